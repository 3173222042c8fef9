"""The fp8 oracle against SGLang's own extend_attention_fwd on the same fp8 pool (the kernel
its Triton backend runs for TARGET_VERIFY on an fp8 KV cache), in Triton's CPU interpreter:
float32 q and draft rows, float8_e4m3fn pool, k_scale / v_scale as SGLang passes them."""
import pytest
import torch

from kernel.fp8 import FP8
from kernel.inputs import make_case
from kernel.reference import verify_attention_reference

pytest.importorskip("sglang", reason="SGLang is installed by `make test` (requirements/sglang-cpu.lock)")

from kernel.sglang.baseline import load  # noqa: E402

# SGLang rounds q (prefix q.k: `q.to(k.dtype)`) and P (prefix P.V: `p.to(v.dtype)`) to e4m3.
# The cases use an e4m3-exact q, so only the P rounding is left: up to the unit roundoff per
# weight, more below 2**-6 (subnormal); measured 0.04-0.06, bound twice the unit roundoff.
BOUND = 2 * (torch.finfo(FP8).eps / 2)


def cases():
    yield make_case([40, 7], [6, 3], 4, tree="random", seed=2, dtype=torch.float32, kv_dtype="fp8_e4m3")
    yield make_case([33, 64], [8, 2], 2, tree="ddtree", layout="fragmented", page_size=16, seed=3,
                    dtype=torch.float32, kv_dtype="fp8_e4m3", v_scale=0.03)
    yield make_case([70], [5], 2, tree="star", layout="scattered", page_size=64, seed=4, dtype=torch.float32,
                    kv_dtype="fp8_e4m3", k_scale=0.02)


@pytest.mark.parametrize("case", list(cases()), ids=lambda c: f"{c.meta['tree']}-{c.meta['layout']}-p{c.meta['page_size']}")
def test_fp8_oracle_agrees_with_sglang_extend_on_the_fp8_pool(case):
    sgl = load()
    q = case.q.to(FP8).float()               # e4m3-exact: SGLang's q rounding is lossless
    o = torch.full((q.shape[0], q.shape[1], 512), float("nan"))
    sgl.extend_attention_fwd(q, case.k_extend, case.k_extend[..., :512], o, case.kv_cache, case.kv_cache[..., :512],
                             case.qo_indptr, case.kv_indptr, case.kv_indices, case.custom_mask, True, case.mask_indptr,
                             max(case.meta["draft_lens"]), case.k_scale, case.v_scale, sm_scale=case.sm_scale,
                             logit_cap=0.0, page_size=case.meta["page_size"])
    args = (q,) + case.args()[1:]
    ref, _ = verify_attention_reference(*args, **case.kwargs())
    assert torch.isfinite(o).all(), "SGLang read a NaN-poisoned slot"
    err = float((o.double() - ref).norm() / ref.norm())
    assert err < BOUND, err
    unscaled, _ = verify_attention_reference(*args, k_scale=1.0, v_scale=1.0)
    assert float((o.double() - unscaled).norm() / unscaled.norm()) > 2 * BOUND

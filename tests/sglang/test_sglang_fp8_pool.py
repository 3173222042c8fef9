"""SGLang's own fp8 MLA pool on the CPU: a real MLATokenToKVPool(float8_e4m3fn) written by
TritonAttnBackend.forward_extend in TARGET_VERIFY with a layer k_scale (SGLang's write path)
and read by SGLang's extend_attention_fwd (Triton interpreter, float32 q): the bytes it
stores are kernel.fp8.quantize_mla_rows's, and its output agrees with the fp8 oracle."""
import pytest
import torch

from kernel.fp8 import FP8, quantize_mla_rows
from kernel.inputs import make_case
from kernel.reference import verify_attention_reference
from kernel.sglang.harness import DRAFT, Harness, rel_err

# SGLang's prefix stage rounds P to e4m3 before P.V (extend_attention.py, `p.to(v.dtype)`):
# up to e4m3's unit roundoff per weight, more for weights below 2**-6 (subnormal); measured
# 0.05-0.06 here, so the bound is twice the unit roundoff.
E4M3_UNIT_ROUNDOFF = torch.finfo(FP8).eps / 2
BOUND = 2 * E4M3_UNIT_ROUNDOFF


def _scaled_layer(h, k_scale, v_scale):
    # what Fp8KVCacheMethod.process_weights_after_loading leaves on a RadixAttention
    layer = h.layer
    layer.k_scale = torch.tensor(k_scale, dtype=torch.float32)
    layer.v_scale = torch.tensor(v_scale, dtype=torch.float32)
    layer.k_scale_float, layer.v_scale_float = k_scale, v_scale


@pytest.fixture(scope="module")
def case():
    c = make_case([40, 13], [DRAFT, DRAFT], 2, tree="random", seed=5, dtype=torch.float32, kv_dtype="fp8_e4m3")
    # SGLang's kernel also rounds q to e4m3 for the prefix q.k (`q.to(k.dtype)`); an
    # e4m3-exact q makes that rounding lossless, so only the P rounding above remains.
    c.q = c.q.to(FP8).float()
    return c


@pytest.mark.parametrize("v_factor", [1.0, 3.0])
def test_sglang_writes_our_bytes_and_reads_what_the_oracle_reads(case, v_factor):
    h = Harness(heads=2, dtype=torch.float32, kv_dtype=FP8)
    v_scale = case.k_scale * v_factor
    _scaled_layer(h, case.k_scale, v_scale)
    out = h.run_eager(case)                      # saves the draft rows, then attends
    N = case.q.shape[0]
    written = h.layer_pool(0)[h._draft_slots(N)]
    assert written.dtype == torch.uint8          # SGLang's store_dtype for an fp8 pool
    assert torch.equal(written, quantize_mla_rows(case.k_extend, case.k_scale).view(torch.uint8))
    assert torch.isfinite(out).all()
    ref, _ = verify_attention_reference(*case.args(), k_scale=case.k_scale, v_scale=v_scale)
    assert rel_err(out, ref) < BOUND, rel_err(out, ref)
    assert torch.equal(h.oracle(case), ref)     # the harness's oracle reads the pool SGLang holds
    # the read path really is K * k_scale and V * v_scale: other readings are far off
    wrong_v, _ = verify_attention_reference(*case.args(), k_scale=case.k_scale, v_scale=case.k_scale * 2 * v_factor)
    unscaled, _ = verify_attention_reference(*case.args(), k_scale=1.0, v_scale=1.0)
    assert rel_err(out, wrong_v) > 2 * BOUND
    assert rel_err(out, unscaled) > 2 * BOUND


def test_filler_layers_stay_inside_the_scale_the_case_was_drawn_for(case):
    """Layers past 0 get seeded filler rows. On an fp8 pool SGLang's cast to e4m3fn does not
    saturate, so filler beyond 448 x k_scale would store NaN on both arms (the H200's
    sglang-extend fp8-ragged case: finite=False in layer 1 only). A k_scale 100x smaller than the
    case's puts most randn draws out of range: the filler stays within 448 x k_scale, so every owned
    slot and every written row is finite (the CPU torch here saturates the cast where the H200's
    stores NaN, so the bound on the rows is what fails here without the clamp)."""
    h = Harness(heads=2, dtype=torch.float32, kv_dtype=FP8, layers=2)
    scale = case.k_scale / 100
    h.set_kv_scales(scale, scale)
    h._fill_pools(case, DRAFT * 2, seed=0)
    owned = case.kv_indices
    assert torch.isfinite(h.layer_pool(1)[owned].view(FP8).float()).all()
    _, ks = h.layer_inputs(case)
    assert ks[1].abs().max() <= 448 * scale * 1.01
    assert torch.isfinite(quantize_mla_rows(ks[1], scale).float()).all()

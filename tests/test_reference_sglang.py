"""The oracle against SGLang's own extend_attention_fwd (the kernel its Triton backend runs
for TARGET_VERIFY), executed by Triton's CPU interpreter in float32: tree masks, DDTree's padded
trees (pull request #29907: padding rows all False, prefix-only attention; over an empty prefix
o = 0) and DFLASH's causal blocks without a mask."""
import pytest
import torch

from kernel.inputs import ddtree_case, dflash_case, make_case, random_case
from kernel.reference import verify_attention_reference

pytest.importorskip("sglang", reason="SGLang is installed by `make test` (requirements/sglang-cpu.lock)")
import triton  # noqa: E402

from kernel.sglang.baseline import load, run_extend  # noqa: E402


@pytest.fixture(scope="module")
def sgl():
    assert triton.runtime.interpreter is not None
    import os
    assert os.environ.get("TRITON_INTERPRET") == "1", "tests/conftest.py sets the interpreter before triton loads"
    return load()


def cases():
    yield make_case([16], [4], 2, tree="random", seed=1, dtype=torch.float32)
    yield make_case([40, 7, 0], [6, 3, 5], 4, tree="ddtree", layout="fragmented", seed=2, dtype=torch.float32)
    yield make_case([33, 64], [8, 2], 8, tree="star", layout="scattered", page_size=16, seed=3, dtype=torch.float32)
    yield make_case([70], [5], 3, tree="chain", layout="contiguous", seed=4, dtype=torch.float32)
    for s in range(4):
        yield random_case(100 + s, max_prefix=80, max_draft=8, max_batch=3, max_heads=4, dtype=torch.float32)
    # DDTree: D = budget + 1 per request, padding past each tree's size; an empty prefix too
    yield ddtree_case([30, 0, 12], 7, 2, topk=2, tree_sizes=[5, 3, 8], seed=11, dtype=torch.float32)
    yield ddtree_case([21, 45], 4, 2, topk=1, tree_sizes=[1, 3], seed=12, dtype=torch.float32)
    yield ddtree_case([50], 16, 1, topk=2, seed=13, dtype=torch.float32)
    # DFLASH: a causal block, custom_mask None as its worker passes it
    yield dflash_case([25, 0], 8, 2, seed=14, dtype=torch.float32)


def _id(c):
    m = c.meta
    return f"{m.get('algorithm', m['tree'])}-{m['tree']}-{m['layout']}-p{m['page_size']}-s{m['seed']}"


@pytest.mark.parametrize("case", list(cases()), ids=_id)
def test_oracle_agrees_with_sglang_extend(sgl, case):
    o = torch.full((case.q.shape[0], case.q.shape[1], 512), float("nan"))
    run_extend(sgl, case, o, page_size=case.meta["page_size"])
    ref, _ = verify_attention_reference(*case.args())
    assert torch.isfinite(o).all()
    assert float((o.double() - ref).norm() / ref.norm()) < 1e-5
    # row by row: every padding row (prefix only) and every zero row (no key at all) agrees too
    diff, scale = (o.double() - ref).flatten(1).norm(dim=1), ref.flatten(1).norm(dim=1)
    assert bool((diff <= 1e-4 * scale + 1e-12).all())

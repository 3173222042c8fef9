"""The oracle against SGLang's own extend_attention_fwd (the kernel its Triton backend runs
for TARGET_VERIFY), executed by Triton's CPU interpreter in float32."""
import pytest
import torch

from kernel.inputs import make_case, random_case
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


@pytest.mark.parametrize("case", list(cases()), ids=lambda c: f"{c.meta['tree']}-{c.meta['layout']}-p{c.meta['page_size']}")
def test_oracle_agrees_with_sglang_extend(sgl, case):
    if case.custom_mask is None:
        pytest.skip("SGLang's verify path always passes a mask")
    o = torch.full((case.q.shape[0], case.q.shape[1], 512), float("nan"))
    run_extend(sgl, case, o, page_size=case.meta["page_size"])
    ref, _ = verify_attention_reference(*case.args())
    assert torch.isfinite(o).all()
    assert float((o.double() - ref).norm() / ref.norm()) < 1e-5

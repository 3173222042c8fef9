"""The EXTEND references (kernel/bench/extend_reference.py) against the float64 oracle: the same
attention for chosen rows (float64) and all rows (fp32), on bf16 and fp8 pools, empty prefixes
included, blocked into several pieces as at 180k."""
import pytest
import torch

from kernel.bench import extend_reference as er
from kernel.inputs import make_case
from kernel.reference import verify_attention_reference


def _case(kv_dtype="auto", **kw):
    c = make_case([37, 0, 120, 5], [5, 9, 3, 1], 4, causal=True, layout="fragmented", page_size=16, seed=3,
                  kv_dtype=kv_dtype, **kw)
    if kv_dtype != "auto":
        c.v_scale = c.k_scale * 3.0   # separate v_scale: V read with its own scale
    return c


@pytest.fixture(params=["auto", "fp8_e4m3"])
def case(request):
    return _case(request.param)


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    # a few KB per block: every request runs in several blocks, as 180k prefixes do
    monkeypatch.setattr(er, "BLOCK_BYTES", 4096)


def test_rows_equal_the_oracle_in_float64(case):
    o, lse = verify_attention_reference(*case.args(), **case.kwargs())
    for b in range(4):
        q0, T, _, _ = er.request_span(case, b)
        toks = list(range(T))[::-1]                       # any order
        ro, rl = er.reference_rows(case, b, toks)
        idx = torch.tensor(toks) + q0
        assert torch.allclose(ro, o[idx], rtol=0, atol=1e-12)
        assert torch.allclose(rl, lse[idx], rtol=0, atol=1e-12)


def test_fp32_all_rows_within_1e5_of_the_oracle(case):
    o, lse = verify_attention_reference(*case.args(), **case.kwargs())
    for b in range(4):
        q0, T, _, _ = er.request_span(case, b)
        ro, rl = er.reference_fp32(case, b)
        assert ro.dtype == torch.float32 and ro.shape == (T, 4, 512)
        assert float((ro.double() - o[q0:q0 + T]).abs().max()) < 1e-5
        assert float((rl.double() - lse[q0:q0 + T]).abs().max()) < 1e-5


def test_a_wrong_scale_is_seen():
    # the fp8 pool is read with its own scales: a reference that ignored v_scale would not match
    c = _case("fp8_e4m3")
    o, _ = verify_attention_reference(*c.args(), **c.kwargs())
    c.v_scale = c.k_scale
    ro, _ = er.reference_rows(c, 2, [0, 1, 2])
    assert float((ro - o[9 + 5:9 + 5 + 3]).abs().max()) > 1e-3


def test_refuses_a_tree_mask_and_tokens_out_of_range():
    tree = make_case([10], [4], 2, tree="random", seed=1)
    with pytest.raises(ValueError, match="causal case"):
        er.reference_rows(tree, 0, [0])
    with pytest.raises(ValueError, match="causal case"):
        er.reference_fp32(tree, 0)
    with pytest.raises(ValueError, match=r"tokens: request 0 has new tokens 0..4, got 0..5"):
        er.reference_rows(_case(), 0, [0, 5])


def test_sample_tokens_keeps_the_edges():
    s = er.sample_tokens(8192, 48, seed=1)
    assert s == sorted(set(s)) and len(s) == 48 and all(0 <= t < 8192 for t in s)
    assert {0, 7, 8, 63, 64, 4096, 8190, 8191} <= set(s)
    assert er.sample_tokens(5, 48, seed=1) == [0, 1, 2, 3, 4]
    assert er.sample_tokens(8192, 48, seed=1) == s and er.sample_tokens(8192, 48, seed=2) != s

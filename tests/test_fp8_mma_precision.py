"""kernel.bench.fp8_mma_precision on the CPU: the two-term split's accuracy, and the schemes'
errors against the float64 oracle on one case, in the order the next fp8 rung relies on."""
import pytest
import torch

from kernel.bench import fp8_mma_precision as fp
from kernel.bench.timing import rel_err
from kernel.inputs import make_case
from kernel.reference import verify_attention_reference


def test_two_terms_keep_seven_or_more_bits_in_e4m3s_normal_range():
    x = torch.linspace(1.0, 256.0, 4001, dtype=torch.float64)
    hi = fp.rounded(x, fp.E4M3)
    assert float(((hi - x).abs() / x).max()) > 2 ** -6            # one e4m3 term: 4 bits
    assert float(((fp.split2(x) - x).abs() / x).max()) <= 2 ** -8
    assert float(((fp.split2(x, fp.E5M2) - x).abs() / x).max()) <= 2 ** -7


def test_schemes_against_the_oracle_on_a_ddtree_case():
    c = make_case([1500], [17], 8, tree="ddtree", seed=3, kv_dtype="fp8_e4m3")
    ref, _ = verify_attention_reference(*c.args(), **c.kwargs())
    err = {s: rel_err(fp.attention(c, s), ref) for s in fp.SCHEMES}
    assert err["f16"] < 5e-3                        # today's kernel: the bf16 output's rounding
    assert err["e4m3"] > 1e-2                       # one rounding of q and P: SGLang's path, off the bar
    assert err["e4m3+e5m2"] < 2 * err["f16"]        # an e5m2 low term keeps P's small values
    assert err["e4m3x2_p16"] < 2 * err["f16"]       # or P moved up by 2^4 into e4m3's normal range
    assert err["e4m3x2"] > err["e4m3x2_p16"]
    assert err["qk_e4m3x2"] < 2 * err["f16"]        # q's two terms alone: QK by e4m3 MMAs, PV as today


def test_an_e4m3_p_loses_the_tail_behind_a_sink_at_long_context():
    # key 0 eleven nats above the rest: their P are near 2^-16, below e4m3's range even times 2^4
    far = {s: fp.sink_row(185000, 11, s) for s in ("f16", "e4m3", "e4m3x2_p16", "e4m3+e5m2", "qk_e4m3x2")}
    assert far["f16"]["tail_mass"] > 0.5                 # the tail carries most of the output
    assert far["f16"]["rel_err"] < 5e-3 and far["qk_e4m3x2"]["rel_err"] < 5e-3
    assert far["e4m3x2_p16"]["rel_err"] > 0.3 and far["e4m3"]["rel_err"] > 0.3
    assert far["e4m3+e5m2"]["rel_err"] > 1e-2            # nor does an e5m2 low term keep them all
    near = fp.sink_row(185000, 4, "e4m3x2_p16")          # without a sink the tail stays in range
    assert near["rel_err"] < 5e-3


def test_unknown_format_and_scheme_are_refused_by_name():
    with pytest.raises(ValueError, match="fmt: 'int8'"):
        fp.operand(torch.ones(2, dtype=torch.float64), "int8", 1.0)
    with pytest.raises(ValueError, match="scheme: 'int8'"):
        fp.attention(make_case([10], [2], 8, seed=1, kv_dtype="fp8_e4m3"), "int8")


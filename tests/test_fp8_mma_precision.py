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


def test_unknown_scheme_is_refused_by_name():
    with pytest.raises(ValueError, match="scheme: 'int8'"):
        fp.operand(torch.ones(2, dtype=torch.float64), "int8", 1.0)

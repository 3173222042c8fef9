"""kernel.inputs.sink_case: the sink sits `gap` nats above a tail spread by 0.5 nats on both pools,
and its tail carries the output (the rows kernel/bench/sink_check.py and the SGLang fp8 test use)."""
import pytest
import torch

from kernel.bench.sink_check import tail_mass
from kernel.checks import VerifyInputError
from kernel.fp8 import dequantize_keys
from kernel.inputs import sink_case


@pytest.mark.parametrize("kv", ["auto", "fp8_e4m3"])
def test_the_sink_is_gap_nats_above_a_half_nat_tail(kv):
    c = sink_case(3000, 4, 11.0, 2, kv_dtype=kv)
    rows = c.kv_cache[c.kv_indices, 0]
    k = dequantize_keys(rows, c.k_scale) if kv != "auto" else rows.double()
    lg = (c.q.double().reshape(-1, 576) @ k.double().T) * c.sm_scale        # [rows, S]
    tail = lg[:, 1:]
    assert torch.allclose(lg[:, 0] - tail.mean(1), torch.full((8,), 11.0, dtype=torch.float64), atol=0.15)
    assert 0.45 < float(tail.std(1).min()) and float(tail.std(1).max()) < 0.55
    assert (kv == "auto") == (c.k_scale is None)
    # 3,000 keys at e^-11 x 1.13 (the spread): 5 % of the mass; 185k keys hold most of it (sink_check)
    assert 0.03 < tail_mass(c) < 0.08


def test_a_case_without_a_tail_is_refused_by_name():
    with pytest.raises(VerifyInputError, match="prefix_len, draft_len"):
        sink_case(1, 4, 8.0)
    with pytest.raises(VerifyInputError, match="kv_dtype"):
        sink_case(10, 4, 8.0, kv_dtype="int8")

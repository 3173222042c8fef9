"""kernel/bench/micro.py's rounds for the full stage: every timing once a round, the order
alternating, so that the merge's figure (a difference of two timings) is not a first-timed bias."""
import pytest

from kernel.bench.micro import rounds_of


def test_each_name_is_timed_once_a_round_in_alternating_order():
    calls = []

    def timer(name, us):
        def fn():
            calls.append(name)
            return us + len(calls)
        return fn

    out = rounds_of({"full": timer("full", 100.0), "no_merge": timer("no_merge", 95.0),
                     "no_pdl": timer("no_pdl", 101.0)}, 3)
    assert calls == ["full", "no_merge", "no_pdl", "no_pdl", "no_merge", "full", "full", "no_merge", "no_pdl"]
    assert out == {"full": [101.0, 106.0, 107.0], "no_merge": [97.0, 100.0, 103.0], "no_pdl": [104.0, 105.0, 110.0]}


def test_rounds_must_be_positive():
    with pytest.raises(ValueError, match="rounds: 0"):
        rounds_of({"full": lambda: 1.0}, 0)

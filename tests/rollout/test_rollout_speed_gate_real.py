"""The speed gate against SGLang's real servers (reports/data/rungs/, from
`python -m kernel.sglang.real_server` on the GPU machine): what its warm-up changed in a real run."""
import json
import statistics
from pathlib import Path

from rollout.ab import WARM_DECODE_TOKENS

RUNGS = Path(__file__).resolve().parents[2] / "reports" / "data" / "rungs"


def _speed_gate(name: str) -> dict:
    """A rollout record: the canary's A/B at top level (rollout/engine.py, write_result)."""
    record = json.loads((RUNGS / name).read_text())
    assert record["kind"] == "rollout-ab"
    return record


def test_a_real_eagle_canary_warmed_by_decoding_has_no_slow_first_round():
    # SGLang 0.5.23's real servers, EAGLE, the production kernel, one H100 (kernel/NOTES.md, 2026-12-06
    # twenty-fourth session). Before the decode warm-up the candidate's first timed round ran 25 % below
    # the median of its other four; after it, every arm decoded WARM_DECODE_TOKENS untimed first and the
    # first round was within the others' spread
    before = _speed_gate("rollout-h100-20261206T081647Z-e5bbaa.json")
    after = _speed_gate("rollout-h100-20261206T103110Z-2fdc38.json")
    assert "decoded_tokens" not in before["warm"]["candidate"]
    assert all(after["warm"][role]["decoded_tokens"] == WARM_DECODE_TOKENS for role in ("candidate", "control"))
    for gate, lo, hi in ((before, 0.0, 0.85), (after, 0.95, 1.2)):
        first, *rest = gate["candidate"]["tok_s"]
        assert lo <= first / statistics.median(rest) < hi
    assert after["passed"] and after["ci"]["high"] / after["ci"]["low"] < before["ci"]["high"] / before["ci"]["low"]

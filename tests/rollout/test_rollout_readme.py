"""The README's "Rolling out" section matches the tool: its verbs, gates, defaults, exit codes."""
import re

from rollout import engine
from rollout.__main__ import parser
from rollout.inventory import GATE_FIELDS, ROLLOUT_FIELDS
from rollout_helpers import REPO


def section() -> str:
    text = (REPO / "README.md").read_text()
    return text.split("## Rolling out", 1)[1].split("\n## ", 1)[0]


def test_every_verb_and_only_those():
    verbs = set(parser()._subparsers._group_actions[0].choices)
    shown = {"plan"} if "make rollout-plan" in section() else set()  # `make rollout-plan` runs `plan`
    for line in re.findall(r"python -m rollout ([a-z|]+)", section()):
        shown |= set(line.split("|"))
    assert shown == verbs, (shown ^ verbs)


def test_gates_in_the_order_the_engine_runs_them():
    bullet = section().split("- **Gates.**", 1)[1].split("\n- **", 1)[0]
    named = re.findall(r"`([a-z_/]+)`", bullet.split(". The numerics", 1)[0])
    assert [n.strip("/") for n in named] == list(engine.PROMOTION_GATES)
    outcomes = section().split("- **Outcomes.**", 1)[1].split("\n- **", 1)[0]
    assert re.findall(r"`([a-z_/]+)`", outcomes.split("(gates", 1)[1].split(")", 1)[0]) == \
        ["starts", "arm", "/health_generate"] and len(engine.ROLLBACK_GATES) == 3


def test_exit_codes_and_defaults():
    codes = section().split("- **Exit codes.**", 1)[1]
    for code in (0, engine.EXIT_ERROR, engine.EXIT_GATE, engine.EXIT_LOCKED, engine.EXIT_HALTED,
                 engine.EXIT_INTERRUPTED):
        assert re.search(rf"\b{code}\b", codes), code
    s = section()
    assert f"(default {ROLLOUT_FIELDS['max_unavailable'][1]})" in s
    assert f"(default {ROLLOUT_FIELDS['progress_deadline_s'][1] / 3600:g} h)" in s
    assert f"≥ {GATE_FIELDS['min_top1_agreement'][1]}" in s and f"≤ {GATE_FIELDS['max_mean_abs_logprob_diff'][1]}" in s
    assert f"{GATE_FIELDS['numerics_prompts'][1]} short prompts" in s
    assert f"{GATE_FIELDS['context_tokens'][1]:,} tokens" in s

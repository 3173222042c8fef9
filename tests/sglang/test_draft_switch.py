"""kernel/sglang/draft_switch.py: the one rule the plugin and the real-server job read."""
import pytest

from kernel.sglang.draft_switch import DRAFT_ENV, draft_extend_on


@pytest.mark.parametrize("env,on", [({}, True), ({DRAFT_ENV: ""}, True), ({DRAFT_ENV: " 1 "}, True),
                                    ({DRAFT_ENV: "0"}, False)])
def test_unset_or_1_is_on_and_0_is_off(env, on):
    assert draft_extend_on(env) is on


def test_another_value_names_the_variable_and_the_value():
    with pytest.raises(ValueError, match=r"MLA_VERIFY_DRAFT_EXTEND='true' is not one of 0, 1"):
        draft_extend_on({DRAFT_ENV: "true"})

import pytest

from rollout.stats import bootstrap_ratio_ci, ratio_of_medians


def test_ratio_and_ci_bracket_the_truth():
    cand = [20.0, 21.0, 19.0, 20.5, 19.5]
    ctrl = [10.0, 10.5, 9.5, 10.2, 9.8]
    assert ratio_of_medians(cand, ctrl) == 2.0
    lo, hi = bootstrap_ratio_ci(cand, ctrl, paired=True)
    assert 1.8 < lo <= 2.0 <= hi < 2.2


def test_ci_widens_with_an_outlier_and_is_deterministic():
    cand = [20.0, 20.0, 20.0, 20.0, 2.0]
    ctrl = [10.0] * 5
    lo, hi = bootstrap_ratio_ci(cand, ctrl, paired=False, seed=1)
    assert lo < 0.98 and hi == 2.0  # one bad round can make the gate refuse
    assert (lo, hi) == bootstrap_ratio_ci(cand, ctrl, paired=False, seed=1)


def test_bad_input_names_the_problem():
    with pytest.raises(ValueError, match="equal rounds"):
        bootstrap_ratio_ci([1.0, 2.0], [1.0], paired=True)
    with pytest.raises(ValueError, match="level"):
        bootstrap_ratio_ci([1.0], [1.0], paired=False, level=1.5)
    with pytest.raises(ValueError, match="samples"):
        bootstrap_ratio_ci([], [1.0], paired=False)

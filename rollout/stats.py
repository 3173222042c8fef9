"""Median and a bootstrap confidence interval for the candidate/control speed ratio."""
from __future__ import annotations

import random
import statistics


def ratio_of_medians(cand: list[float], ctrl: list[float]) -> float:
    return statistics.median(cand) / statistics.median(ctrl)


def bootstrap_ratio_ci(cand: list[float], ctrl: list[float], *, paired: bool, level: float = 0.95,
                       resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of median(cand)/median(ctrl).

    paired=True resamples rounds (cand[i] and ctrl[i] were measured back to back, so drift
    that hits one round hits both arms); paired=False resamples each arm on its own.
    """
    if not cand or not ctrl:
        raise ValueError(f"need samples in both arms, got {len(cand)} candidate and {len(ctrl)} control")
    if paired and len(cand) != len(ctrl):
        raise ValueError(f"paired bootstrap needs equal rounds, got {len(cand)} and {len(ctrl)}")
    if not 0.5 < level < 1:
        raise ValueError(f"level must be in (0.5, 1), got {level}")
    rng = random.Random(seed)
    stats = []
    for _ in range(resamples):
        if paired:
            idx = [rng.randrange(len(cand)) for _ in cand]
            c, k = [cand[i] for i in idx], [ctrl[i] for i in idx]
        else:
            c = [rng.choice(cand) for _ in cand]
            k = [rng.choice(ctrl) for _ in ctrl]
        stats.append(ratio_of_medians(c, k))
    stats.sort()
    lo = stats[int((1 - level) / 2 * resamples)]
    hi = stats[min(resamples - 1, int((1 + level) / 2 * resamples))]
    return lo, hi

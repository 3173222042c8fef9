"""rowsd's cp.async pipeline on the CPU (kernel/csrc/tier_rowsd.cuh): a model of its commit groups,
loop-top waits and ring stages, with the constants read from the source, for every place of
half 1's copies (COPY_AT 0, 1, 2) and of rows32d's (COPY32_AT 0, 2), one or two halves and both
pools. It asserts what a wrong
constant would break silently on the GPU: a tile read before its group completed, a copy
reading slot ids whose group had not, a stage refilled while a half may still read it, an id
overwritten in the window before its copy read it. On bf16 half 0 issues the copies (SPLIT_COPIES) in
its step j, after top(j)'s commit, as half 1 did: the same late group; and with H0_LAG it reads tile
j - 1 in step j, as half 1 always has, so the refill rule below holds for both halves."""
import re
import sys
from pathlib import Path

import pytest

SRC = (Path(__file__).resolve().parents[1] / "kernel" / "csrc" / "tier_rowsd.cuh").read_text()


def _int(pattern: str) -> int:
    return int(re.search(pattern, SRC).group(1))


STAGES = _int(r"constexpr int STAGES = (\d+);")
IDX_AHEAD = _int(r"constexpr int IDX_AHEAD = (\d+);")
IDX_WIN = _int(r"constexpr int IDX_WIN = (\d+);")
m = re.search(r"static constexpr int KST = FP8 \? (\d+) : STAGES;", SRC)
KST8 = int(m.group(1))
# fp8 rows64d's count is AHEAD8_PAIR, production's value the #else branch's (-DMLAV_AHEAD8 sets a variant's)
AHEAD8_PAIR = _int(r"#else\nconstexpr int AHEAD8_PAIR = (\d+);")
m = re.search(r"static constexpr int AHEAD = FP8 \? \(HALVES == 2 \? AHEAD8_PAIR : (\d+)\) : \(HALVES == 2 \? (\d+) : (\d+)\);", SRC)
AHEAD = {(True, 2): AHEAD8_PAIR, (True, 1): int(m.group(1)), (False, 2): int(m.group(2)), (False, 1): int(m.group(3))}


def params(fp8: bool, halves: int) -> tuple[int, int, int]:
    """(AHEAD, IDX_AHEAD, ring stages) of Layout<halves, fp8>."""
    ah = AHEAD[(fp8, halves)]
    return ah, (ah if fp8 else IDX_AHEAD), (KST8 if fp8 else STAGES)


def wait_open(copy_at: int, ah: int) -> int:
    """The loop-top cp.async.wait_group count: groups left open (the source's expression)."""
    return 2 * ah - 2 if copy_at else ah - 1


def late_copies(copy_at: int, copy32_at: int, halves: int) -> bool:
    """Whether tile j + AHEAD's copies go into step j's second group (the source's LATE_COPIES)."""
    return copy_at != 0 if halves == 2 else copy32_at == 2


def simulate(copy_at: int, fp8: bool, halves: int, n: int, copy32_at: int = 0) -> None:
    ah, idx, kst = params(fp8, halves)
    late = late_copies(copy_at, copy32_at, halves)
    groups: list[set] = []                 # every thread commits the same sequence of groups
    cur: set = set()

    def commit():
        nonlocal cur
        groups.append(cur)
        cur = set()

    done: set = set()                      # items whose groups completed, as of the last wait
    ids_ready = set(range(ah))             # the prologue's tiles read their slot ids directly

    def copy(t: int, step: int | None):
        """Tile t's copies, issued in loop step `step` (None: the prologue, before any read)."""
        if t >= n:
            return
        assert t in ids_ready or ("ids", t) in done, f"tile {t}'s slot ids not landed at step {step}"
        # the stage's last tile, t - kst, is read by half 0 in its step and by half 1 (PV) one step
        # later: both are before the barrier of step t - kst + halves
        assert step is None or t - kst <= step - halves, f"tile {t} refills stage {t % kst} while tile {t - kst} is read"
        cur.add(("tile", t))

    def copy_ids(t: int, step: int):
        if t >= n:
            return
        # the window slot's previous id, of tile t - IDX_WIN, was read by that tile's copy, in step
        # t - IDX_WIN - ah: before this step's barrier
        assert t - IDX_WIN - ah < step, f"tile {t}'s id overwrites one still unread"
        cur.add(("ids", t))

    for t in range(ah):                    # prologue
        copy(t, None)
        if t == 0:
            for k in range(ah, ah + idx):
                copy_ids(k, 0)
        commit()
        if copy_at:
            commit()
    for j in range(n):
        keep = wait_open(copy_at, ah)
        for g in groups[:max(0, len(groups) - keep)]:
            done.update(g)
        assert ("tile", j) in done, f"copy_at {copy_at}: tile {j} used before its group completed"
        if not late:
            copy(j + ah, j)
        copy_ids(j + ah + idx, j)
        commit()
        if late:                           # in QK(j) or right before it, after top(j)'s commit
            copy(j + ah, j)
        if copy_at:
            commit()                       # (without it the late copies join top(j + 1)'s group)


@pytest.mark.parametrize("copy_at", (0, 1, 2))
@pytest.mark.parametrize("fp8", (False, True))
@pytest.mark.parametrize("halves", (1, 2))
def test_every_tile_and_slot_id_lands_before_use_and_no_stage_is_refilled_early(copy_at, fp8, halves):
    for n in (1, 2, 3, 5, 9, 40):
        simulate(copy_at, fp8, halves, n)


@pytest.mark.parametrize("copy_at", (1, 2))
@pytest.mark.parametrize("fp8", (False, True))
def test_rows32d_copies_in_qk_land_before_use_and_refill_no_stage_early(copy_at, fp8):
    for n in (1, 2, 3, 5, 9, 40):
        simulate(copy_at, fp8, 1, n, copy32_at=2)


def test_copies_in_qk_with_one_group_a_step_fail_the_model_and_the_source_forbids_them(monkeypatch):
    # rows32d's copies in QK with COPY_AT = 0 would join the next step's group, one too late for
    # the wait of AHEAD - 1
    monkeypatch.setattr(sys.modules[__name__], "late_copies", lambda copy_at, copy32_at, halves: True)
    with pytest.raises(AssertionError, match="before its group completed"):
        simulate(0, False, 1, 9, copy32_at=2)
    assert "static_assert(COPY32_AT == 0 || COPY_AT != 0," in SRC


def test_the_model_places_the_copies_as_the_source_does():
    assert "constexpr bool LATE_COPIES = HALVES == 2 ? COPY_AT != 0 : COPY32_AT == 2;" in SRC


def test_the_model_waits_as_the_source_does():
    assert "cp_async_wait<COPY_AT ? 2 * AHEAD - 2 : AHEAD - 1>();" in SRC
    # and the prologue commits a second group a tile where the loop commits two a step
    assert "if (COPY_AT) cp_async_commit();                       // two groups a tile" in SRC


def test_the_model_catches_a_wait_that_leaves_one_group_too_many_open(monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "wait_open", lambda copy_at, ah: (2 * ah - 1) if copy_at else ah)
    with pytest.raises(AssertionError, match="before its group completed"):
        simulate(1, False, 2, 9)


def test_the_model_catches_a_stage_refilled_while_read():
    global AHEAD
    saved = dict(AHEAD)
    AHEAD[(False, 2)] = STAGES - 1          # tile j + 3 into the stage of tile j - 1, still in half 1's PV
    try:
        with pytest.raises(AssertionError, match="refills stage"):
            simulate(1, False, 2, 9)
    finally:
        AHEAD.clear()
        AHEAD.update(saved)

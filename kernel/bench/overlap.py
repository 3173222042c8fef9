"""Why the KV loads do not hide under the math (issue 25's overlap rung).

Before the lean loader, at the centre rows64d_pair (tier 9) took 144.5 us without its merge,
against 111.7 us for its math alone and ~64 us for its loads alone: about 730 clocks per 16-token
tile that overlapped nothing, the same at T = 32 (micro-h200-20261202T1531.json). This times the one kernel in each
combination of:
  - placement: the KV rows where the case put them (213 MB scattered over the pool: DRAM), or the
    same slot ids modulo a window a third of L2's size (every row an L2 hit after the first pass);
  - mode: full (the verify kernel alone, mode 4), no loads (mode 2 | 4: the math on resident
    tiles of zeros), no math (mode 1 | 4: the loads alone); rowsd (tiers 6, 8) from DRAM also no
    loads on resident tiles of finite noise (mode 2 | 4 | 256, the table's column "(noise)");
  - build: the production library, and any diagnostic builds a rung lists in VARIANTS (-D macros,
    each run at the tiers whose code it changes, on both pools; built only when one of them runs).
Each (build, mode) is timed --rounds times (default 3), the builds in alternating order after one
discarded call, and the median kept: the build timed first after a case is made ran 1-4 % slow.
If the L2 rows close the gap, the loads' latency is what the ring does not cover; if not, the
cost is inside the SM (the copies' issue and shared-memory writes against QK's ldmatrix).

    python -m kernel.bench.overlap --out DIR          # JSON overlap-<gpu>-<stamp>.json, a table last
    python -m kernel.bench.overlap --kv fp8_e4m3 --out DIR   # the same on SGLang's fp8 pool (its tiers)
    python -m kernel.bench.overlap --tiers 8 --dram-only --variants copy_in_qk --out DIR   # one rung's builds
    python -m kernel.bench.overlap --kv fp8_e4m3 --tiers 8,4 --t 16,17 --out DIR   # other draft lengths
    python -m kernel.bench.overlap --once 9           # two centre calls of tier 9 (full, no loads), for ncu
    python -m kernel.bench.overlap --once 8 --once-t 32   # the same at T = 32
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys

import torch

from .. import build, checks
from ..inputs import make_case
from ..ops import TIERS, get_workspace, launch
from .env import add_commit_arg, no_gpu, record
from .micro import MODE_NO_LOADS, MODE_NO_MATH, MODE_NO_MERGE, MODE_NOISE_RING, rounds_of, shape_case, sm_clock_mhz
from .same_output import compare
from .sanitize_tiers import cases as edge_cases
from .sm120_estimate import TAIL_E, tail_e_of, tiles_per_cta
from .sweeps import FP8_KV, KV_DTYPE_NAMES
from .timing import log, time_calls
from .validate import LOUD_Q, loud_q

MODES = {"full": MODE_NO_MERGE, "no_loads": MODE_NO_LOADS | MODE_NO_MERGE, "no_math": MODE_NO_MATH | MODE_NO_MERGE}
# --merge: also the call as a server makes it, the verify kernel and its merge (the merge's cost is
# this row's time less the full row's)
MERGED_MODE = ("merged", 0)
# rowsd (tiers 6 and 8) also times its math on resident tiles of finite noise instead of zeros
# (MODE_NOISE_RING, kernel/bench/clocks.py): what the tensor pipe's toggling costs the math alone
NOISE_MODE = ("no_loads_noise", MODE_NO_LOADS | MODE_NO_MERGE | MODE_NOISE_RING)
NOISE_TIERS = (6, 8)
# build name -> -D macros of a diagnostic build (tier 9). Measured and refuted
# (reports/data/rungs/overlap-h200-20261202T1705.json, kernel/NOTES.md): the second tile's copies
# issued after QK(a) or after the softmax, pair p + 2 prefetched into L2; measured and kept
# (rungs/overlap-h200-20261202T1713.json): the lean loader, now every bf16 tier's production code;
# measured and not kept (rungs/overlap-h200-20261202T2044.json, ...T2116.json: commit f772087's
# tier 9 and its two variants): whole rows by cp.async.bulk on 1,168-byte padded rows, the bulk
# copies issued after QK(a), and the lean cp.async on the padded rows; measured and tied
# (rungs/overlap-h200-20261203T0015.json: commit 931babd's MLAV_PAIR_QK_X4): tier 9's K read as
# rows64d reads it, one ldmatrix.x4 a k-step requested a k-step ahead
# where rows64d's half 1 issues a tile's copies in its step (tier_rowsd.cuh, COPY_AT; all three
# measured in rungs/overlap*-h200-20261203T1504.json): right after the loop-top barrier, right
# before its QK (production on bf16), one copy a QK k-step (production on fp8); rows32d's copies
# one a QK k-step (COPY32_AT; measured, not kept: rungs/overlap*-h200-20261203T1656.json). Measured
# and deleted (rungs/overlap*-h200-20261203T1718.json, commit c2732c7): rows64d's half 0 issuing the
# first 1-3 pieces of each thread's share, one a k-step of its QK (-DMLAV_HALF0_PIECES), 3-12 % slower.
# rows64d's softmax between its own MMAs (tier_rowsd.cuh): half 0 running PV(j - 1) in step j with
# softmax(j) between its column steps (H0_LAG), half 1 issuing softmax(j - 1)'s exp and stores
# between QK(j)'s k-steps (H1_MIX), and both (rungs/overlap*-h200-20261203T1909-softmax-mma.json:
# H0_LAG's math alone -5 %, its full call not faster; H1_MIX +14 to +29 %, its code deleted since);
# with H0_LAG, half 0 issuing half of each tile's copies or all of them in its PV (SPLIT_COPIES 1,
# 2; rungs/overlap*-h200-20261203T1916-copies.json: 2 -3.8 % at the bf16 centre, even on fp8), a
# column step later (3) or with their address formed before QK (4) (rungs/overlap*-h200-
# 20261203T1920-copies-where.json: 3 -3.5 / -4.1 % at the bf16 centre and T = 32, production on
# bf16 since; none faster on fp8; 1 and 4 deleted since); h0_classic is bf16's production before it
# (on fp8 it is production). Measured and deleted (rungs/overlap-fp8-h200-20261203T2239-e4m3-
# bits.json, commit 62e2258's -DMLAV_E4M3_BITS): the fp8 copies' e4m3 -> f16 by sm_80/86's bit move
# (PRMT, shift, two LOP3 a pair) instead of F2FP on sm_90: bit-equal output, rows64d_fp8 24-28 %
# slower (full call and math alone), small8 19-21 % (full) and 27-29 % (math alone).
# Measured and deleted (rungs/overlap*-h200-20261203T2339-p-words.json, commit 1775180's
# -DMLAV_P_WORDS): rowsd's P fragments word-major in shared memory, so the softmax's two 4-byte
# stores a warp and tile take one wavefront each, not four (4-way conflicted: the math alone's
# excess wavefronts, rungs/ncu-final-tier8-*), for 6 more LDS a warp and tile in PV: rows64d bf16
# +1.1 % at the centre and +1.6 % at T = 32, rows32d -1.6 %, rows64d fp8 -0.2 to -0.3 %.
# Measured and kept (rungs/overlap*-h200-20261204T033[56]-q-first.json, commit d19694f's -DMLAV_Q_FIRST,
# two runs): rowsd's Q loads issued before the prologue's slot ids and copies, -1 to -3 us a call
# on tiers 8 and 6 of both pools, never slower; production since. The same for the small tiers
# (commit 2aa39fc's -DMLAV_Q_FIRST_SMALL, two runs,
# rungs/overlap*-h200-20261204T034[23]-q-first-small-run[12].json): tiers 1 and 4 within -1.7 to
# +0.7 us of production, a tie; not kept.
# Measured and deleted (2026-12-04, second session; commits 7ce5f16 .. 7d18d93, the rungs' `commit` fields):
# fp8 rows64d's copies, every build bit-equal to production on 14 calls (rungs/overlap-fp8-h200-
# 20261204T1004-pieces.json, ...T1008-h0pv.json, ...T1018-h0pv-split.json, ...T1026-h1-form.json,
# ...T1031-qk-form.json): half 1's pieces a k-step or two later or every other k-step
# (-DMLAV_PIECE_AT), 5 or 4 tiles in flight instead of 6 (-DMLAV_AHEAD8), half 0 issuing them in its
# PV (-DMLAV_H0PV_PIECES, _FORM), the halves splitting them (-DMLAV_H0PV_SPLIT), half 1 forming its
# share early (-DMLAV_H1_FORM) or after QK's first ldmatrix (-DMLAV_QK_FORM): the first half-0 build
# (commit 77afb6d, pieces from PV's column step 3) -0.7 to -2.6 % in three runs (...T1057-h0pv-repeat-
# run{1,2}.json), production on fp8 since (H0PV_AT = 3, its machine code equal to 77afb6d's build on
# sm_90; h0pv_off is the production before it); the others within about 1 % or slower, up to +13 %
# (kernel/NOTES.md). Then (2026-12-04, third session; commit 3591b83's -DMLAV_SHARE_BF, rungs/overlap-
# fp8-h200-20261204T1256-share.json and ...T1257-share-bf-run{1,2,3}.json): the share's bounds as two
# compares without n_main and no branch, -0.3 to -2.1 % in four runs, production since; the share formed
# in PV's column step 0 (=2) +0.5 to +1.5 %, deleted.
# Measured and deleted (2026-12-04, fourth session; commit ae4e700's -DMLAV_PIECE_IMM, three runs a pool,
# rungs/overlap*-h200-20261204T141[89]-piece-imm-run{1,2,3}.json): rows64d's copy pieces at immediate
# offsets of one base pair (a switch on the piece), bit-equal: fp8 -1.0 % at T = 8 but +0.4 % at T = 16
# and +0.7 % at T = 32 (math alone +0.2 to +0.9 %, the loads alone +2.4 % at T = 16, 32); bf16 a tie.
# Measured and deleted (same session; commit 880419a's -DMLAV_H1_SHARE, two runs a pool,
# rungs/overlap*-h200-20261204T1437-h1-share-run{1,2}.json, barwait T1438): half 1 forming half 0's
# copy share a step ahead into a 16-byte record, bit-equal: full call +2.6 to +4.4 % on fp8, +6 / +7 %
# on bf16 (centre, T = 32): half 0's busy clocks fell 142 a tile on fp8 and not at all on bf16, half 1's
# rose 312 / 337, and it became the longer path.
# Measured (same session; commit a08f1e5's -DMLAV_SPLIT_COPIES=5 / 6, three runs, rungs/overlap-h200-
# 20261204T1555-pieces-block-run{1,2,3}.json, bit-equal): bf16 half 0's nine pieces as one block at PV's
# column step 7: -2.0 % at the centre, -2.4 % at T = 32 (math alone -2.2 / -1.7 %), production since
# (2026-12-04, fifth session; bench T1708); at step 0 +1.4 % at the centre, a tie at T = 32.
# Measured (fifth session; bit-equal): fp8 half 0's five H0PV pieces as one block at PV's column step 7
# or 3 (commit 79fa28f, three runs, rungs/overlap-fp8-h200-20261204T1714-h0pv-block-run{1,2,3}.json):
# +2.0 / +1 % (the math alone at step 3 -2.3 %, so five LDGSTS at once stall PV); as pairs at steps 3,
# 5, 7 (commit dc26749, three runs, ...T1719-h0pv-pairs-run1.json, the other two printed only): -2.4
# to -2.8 % at T = 8-32, production since, then -1.9 to -3.0 % against h0pv_spread in three more runs
# of the production build (...T1729-pairs-production-run{1,2,3}.json); 3 + 2 at steps 3, 6 a tie or
# slower; bf16's nine as two blocks at steps 4 and 7 (...overlap-h200-20261204T1720-two-blocks-run1.json,
# three runs) +3-4 %. Deleted but the spread.
# Measured (2026-12-04, sixth session; commit 2a9cff4's -DMLAV_MODE_CONST, _LOADS_CONST, _MATH_CONST,
# three runs a pool, rungs/overlap*-h200-20261204T1909-mode-const-run{1,2,3}.json, bit-equal): rowsd's
# runtime mode tests (loads, math, evict-first) as constants in the verify kernel. bf16 all three: rows32d
# -7 % at T = 4, -9 % at T = 8, rows64d -2.8 % at the centre, a tie at T = 32; fp8 the loads alone:
# -2.8 % rows32d, -3.7 / -2.0 / -1.9 % rows64d at T = 8 / 16 / 32 (all three there -1.3 to +1.3 %).
# Production since as tier_rowsd.cuh's Kind PROD; modes_runtime is the production before. In the same
# runs (commit 48c4265's -DMLAV_SMALL_MODE_CONST, ...T1920-modes-prod-small-run{1,2,3}.json) the small
# tiers' loads and math (bf16 also evict-first) as constants: fp8 -4.2 % at T = 1, -4.7 / -4.7 / -3.8 %
# at T = 8 / 16 / 32 (tier 4); bf16 T = 1 -0.2 to -1.4 %, a tie. Production on fp8 since
# (tier_small8.cuh), then -2.8 to -5.2 % (T = 1) and -3.4 to -4.8 % (tier 4) against
# small8_modes_runtime, the production before (...T1944-small8-production-run{1,2,3}.json).
# Measured and deleted (same session; commit 7668ebc, three runs a pool, ...T1958-evict-run{1,2,3}.json,
# bit-equal): rowsd's evict-first apart from the math, fixed on fp8 with its loads (-DMLAV_FP8_FIX_EVICT,
# -0.4 to +0.5 %) or tested at run time on bf16 (-DMLAV_BF16_EVICT_RUNTIME, +0.2 to +0.8 %): ties.
# Each must write production's output bit for bit
# name -> (-D macros, tiers whose code they change)
VARIANTS: dict[str, tuple[tuple[str, ...], tuple[int, ...]]] = {
    "copy_after_barrier": (("MLAV_COPY_AT=0",), (8,)),
    "copy_before_qk": (("MLAV_COPY_AT=1",), (8,)),
    "copy_in_qk": (("MLAV_COPY_AT=2",), (8,)),
    "copy32_in_qk": (("MLAV_COPY32_AT=2",), (6,)),
    "h0_lag": (("MLAV_H0_LAG=1",), (8,)),
    "h0_lag_copies": (("MLAV_H0_LAG=1", "MLAV_SPLIT_COPIES=2"), (8,)),
    "h0_lag_copies_late": (("MLAV_H0_LAG=1", "MLAV_SPLIT_COPIES=3"), (8,)),
    "h0_classic": (("MLAV_H0_LAG=0", "MLAV_SPLIT_COPIES=0"), (8,)),
    "h0pv_off": (("MLAV_NO_H0PV",), (8,)),
    # bf16 rows64d: half 0's nine copy pieces as one block at PV's column step 0 (production: step 7;
    # spread between the steps, the production before, is h0_lag_copies_late; fp8 unchanged)
    "pieces_block0": (("MLAV_SPLIT_COPIES=5",), (8,)),
    # fp8 rows64d: half 0's five H0PV pieces one a column step (3-7), the production before the pairs
    "h0pv_spread": (("MLAV_H0PV_SPREAD",), (8,)),
    # rowsd's mode bits read at run time in the verify kernel, the production before its Kind PROD
    # fixed them (tier_rowsd.cuh): the full call only (its no_loads rows run the math-alone copy)
    "modes_runtime": (("MLAV_MODES_RUNTIME",), (8, 6)),
    # the fp8 small tier's mode bits read at run time in the verify kernel, the production before
    # (tier_small8.cuh; the full call only; the bf16 small tier's code is production's)
    "small8_modes_runtime": (("MLAV_SMALL8_MODES_RUNTIME",), (1, 4)),
    # rows64d's half 1 (tier_rowsd.cuh, H1_LAG; production: softmax(j - 1), PV(j - 1), QK(j)): QK(j)
    # with softmax(j - 1)'s stages at k-steps 0, 2, 4, 6 (h1_lag, bf16; h1_lag_fp8, fp8, which spilled
    # 8-28 bytes on sm_89 and sm_90 before FRESH_IDS) or 0, 1, 3, 5 (h1_lag2, bf16), then S(j)'s store
    # and PV(j - 1) past its half barrier. Measured (2026-12-04, seventh session; commit 8c13591, three runs,
    # rungs/overlap-h200-20261204T2126-h1-lag-run{1,2,3}.json, bit-equal): h1_lag -2.0 % at the centre,
    # -5.5 % at T = 32 (means; runs -5.3 to -5.9 %); h1_lag2 -0.2 / -3.4 %
    "h1_lag": (("MLAV_H1_LAG=1",), (8,)),
    "h1_lag2": (("MLAV_H1_LAG=2",), (8,)),
    "h1_lag_fp8": (("MLAV_H1_LAG_FP8=1",), (8,)),
    # rows64d's halves forming their thread-index values from one shared thread index, production's
    # before FRESH_IDS (tier_rowsd.cuh). Measured against it (2026-12-05, commit 5f6b0c2, three runs,
    # rungs/overlap*-h200-20261205T015*-fresh-ids-run{1,2,3}.json, bit-equal): FRESH_IDS -5.7 % at the
    # centre and -9.2 % at T = 32 on bf16, -1.2 / -0.3 % on fp8 (h1_lag on top of it: -5.0 / -9.4 %)
    "ids_classic": (("MLAV_FRESH_IDS=0",), (8,)),
    # rows64d's tile loops unrolled by two (tier_rowsd.cuh, -DMLAV_UNROLL=mask of the halves: both,
    # half 0's, half 1's). Measured and deleted (2026-12-05, commit 7bcb97b, three runs,
    # rungs/overlap*-h200-20261205T040*-fresh-step-unroll-run{1,2,3}.json, bit-equal): fresh_step,
    # each half's thread-index values read again at every tile step (-DMLAV_FRESH_STEP), +2.9 / +6.1 %
    # (bf16 T = 8 / 32), +1.2 to +1.4 % (fp8 T >= 16). The unrolled loops (9360b41, 606c5e1,
    # rungs/overlap*-h200-20261205T04{16,57}-*.json): bf16 math alone -7 to -9 %, full call +3 %; fp8
    # full call -2.6 to -2.8 % at T >= 16 (kernel/NOTES.md)
    "unroll2": (("MLAV_UNROLL=3",), (8,)),
    "unroll_h0": (("MLAV_UNROLL=1",), (8,)),
    "unroll_h1": (("MLAV_UNROLL=2",), (8,)),
    # fp8's loops rolled (UNROLL_FP8 = 0), the production before fp8's unrolled loops
    "fp8_rolled": (("MLAV_UNROLL_FP8=0",), (8,)),
    # both, with half 0's copy block at PV's column step 0 (pieces_block0's; bf16 only: the macro
    # sets fp8's SPLIT_COPIES too)
    "unroll2_block0": (("MLAV_UNROLL=3", "MLAV_SPLIT_COPIES=5"), (8,)),
    # both, with every copy at the top of the step (copy_after_barrier's; bf16 only, as above)
    "unroll2_copy_top": (("MLAV_UNROLL=3", "MLAV_COPY_AT=0"), (8,)),
    # both, with half 0's copy pieces spread over PV's column steps (h0_lag_copies' one a step,
    # h0_lag_copies_late's from step 1; bf16 only, as above). Measured (cc0d8fd, three runs,
    # rungs/overlap-h200-20261205T053*-unroll-spread-run{1,2,3}.json): +4.2 to +6.2 % full call
    "unroll2_spread": (("MLAV_UNROLL=3", "MLAV_SPLIT_COPIES=2"), (8,)),
    "unroll2_spread_late": (("MLAV_UNROLL=3", "MLAV_SPLIT_COPIES=3"), (8,)),
    # (item_order, unroll2_item_order: the work item's fields reordered so that rowsd's copy
    # addresses read p0, p1, S, qo0 as one 16-byte group, which took a load-use wait out of half 0's
    # loop top (-DMLAV_ITEM_COPY_ORDER, commit c0ef52e). Measured on an H100 (five rounds, bit-equal,
    # rungs/overlap-h100-20261206T0627-item-order.json): -0.8 % at T = 8, +0.4 % at T = 32 rolled,
    # -1.1 % / 0.0 % unrolled against unroll2; barwait: half 0 98 busy clocks a tile shorter, half 1
    # 75 longer (rungs/barwait-h100-20261206T0627-*.json); deleted)
    # (h1_pieces2, h1_pieces3, unroll2_h1p3, unroll2_h1p4: bf16's copy block split between the halves,
    # the last N of each thread's nine pieces in half 1 as one block before its QK(j), rolled and
    # unrolled (-DMLAV_H1_PIECES=N, commit 6e91aa3). Measured on an H100 (three rounds, bit-equal,
    # rungs/overlap-h100-20261206T0605-h1-pieces.json): +2.9 to +3.1 % at T = 8, +5.2 / +5.3 % at
    # T = 32 rolled, +5.5 to +8.3 % unrolled; barwait moved the loads' ~250 busy clocks a tile from
    # half 0 to half 1 whole, with 3 of 9 pieces (rungs/barwait-h100-20261206T0605-*.json); deleted)
    # (ids_half0 and unroll_h1_ids_half0, bf16's slot-id copies by warp 0 (-DMLAV_IDS_WARP=0), rolled
    # and with half 1's loop unrolled: measured on an H100, 2026-12-05 (commit 5627f80, two runs,
    # rungs/overlap-h100-20261205T1208-ids-half0-run{1,2}.json, bit-equal): +1.8 to +2.4 % / +0.1 to
    # +0.8 % at T = 8, +6.3 to +6.9 % / +4.6 to +4.7 % at T = 32, the loads alone +12 %; deleted)
    # (rows64d's tail CTAs, a row tile ending within half 0, with half 1 idle (-DMLAV_TAIL=1, then
    # production) against computing its padding rows (tail_off) and with half 0 on one m-tile too
    # (tail_m16): measured on an H100 at T = 8, 17, 33 (commit 98f7366, three runs,
    # rungs/overlap*-h100-20261205T14{39,40}-tail-*.json, bit-equal): no gain at T = 17 or 33, where every
    # row tile of a split reads the same KV range, so a faster tail CTA only idles its SM; deleted, then
    # back the next session with the tail row tile on splits of its own, below; tail_m16 stays deleted)
    # rows64d's tail kernels (tier_rowsd.cuh, TAIL; production: taken where the shape ends in a tail,
    # with half 1 idle in tail CTAs and the tail row tile on its own, longer splits): tail_off never
    # takes them (the production before: equal splits, padding rows computed), tail_equal takes them
    # with equal splits (half 1 idle alone, the fourteenth session's production)
    # (unroll2_align and unroll_align_fp8, the unrolled loops as pairs of tiles (2 k, 2 k + 1), each
    # tile's parity and stage known to the compiler (-DMLAV_UNROLL_ALIGN=1 with MLAV_UNROLL=3,
    # -DMLAV_UNROLL_ALIGN_FP8=1): the issue model had bf16 at 1,637 cycles a tile against production's
    # 1,700. Measured on an H200 (commit f1a7837, three rounds, rungs/overlap*-h200-20261206T0308-
    # unroll-align.json, bit-equal): bf16 math alone -5.5 / -5.7 % (T = 8 / 32), as the model's loads-off
    # figure, but the full call +0.6 / +0.8 %; fp8 +2.2 / +1.6 / +1.1 % (T = 8 / 16 / 32); deleted)
    # (ids_after_q: rowsd's prologue with the first AHEAD tiles' slot ids loaded before Q's fragments
    # (IDS_FIRST, built as production) against after them, 5e66d98f's order (-DMLAV_IDS_FIRST=0):
    # the prologue trace had tile 0's copies 2.9-3.6 us after the plan. Measured on an H100 (three
    # rounds, bit-equal, rungs/overlap*-h100-20261206T1651-ids-first*.json): ids first +0.7 / +1.4 us
    # at rows64d T = 16 / 8 on bf16, +0.7 / +0.9 on fp8, +0.2 at rows32d T = 4 on both; deleted)
    # (q_early: rowsd's Q fragments issued inside the plan, behind its indptr loads, for the row tile a
    # one-request launch gives the CTA, loaded again where the plan's item differs (-DMLAV_Q_EARLY,
    # commit 01dc64d); q_prefetch: that row tile's Q lines prefetched into L1 there instead, qa's code
    # production's (-DMLAV_Q_PREFETCH, 4ec8f94). Measured on an H100 (three runs, bit-equal,
    # rungs/overlap*-h100-20261206T19{11,16,44}-q-*.json): q_early's math alone 0.9-1.7 us shorter at
    # rows64d T = 8 and 16 on both pools, its full call slower at three of the four (+0.6 to +2.6 us);
    # q_prefetch's math alone no shorter, its full call -0.4 to +0.8 us; both deleted)
    "tail_off": (("MLAV_TAIL=0",), (8,)),
    "tail_equal": (("MLAV_TAIL=1",), (8,)),
    # fp8's tail row tile on splits as long as the full ones' (8 / 8), the production before 7 / 8: fp8's
    # tail CTAs cost 0.81-0.86 of a full one a tile, and the schedule gives the busiest full CTA 3.6-4.5 %
    # fewer tiles at D = 17, 33 on 132 SMs with 7 / 8 (none at 65: the split count stays 14), 2.6-4.8 % at
    # 17-65 on 188. Measured as the variant tail_e7_fp8 (-DMLAV_TAIL_E_FP8=7) against it (commit f1a7837,
    # H200, five rounds, rungs/overlap-fp8-h200-20261206T0308-tail-e7.json, within 1.6e-3): D = 17 -3.1 %,
    # D = 33 -4.5 %, D = 65 -0.1 %
    "tail_e8_fp8": (("MLAV_TAIL_E_FP8=8",), (8,)),
    # plan_item aiming its chunk at target items where they fit in one wave, not at target - U (U: the
    # row tiles): 132 items instead of 130 at the centre and T = 16 (tiles a CTA 89 -> 88, 178 -> 176),
    # instead of 128 at T = 32 (362 -> 351). Its first form measured on an H100 (commit 3eac450, three
    # rounds, rungs/overlap*-h100-20261206T1225-wave-fit.json): full call bf16 -0.4 / -2.4 % (T = 8 /
    # 32), fp8 -0.9 / -3.1 % (T = 16 / 32); production since the second form (rows64's spills 0), and
    # the old schedule, the chunk aimed at target - U always, its variant
    "wave_safe": (("MLAV_WAVE_SAFE",), (8,)),
    # (bulk8, -DMLAV_BULK8, commit a55d43a: fp8 rows64d's prefix rows by one cp.async.bulk each on sm_90 /
    # sm_120, 16 a tile from lanes 0-3 of half 0's warps at H0PV's column step, completing on an mbarrier
    # a stage that every thread waited on in top(j). Measured on an H100 (three rounds, bit-equal,
    # rungs/overlap-fp8-h100-20261206T0746-bulk8.json): the full call +10.5 / +10.6 / +10.2 % at T = 8 /
    # 16 / 32, the loads alone a tie at T = 8 and +20 / +29 % at 16 / 32; barwait: issuing them cost half
    # 0 more than the LDGSTS they replaced (kernel/NOTES.md); deleted)
    # (zero_copies, -DMLAV_ZERO_COPIES, commit 18dd7b8: rows64d's loop copy pieces with 0 source bytes,
    # each still forming its address and writing its 16 bytes of shared memory but reading nothing;
    # outputs wrong by design, timed anyway (by a set of such builds that overlap skipped the check for,
    # deleted with it). H100, three rounds, rungs/overlap*-h100-20261206T0809-
    # zero-copies.json: bf16 T = 8 / 32 -5.2 / -2.1 % against production, where the math alone is
    # -10.3 / -8.3 %; fp8 T = 16 / 32 -0.4 / -1.4 %: the copies cost the tile mostly as instructions and
    # shared-memory writes, not as global reads (kernel/NOTES.md); deleted)
    # (addr_ids, -DMLAV_ADDR_IDS, commits 99721e9, 9cc1bda, 9baadf2: the slot-id warp (warp 4) turned each
    # token's window entry into its row's byte address, half 0's copy share loaded it: half 0's loop
    # 285 -> 262 sm_90 instructions a tile on bf16. Measured on an H100 (three rounds, bit-equal,
    # rungs/overlap*-h100-20261206T08{38,48}-addr-ids-*.json): converted right after top(j)'s barrier
    # bf16 T = 8 / 32 +0.7 / +4.0 %, fp8 T = 16 / 32 +8.3 / +8.0 %; inside half 1's QK +1.2 / +8.5 %,
    # +2.4 / +2.7 %: half 0 ~240-320 busy clocks a tile shorter, half 1 ~140 longer wherever warp 4
    # ran the chain, and the loop longer (kernel/NOTES.md); deleted)
    # the merge's grid launched at the verify grid's exit, the production before each verify CTA let it
    # launch once its loop was done (verify_common.cuh, pdl_trigger): only the call with its merge
    # (--merge) can differ. Measured as the variant pdl_trigger (-DMLAV_PDL_TRIGGER) against it (commit
    # 5956a7f, five rounds, rungs/overlap*-h100-20261205T1830-pdl-trigger.json, bit-equal), then as
    # production against it (...T1839-pdl-confirm.json): the merged call 0.5-1.5 us faster at T = 1-32
    # on both pools, except rows64d at the centre, a tie
    "pdl_at_exit": (("MLAV_NO_PDL_TRIGGER",), (8, 6, 4, 1)),
    # rowsd's fp8 q scale from the CTA's max |q| (a warp max, a CTA barrier, the conversion after it), the
    # production before q_fast: where every |q| < 2^14 (qe = 0) each warp now converts its fragments as
    # they land and the CTA agrees by the barrier's OR; else Q is loaded again and scaled this way. Measured
    # as the variant q_fast (-DMLAV_Q_FAST, commit 5d32435) against it on an H200 (three runs, five, three
    # and five rounds, bit-equal also at q x 2^14, rungs/overlap-fp8-h200-20261206T204[17]-q-fast-run*.json):
    # every fp8 rowsd shape's full call shorter in every run, rows64d -0.6 to -1.2 us at T = 8, -1.0 to
    # -1.5 at T = 16, -4.7 at T = 32; rows32d -2.7 to -10.8 us; its math alone +0.5 to +5.2 us (the loops'
    # code moved: half 0's 1,280 -> 1,278 sm_90 instructions, half 1's 1,359 -> 1,356)
    "q_cta_max": (("MLAV_Q_CTA_MAX",), (8, 6)),
    # rowsd's Q from global memory in every CTA, the production before Q went through the ring before
    # the plan (tier_rowsd.cuh; measured as q_smem, one H100, three runs, bit-equal: the call with its
    # merge 0.3-1.5 us shorter at every default rowsd shape, rungs/overlap*-h100-20261207T082[45]-q-smem-run*.json)
    "q_global": (("MLAV_Q_GLOBAL",), (8, 6)),
    # rowsd's prologue with its slot ids loaded by slot_of (each sign-extended inside the bounds test's
    # branch, so each load waited for the one before) and its item read from shared memory, and fp8
    # rows64d 6 tiles ahead: the production before pro_regs + ahead4 (tier_rowsd.cuh; measured as
    # ahead4_pro_regs against it on one H100, three runs, bit-equal, device-only patch
    # rungs/overlap-h100-20261207T1130-pro-regs.patch: fp8 rows64d's merged call -1.5 to -1.9 us at
    # T = 8, -1.2 to -1.4 at T = 16, -0.1 to -0.4 at T = 32; bf16's centre -0.3 to -1.3,
    # rungs/overlap{-fp8,}-h100-20261207T123[789]-pro-regs-run*.json)
    "pro_smem_ahead6": (("MLAV_PRO_SMEM", "MLAV_AHEAD8=6"), (8, 6)),
    # plan_item at every tier, the production before a one-request launch's item came in closed form
    # (verify_common.cuh's plan_one, in rows64d, small's 8-row tiles and small8's 8- and 16-row tiles;
    # measured as plan_one against it on one H100, five rounds, bit-equal: merged call 0.7-2.1 us shorter
    # at every default shape timed, rungs/overlap{-fp8,}-h100-20261207T21{17,46,47}-plan-one*.json; the
    # kernels where it lost keep plan_item, rungs/plan-one-selective.patch)
    "plan_general": (("MLAV_PLAN_GENERAL",), (1, 2, 8)),
}
# Measured and deleted (2026-12-07, thirty-fourth session; one H100, three runs, bit-equal; a patch applied on the
# device only, rungs/overlap-fp8-h100-20261207T1103-prologue.patch, kernel/NOTES.md): ahead5 (-DMLAV_AHEAD8=5), slower
# at fp8 T = 8-32 by 0.1-3 us; qcvt (-DMLAV_QCVT_EARLY: fp8's q_big OR at the ring's barrier and Q converted behind tile
# 0's copies), +0.5 to +2.3 us at every T, its loop entered only 0.1 us sooner as traced. Measured and not made
# production (rungs/overlap-h100-20261207T1130-pro-regs.patch): pro_regs alone (the prologue's ids and item in
# registers, fp8 rows64d still 6 ahead), +0.4 to +3.2 us merged at every fp8 T although its loop started 0.6 us sooner;
# ahead4 alone (4 ahead, ids as before), -1.2 / -0.6 us at fp8 T = 8 / 16 but +0.2 to +0.4 at T = 32
# Measured and deleted (2026-12-07, thirty-third session; one H100, bit-equal; patches applied on the device only,
# rungs/overlap-h100-20261207T0753-epi-direct.patch and rungs/overlap-fp8-h100-20261207T0806-ost8.patch,
# kernel/NOTES.md): epi_direct (-DMLAV_EPI_DIRECT: each half storing its rows straight from its registers, no
# staging and no CTA barrier), bf16 rows64d 2-5 us slower and fp8 rows64d's merged call slower at T = 8 and 16;
# ost8 (-DMLAV_OST8: fp8's staging rows padded by 32 bytes, off a 2-way bank conflict), its staging 0.2 us
# shorter as traced but the call within 0.3 us at T = 16 over three runs
# Measured and deleted (2026-12-06, thirtieth session; one H200, five rounds, bit-equal; the source was a patch
# applied on the device only, rungs/overlap*-h200-20261206T2306-plan-fast-merge-unr5.log and ...-t1.json,
# kernel/NOTES.md): plan_fast (-DMLAV_PLAN_FAST: the item's mask offset prefetched into L1 in pass 1, 32-bit
# chunk divisions, and with bs <= 32 no exchange or barrier after passes 1 and 2), whose plan the trace put
# 0.19-0.31 us shorter but whose full call was 0.7-1.1 us slower at fp8 rows64d T = 8 / 16 / 32; and
# merge_unr5 (-DMLAV_MERGE_UNR5: 5 splits in flight a merge thread, so 128 rows' 66 splits take one round),
# -0.2 / -0.9 us merged at T = 16 (fp8 / bf16) and +1.0 us at fp8 T = 32
# Measured and deleted (2026-12-06, twenty-fourth session; commits cec8c04 and 031d8e7, one H100, three
# rounds, rungs/overlap*-h100-20261206T{0957,1003,1004}-*.json): rows64d with a fourth warpgroup that
# issued every copy and slot id (-DMLAV_HELPER, built for sm_90a: setmaxnreg gave the math warps 240
# registers, the helper 24), bit-equal on bf16, +4 to +13 % (its math alone +7 to +11 %; fp8's build
# stopped on an illegal instruction in the helper's code); and production capped at 240 registers
# (-DMLAV_MAXNREG=240), whose math alone lost as much: +9 to +12 % on both pools. Then (commit f812b5f,
# rungs/overlap-fp8-h100-20261206T1023-stage16.json): fp8's math-alone kernel reading its prefix tiles
# as bf16's loop does, from f16 stages converted once a tile from e4m3 ones (-DMLAV_STAGE16=1: by half
# 1; =2: split between the halves), timed by its no_loads rows: +23 / +12 % at T = 16 and 32

# builds whose split boundaries differ from production's where a request has a tail row tile, so
# that their merge rounds differently: held to production's output within REL_TOL (relative
# 2-norm, o and lse) and no unwritten output, instead of bit for bit; each with the tail weight its
# schedule runs per pool (eighths, plan_item's TAIL_E; {}: equal splits), which sets its tiles a CTA
TAIL_E_OF_BUILD = {"tail_off": {}, "tail_equal": {}, "tail_e8_fp8": {**TAIL_E, FP8_KV: 8}}
# builds whose plan_item does not fit the chunk to one wave of target items (MLAV_WAVE_SAFE), unlike production's
WAVE_FIT_OF_BUILD = {"wave_safe": False}
SPLITS_DIFFER = set(TAIL_E_OF_BUILD) | set(WAVE_FIT_OF_BUILD)
REL_TOL = 1e-2
# (T, tiers of the production library) per pool; the variants run their tiers at each T, both pools
SHAPES = {"auto": ((1, (1,)), (4, (6,)), (8, (8, 9, 6)), (32, (8, 9))),
          FP8_KV: ((1, (1,)), (2, (2,)), (8, (8, 6, 4)), (16, (8, 4)), (32, (8, 4)))}
ROW_BYTES = {"auto": checks.ROW_BYTES, FP8_KV: checks.FP8_ROW_BYTES}   # a pool row
S, H = 185000, 8


def same_enough(build_name: str, row: dict) -> bool:
    """A same_output row passes: bit-equal, or (SPLITS_DIFFER) within REL_TOL with every output
    written."""
    if row["equal"]:
        return True
    return build_name in SPLITS_DIFFER and row["nan"] == row["nan_production"] == 0 and row["rel_err"] <= REL_TOL


def l2_window_rows(kv: str = "auto") -> int:
    """Pool rows of the pool `kv` that take a third of this GPU's L2."""
    return torch.cuda.get_device_properties(0).L2_cache_size // 3 // ROW_BYTES[kv]


def _args(case, placement: str, kv: str) -> tuple:
    args = list(case.args())
    if placement == "l2":
        args[3] = args[3] % l2_window_rows(kv)
    return tuple(args)


def variant_lib(name: str):
    """VARIANTS[name]'s diagnostic build for this device's arch only (built once, then cached)."""
    arch = "".join(map(str, torch.cuda.get_device_capability()))
    log(f"overlap: building {name} ({' '.join(VARIANTS[name][0])}) for sm_{arch}")
    return build.load((arch,), defines=VARIANTS[name][0])


def shapes_of(kv: str, ts=None, tiers=None) -> tuple:
    """(T, tiers) pairs to time: the pool's SHAPES, or each draft length of `ts` at `tiers` (default
    rows64d, tier 8)."""
    if ts is None:
        return SHAPES[kv]
    return tuple((T, tuple(tiers or (8,))) for T in ts)


def run(kv: str = "auto", tiers=None, placements=("dram", "l2"), variants=None, ts=None, rounds: int = 3,
        merge: bool = False) -> dict:
    ws = get_workspace("cuda")
    shapes = shapes_of(kv, ts, tiers)
    mhz = sm_clock_mhz()["sm_max"] or 1980.0
    libs = {"production": build.load()}
    timed = {t for _, st in shapes for t in st if tiers is None or t in tiers}
    for name, (_, vtiers) in VARIANTS.items():
        if timed & set(vtiers) and (variants is None or name in variants):
            libs[name] = variant_lib(name)
    # a variant that does not write production's output, bit for bit (SPLITS_DIFFER: within
    # REL_TOL), on the loaders' edge cases and at every timed shape is not timed (same_output.py)
    vtiers = {b: (libs[b], [t for t in VARIANTS[b][1] if t in timed]) for b in libs if b != "production"}

    def loud_cases():   # fp8's q scale 2^-qe != 1 (|q| >= 2^14): the logits as the edge case's
        for prefix, draft in ((3000,), (8,)), ((0, 1, 15, 16), (1, 8, 3, 8)):
            yield f"{list(prefix)}/{list(draft)}/q x {LOUD_Q:g}", loud_q(make_case(
                list(prefix), list(draft), 8, tree="random", layout="scattered", seed=790, device="cuda", kv_dtype=kv))

    def shape_cases():   # one 185k case at a time: each pool holds 213 MB of KV
        for T, _ in shapes:
            yield f"S={S} T={T} H={H}", shape_case(S, T, H, kv)[0]

    same = []
    if vtiers:
        cases = itertools.chain(edge_cases("fp8" if kv == FP8_KV else "bf16", "cuda"), loud_cases(), shape_cases())
        same = compare(libs["production"], vtiers, cases, ws)
    differs = set()
    for b in vtiers:
        mine = [c for c in same if c["build"] == b]
        bad = [c for c in mine if not same_enough(b, c)]
        near = sum(1 for c in mine if not c["equal"] and same_enough(b, c))
        log(f"overlap: {b}: {len(mine) - len(bad)} of {len(mine)} calls equal to production's output"
            + (f" ({near} within {REL_TOL:g}, worst {max(c['rel_err'] for c in mine):.2e})" if near else "")
            + (f"; NOT TIMED, differs at {[(c['case'], c['tier']) for c in bad][:4]}" if bad else ""))
        if bad:
            differs.add(b)
    for b in differs:
        del libs[b]
    rows = []
    for T, shape_tiers in shapes:
        shape_tiers = [t for t in shape_tiers if tiers is None or t in tiers]
        if not shape_tiers:
            continue
        case, o, lse = shape_case(S, T, H, kv)
        builds = [(b, t) for t in shape_tiers for b in libs if b == "production" or t in VARIANTS[b][1]]
        for placement in placements:
            args = _args(case, placement, kv)
            # the first build timed after a shape's case was made came out 1-4 % slower than the others
            # in every run of 2026-12-05 (rungs/overlap-h100-20261205T16{19,27}-*.json: production
            # first, then the variants, each a little faster than the one before, with the same loops):
            # one discarded call of it, then every (build, mode) once a round, the builds in order on
            # even rounds and reversed on odd ones, and the median of the rounds
            def call(b, tier, mode, args=args):
                return lambda: launch(*args, o, lse, ws.buffer, ws.target_ctas, ws.max_bs, mode=mode, tier=tier,
                                      lib=libs[b], **case.kwargs())

            time_calls([call(*builds[0], MODES["full"])])
            def modes_of(tier, placement=placement):
                return (list(MODES.items()) + ([NOISE_MODE] if tier in NOISE_TIERS and placement == "dram" else [])
                        + ([MERGED_MODE] if merge else []))

            def one_build(b, tier):   # a round of one build: its modes in order
                return lambda: {name: time_calls([call(b, tier, mode)]) * 1e3 for name, mode in modes_of(tier)}

            per_build = rounds_of({(b, tier): one_build(b, tier) for b, tier in builds}, rounds)
            us_of = {(b, tier, name): [rnd[name] for rnd in per_round]
                     for (b, tier), per_round in per_build.items() for name in per_round[0]}
            for (b, tier, mode_name), uss in us_of.items():
                tiles = tiles_per_cta([S], T, H, TIERS[tier], ws.target_ctas, tail_e_of(tier, KV_DTYPE_NAMES[kv], TAIL_E_OF_BUILD.get(b)),
                                      WAVE_FIT_OF_BUILD.get(b))
                us = statistics.median(uss)
                rows.append({"S": S, "T": T, "H": H, "tier": tier, "kv_dtype": KV_DTYPE_NAMES[kv], "build": b, "defines": list(VARIANTS[b][0] if b in VARIANTS else ()),
                             "placement": placement, "mode": mode_name, "time_us": us, "rounds_us": uss,
                             "tiles_per_cta": tiles, "clk_per_tile": us * mhz / tiles})
                log(f"overlap {KV_DTYPE_NAMES[kv]} T={T} tier {tier} {b:18s} {placement:4s} {mode_name:8s} {us:8.1f} us "
                    f"{us * mhz / tiles:7.0f} clk/tile (rounds {', '.join(f'{u:.1f}' for u in uss)})")
        del case, o, lse
        torch.cuda.empty_cache()
    return {"kind": "overlap", "kv_dtype": KV_DTYPE_NAMES[kv], "clock_assumed_mhz": mhz,
            "l2_window_rows": l2_window_rows(kv), "rows": rows, "same_output": same,
            "not_timed_differs": sorted(differs)}


def table(doc: dict) -> list[str]:
    """One line per (T, tier, build, placement): full, no loads, no math (us) and what does not
    overlap: full - max(no loads, no math), in clocks per tile."""
    by = {}
    for r in doc["rows"]:
        by.setdefault((r["T"], r["tier"], r["build"], r["placement"]), {})[r["mode"]] = r
    merged = any(r["mode"] == MERGED_MODE[0] for r in doc["rows"])
    out = [f"{'T':>3} {'tier':>4} {'build':18s} {'KV':4s} {'full':>8} {'no loads':>9} {'(noise)':>8} {'no math':>8} "
           f"{'exposed clk/tile':>17}" + (f" {'merged':>8}" if merged else "")]
    for (T, tier, b, pl), m in by.items():
        full, nl, nm = (m[k]["time_us"] for k in ("full", "no_loads", "no_math"))
        exposed = (full - max(nl, nm)) * doc["clock_assumed_mhz"] / m["full"]["tiles_per_cta"]
        noise = f"{m['no_loads_noise']['time_us']:8.1f}" if "no_loads_noise" in m else f"{'-':>8}"
        mg = (f" {m[MERGED_MODE[0]]['time_us']:8.1f}" if MERGED_MODE[0] in m else f" {'-':>8}") if merged else ""
        out.append(f"{T:>3} {tier:>4} {b:18s} {pl:4s} {full:8.1f} {nl:9.1f} {noise} {nm:8.1f} {exposed:17.0f}{mg}")
    return out


def once(tier: int, T: int = 8, variant: str | None = None) -> None:
    ws = get_workspace("cuda")
    case, o, lse = shape_case(S, T, H)
    lib = variant_lib(variant) if variant else None
    for mode in (MODES["full"], MODES["no_loads"]):
        launch(*case.args(), o, lse, ws.buffer, ws.target_ctas, ws.max_bs, mode=mode, tier=tier, lib=lib,
               **case.kwargs())
    torch.cuda.synchronize()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="folder for overlap-<gpu>-<stamp>.json")
    ap.add_argument("--kv", choices=sorted(SHAPES), default="auto",
                    help="the pool: auto (bf16, default) or fp8_e4m3 (SGLang's fp8 pool, at its tiers)")
    ap.add_argument("--once", type=int, metavar="TIER", help="two centre calls of TIER (full, no loads), for a profiler")
    ap.add_argument("--once-t", type=int, default=8, metavar="T", help="--once's draft tokens (default 8: the centre)")
    ap.add_argument("--once-variant", default=None, metavar="NAME", help="--once with a diagnostic build of VARIANTS")
    ap.add_argument("--tiers", default="", help="comma-separated tiers to time (default: every tier of SHAPES)")
    ap.add_argument("--dram-only", action="store_true", help="leave out the L2-resident placement")
    ap.add_argument("--variants", default=None,
                    help="comma-separated diagnostic builds of VARIANTS to time beside production "
                         "(default: every one whose tiers are timed; '' for none)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="times each build is timed at each shape, in alternating orders (default 3; the median)")
    ap.add_argument("--t", default="", metavar="T,T",
                    help="comma-separated draft lengths to time instead of the pool's shapes, each at --tiers "
                         "(default tier 8), e.g. 8,17,33 for the tails of DDTree's D = 8 k + 1")
    ap.add_argument("--merge", action="store_true",
                    help="also time each build's call with its merge (mode 'merged', column 'merged')")
    add_commit_arg(ap)
    a = ap.parse_args(argv)
    try:
        ts = [int(t) for t in a.t.split(",") if t] or None
    except ValueError:
        print(f"error: --t: expected comma-separated integers, got {a.t!r}", file=sys.stderr)
        return 2
    if a.rounds < 1:
        print(f"error: --rounds: {a.rounds} (at least 1)", file=sys.stderr)
        return 2
    if ts and min(ts) < 1:
        print(f"error: --t: {min(ts)} draft tokens (at least 1)", file=sys.stderr)
        return 2
    if a.once is not None and a.once not in TIERS:
        print(f"error: --once: tier {a.once} is not one of {sorted(TIERS)}", file=sys.stderr)
        return 2
    try:
        tiers = [int(t) for t in a.tiers.split(",") if t] or None
    except ValueError:
        print(f"error: --tiers: expected comma-separated integers, got {a.tiers!r}", file=sys.stderr)
        return 2
    if tiers and any(t not in TIERS for t in tiers):
        print(f"error: --tiers: {[t for t in tiers if t not in TIERS]} not among {sorted(TIERS)}", file=sys.stderr)
        return 2
    variants = None if a.variants is None else [v for v in a.variants.split(",") if v]
    if variants and any(v not in VARIANTS for v in variants):
        print(f"error: --variants: {[v for v in variants if v not in VARIANTS]} not among {sorted(VARIANTS)}",
              file=sys.stderr)
        return 2
    if a.once_variant is not None and a.once_variant not in VARIANTS:
        print(f"error: --once-variant: {a.once_variant!r} is not among {sorted(VARIANTS)}", file=sys.stderr)
        return 2
    if a.once_t < 1:
        print(f"error: --once-t: {a.once_t} draft tokens (at least 1)", file=sys.stderr)
        return 2
    if a.once is None and not a.out:
        print("error: --out: a folder is needed (or --once TIER)", file=sys.stderr)
        return 2
    if no_gpu("kernel.bench.overlap"):
        return 2
    if a.once is not None:
        once(a.once, a.once_t, a.once_variant)
        return 0
    doc = record(a.out, "overlap" if a.kv == "auto" else "overlap-fp8", a.commit,
                 run(a.kv, tiers, ("dram",) if a.dram_only else ("dram", "l2"), variants, ts, a.rounds, a.merge))
    print("\n".join(table(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

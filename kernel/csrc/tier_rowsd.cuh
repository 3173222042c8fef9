// Tier rows64d / rows32d (design D of the kernel memo, tier ids 8 and 6): query rows in the
// MMA's M dimension, in 32-row pipelines ("halves") of 4 warps; HALVES = 2 gives 64-row CTAs
// of 8 warps (rows64d), HALVES = 1 gives 32-row CTAs of 4 warps, two per SM (rows32d).
// Warp w = 4 r + d: half r (rows 32 r .. 32 r + 31), quarter d.
//   QK:  warp (r, d) keeps Q[its 32 rows, 144 dims of dim quarter d] in registers (k-step kk
//        = dims 64 kk + 16 d .. + 15, kk = 0..8, the last one rope: 9 k-steps x 2 m-tiles) and
//        computes partial S[32 rows, 16 tokens]: each K fragment feeds 4 MMAs. Quarter d takes
//        16 dims of every 128-byte block of a row, not 2 blocks of its own, because the swizzle
//        permutes 16-byte chunks within a block by the row: a lane's chunk is then at the same
//        place in every block, so its 9 K addresses are one base plus immediates (with whole
//        blocks a quarter, each k-step mod 4 needed an address of its own).
//   softmax: warp (r, d) sums the four dim-quarter partials of 8 rows of its half (a quad per
//        row, 4 tokens per thread; the partials are stored in the order this read wants, one
//        conflict-free 16-byte load each), keeps the running max stale until a row's max
//        exceeds it by 2^8 (P <= 256 in bf16, so rescaling O is rare; a warp vote on each lane's
//        own max decides first, so the quad's max shuffles run only then), writes P as A fragments.
//   PV:  warp (r, d) owns O[its 32 rows, columns 64 b + 16 d .. + 15 of blocks b = 0..7] (128
//        registers; V addresses one base plus immediates, as K's).
// A half synchronises its 4 warps with named barriers. With two halves, they meet once per
// tile, at the CTA barrier that also rotates the KV ring, at different points of their tile:
// half 0 runs QK(j), softmax(j), PV(j); half 1 runs softmax(j-1), PV(j-1), QK(j); so while
// one half waits on its softmax chain the other (same schedulers) issues MMAs. On bf16 half 0
// runs QK(j), then PV(j-1) with softmax(j) and tile j + AHEAD's copies between PV's column steps
// (H0_LAG, SPLIT_COPIES), so its own MMAs cover its softmax too. With one half
// per CTA, the two CTAs on an SM are independent and overlap the same way by themselves (each
// reads the KV range of its row tile: the second read comes from L2).
// KV: 16-token stages under L2 evict-first (bf16 4, fp8 8), AHEAD tiles in flight past the ones
// in use, slot ids by cp.async IDX_AHEAD tiles earlier into a shared window (in the loop by lanes
// 0-15 of warp 0, and the tile's copies issued by the lean loader; see tier_rows64d_pair.cuh and
// the overlap rung in kernel/NOTES.md); with two halves warp 4 copies the slot ids and one half
// the tile: half 0 in its PV (bf16), half 1 a piece a k-step of its QK (fp8; see load_lean,
// COPY_AT and SPLIT_COPIES).
// Partials (normalised bf16 O, fp32 log2-LSE) use the common layout and merge (combine<32 HALVES>).
// FP8 (SGLang's fp8_e4m3 pool): small8's numerics on this schedule. The prefix rows stream as
// e4m3 bytes into rows padded to 592 B (8 rows of one 16-byte column in 8 bank groups, so no
// swizzle) and the MMAs read them straight from there, converted to f16 in registers (exact;
// e4m3.cuh), as f16 MMAs: no bf16 copy of a tile is written and no barrier sits between a
// tile's copy and its MMAs. QK: ldmatrix reads a row's bytes as b16 pairs, so a lane holds dims
// 4 qd .. 4 qd + 3 of its token where the B fragment wants 2 qd, 2 qd + 1, 2 qd + 8, 2 qd + 9;
// Q's A fragments take the same permutation of each 16 dims (quarter d: dims 144 d .. + 143), as
// f16 times 2^-qe (qe per CTA, so that max |q| < 2^15; 2^qe joins the logits' scale). PV:
// ldmatrix.trans of bytes gives a lane tokens 2 qd, 2 qd + 1 of the byte pair 2 g, 2 g + 1, so
// one byte_perm splits it into two n-tiles, the even and the odd columns (warp d: columns
// 128 d .. + 127; the epilogue puts them back). P enters f16 unscaled (<= 2^8 with the stale
// max). Draft rows (positions >= S, bf16 rows of k_extend, L2-resident) are tiles of their own
// after the prefix tiles, read from global memory by bf16 MMAs (Q reloaded as bf16, the same
// permutations) into the same accumulators. k_scale folds into the prefix logits' scale;
// v_scale into the draft P (as 1 / v_scale) and the final normalisation (l sums the unscaled P).
#pragma once
#include <type_traits>

#include "e4m3.cuh"
#include "slot_window.cuh"
#include "verify_common.cuh"

namespace mlav {
namespace rowsd {

constexpr int STAGES = 4;
constexpr int RING_BYTES = STAGES * TILE_BYTES;        // 73,728
constexpr int IDX_AHEAD = 4;                           // tiles between an index copy and its use
constexpr int IDX_WIN = 8;                             // tiles in the index window (> IDX_AHEAD)
constexpr int QK_STEPS = 9;                            // 8 latent + 1 rope k-step per dim quarter
constexpr int OSTRIDE = DV + 8;                        // padded bf16 row of the output staging
constexpr float RESCALE_LOG2 = 8.f;                    // keep a stale max up to 2^8 below the true one
// rows64d's half 0: 0 runs PV(j) in its step j, behind its softmax(j) and a second half barrier;
// 1 runs PV(j - 1) in step j with its softmax(j) interleaved between PV's column steps, so that
// the softmax's latency chain issues in the shadow of the warp's own MMAs and half 0 passes one
// half barrier a tile (P, alpha and the rescale flags then take two buffers, by the tile's
// parity). Production: 1 on bf16 (with SPLIT_COPIES = 3: -3.5 % at the centre, -4.1 % at T = 32),
// 0 on fp8, where no variant was faster (kernel/bench/overlap.py, kernel/NOTES.md).
// -DMLAV_H0_LAG sets both pools (diagnostic builds)
#ifdef MLAV_H0_LAG
constexpr int H0_LAG_BF16 = MLAV_H0_LAG, H0_LAG_FP8 = MLAV_H0_LAG;
#else
constexpr int H0_LAG_BF16 = 1, H0_LAG_FP8 = 0;
#endif
// with H0_LAG: 0 leaves a tile's copies to half 1 (COPY_AT); 2 gives half 0 every piece of each
// thread's share, one between PV(j - 1)'s column steps; 3 as 2 a column step later (piece c - 1
// at step c, the last three at step 7), production on bf16 until the block: the copies lengthened
// half 1, the longer path with loads, and half 0 has the room since H0_LAG; 6, the nine pieces as
// one block at PV's column step 7, production on bf16: spread, each piece cost half 0 ~10 issue
// slots on sm_90 (its address formed again, three never-executed LDS before its LDGSTS), even when
// predicated off (-2.0 % at the centre, -2.4 % at T = 32; kernel/bench/half_paths.py counts them);
// 5 as 6 at step 0, +1.4 % at the centre. (Measured and deleted: 1, half 0 the even pieces and half
// 1 the odd ones, +3-5 %; 4, as 2 with the address formed before QK(j), +0-4 %; kernel/NOTES.md.)
// -DMLAV_SPLIT_COPIES sets both pools (diagnostic builds)
#ifdef MLAV_SPLIT_COPIES
constexpr int SPLIT_COPIES_BF16 = MLAV_SPLIT_COPIES, SPLIT_COPIES_FP8 = MLAV_SPLIT_COPIES;
#else
constexpr int SPLIT_COPIES_BF16 = 6, SPLIT_COPIES_FP8 = 0;
#endif
// fp8 rows64d (H0_LAG = 0, COPY_AT = 2): K >= 0 gives half 0 the late copies, piece i at the top
// of its PV(j)'s column step K + i, and half 1 none; -1 leaves them to half 1's QK. Production 3:
// the copies cost whichever half issues them 160-450 clocks a tile and half 1 is fp8's longer
// path, so half 0's PV takes them (-0.7 % at the centre, -1.3 to -2.6 % at T = 16, 32 in three
// runs; kernel/bench/overlap.py, kernel/NOTES.md). -DMLAV_NO_H0PV: -1, the production before
#ifdef MLAV_NO_H0PV
constexpr int H0PV_AT_FP8 = -1;
#else
constexpr int H0PV_AT_FP8 = 3;
#endif
// H0PV's five pieces go in pairs, (0, 1) at PV's column step H0PV_AT, (2, 3) at + 2 and 4 at + 4:
// one piece a step cost half 0 ~3 issue slots each on sm_90 (its address formed again, never-executed
// LDS before its LDGSTS), paired 506 -> 495 instructions a tile, -2.4 to -2.8 % at T = 8-32 in three
// runs. One block of five (488) was 1-2 % slower and 3 + 2 a tie or slower: five LDGSTS at once
// stall PV (kernel/NOTES.md). -DMLAV_H0PV_SPREAD: one a step, the production before (diagnostic)
#ifdef MLAV_H0PV_SPREAD
constexpr bool H0PV_PAIRS_FP8 = false;
#else
constexpr bool H0PV_PAIRS_FP8 = true;
#endif
// rows64d's half 1: 0 runs softmax(j - 1), PV(j - 1), QK(j) in its step j; 1 runs QK(j) with
// softmax(j - 1)'s stages between its k-steps (0, 2, 4, 6), then, past its half barrier, stores
// S(j) and runs PV(j - 1): half 1's softmax chain in the shadow of its own MMAs, as H0_LAG does for
// half 0 (fp8's draft tiles, whose QK has no k-step hook, keep 0); 2 as 1 at k-steps 0, 1, 3, 5.
// Measured on bf16 (-DMLAV_H1_LAG=1, bit-equal, three runs): -2.0 % at the centre and -5.5 % at
// T = 32 (2: -0.2 / -3.4 %) before FRESH_IDS (below); with it, -5.0 / -9.4 % where FRESH_IDS alone
// gave -5.7 / -9.2 % (kernel/bench/overlap.py, kernel/NOTES.md), so production is 0. fp8's copy
// spilled 8-28 bytes on sm_89 and sm_90 without FRESH_IDS.
// -DMLAV_H1_LAG sets bf16, -DMLAV_H1_LAG_FP8 fp8 (diagnostic builds)
#ifdef MLAV_H1_LAG
constexpr int H1_LAG_BF16 = MLAV_H1_LAG;
#else
constexpr int H1_LAG_BF16 = 0;
#endif
#ifdef MLAV_H1_LAG_FP8
constexpr int H1_LAG_FP8 = MLAV_H1_LAG_FP8;
#else
constexpr int H1_LAG_FP8 = 0;
#endif

// rows64d: each half's loop forms its thread-index values (lane, quarter, softmax row, addresses)
// from a thread index read of its own (asm volatile), with its half a constant. Shared, one set of
// values was live through both loops, and ptxas, out of registers in the longer loop, formed them
// again in both (with H1_LAG half 0's loop grew from 288 to 316 sm_90 instructions a tile and warp
// while its code was unchanged). Apart: bf16 sm_90 half 0 / half 1 288 / 278 -> 285 / 256, sm_120
// 343 / 328 -> 334 / 305; fp8 sm_90 375 / 354 -> 367 / 351, sm_120 424 / 422 -> 401 / 392
// (kernel/bench/half_paths.py). Measured (bit-equal, three runs, full call without the merge): bf16
// -5.7 % at the centre and -9.2 % at T = 32, mostly the loads' exposed clocks; fp8 -1.2 / -0.6 /
// -0.3 % at T = 8 / 16 / 32 (kernel/bench/overlap.py, kernel/NOTES.md). Production on both pools;
// -DMLAV_FRESH_IDS=0 builds the shared set (diagnostic builds)
#ifdef MLAV_FRESH_IDS
constexpr bool FRESH_IDS = MLAV_FRESH_IDS;
#else
constexpr bool FRESH_IDS = true;
#endif

// rows64d's prefix-tile loops unrolled by two, per pool: bit h for half h. Measured (three runs,
// bit-equal, kernel/NOTES.md): mask 3 on fp8 -2.6 to -2.8 % at T >= 16, a tie at T = 8; on bf16
// the math alone -7 to -9 % but the full call +3 % (unrolled, ptxas issues the production copy's
// shared loads closer to their use, and they wait while copies land: kernel/NOTES.md). Production:
// fp8 3 (confirmed on an H100, 2026-12-05: -1.0 to -2.3 % at T = 16, -2.6 to -2.9 % at T = 32),
// bf16 0. -DMLAV_UNROLL sets both pools, -DMLAV_UNROLL_FP8 fp8 alone (diagnostic builds)
#ifdef MLAV_UNROLL
constexpr int UNROLL_BF16 = MLAV_UNROLL;
#else
constexpr int UNROLL_BF16 = 0;
#endif
#ifdef MLAV_UNROLL_FP8
constexpr int UNROLL_FP8 = MLAV_UNROLL_FP8;
#elif defined(MLAV_UNROLL)
constexpr int UNROLL_FP8 = MLAV_UNROLL;
#else
constexpr int UNROLL_FP8 = 3;
#endif

// (UNROLL_ALIGN, UNROLL_ALIGN_FP8: the unrolled loops as pairs of tiles (2 k, 2 k + 1), each tile's
// parity and stage known to the compiler: math alone -5.5 % on bf16, but the full call +0.6 to
// +2.2 % on both pools (H200, rungs/overlap*-h200-20261206T0308-unroll-align.json); deleted)

// rows64d's tail CTAs: DDTree verifies D = budget + 1 nodes, so at 8 heads a request's last row
// tile often holds <= 32 rows (D = 17: 8). In the kernels of TL = true, such a CTA runs half 1
// without its math (top(j)'s barrier, slot ids, copies and commits only: its rows are past the
// request and never stored), and the plan gives that row tile fewer, longer splits than the full
// ones (plan_item's TAIL_E, per pool below), so that its CTAs, cheaper a tile, end with the full ones
// instead of idling their SMs (with equal splits half 1's idling gained nothing: kernel/NOTES.md,
// fourteenth session). The launcher takes them where the launch's static shape has a tail
// (tail_rows: every request of num_tokens / bs tokens); every other launch runs the kernels of
// TL = false, the code of before, since the tail's plan cost the shapes without one 0.3-1.4 %.
// -DMLAV_TAIL=0: the launcher never takes them (the production before, diagnostic builds); 1: it
// does, with equal splits (half 1 idle alone, diagnostic); 2: both (production).
// TAIL_E: a bf16 tail CTA's cost a tile in eighths of a full one's, which sets its splits' length
// (plan_item): 0.67 of the math alone measured with half 1 idle (8-32 rows, rungs/overlap-h100-
// 20261205T1552-tail-cost-*.json), 0.76-0.78 in the full call at D = 17 and 65 (kernel/NOTES.md),
// taken as 6 / 8. TAIL_E_FP8: fp8's tail CTAs cost about 0.81-0.86 of a full one (its half 1 issues
// the tile's copies, and its half 0 runs the classic way), so that 6 / 8 made them set the call at
// D = 65 (+3.5 %); 7 / 8 against equal splits (8 / 8): D = 17 -3.1 %, D = 33 -4.5 %, D = 65 a tie
// (H200, rungs/overlap-fp8-h200-20261206T0308-tail-e7.json); production since `kernel.guarantees`
// (validation, graph replay, SGLang's backend with memcheck, sanitizers) passed on this code
// (H100, rungs/guarantees-h100-20261206T0547-tail-e7/)
#ifdef MLAV_TAIL
constexpr int TAIL = MLAV_TAIL;
#else
constexpr int TAIL = 2;
#endif
#ifdef MLAV_TAIL_E
constexpr int TAIL_E = MLAV_TAIL_E;
#else
constexpr int TAIL_E = 6;
#endif
#ifdef MLAV_TAIL_E_FP8
constexpr int TAIL_E_FP8 = MLAV_TAIL_E_FP8;
#else
constexpr int TAIL_E_FP8 = 7;
#endif

// fp8 rows64d's tiles issued ahead (MLAV_AHEAD8 for a variant: overlap's pro_smem_ahead6)
#ifdef MLAV_AHEAD8
constexpr int AHEAD8_PAIR = MLAV_AHEAD8;
#else
constexpr int AHEAD8_PAIR = 4;
#endif

template <int HALVES, bool FP8 = false>
struct Layout {
  static constexpr int BM = 32 * HALVES;               // query rows per CTA
  static constexpr int THREADS = 128 * HALVES;
  static constexpr int WARPS = THREADS / 32;
  static constexpr int TPT = THREADS / BN;             // loader threads per token
  // bf16: 4 stages of 18 KB, AHEAD tiles issued past the ones in use (one tile per half with
  // two halves). fp8: 8 stages of e4m3 tiles in 592-byte rows (9.25 KB), 7 ahead with one half;
  // with two, AHEAD8_PAIR (4: fp8 rows64d's call 1.2-1.9 us shorter at T = 8 and 16 than with 6,
  // paired with the prologue's register ids below, 0.1-0.4 at T = 32; one H100, three runs,
  // rungs/overlap-fp8-h100-20261207T123[789]-pro-regs-run*.json)
  static constexpr int KST = FP8 ? 8 : STAGES;         // ring stages
  static constexpr int AHEAD = FP8 ? (HALVES == 2 ? AHEAD8_PAIR : 7) : (HALVES == 2 ? 2 : 3);
  // a tile's slot ids are copied IDX_AHEAD iterations before its loads read them, in the group
  // of iteration t - AHEAD - IDX_AHEAD; the loads' wait at iteration t - AHEAD has completed
  // groups up to that one only if IDX_AHEAD >= AHEAD (bf16 keeps 4, its measured machine code)
  static constexpr int IDX_AHEAD = FP8 ? AHEAD : rowsd::IDX_AHEAD;
  static constexpr int ROW8 = D + 16;                  // fp8: a stage row, 37 16-byte groups
  static constexpr int STAGE8 = BN * ROW8;
  static constexpr int XS_BYTES = WARPS * 4 * 32 * 16; // partial S: [warp][row group][lane] float4
  static constexpr int H0_LAG = HALVES == 2 ? (FP8 ? H0_LAG_FP8 : H0_LAG_BF16) : 0;
  static constexpr int SPLIT_COPIES = FP8 ? SPLIT_COPIES_FP8 : SPLIT_COPIES_BF16;
  static constexpr int UNROLL_MASK = HALVES == 2 ? (FP8 ? UNROLL_FP8 : UNROLL_BF16) : 0;
  static constexpr int NBUF = H0_LAG ? 2 : 1;          // P, alpha, flags: buffers by tile parity
  static constexpr int PS_BYTES = NBUF * 2 * HALVES * 32 * 16;   // P: [buf][half][m-tile][lane] A fragment (uint4)
  static constexpr int RING = FP8 ? KST * STAGE8 : RING_BYTES;
  static constexpr int OFF_XS = RING;
  static constexpr int OFF_PS = OFF_XS + XS_BYTES;
  static constexpr int OFF_ALPHA = OFF_PS + PS_BYTES;  // [BM] rescale of the running O
  static constexpr int OFF_FLAG = OFF_ALPHA + NBUF * BM * 4;   // [buf][WARPS] per softmax warp: some row rescaled
  static constexpr int OFF_INV = OFF_FLAG + NBUF * WARPS * 4;   // [BM] 1 / l at the end
  static constexpr int OFF_LSE = OFF_INV + BM * 4;     // [BM] log2-LSE at the end
  static constexpr int OFF_IDX = (OFF_LSE + BM * 4 + 15) / 16 * 16;   // [IDX_WIN][BN] slot ids, 8 B each
  static constexpr int OFF_ITEM = OFF_IDX + IDX_WIN * BN * 8;        // this CTA's Item
  static constexpr int OFF_FP8 = OFF_ITEM + (int)((sizeof(Item) + 15) / 16 * 16);   // fp8: n_main, pscale
  static constexpr int SMEM = OFF_FP8 + (FP8 ? 16 : 0);
  static constexpr int MIN_BLOCKS = HALVES == 1 ? 2 : 1;
  static_assert(SMEM <= 99 * 1024, "sm_120 allows at most 99 KB of shared memory per block");
  static_assert(BM * OSTRIDE * 2 <= RING, "the output staging reuses the ring");
  static_assert(KST >= AHEAD + HALVES, "a stage is refilled only after both halves are past it");
  static_assert(AHEAD <= IDX_AHEAD && IDX_AHEAD < IDX_WIN, "slot ids land before their loads, in a slot of their own");
  static_assert(OFF_XS >= 64 * 4 && XS_BYTES >= 64 * 4, "the plan's scratch lives in xs");
};

// The copies of the body are verify_common.cuh's Kind (launch_rowsd picks one from the call's mode
// bits); ANY_MODE and PARTS are bf16's only (fp8's PROD reads no-math and plain cache itself). PROD
// fixes the pool's FIX_* flags below as compile-time constants: runtime tests cost bf16 half 0 88 of
// 407 sm_90 instructions a tile (kernel/bench/half_paths.py). What PROD fixes, per pool (three runs
// each, rungs/overlap*-h200-20261204T1909.json): bf16 the loads, the math and evict-first, -7 %
// (rows32d) and -2.8 % (rows64d) at the centre, a tie at T = 32; fp8 the loads alone, -2 to -3.7 %
// at T = 8-32, where fixing all three, or the math alone, ranged from -1.4 to +1.4 %, so fp8's math
// and evict-first stay runtime tests.
// -DMLAV_MODES_RUNTIME: nothing fixed, the production before (diagnostic builds)
#ifdef MLAV_MODES_RUNTIME
constexpr bool FIX_LOADS = false, FIX_MATH_EVICT_BF16 = false;
#else
constexpr bool FIX_LOADS = true, FIX_MATH_EVICT_BF16 = true;
#endif
constexpr bool FIX_MATH_EVICT_FP8 = false;

template <int HALVES, int KIND, bool FP8, bool TL>
__device__ __forceinline__ void rowsd_body(const Params& p) {
  constexpr bool FIXED = KIND == PROD || KIND == MATH_ALONE;
  constexpr bool FIX_ME = FIXED && (FP8 ? FIX_MATH_EVICT_FP8 : FIX_MATH_EVICT_BF16);
  using Lo = Layout<HALVES, FP8>;
  constexpr int BM = Lo::BM, THREADS = Lo::THREADS, TPT = Lo::TPT, AHEAD = Lo::AHEAD;
  // this pool's half-0 schedule. The per-part diagnostic copy runs half 0 the classic way: with
  // H0_LAG its leave-one-out parts timed a different loop (half 0's 944 sm_90 instructions against
  // production's 782, the skeleton 642 clocks a tile against 459), and the sm_120 model, which
  // reads the MMA clocks from them, halved them (rungs/micro-h200-20261203T1935-h0lag-diag-parts.json,
  // kernel/NOTES.md). Production's math alone is within 1 % of the classic loop's (overlap T1920:
  // 98.2 against 98.5 us)
  constexpr int H0_LAG = KIND == PARTS ? 0 : Lo::H0_LAG, SPLIT_COPIES = Lo::SPLIT_COPIES;
  extern __shared__ __align__(128) uint8_t smem[];
#ifndef MLAV_Q_GLOBAL
  // Q through the ring: a one-request launch's CTA b serves row tile b % row tiles (the items are
  // split-major), so before the plan each CTA copies that row tile's Q into the ring by 16-byte
  // cp.async, whole 128-byte lines, and its ~74 KB cross L2 -> SM during the plan's round trips and
  // barriers instead of after them; past the plan the A fragments are read from there (ldmatrix on
  // bf16, 8-byte loads on fp8; the 16-byte chunks XOR-swizzled by row so that those reads miss each
  // other's banks), and only then does the ring take the prologue's tiles. A CTA whose item is another
  // row tile, every CTA of a launch of several requests and the tail kernels load Q from global memory
  // as before. Measured (one H100, three runs, bit-equal): the prologue 3.7 -> 1.6 us at bf16 rows64d,
  // 4.8 -> 3.4 at fp8 T = 16; the call with its merge 0.3-1.5 us shorter at every shape a rowsd tier
  // serves by default (rungs/overlap*-h100-20261207T082[45]-q-smem-run*.json, kernel/NOTES.md).
  // -DMLAV_Q_GLOBAL: Q from global memory in every CTA, the production before (diagnostic builds)
  int q_guess = -1;
  auto q_chunk = [&](int row, int c) { return row * (D / 8) + (c ^ (FP8 ? (2 * row) & 6 : row & 7)); };
  if (!TL && p.bs == 1) {
    const int rows_g = p.num_tokens * p.H;
    q_guess = blockIdx.x % ((rows_g + BM - 1) / BM);
    for (int i = threadIdx.x; i < BM * (D / 8); i += THREADS) {
      const int row = i / (D / 8), c = i % (D / 8);
      const bool ok = q_guess * BM + row < rows_g;
      cp_async16(smem_u32(smem + q_chunk(row, c) * 16), p.q + (long long)(ok ? q_guess * BM + row : 0) * D + c * 8,
                 ok ? 16 : 0);
    }
  }
  cp_async_commit();
#endif
  {
    Item item;
    // plan_one for rows64d's one-request launches; rows32d's loop lost beside it (verify_common.cuh's plan)
    if (!plan<BM, THREADS, (TL && HALVES == 2 && TAIL >= 2) ? (FP8 ? TAIL_E_FP8 : TAIL_E) : 8, HALVES == 2>(
            p, reinterpret_cast<int*>(smem + Lo::OFF_XS), item)) {
#ifndef MLAV_Q_GLOBAL
      cp_async_wait<0>();                                 // its Q copies land before the CTA leaves
#endif
      return;
    }
    // the item's fields are read from shared memory where used, not held in registers through
    // the loop (at 255 registers every live value counts)
    if (threadIdx.x == 0) *reinterpret_cast<Item*>(smem + Lo::OFF_ITEM) = item;
    __syncthreads();
  }
  const Item& it = *reinterpret_cast<const Item*>(smem + Lo::OFF_ITEM);

  // (not const: with FRESH_IDS each half's loop forms them again, fresh_ids below)
  int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int g = lane >> 2, qd = lane & 3;
  int r = warp >> 2, d = warp & 3;                       // half, quarter
  const int H = p.H;
  const int rows = it.T * H;
  const int row_base = it.rt * BM;
  const long long grow0 = (long long)it.qo0 * H + row_base;   // flat [N*H] row of tile row 0
  __nv_bfloat16* ring = reinterpret_cast<__nv_bfloat16*>(smem);
  float4* xs = reinterpret_cast<float4*>(smem + Lo::OFF_XS);
  uint4* ps = reinterpret_cast<uint4*>(smem + Lo::OFF_PS);
  float* alpha_s = reinterpret_cast<float*>(smem + Lo::OFF_ALPHA);
  int* flag_s = reinterpret_cast<int*>(smem + Lo::OFF_FLAG);
  float* inv_s = reinterpret_cast<float*>(smem + Lo::OFF_INV);
  float* lse_s = reinterpret_cast<float*>(smem + Lo::OFF_LSE);
  uint8_t* idx_win = smem + Lo::OFF_IDX;
  uint8_t* ring8 = smem;                                  // fp8: the e4m3 stages
  const bool evict_first = FIX_ME || !(p.mode & MODE_PLAIN_CACHE);

  // ---- KV producer: thread -> token tid / TPT of a tile, 16-byte chunks (tid % TPT) + TPT i
  const int ld_tok = tid / TPT, ld_lane = tid % TPT;
  // tiles: bf16, one range [p0, p1) through the ring; fp8, n_main prefix tiles over [p0, pe)
  // through the ring, then the draft tiles over [ts, p1), read from k_extend. In the loop pe, ts
  // and n_main are read from shared memory where used, not held (as the item's fields)
  auto pe = [&]() { return min(it.p1, it.S); };
  auto ts = [&]() { return max(it.p0, it.S); };
  int* nmain_s = reinterpret_cast<int*>(smem + Lo::OFF_FP8);
  float* pscale_s = reinterpret_cast<float*>(smem + Lo::OFF_FP8 + 4);
  const int n_main0 = FP8 ? (pe() > it.p0 ? (pe() - it.p0 + BN - 1) / BN : 0) : 0;
  const int n_tiles = FP8 ? n_main0 + (it.p1 > ts() ? (it.p1 - ts() + BN - 1) / BN : 0) : (it.p1 - it.p0 + BN - 1) / BN;
  if (FP8 && tid == 0) *nmain_s = n_main0;                // read after the prologue's barrier
  auto n_main = [&]() { return *nmain_s; };
  // the item again, in registers, for the id window and the tile loads: each cp.async's memory
  // clobber made the prologue's copies and id copies re-read its fields from shared memory, one
  // waited-for LDS after another. Not on fp8 rows32d, whose call the register form (with its ids
  // below) made 2.9-12.3 us slower at T = 8-32 (rungs/overlap-fp8-h100-20261207T1504.json; as on fp8
  // rows64d at 6 ahead: the loop, not the prologue, lost). MLAV_PRO_SMEM: the shared-memory form
  // everywhere, overlap's variant pro_smem_ahead6
#ifdef MLAV_PRO_SMEM
  constexpr bool PRO_REGS = false;
#else
  constexpr bool PRO_REGS = !FP8 || HALVES == 2;
#endif
  std::conditional_t<PRO_REGS, const Item, const Item&> pit = it;
  const SlotWindow<BN, IDX_WIN> ids{p, pit, idx_win, ld_tok, ld_lane, FP8 ? n_main0 : n_tiles, pit.p1, pit.S};
  auto load_tile = [&](int tile, long long slot) {
    int pos = pit.p0 + tile * BN + ld_tok;
    const __nv_bfloat16* src = nullptr;
    if (tile < n_tiles && pos < pit.p1)
      src = pos < pit.S ? p.kv + slot * p.kv_stride : p.kext + (long long)(pit.qo0 + pos - pit.S) * p.ext_stride;
    __nv_bfloat16* dst = ring + (tile % STAGES) * (BN * D);
    const int bytes = src ? 16 : 0;
    if (!src) src = p.kv;
    const uint64_t pol = policy_evict_first();   // made where used: no register held across the loop
#pragma unroll
    for (int i = 0; i < (CHUNKS + TPT - 1) / TPT; ++i) {
      int ch = ld_lane + TPT * i;
      if (ch < CHUNKS) {
        uint32_t dd = smem_u32(dst + swz(ld_tok, ch) * 8);
        const void* s = src + (bytes ? ch * 8 : 0);
        if (evict_first) cp_async16_hint(dd, s, bytes, pol); else cp_async16(dd, s, bytes);
      }
    }
  };
  // in the loop (bf16): the tile's copies and its slot ids, the lean way (slot_window.cuh). With two
  // halves, half 1 alone copies (8 threads a token, 9 copies each), in its step (COPY_AT),
  // and warp 4 the slot ids (all 8 warps issuing at once left no MMA to cover the block, and half
  // 0's first K loads queued behind the copies: Nsight Compute, kernel/NOTES.md)
  constexpr bool HALF1_LOADS = HALVES == 2 && !FP8;
  // (fp8 too: its copies were half 1's when this was chosen). Warp 0 instead, so that half 1 holds
  // no loads' code on bf16: +6.3 to +6.9 % at T = 32 on an H100, its loads alone +12 % (2026-12-05,
  // kernel/NOTES.md; measured, deleted)
  constexpr int IDS_WARP = HALVES == 2 ? 4 : 0;
  auto load_lean = [&](int tile) {
    if constexpr (HALF1_LOADS) {
      if (r == 1) copy_row_lean<8, BN, IDX_WIN, STAGES>(p, it, idx_win, ring, tile, (tid & 127) >> 3, tid & 7, evict_first);
    } else {
      copy_row_lean<TPT, BN, IDX_WIN, STAGES>(p, it, idx_win, ring, tile, ld_tok, ld_lane, evict_first);
    }
  };
  // (the slot-id copy stays written out in rowsd and small: as a shared function ptxas ordered
  // its compares differently, and the measured machine code is kept byte for byte)
  auto copy_ids = [&](int t) {
    if (warp != IDS_WARP || lane >= BN || !p.kv_indices) return;
    const int pos = it.p0 + t * BN + lane;
    if (t >= n_tiles || pos >= it.p1 || pos >= it.S) return;
    const int isz = p.kv_indices_64 ? 8 : 4;
    const uint8_t* src = reinterpret_cast<const uint8_t*>(p.kv_indices) + (long long)(it.kv0 + pos) * isz;
    const uint32_t dst = smem_u32(idx_win + ((t % IDX_WIN) * BN + lane) * 8);
    if (isz == 8) asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src));
    else asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
  };
  // fp8, the prologue's first tiles (slot ids read directly): the prefix rows of a prefix tile;
  // its rows past pe are zero-filled (their logits are masked, so P = 0 there, and V must not be
  // NaN: 0 * NaN; a stale 0x7f byte is one after the convert)
  auto load_tile8 = [&](int tile, long long slot) {
    if (tile >= n_main0) return;
    const int pos = pit.p0 + tile * BN + ld_tok;
    const bool ok = pos < pit.p1 && pos < pit.S;
    const uint8_t* src = ok ? p.kv8 + slot * p.kv_stride : p.kv8;
    uint8_t* dst = ring8 + (tile % Lo::KST) * Lo::STAGE8 + ld_tok * Lo::ROW8;
    const uint64_t pol = policy_evict_first();
#pragma unroll
    for (int i = 0; i < (CHUNKS8 + TPT - 1) / TPT; ++i) {
      const int ch = ld_lane + TPT * i;
      if (ch < CHUNKS8) {
        const void* s = src + (ok ? ch * 16 : 0);
        if (evict_first) cp_async16_hint(smem_u32(dst + ch * 16), s, ok ? 16 : 0, pol);
        else cp_async16(smem_u32(dst + ch * 16), s, ok ? 16 : 0);
      }
    }
  };
  // fp8 in the loop, the lean way (as load_lean; half 1 alone with two halves, 8 threads a token):
  // the slot id from the window, one base address (a 32 x 32-bit product: slot ids and strides are
  // below 2^31), the copies at immediate offsets (chunk part + 8 i is 128 i bytes past chunk part
  // in the pool row and in the padded stage row), the L2 policy a select; rows past pe as above
  auto load_lean8 = [&](int tile) {
    if (HALVES == 2 && r != 1) return;
    const int tok = (tid & 127) >> 3, part = tid & 7;
    const int pos = it.p0 + tile * BN + tok;
    const uint2 e = *reinterpret_cast<const uint2*>(idx_win + ((tile % IDX_WIN) * BN + tok) * 8);
    const unsigned slot = p.kv_indices ? e.x : (unsigned)it.kv0 + (unsigned)pos;   // (an 8-byte id's low word)
    const bool ok = pos < it.p1 && pos < it.S;
    const uint8_t* src = (ok ? p.kv8 + (unsigned long long)slot * (unsigned)p.kv_stride : p.kv8) + part * 16;
    const int bytes = ok ? 16 : 0;
    const uint32_t dd = smem_u32(ring8 + (tile % Lo::KST) * Lo::STAGE8 + tok * Lo::ROW8 + part * 16);
    const uint64_t pol = policy_kv(evict_first);
    cp_async16_run<CHUNKS8 / 8, 128>(dd, src, bytes, pol);
    if (part < CHUNKS8 % 8) cp_async16_at<CHUNKS8 / 8 * 128>(dd, src, bytes, pol);
  };
  auto load = [&](int tile, long long slot) {
    if constexpr (FP8) load_tile8(tile, slot); else load_tile(tile, slot);
  };
  constexpr int AH = AHEAD;                               // tiles issued before the first is used
  // where half 1 of rows64d issues tile j + AHEAD's copies in its step j: 0 right after the
  // loop-top barrier, where they lengthened the half that is already the longer one by ~390
  // clocks a tile (kernel/bench/barwait.py); 1 right before its QK(j), production on bf16 until
  // half 0 took the copies (SPLIT_COPIES: 1 now only keeps the two groups a step there); 2 one
  // copy a k-step of QK(j), production on fp8, where it was 6-7 % faster than 1 (on bf16 within
  // 1 % of 1, and sm_120's bf16 half-0 loop 5 % longer; kernel/bench/overlap.py, kernel/NOTES.md).
  // -DMLAV_COPY_AT sets both pools (diagnostic builds). With 1 or 2 every step closes two groups
  // (top(j): the slot ids and, rows32d with COPY32_AT = 0, the copies; the step's end: the late
  // copies), so the wait keeps 2 AHEAD - 2 open
#ifdef MLAV_COPY_AT
  constexpr int COPY_AT = MLAV_COPY_AT;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
  constexpr int COPY_AT = 1;   // (sm_80, sm_86: with 2 ptxas spills 4 bytes of the fp8 copy)
#else
  constexpr int COPY_AT = FP8 ? 2 : 1;
#endif
  // rows32d (one half, all four warps copy): 0 tile j + AHEAD's copies in top(j), right before
  // QK(j), production; 2 one copy a k-step of QK(j), as rows64d's COPY_AT = 2 (-DMLAV_COPY32_AT)
#ifdef MLAV_COPY32_AT
  constexpr int COPY32_AT = MLAV_COPY32_AT;
#else
  constexpr int COPY32_AT = 0;
#endif
  static_assert(COPY32_AT == 0 || COPY_AT != 0, "rows32d's copies in QK need the two groups a step");
  // copies outside top: half 1 of rows64d (COPY_AT 1, 2), rows32d with COPY32_AT = 2
  constexpr bool LATE_COPIES = HALVES == 2 ? COPY_AT != 0 : COPY32_AT == 2;
  // half 0 issues the late copies, half 1 none: SPLIT_COPIES in the step of H0_LAG (bf16), H0PV
  // in the classic step (fp8, PV's column steps H0PV_AT .. + 4)
  constexpr int H0PV_AT = H0PV_AT_FP8;
  constexpr bool H0PV = FP8 && HALVES == 2 && !H0_LAG && COPY_AT == 2 && H0PV_AT >= 0;
  static_assert(H0PV_AT + 4 < 8, "H0PV_AT: every piece inside PV's 8 column steps");
  constexpr bool SPLIT = HALVES == 2 && LATE_COPIES && ((H0_LAG && SPLIT_COPIES) || H0PV);
  static_assert(SPLIT_COPIES == 0 || SPLIT_COPIES == 2 || SPLIT_COPIES == 3 || SPLIT_COPIES == 5 || SPLIT_COPIES == 6,
                "SPLIT_COPIES: 0, 2, 3, 5 or 6");
  // half 1's QK takes the softmax where its k-steps hold no copies (fp8 on sm_80, 86: COPY_AT 1)
  constexpr int H1_LAG = KIND == PARTS || !SPLIT ? 0 : FP8 ? H1_LAG_FP8 : H1_LAG_BF16;
  const bool loads = KIND == MATH_ALONE ? false
                    : (KIND == PROD && FIX_LOADS) || !(p.mode & MODE_NO_LOADS);
#ifdef MLAV_Q_GLOBAL   // (with Q through the ring: once Q is read from it, below)
  if (!loads) {   // math-only diagnostics: defined tile contents (fill_resident)
    fill_resident<FP8>(smem, Lo::RING, tid, THREADS, p.mode);
    __syncthreads();
  }
#endif
  // ---- Q A fragments straight from global memory where Q did not go through the ring:
  // qa[kk][m] = {Q[g][k+2qd..], Q[g+8][k+2qd..], Q[g][k+8+2qd..], Q[g+8][k+8+2qd..]} of the
  // m-tile's 16 rows, k = this dim quarter's kk-th k-step. Issued before the prologue's slot ids
  // and copies: after them (the copies wait on the ids) their round trip followed the ids' where
  // it now overlaps it, which fp8's q scale waits on at the prologue's end and every tier's first
  // QK: -1 to -3 us a call on both pools, bit-equal
  // (rungs/overlap*-h200-20261204T033[56]-q-first.json)
  uint32_t qa[QK_STEPS][2][4];
#ifndef MLAV_Q_GLOBAL
  const bool q_in_smem = q_guess == it.rt && it.b == 0 && it.qo0 == 0 && rows == p.num_tokens * H;
  if (!q_in_smem) {
#endif
#pragma unroll
  for (int kk = 0; kk < QK_STEPS; ++kk) {
    const int k = 64 * kk + 16 * d;                      // chunks 8 kk + 2 d, + 1 (see qk)
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = r * 32 + m * 16 + g + 8 * h;
        const bool ok = row_base + row < rows;
        if constexpr (FP8) {   // dims 16 (9 d + kk) + 4 qd .. + 3: the e4m3 fragments' order (top)
          const uint2 v = ok ? __ldg(reinterpret_cast<const uint2*>(p.q + (grow0 + row) * D + 16 * (9 * d + kk) + 4 * qd))
                             : make_uint2(0u, 0u);
          qa[kk][m][h] = v.x;
          qa[kk][m][2 + h] = v.y;
        } else {
          const uint32_t* src = reinterpret_cast<const uint32_t*>(p.q + (grow0 + (ok ? row : 0)) * D + k + 2 * qd);
          qa[kk][m][h] = ok ? __ldg(src) : 0u;
          qa[kk][m][2 + h] = ok ? __ldg(src + 4) : 0u;
        }
      }
  }
#ifndef MLAV_Q_GLOBAL
  }
#endif
  // prologue: tiles 0 .. AHEAD - 1 before anything but Q's loads; the index window for the next IDX_AHEAD.
  // Every tile's slot ids are loaded before any copy: a tile's copies wait on its id load, and with
  // the two interleaved the AHEAD id loads ran one after another (fp8 rows64d's prologue 7.84 ->
  // 6.75 us, fp8 T = 1's 6.72 -> 4.99: trace-h200-20261203T1724.json against ...T1935.json)
  // with PRO_REGS as 32-bit loads that wait on nothing: fp8 rows64d's traced prologue 3.58 -> 2.40 us
  // with AHEAD8_PAIR 4 (rungs/trace-h100-20261207T1239-pro-regs-*.json)
  std::conditional_t<PRO_REGS, unsigned, long long> slot0[AH];
#pragma unroll
  for (int t = 0; t < AH; ++t) {
    if constexpr (PRO_REGS) slot0[t] = loads && t < n_tiles ? ids.slot32_of(t) : 0u;
    else slot0[t] = loads && t < n_tiles ? ids.slot_of(t) : -1;
  }
#ifndef MLAV_Q_GLOBAL
  // Q's A fragments from the ring (the slot ids' loads above are in flight meanwhile)
  cp_async_wait<0>();
  __syncthreads();                                        // every thread's Q chunks landed
  if (q_in_smem) {
#pragma unroll
    for (int kk = 0; kk < QK_STEPS; ++kk)
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        if constexpr (FP8) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int R = r * 32 + m * 16 + g + 8 * h;
            const uint2 v = *reinterpret_cast<const uint2*>(smem + q_chunk(R, 2 * (9 * d + kk) + (qd >> 1)) * 16 + 8 * (qd & 1));
            qa[kk][m][h] = v.x;
            qa[kk][m][2 + h] = v.y;
          }
        } else {
          const int R = r * 32 + m * 16 + (lane & 7) + 8 * ((lane >> 3) & 1);
          ldsm_x4(smem_u32(smem + q_chunk(R, 8 * kk + 2 * d + (lane >> 4)) * 16),
                  qa[kk][m][0], qa[kk][m][1], qa[kk][m][2], qa[kk][m][3]);
        }
      }
  }
  __syncthreads();                                        // every warp has read Q: the ring takes tiles
  if (!loads) {
    fill_resident<FP8>(smem, Lo::RING, tid, THREADS, p.mode);
    __syncthreads();
  }
#endif
#pragma unroll
  for (int t = 0; t < AH; ++t) {
    if (loads && t < n_tiles) load(t, slot0[t]);
    if (t == 0 && loads)
      for (int k = AH; k < AH + Lo::IDX_AHEAD; ++k) ids.copy_index(k);
    cp_async_commit();
    if (COPY_AT) cp_async_commit();                       // two groups a tile, as in the loop
  }
  // fp8: q as f16 times 2^-qe (e4m3.cuh), qe per CTA; 2^qe and the e4m3 convert's 2^KV16_SHIFT go
  // into the prefix logits' scale, pscale_s
  if constexpr (FP8) {
    auto each_q = [&](auto f) {
#pragma unroll
      for (int kk = 0; kk < QK_STEPS; ++kk)
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
          for (int i = 0; i < 4; ++i) f(qa[kk][m][i]);
    };
#ifndef MLAV_Q_CTA_MAX
    // A CTA whose |q| all lie below 2^14 has qe = 0 (q_f16_exponent), the usual case: each warp
    // converts its own fragments once they land and the CTA agrees on that in the barrier's own
    // OR, so no warp waits for the slowest one's Q before converting; else Q is loaded again and
    // scaled as below. The bf16x2 max ignores NaN as fmaxf does, so both forms choose the same qe
    // (and the same f16 values: q x 1 is q)
    __nv_bfloat162 m2 = __float2bfloat162_rn(0.f);
    each_q([&](uint32_t x) { m2 = __hmax2(m2, __habs2(*reinterpret_cast<__nv_bfloat162*>(&x))); });
    const bool q_big = __low2float(m2) >= 16384.f || __high2float(m2) >= 16384.f;
    each_q([&](uint32_t& x) { const float2 f = unpack_bf16(x); x = f16x2_of(f.x, f.y); });
    if (__syncthreads_or(q_big)) {   // Q again, as loaded above
#pragma unroll
      for (int kk = 0; kk < QK_STEPS; ++kk)
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = r * 32 + m * 16 + g + 8 * h;
            const uint2 v = row_base + row < rows
                                ? __ldg(reinterpret_cast<const uint2*>(p.q + (grow0 + row) * D + 16 * (9 * d + kk) + 4 * qd))
                                : make_uint2(0u, 0u);
            qa[kk][m][h] = v.x;
            qa[kk][m][2 + h] = v.y;
          }
#else
    {
#endif
    float mq = 0.f;
    each_q([&](uint32_t x) { mq = absmax_bf16x2(mq, x); });
    mq = warp_max(mq);
    float* qmax_s = reinterpret_cast<float*>(xs);         // (xs is free until the first QK)
    if (lane == 0) qmax_s[warp] = mq;
    __syncthreads();
#pragma unroll
    for (int w = 0; w < Lo::WARPS; ++w) mq = fmaxf(mq, qmax_s[w]);
    const int qe = q_f16_exponent(mq);
    const float sc = ldexpf(1.f, -qe);
    each_q([&](uint32_t& x) { x = bf16x2_to_f16x2(x, sc); });
    if (tid == 0) *pscale_s = p.kscale_log2 * ldexpf(1.f, qe + KV16_SHIFT);   // read after the loop's barrier
#ifndef MLAV_Q_CTA_MAX
    } else if (tid == 0) {
      *pscale_s = p.kscale_log2 * ldexpf(1.f, KV16_SHIFT);
#endif
    }
  }
  // fp8: the first KV position of tile j (prefix tiles, then draft tiles)
  auto tile_pos = [&](int j) { return FP8 && j >= n_main() ? ts() + (j - n_main()) * BN : it.p0 + j * BN; };

  // softmax thread: row srow of the tile, tokens 2qd, 2qd + 1, 8 + 2qd, 9 + 2qd of a tile
  int srow = r * 32 + (d >> 1) * 16 + (d & 1) * 8 + g;
  float m_run = -INFINITY, l_run = 0.f;

  float acc[2][16][4];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int n = 0; n < 16; ++n) acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.f;

  const bool math = FIX_ME || !(p.mode & MODE_NO_MATH);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ != 900
  constexpr int DG = 0;   // the per-part diagnostics run on the H200 only
#else
  constexpr int DG = KIND == PARTS;
#endif
  const bool do_sm = math && !(DG && (p.mode & MODE_NO_SOFTMAX));
  const bool do_qk = math && !(DG && (p.mode & MODE_NO_QK));
  const bool do_pv = math && !(DG && (p.mode & MODE_NO_PV));

  // partial S of tile `tile` over this warp's 32 rows and 144 dims into s (qk_s); store_s puts
  // it in xs, per row group (2 m + hr) in the order the softmax reads it; qk does both
  // (draft_tag, std::bool_constant: the draft tiles' copy of the loop, fp8 only; see the loop)
  // hook(kk) runs at the top of k-step kk (the prefix tiles' QK; qk_copying issues a copy there)
  auto qk_s = [&](int tile, auto draft_tag, auto hook, float (&s)[2][2][4]) {
    constexpr bool DRAFT = decltype(draft_tag)::value;
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int n = 0; n < 2; ++n) s[m][n][0] = s[m][n][1] = s[m][n][2] = s[m][n][3] = 0.f;
    if constexpr (FP8) {
      if constexpr (!DRAFT) {
        // e4m3: lanes 0-7 address tokens 0-7, lanes 8-15 tokens 8-15 at the 16-byte column
        // 9 d + kk, so one ldmatrix.x2 holds both n-tiles of k-step kk (requested a k-step
        // ahead); a register's 4 bytes are dims 4 qd .. + 3 of token g: b0, b1 of one MMA
        const uint8_t* kt = ring8 + (tile % Lo::KST) * Lo::STAGE8;
        const uint32_t kb = smem_u32(kt + (lane & 15) * Lo::ROW8 + 9 * d * 16);
        uint32_t b[2][2];
        ldsm_x2(kb, b[0][0], b[0][1]);
#pragma unroll
        for (int kk = 0; kk < QK_STEPS; ++kk) {
          hook(kk);
          if (kk + 1 < QK_STEPS) ldsm_x2(kb + 16 * (kk + 1), b[(kk + 1) & 1][0], b[(kk + 1) & 1][1]);
          const uint32_t* cb = b[kk & 1];
          const uint32_t x0 = e4m3x2_to_f16x2(cb[0]), x1 = e4m3x2_hi_to_f16x2(cb[0]);
          const uint32_t y0 = e4m3x2_to_f16x2(cb[1]), y1 = e4m3x2_hi_to_f16x2(cb[1]);
          mma16816<true>(s[0][0], qa[kk][0], x0, x1);
          mma16816<true>(s[1][0], qa[kk][1], x0, x1);
          mma16816<true>(s[0][1], qa[kk][0], y0, y1);
          mma16816<true>(s[1][1], qa[kk][1], y0, y1);
        }
      } else {   // draft rows: bf16 from k_extend and q reloaded as bf16, in the same dim order
        // (a rare tile, so the fewest live registers: every address is formed in the k-step from
        // an opaque copy of its index, which keeps ptxas from hoisting them all and holding them)
        const int pos0 = tile_pos(tile) + g;
#pragma unroll 1
        for (int kk = 0; kk < QK_STEPS; ++kk) {
          int kx;
          asm volatile("mov.b32 %0, %1;" : "=r"(kx) : "r"(kk));
          const int c = 16 * (9 * d + kx) + 4 * qd;
          uint2 x = make_uint2(0u, 0u), y = x;
          if (pos0 < it.p1) x = __ldg(reinterpret_cast<const uint2*>(p.kext + (long long)(it.qo0 + pos0 - it.S) * p.ext_stride + c));
          if (pos0 + 8 < it.p1) y = __ldg(reinterpret_cast<const uint2*>(p.kext + (long long)(it.qo0 + pos0 + 8 - it.S) * p.ext_stride + c));
#pragma unroll
          for (int m = 0; m < 2; ++m) {
            // rows g and g + 8 of m-tile m; a row past the request reads the tile's row 0
            // (finite, and never stored)
            const int ra = r * 32 + m * 16 + g, rb = ra + 8;
            const uint2 u = __ldg(reinterpret_cast<const uint2*>(p.q + (grow0 + (row_base + ra < rows ? ra : 0)) * D + c));
            const uint2 w = __ldg(reinterpret_cast<const uint2*>(p.q + (grow0 + (row_base + rb < rows ? rb : 0)) * D + c));
            const uint32_t a[4] = {u.x, w.x, u.y, w.y};
            mma16816(s[m][0], a, x.x, x.y);
            mma16816(s[m][1], a, y.x, y.y);
          }
        }
      }
    } else {
      const __nv_bfloat16* kt = ring + (tile % Lo::KST) * (BN * D);
      const int tok = ((lane >> 4) << 3) + (lane & 7);
      const int sub = (lane >> 3) & 1;
      // k-step kk reads chunks 8 kk + 2 d and + 1 of a row, i.e. 128-byte block kk: the swizzle
      // permutes within a block only, so every k-step's address is this one plus 128 kk bytes
      const uint32_t kb = smem_u32(kt + swz(tok, 2 * d + sub) * 8);
      uint32_t b[2][4];
      // the fragment of k-step kk + 1 is requested before the MMAs of kk (asm volatile keeps order)
      ldsm_x4(kb, b[0][0], b[0][1], b[0][2], b[0][3]);
#pragma unroll
      for (int kk = 0; kk < QK_STEPS; ++kk) {
        hook(kk);
        if (kk + 1 < QK_STEPS) {
          uint32_t* nb = b[(kk + 1) & 1];
          ldsm_x4(kb + 128 * (kk + 1), nb[0], nb[1], nb[2], nb[3]);
        }
        const uint32_t* cb = b[kk & 1];
        mma16816(s[0][0], qa[kk][0], cb[0], cb[1]);
        mma16816(s[1][0], qa[kk][1], cb[0], cb[1]);
        mma16816(s[0][1], qa[kk][0], cb[2], cb[3]);
        mma16816(s[1][1], qa[kk][1], cb[2], cb[3]);
      }
    }
  };
  auto store_s = [&](const float (&s)[2][2][4]) {
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr)
        xs[(warp * 4 + m * 2 + hr) * 32 + lane] =
            make_float4(s[m][0][2 * hr], s[m][0][2 * hr + 1], s[m][1][2 * hr], s[m][1][2 * hr + 1]);
  };
  auto qk = [&](int tile, auto draft_tag, auto hook) {
    float s[2][2][4];
    qk_s(tile, draft_tag, hook, s);
    store_s(s);
  };

  // softmax of tile j for row srow: sum the four dim-quarter partials of this half, mask,
  // online max with a stale-max threshold, P -> ps as the PV warps' A fragments. In four stages
  // (load, sum and mask, max and exp, stores) over a state, so that half 0 can issue them between
  // PV's column steps (H0_LAG); softmax(j) runs them back to back
  struct SmState {
    float4 t[4];
    float v[4];
    float p[4];
    float alpha;
    bool any, pref;
  };
  // the buffer of tile j's P, alpha and flags (two with H0_LAG, by parity)
  auto buf = [&](int j) { return Lo::NBUF == 2 ? (j & 1) : 0; };
  auto sm_load = [&](SmState& st) {
#pragma unroll
    for (int dq = 0; dq < 4; ++dq) st.t[dq] = xs[((r * 4 + dq) * 4 + d) * 32 + lane];
  };
  auto sm_mask = [&](int j, SmState& st) {
    float* v = st.v;
    v[0] = st.t[0].x; v[1] = st.t[0].y; v[2] = st.t[0].z; v[3] = st.t[0].w;
#pragma unroll
    for (int dq = 1; dq < 4; ++dq) {
      v[0] += st.t[dq].x; v[1] += st.t[dq].y; v[2] += st.t[dq].z; v[3] += st.t[dq].w;
    }
    const int tpos = tile_pos(j);
    // fp8: a tile is prefix or draft, never both; a prefix tile ends at pe (its rows past pe
    // belong to the draft tiles), a draft tile is masked
    const bool pref = !FP8 || j < n_main();
    st.pref = pref;
    const bool edge = FP8 ? !pref || tpos + BN > pe() : tpos + BN > it.S || tpos + BN > it.p1;
    if constexpr (FP8) {   // k_scale, 2^qe and the convert's shift on the prefix logits
      const float sc = pref ? *pscale_s : p.scale_log2;
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] *= sc;
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] *= p.scale_log2;
    }
    if (edge) {                                           // rare: mask facts recomputed here
      const int s_lr = row_base + srow;                   // row within the request
      const int s_tq = s_lr < rows ? s_lr / H : 0;        // its draft token
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int pos = tpos + (i >> 1) * 8 + 2 * qd + (i & 1);
        bool ok = pos < (FP8 && pref ? pe() : it.p1);
        if (ok && pos >= it.S && s_lr < rows) {
          const int dj = pos - it.S;
          ok = p.mask ? __ldg(p.mask + it.m0 + (long long)s_tq * (it.S + it.T) + it.S + dj) != 0 : dj <= s_tq;
        }
        if (!ok) v[i] = -INFINITY;
      }
    }
  };
  auto sm_exp = [&](SmState& st) {
    const float* v = st.v;
    // first finite max, or one 2^8 above the stale max: move it (m_run = -inf gives alpha 0)
    st.any = stale_row_max(fmaxf(fmaxf(v[0], v[1]), fmaxf(v[2], v[3])), RESCALE_LOG2, m_run, st.alpha);
    // a row that has seen only masked keys keeps m = -inf; shift by 0 to avoid inf - inf
    const float shift = m_run == -INFINITY ? 0.f : m_run;
#pragma unroll
    for (int i = 0; i < 4; ++i) st.p[i] = exp2f(v[i] - shift);
    l_run = l_run * st.alpha + ((st.p[0] + st.p[1]) + (st.p[2] + st.p[3]));
  };
  auto sm_store = [&](int j, const SmState& st) {
    const float p0 = st.p[0], p1 = st.p[1], p2 = st.p[2], p3 = st.p[3];
    const int b = buf(j);
    uint32_t* pw = reinterpret_cast<uint32_t*>(ps + ((b * HALVES + r) * 2 + (d >> 1)) * 32 + lane);
    if constexpr (FP8) {   // prefix: f16 for the f16 MMAs; draft: bf16 times 2^-KV16_SHIFT / v_scale
      if (st.pref) {
        pw[d & 1] = f16x2_of(p0, p1);
        pw[2 + (d & 1)] = f16x2_of(p2, p3);
      } else {
        const float ds = ldexpf(1.f, -KV16_SHIFT) / p.v_scale;
        pw[d & 1] = pack_bf16(p0 * ds, p1 * ds);
        pw[2 + (d & 1)] = pack_bf16(p2 * ds, p3 * ds);
      }
    } else {
      pw[d & 1] = pack_bf16(p0, p1);                      // a0 / a1: tokens 2qd, 2qd + 1
      pw[2 + (d & 1)] = pack_bf16(p2, p3);                // a2 / a3: tokens 8 + 2qd, 9 + 2qd
    }
    if (qd == 0) alpha_s[b * BM + srow] = st.alpha;
    if (lane == 0) flag_s[b * Lo::WARPS + warp] = st.any;
  };
  auto softmax = [&](int j) {
    SmState st;
    sm_load(st);
    sm_mask(j, st);
    sm_exp(st);
    sm_store(j, st);
  };

  // PV(j): O[this half's 32 rows, my 128 columns] = alpha * O + P V
  // hook(c) runs at the top of column step c = 0..7 (H0_LAG: softmax(j + 1)'s stages and the
  // copies of tile j + 1 + AHEAD)
  auto pv = [&](int j, auto draft_tag, auto hook) {
    constexpr bool DRAFT = decltype(draft_tag)::value;
    const int pb = buf(j);
    const int4 f = reinterpret_cast<const int4*>(flag_s + pb * Lo::WARPS)[r];
    if ((f.x | f.y | f.z | f.w) != 0) {                   // uniform across the half
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const float a0 = alpha_s[pb * BM + r * 32 + m * 16 + g], a1 = alpha_s[pb * BM + r * 32 + m * 16 + g + 8];
#pragma unroll
        for (int n = 0; n < 16; ++n) {
          acc[m][n][0] *= a0; acc[m][n][1] *= a0;
          acc[m][n][2] *= a1; acc[m][n][3] *= a1;
        }
      }
    }
    uint32_t pa[2][4];
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const uint4 t = ps[((pb * HALVES + r) * 2 + m) * 32 + lane];
      pa[m][0] = t.x; pa[m][1] = t.y; pa[m][2] = t.z; pa[m][3] = t.w;
    }
    if constexpr (FP8) {
      if (!DRAFT || j < n_main()) {
        // e4m3, columns 128 d + 16 c .. + 15 by one ldmatrix.x2.trans (requested 16 columns
        // ahead): lanes 0-7 address tokens 0-7, lanes 8-15 tokens 8-15. A register holds tokens
        // 2 qd, 2 qd + 1 of the byte pair 2 g, 2 g + 1; byte_perm puts the even bytes (columns
        // 2 g) in its low half and the odd ones in its high half: n-tiles 2 c (even) and 2 c + 1
        const uint8_t* vt = ring8 + (j % Lo::KST) * Lo::STAGE8;
        const uint32_t vb = smem_u32(vt + (lane & 15) * Lo::ROW8 + 128 * d);
        uint32_t b[2][2];
        ldsm_x2_t(vb, b[0][0], b[0][1]);
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          hook(c);
          if (c + 1 < 8) ldsm_x2_t(vb + 16 * (c + 1), b[(c + 1) & 1][0], b[(c + 1) & 1][1]);
          const uint32_t* cb = b[c & 1];
          const uint32_t x = __byte_perm(cb[0], 0u, 0x3120), y = __byte_perm(cb[1], 0u, 0x3120);
          const uint32_t e0 = e4m3x2_to_f16x2(x), e1 = e4m3x2_to_f16x2(y);
          const uint32_t o0 = e4m3x2_hi_to_f16x2(x), o1 = e4m3x2_hi_to_f16x2(y);
#pragma unroll
          for (int m = 0; m < 2; ++m) {
            mma16816<true>(acc[m][2 * c], pa[m], e0, e1);
            mma16816<true>(acc[m][2 * c + 1], pa[m], o0, o1);
          }
        }
      } else {   // draft rows: bf16 from k_extend, two columns of 4 tokens, paired by token
        const int t0 = tile_pos(j) + 2 * qd;
        const __nv_bfloat16* vr[4];
        bool ok[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {   // tokens 2 qd, 2 qd + 1, 2 qd + 8, 2 qd + 9
          const int pos = t0 + (i & 1) + (i >> 1) * 8;
          ok[i] = pos < it.p1;
          vr[i] = p.kext + (long long)(it.qo0 + (ok[i] ? pos - it.S : 0)) * p.ext_stride + 128 * d + 2 * g;
        }
#pragma unroll
        for (int q = 0; q < 4; ++q)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            hook(2 * q + h);
            uint32_t x[4];
#pragma unroll
            for (int i = 0; i < 4; ++i)
              x[i] = ok[i] ? __ldg(reinterpret_cast<const uint32_t*>(vr[i] + 32 * q + 16 * h)) : 0u;
            const uint32_t e0 = __byte_perm(x[0], x[1], 0x5410), e1 = __byte_perm(x[2], x[3], 0x5410);
            const uint32_t o0 = __byte_perm(x[0], x[1], 0x7632), o1 = __byte_perm(x[2], x[3], 0x7632);
#pragma unroll
            for (int m = 0; m < 2; ++m) {
              mma16816(acc[m][2 * (2 * q + h)], pa[m], e0, e1);
              mma16816(acc[m][2 * (2 * q + h) + 1], pa[m], o0, o1);
            }
          }
      }
    } else {
      const __nv_bfloat16* vt = ring + (j % Lo::KST) * (BN * D);
      const int tok = ((lane >> 3) & 1) * 8 + (lane & 7);
      const int sub = lane >> 4;
      // n-tiles 2 n2, 2 n2 + 1 are chunks 8 n2 + 2 d, + 1 (columns 64 n2 + 16 d .. + 15): block n2
      const uint32_t vb = smem_u32(vt + swz(tok, 2 * d + sub) * 8);
      uint32_t b[2][4];
      ldsm_x4_t(vb, b[0][0], b[0][1], b[0][2], b[0][3]);
#pragma unroll
      for (int n2 = 0; n2 < 8; ++n2) {
        hook(n2);
        if (n2 + 1 < 8) {
          uint32_t* nb = b[(n2 + 1) & 1];
          ldsm_x4_t(vb + 128 * (n2 + 1), nb[0], nb[1], nb[2], nb[3]);
        }
        const uint32_t* cb = b[n2 & 1];
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          mma16816(acc[m][2 * n2], pa[m], cb[0], cb[1]);
          mma16816(acc[m][2 * n2 + 1], pa[m], cb[2], cb[3]);
        }
      }
    }
  };
  // tile t's copies (half 1 alone with two halves), the lean way
  auto copy_tile = [&](int t) {
    if constexpr (FP8) {
      if (t < n_main()) load_lean8(t);
    } else {
      if (t < n_tiles) load_lean(t);
    }
  };
  // COPY_AT = 2 (rows64d's half 1) or COPY32_AT = 2 (rows32d): this thread's share of tile t's
  // copies, to issue one piece a QK k-step (pieces 128 bytes apart, as copy_row_lean's and
  // load_lean8's runs; 8 threads a token, tid & 127 the thread of the copying half)
  struct CopyShare {
    const char* src;
    uint32_t dd;
    int bytes;
    bool last;       // fp8: this thread copies a fifth piece (CHUNKS8 % 8 of the 8 parts do)
    uint64_t pol;
    __device__ __forceinline__ void piece(int i) const {
      constexpr int NP = FP8 ? CHUNKS8 / 8 : CHUNKS / 8;
      if (i < NP || (FP8 && i == NP && last)) cp_async16_hint(dd + 128 * i, src + 128 * i, bytes, pol);
    }
  };
  // past the prefix (fp8) or the range the pieces zero-fill a stage no one reads until it is refilled
  auto copy_share = [&](int t) {
    CopyShare c{reinterpret_cast<const char*>(p.kv), 0u, 0, false, policy_kv(evict_first)};
    const int tok = (tid & 127) >> 3, part = tid & 7;
    const int pos = it.p0 + t * BN + tok;
    const uint2 e = *reinterpret_cast<const uint2*>(idx_win + ((t % IDX_WIN) * BN + tok) * 8);
    const unsigned slot = p.kv_indices ? e.x : (unsigned)it.kv0 + (unsigned)pos;
    if constexpr (FP8) {
      // pos < min(p1, S) implies t < n_main (n_main's tiles cover [p0, min(p1, S))): two compares
      // of the item's fields, no n_main and no branch; ~1 % faster at T = 8-32 than with the test
      // of t (kernel/NOTES.md; four runs, rungs/overlap-fp8-h200-20261204T125[67]*.json)
      const bool ok = (pos < it.p1) & (pos < it.S);
      c.src = reinterpret_cast<const char*>(ok ? p.kv8 + (unsigned long long)slot * (unsigned)p.kv_stride : p.kv8) + part * 16;
      c.bytes = ok ? 16 : 0;
      c.dd = smem_u32(ring8 + (t % Lo::KST) * Lo::STAGE8 + tok * Lo::ROW8 + part * 16);
      c.last = part < CHUNKS8 % 8;
    } else {
      const bool pre = pos < it.S, in = t < n_tiles && pos < it.p1;
      const char* base = reinterpret_cast<const char*>(pre ? p.kv : p.kext);
      const unsigned row = pre ? slot : (unsigned)(it.qo0 + pos - it.S);
      const unsigned stride = 2u * (unsigned)(pre ? p.kv_stride : p.ext_stride);
      c.src = (in ? base + (unsigned long long)row * stride : reinterpret_cast<const char*>(p.kv)) + part * 16;
      c.bytes = in ? 16 : 0;
      c.dd = smem_u32(ring + (t % STAGES) * (BN * D) + swz(tok, part) * 8);
    }
    return c;
  };
  MLAV_BW(unsigned bw_data = 0, bw_cta = 0, bw_half = 0, bw_tiles = 0);
  auto half_bar = [&]() {
    MLAV_BW(const unsigned t0 = clock());
    named_bar(1 + r, 128);
    MLAV_BW(bw_half += clock() - t0);
  };

  MLAV_TRACE_AT(TRACE_VERIFY, 2);
  // the top of tile step j, both halves: tile j visible, the slot ids of a later tile issued (and
  // unless LATE_COPIES, tile j + AHEAD's copies)
  auto top = [&](int j) {
    MLAV_BW(const unsigned t0 = clock());
    cp_async_wait<COPY_AT ? 2 * AHEAD - 2 : AHEAD - 1>();   // tile j landed (this thread's copies)
    MLAV_BW(const unsigned t1 = clock());
    // tile j visible; every half is past its last read of tile j + AHEAD - KST, whose stage
    // takes tile j + AHEAD (fp8: only prefix tiles go through the ring). Each half reaches it in
    // a loop of its own, so at an instruction of its own: the barrier is not the aligned kind
    cta_bar_unaligned();
    MLAV_BW(bw_data += t1 - t0; bw_cta += clock() - t1; ++bw_tiles);
    if (loads) {
      if constexpr (FP8) {
        if (!LATE_COPIES && j + AH < n_main()) load_lean8(j + AH);
        copy_ids(j + AH + Lo::IDX_AHEAD);
      } else {
        if (!LATE_COPIES && j + AH < n_tiles) load_lean(j + AH);
        copy_ids(j + AH + Lo::IDX_AHEAD);
      }
    }
    cp_async_commit();
  };
  auto no_hook = [](int) {};
  // QK(j) with tile j + AH's copies, one piece a k-step (fp8: in the prefix loop alone, whose QK
  // calls the hook; its draft tiles do not go through the ring)
  auto qk_copying = [&](int j, auto draft_tag) {
    if (!SPLIT && loads && !decltype(draft_tag)::value) {
      const CopyShare sh = copy_share(j + AH);
      if (do_qk) qk(j, draft_tag, [&](int kk) { sh.piece(kk); });
      else
        for (int kk = 0; kk < QK_STEPS; ++kk) sh.piece(kk);
    } else if (do_qk) {
      qk(j, draft_tag, no_hook);
    }
  };
  // one tile step of each half (half 0, or the one half of rows32d; half 1 runs a tile behind in
  // its softmax and PV). Each half has a loop of its own: the half branch stays out of the loop,
  // where at 255 registers ptxas re-read the thread index before it on every tile
  auto step0 = [&](int j, auto draft_tag) {
    top(j);
    const bool cp = SPLIT && loads && !decltype(draft_tag)::value;
    if constexpr (HALVES == 1 && COPY32_AT == 2) qk_copying(j, draft_tag);
    else if (do_qk) qk(j, draft_tag, no_hook);
    half_bar();
    if constexpr (HALVES == 2 && H0_LAG) {
      // PV(j - 1) with softmax(j)'s stages between its column steps: P(j - 1) is in its buffer
      // since top(j)'s barrier, and softmax(j) writes the other one (j >= 1: step0_first
      // runs tile 0)
      // SPLIT: tile j + AH's copies at PV's column steps (2: piece c; 3: piece c - 1 from c = 1,
      // and 7 too at c = 7; piece 8 at c = 7)
      const CopyShare sh = copy_share(cp ? j + AH : 0);
      if (do_pv) {
        SmState st;
        pv(j - 1, draft_tag, [&](int c) {
          if (cp && SPLIT_COPIES >= 5) {
            if (c == (SPLIT_COPIES == 5 ? 0 : 7))
              for (int i = 0; i < 9; ++i) sh.piece(i);
          } else if (cp) {
            if (SPLIT_COPIES == 2) sh.piece(c);
            if (SPLIT_COPIES == 3 && c > 0) sh.piece(c - 1);
            if (SPLIT_COPIES == 3 && c == 7) sh.piece(7);
            if (c == 7) sh.piece(8);
          }
          if (!do_sm) return;
          if (c == 0) sm_load(st);
          if (c == 2) sm_mask(j, st);
          if (c == 4) sm_exp(st);
          if (c == 6) sm_store(j, st);
        });
      } else {
        if (do_sm) softmax(j);
        if (cp)
          for (int i = 0; i < 10; ++i) sh.piece(i);
      }
    } else if constexpr (H0PV) {
      // tile j + AH's copies (fp8's five pieces, CopyShare) between PV(j)'s column steps
      if (do_sm) softmax(j);
      half_bar();
      const CopyShare sh = copy_share(cp ? j + AH : 0);
      if (do_pv) pv(j, draft_tag, [&](int c) {
        if (H0PV_PAIRS_FP8) {
          if (cp && (c == H0PV_AT || c == H0PV_AT + 2)) { sh.piece(c - H0PV_AT); sh.piece(c - H0PV_AT + 1); }
          if (cp && c == H0PV_AT + 4) sh.piece(4);
        } else if (cp && c >= H0PV_AT && c - H0PV_AT < 5) {
          sh.piece(c - H0PV_AT);
        }
      });
      else if (cp)
        for (int i = 0; i < 5; ++i) sh.piece(i);
    } else {
      if (do_sm) softmax(j);
      half_bar();
      if (do_pv) pv(j, draft_tag, no_hook);
    }
    if (COPY_AT) cp_async_commit();
  };
  // idle_tag (std::true_type): half 1 of a tail CTA, its tile steps without the math (TAIL)
  auto step1x = [&](int j, auto draft_tag, auto idle_tag) {
    top(j);
    if constexpr (decltype(idle_tag)::value) {   // the copies half 1 issues in this build, if any
      if constexpr (COPY_AT == 1 && HALVES == 2 && !SPLIT) {
        if (loads) copy_tile(j + AH);
      }
      if constexpr (COPY_AT == 2 && HALVES == 2) {
        if (!SPLIT && loads && !decltype(draft_tag)::value) {
          const CopyShare sh = copy_share(j + AH);
          for (int kk = 0; kk < QK_STEPS; ++kk) sh.piece(kk);
        }
      }
      if (COPY_AT) cp_async_commit();
      return;
    }
    if constexpr (H1_LAG != 0) {
      if constexpr (!decltype(draft_tag)::value) {   // (fp8's draft tiles: as below)
        // j >= 1 (tile 0 runs before the loop). Every warp of the half loads xs(j - 1) at k-step 0,
        // before the half barrier, so S(j) is stored past it; softmax(j) reads it after top(j + 1)
        float s[2][2][4];
        if (do_qk) {
          SmState st;
          qk_s(j, draft_tag, [&](int kk) {
            if (!do_sm) return;
            // the stages at k-steps 0, 2, 4, 6 (1) or 0, 1, 3, 5 (2: the partials' 16 registers
            // live for one k-step)
            if (kk == 0) sm_load(st);
            if (kk == (H1_LAG == 2 ? 1 : 2)) sm_mask(j - 1, st);
            if (kk == (H1_LAG == 2 ? 3 : 4)) sm_exp(st);
            if (kk == (H1_LAG == 2 ? 5 : 6)) sm_store(j - 1, st);
          }, s);
        } else if (do_sm) {
          softmax(j - 1);
        }
        half_bar();
        if (do_qk) store_s(s);
        if (do_pv) pv(j - 1, draft_tag, no_hook);
        if (COPY_AT) cp_async_commit();
        return;
      }
    }
    if (j > 0) {                                          // the CTA barrier ordered xs(j-1)
      if (do_sm) softmax(j - 1);
      half_bar();
      if (do_pv) pv(j - 1, draft_tag, no_hook);
    }
    // the copies of tile j + AH: its stage held tile j + AH - KST <= j - 2, which both halves
    // finished reading before top(j)'s barrier
    if constexpr (COPY_AT == 1 && HALVES == 2 && !SPLIT) {
      if (loads) copy_tile(j + AH);
    }
    if constexpr (COPY_AT == 2 && HALVES == 2) {
      qk_copying(j, draft_tag);
    } else {
      if (do_qk) qk(j, draft_tag, no_hook);
    }
    if (COPY_AT) cp_async_commit();
  };
  auto step1 = [&](int j, auto draft_tag) { step1x(j, draft_tag, std::false_type()); };
  auto step1_idle = [&](int j, auto draft_tag) { step1x(j, draft_tag, std::true_type()); };
  // half 1 holds none of the CTA's rows (read where needed: no register held through the loops)
  auto half1_idle = [&]() { return TL && HALVES == 2 && it.rt * BM + 32 >= it.T * p.H; };
  // fp8 runs the steps in two loops, the prefix tiles' and the draft tiles' (draft_tag): Q's f16
  // fragments are dead in the second, which frees the registers its bf16 QK needs
  // Lo::UNROLL_MASK: the prefix tiles' loop of half h unrolled by two where bit h is set
  auto run = [&](auto step, int j0, auto half_tag) {
    constexpr int UNR = (Lo::UNROLL_MASK >> decltype(half_tag)::value & 1) ? 2 : 1;
    if constexpr (FP8) {
      int j = j0;
#pragma unroll (UNR)
      for (; j < n_main(); ++j) step(j, std::false_type());
      for (; j < n_tiles; ++j) step(j, std::true_type());
    } else {
#pragma unroll (UNR)
      for (int j = j0; j < n_tiles; ++j) step(j, std::false_type());
    }
  };
  // H0_LAG: half 0's tile 0 (nothing to multiply yet), out of the loop
  auto step0_first = [&](auto draft_tag) {
    top(0);
    if (do_qk) qk(0, draft_tag, no_hook);
    half_bar();
    if (do_sm) softmax(0);
    if (SPLIT && loads && !decltype(draft_tag)::value) {   // tile AH's copies
      const CopyShare sh = copy_share(AH);
      for (int i = 0; i < 10; ++i) sh.piece(i);
    }
    if (COPY_AT) cp_async_commit();
  };
  // FRESH_IDS: the thread-index values again, for the half `half` (-1: past both loops, any half);
  // the lambdas above read them by reference
  constexpr bool FRESH = HALVES == 2 && FRESH_IDS;
  auto fresh_ids = [&](int half) {
    int t;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
    tid = t; lane = t & 31; warp = half < 0 ? t >> 5 : 4 * half + ((t >> 5) & 3);
    g = lane >> 2; qd = lane & 3; r = half < 0 ? warp >> 2 : half; d = (t >> 5) & 3;
    srow = r * 32 + (d >> 1) * 16 + (d & 1) * 8 + g;
  };
  MLAV_BW(const unsigned bw_t0 = clock());
  if (HALVES == 2 && H0_LAG && r == 0) {
    if constexpr (FRESH) fresh_ids(0);
    if (n_tiles > 0) {
      if (!FP8 || n_main() > 0) step0_first(std::false_type());
      else step0_first(std::true_type());
    }
    run(step0, 1, std::integral_constant<int, 0>());
  } else if (HALVES == 1 || r == 0) {
    if constexpr (FRESH) fresh_ids(0);
    run(step0, 0, std::integral_constant<int, 0>());
  } else if (half1_idle()) {
    if constexpr (FRESH) fresh_ids(1);
    run(step1_idle, 0, std::integral_constant<int, 1>());
  } else if constexpr (H1_LAG != 0) {
    if constexpr (FRESH) fresh_ids(1);
    if (n_tiles > 0) {                                    // tile 0: nothing to multiply yet
      top(0);
      if (do_qk) {
        if (!FP8 || n_main() > 0) qk(0, std::false_type(), no_hook);
        else qk(0, std::true_type(), no_hook);
      }
      if (COPY_AT) cp_async_commit();
    }
    run(step1, 1, std::integral_constant<int, 1>());
  } else {
    if constexpr (FRESH) fresh_ids(1);
    run(step1, 0, std::integral_constant<int, 1>());
  }
  if constexpr (FRESH) fresh_ids(-1);
  if (HALVES == 2 && r == 1 && n_tiles > 0 && !half1_idle()) {   // half 1's last tile
    half_bar();
    if (do_sm) softmax(n_tiles - 1);
    half_bar();
    if (do_pv) pv(n_tiles - 1, std::true_type(), no_hook);
  }
  if (HALVES == 2 && H0_LAG && r == 0 && n_tiles > 0) {   // half 0's last PV
    half_bar();
    if (do_pv) pv(n_tiles - 1, std::true_type(), no_hook);
  }
#ifdef MLAV_RACE_EVEN
  // diagnostic build for racecheck (kernel/bench/race_probe.py): half 1 passes its named barrier
  // as often as half 0 (n + 1 with H0_LAG, else 2 n; half 1 n + 1, or none while idle in a tail CTA),
  // which racecheck's bookkeeping seems to need
  if (HALVES == 2 && r == 1 && n_tiles > 0)
    for (int k = half1_idle() ? 0 : n_tiles + 1; k < (H0_LAG ? n_tiles + 1 : 2 * n_tiles); ++k) half_bar();
#endif
#ifdef MLAV_BARWAIT
  const unsigned bw_loop = clock() - bw_t0;
  if (lane == 0) {
    unsigned long long* g = g_barwait[HALVES == 2 ? r : 0];
    atomicAdd(g + BW_DATA, (unsigned long long)bw_data);
    atomicAdd(g + BW_CTA, (unsigned long long)bw_cta);
    atomicAdd(g + BW_HALF, (unsigned long long)bw_half);
    atomicAdd(g + BW_LOOP, (unsigned long long)bw_loop);
    atomicAdd(g + BW_TILES, (unsigned long long)bw_tiles);
    atomicAdd(g + BW_WARPS, 1ull);
  }
#endif
  cp_async_wait<0>();
  MLAV_TRACE_AT(TRACE_VERIFY, 3);
  pdl_trigger();

  // ---- epilogue: finish each row's sum across its quad, then normalise
  {
    float l = l_run;
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (qd == 0) {
      // fp8: O also takes v_scale and the convert's 2^KV16_SHIFT (the prefix P carried neither)
      if constexpr (FP8) inv_s[srow] = l > 0.f ? p.v_scale * ldexpf(1.f, KV16_SHIFT) / l : 0.f;
      else inv_s[srow] = l > 0.f ? 1.f / l : 0.f;
      lse_s[srow] = l > 0.f ? m_run + log2f(l) : -INFINITY;
    }
  }
  __syncthreads();                                        // also: every warp is past its last PV
  // stage O (bf16, [64][OSTRIDE]: conflict-free pair stores) in the ring, then 16-byte stores
  __nv_bfloat16* osm = ring;
  // the column base from the thread index re-read (asm volatile): formed here, not hoisted above
  // the loop and held through it (held, rows32d spilled it on sm_120)
  int tn;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tn));
  if constexpr (FP8) {   // n-tiles 4 q + 2 h and + 1: columns 128 d + 32 q + 16 h + 4 qd .. + 3
    const int cb = ((tn >> 5) & 3) * 128 + 4 * (tn & 3);
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const int r0 = r * 32 + m * 16 + g;
      const float i0 = inv_s[r0], i1 = inv_s[r0 + 8];
#pragma unroll
      for (int n = 0; n < 16; n += 2) {
        const int col = cb + 16 * (n >> 1);
        const float* e = acc[m][n];
        const float* o = acc[m][n + 1];
        *reinterpret_cast<uint2*>(osm + r0 * OSTRIDE + col) =
            make_uint2(pack_bf16(e[0] * i0, o[0] * i0), pack_bf16(e[1] * i0, o[1] * i0));
        *reinterpret_cast<uint2*>(osm + (r0 + 8) * OSTRIDE + col) =
            make_uint2(pack_bf16(e[2] * i1, o[2] * i1), pack_bf16(e[3] * i1, o[3] * i1));
      }
    }
  } else {
    const int col0 = ((tn >> 5) & 3) * 16 + 2 * (tn & 3);
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const int r0 = r * 32 + m * 16 + g;
      const float i0 = inv_s[r0], i1 = inv_s[r0 + 8];
#pragma unroll
      for (int n = 0; n < 16; ++n) {
        const int col = (n >> 1) * 64 + (n & 1) * 8 + col0;   // n-tile n: chunk 8 (n / 2) + 2 d + n % 2
        *reinterpret_cast<uint32_t*>(osm + r0 * OSTRIDE + col) = pack_bf16(acc[m][n][0] * i0, acc[m][n][1] * i0);
        *reinterpret_cast<uint32_t*>(osm + (r0 + 8) * OSTRIDE + col) = pack_bf16(acc[m][n][2] * i1, acc[m][n][3] * i1);
      }
    }
  }
  __syncthreads();
  store_tile<BM, OSTRIDE, THREADS>(p, it, osm, lse_s, rows, row_base, grow0, tid);
}

// TL: the tail kernels (TAIL above); the launcher picks them
template <int HALVES, int KIND, bool TL = false>
__global__ void __launch_bounds__(Layout<HALVES>::THREADS, Layout<HALVES>::MIN_BLOCKS)
mla_verify_kernel_rowsd(const Params p) {
  rowsd_body<HALVES, KIND, false, TL>(p);
}
template <int HALVES, int KIND, bool TL = false>
__global__ void __launch_bounds__(Layout<HALVES>::THREADS, Layout<HALVES>::MIN_BLOCKS)
mla_verify_kernel_rowsd_fp8(const Params p) {
  rowsd_body<HALVES, KIND, true, TL>(p);
}

}  // namespace rowsd
}  // namespace mlav

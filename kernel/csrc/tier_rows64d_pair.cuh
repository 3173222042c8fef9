// Tier rows64d_pair (tier id 9, opt-in: `tier=9`, never picked by default): rows64d (tier_rowsd.cuh,
// HALVES = 2) with one barrier pair per 32 tokens instead of per 16 (issue 25's first non-MMA
// rung). Same warps, same fragments and dims per warp (rows64d's: 16 dims of each 128-byte block),
// same math per 16-token sub-tile; what changes per pass of
// two sub-tiles a = 2p, b = 2p + 1:
//   - one CTA barrier and two named barriers per half per 32 tokens (rows64d: per 16);
//   - QK(a) then QK(b) by each warp, partial S stored per sub-tile; the softmax thread sums its
//     8 values (4 tokens of each sub-tile) in one pass: one max-reduction round (2 shuffles), one
//     stale-max test and rescale decision, one mask test, per 32 tokens;
//   - a warp keeps the partial S of the row group it softmaxes itself in registers (its own dim
//     quarter never goes through shared memory), so the partial-S area holds 3 of the 4 row groups
//     per writer: 24 KB for 32 tokens (rows64d: 16 KB for 16);
//   - P of the pass (both sub-tiles) is written over the first 16 bytes per lane of the softmax
//     warp's own partial-S inbox (each thread reads those 16 bytes first, then overwrites them;
//     nothing else writes there until the next pass's QK, after the CTA barrier);
//   - registers: holding the own partial S of sub-tile a through QK(b) costs 4, and at 255 every
//     value counts (ptxas: 254-255 on every target, no spills). So the softmax's running max and
//     sum live in shared memory between passes, no tile count is held through the loop (tiles
//     are bounded by position, the pass count read from the item), the loader's chunk addresses
//     are one base and immediate offsets, QK reads K by ldmatrix.x2 per n-tile, each requested as
//     soon as the current one's two MMAs have issued (4 registers of B, not rows64d's 8 of an x4
//     one k-step ahead; the same bytes in twice the instructions, each used 2 MMAs later), and
//     QK's lane and PV's thread index are re-read (asm) so their ldmatrix, P, alpha and flag
//     addresses are computed in the pass, not held (held, sm_120 spilled 20 B once the loader
//     below was made lean).
//     Variants measured against this one in registers (sm_120 / sm_90 spills, bytes): x4 one
//     k-step ahead 28-44 / 0-12; the rope k-step's Q fragment read again from L1 instead of held
//     0 / 0 but 16 uncoalesced loads a thread per pass (~512 L1 wavefronts per 16 tokens), not kept;
//   - the two halves run in lockstep (rows64d offsets them by half a tile: with two sub-tiles in
//     use by each half and four ring stages, an offset would leave no stage to stream into).
// KV: the 4-stage ring as 2 pairs: pair p + 1 is issued at pass p's CTA barrier into the stages
// pair p - 1 used and lands before pass p + 1 (36 KB in flight at the barrier, as rows64d's 2
// tiles ahead). The copies are issued right after the barrier; by all 8 warps at once that block
// overlapped nothing: the first loader's ~230 instructions a warp a pass cost ~730 clocks a
// tile; the lean one below (slot id, one 32 x 32-bit address product, copies at immediate
// offsets) ran ~130 and cost ~350 (overlap rung, kernel/NOTES.md). Now half 1 alone issues them
// and warp 4 the slot ids, while half 0 starts its QK.
// The log2-LSE and 1 / l of the epilogue live in the ring's tail, past the O staging.
// Partials and merge: rows64d's (combine<64>). bf16 pool only.
#pragma once
#include "slot_window.cuh"
#include "verify_common.cuh"

namespace mlav {
namespace rowspair {

constexpr int BM = 64, THREADS = 256, WARPS = 8;
constexpr int STAGES = 4;                              // = 2 pairs of 16-token tiles
constexpr int RING_BYTES = STAGES * TILE_BYTES;        // 73,728
constexpr int IDX_AHEAD = 4;                           // tiles between an index copy and its use
constexpr int IDX_WIN = 8;                             // tiles in the index window (> IDX_AHEAD + 2)
constexpr int QK_STEPS = 9;                            // 8 latent + 1 rope k-step per dim quarter
constexpr int OSTRIDE = DV + 8;                        // padded bf16 row of the output staging
constexpr float RESCALE_LOG2 = 8.f;                    // keep a stale max up to 2^8 below the true one
constexpr int TPT = THREADS / BN;                      // loader threads per token

// partial S: [warp (reader)][writer slot 0..2][sub-tile][lane] float4: 3 KB per reading warp
constexpr int INBOX = 3 * 2 * 32;                      // float4 entries per reading warp
constexpr int XS_BYTES = WARPS * INBOX * 16;           // 24,576
constexpr int OFF_XS = RING_BYTES;
constexpr int OFF_ALPHA = OFF_XS + XS_BYTES;           // [BM] rescale of the running O
constexpr int OFF_FLAG = OFF_ALPHA + BM * 4;           // [WARPS] per softmax warp: some row rescaled
constexpr int OFF_MRUN = OFF_FLAG + WARPS * 4;        // [BM] running (stale) max per row
constexpr int OFF_LRUN = OFF_MRUN + BM * 4;            // [THREADS] running sum per softmax thread
constexpr int OFF_IDX = (OFF_LRUN + THREADS * 4 + 15) / 16 * 16;   // [IDX_WIN][BN] slot ids, 8 B each
constexpr int OFF_ITEM = OFF_IDX + IDX_WIN * BN * 8;
constexpr int SMEM = OFF_ITEM + (int)((sizeof(Item) + 15) / 16 * 16);
constexpr int OFF_INV = BM * OSTRIDE * 2;              // in the ring, past the output staging
constexpr int OFF_LSE = OFF_INV + BM * 4;
static_assert(SMEM <= 99 * 1024, "sm_120 allows at most 99 KB of shared memory per block");
static_assert(OFF_LSE + BM * 4 <= RING_BYTES, "the epilogue's arrays fit in the ring past the O staging");
static_assert(OFF_XS >= 64 * 4 && XS_BYTES >= 64 * 4, "the plan's scratch lives in xs");

// DIAG = 1: the diagnostic copy that reads mode bits 16/32/64 (leave out the softmax, QK or PV:
// `--stages parts`); DIAG = 0 never tests them.
template <int DIAG>
__global__ void __launch_bounds__(THREADS, 1) mla_verify_kernel_rows64d_pair(const Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  {
    Item item;
    if (!plan_item<BM, THREADS>(p, reinterpret_cast<int*>(smem + OFF_XS), item)) return;
    if (threadIdx.x == 0) *reinterpret_cast<Item*>(smem + OFF_ITEM) = item;
    __syncthreads();
  }
  const Item& it = *reinterpret_cast<const Item*>(smem + OFF_ITEM);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, qd = lane & 3;
  const int r = warp >> 2, d = warp & 3;                 // half, quarter (also: the row group it softmaxes)
  const int H = p.H;
  // the item's derived values are recomputed from shared memory where used, not held through
  // the loop (at 255 registers every live value counts)
  auto rows_of = [&]() { return it.T * H; };
  auto row_base_of = [&]() { return it.rt * BM; };
  __nv_bfloat16* ring = reinterpret_cast<__nv_bfloat16*>(smem);
  float4* xs = reinterpret_cast<float4*>(smem + OFF_XS);
  float* alpha_s = reinterpret_cast<float*>(smem + OFF_ALPHA);
  int* flag_s = reinterpret_cast<int*>(smem + OFF_FLAG);
  uint8_t* idx_win = smem + OFF_IDX;
  const bool evict_first = !(p.mode & MODE_PLAIN_CACHE);

  const int ld_tok = tid / TPT, ld_lane = tid % TPT;
  // (tiles are bounded by their positions, pos < p1, and the pass count is read from the item in
  // shared memory: no register holds a tile count through the loop)
  auto n_tiles_of = [&]() { return (it.p1 - it.p0 + BN - 1) / BN; };
  auto ids = [&]() { return SlotWindow<BN, IDX_WIN>{p, it, idx_win, ld_tok, ld_lane, 1 << 30, it.p1, it.S}; };
  // tiles t and t + 1 in one pass over the item's fields, by half 1 alone (8 threads a token), so
  // half 0 starts its QK at the CTA barrier with the copies' issue beside its MMAs (as rows64d;
  // kernel/NOTES.md): per tile a thread reads its token's slot id from the window, forms one base
  // address (32 x 32 -> 64-bit products: slot ids and strides are below 2^31) and issues its 9
  // copies at immediate offsets; past the range the base is the pool's first row and nothing is
  // read (src_bytes 0 zero-fills); the policy is a select
  auto load_pair = [&](int t) {
    if (r != 1) return;
    constexpr int LT = THREADS / 2 / BN;                 // loader threads per token
    int tn;                                              // re-read: held, sm_80-89 spilled its lane
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tn));
    const int l_tok = (tn & 127) / LT, l_lane = tn % LT;
    const int pos0 = it.p0 + t * BN + l_tok, p1 = it.p1, S = it.S, qo0 = it.qo0;
    const bool idx = p.kv_indices != nullptr;
    const unsigned kv0 = (unsigned)it.kv0;
    const uint64_t pol = policy_kv(evict_first);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int tile = t + k, pos = pos0 + k * BN;
      const uint2 e = *reinterpret_cast<const uint2*>(idx_win + ((tile % IDX_WIN) * BN + l_tok) * 8);
      const unsigned slot = idx ? e.x : kv0 + (unsigned)pos;   // (an 8-byte id's low word: ids < 2^31)
      const bool pre = pos < S, in = pos < p1;
      const char* base = reinterpret_cast<const char*>(pre ? p.kv : p.kext);
      const unsigned row = pre ? slot : (unsigned)(qo0 + pos - S);
      const unsigned stride = 2u * (unsigned)(pre ? p.kv_stride : p.ext_stride);
      const char* src = (in ? base + (unsigned long long)row * stride : reinterpret_cast<const char*>(p.kv)) + l_lane * 16;
      const int bytes = in ? 16 : 0;
      const uint32_t dd = smem_u32(ring + (tile % STAGES) * (BN * D) + swz(l_tok, l_lane) * 8);
      static_assert(CHUNKS % LT == 0 && LT % 8 == 0, "whole rows, chunks l_lane + LT i at immediate offsets");
      cp_async16_run<CHUNKS / LT, LT * 16>(dd, src, bytes, pol);
    }
  };
  // the slot ids of tiles t and t + 1 into the window: warp 4, one lane a token (the other warps
  // skip it whole, not lane by lane); an 8-byte id is copied whole, its low word read
  auto copy_ids = [&](int t) {
    if (warp != 4 || !p.kv_indices) return;
    const int tile = t + (lane >> 4), tok = lane & 15, pos = it.p0 + tile * BN + tok;
    if (pos >= it.p1 || pos >= it.S) return;
    const int isz = p.kv_indices_64 ? 8 : 4;
    const uint8_t* src = reinterpret_cast<const uint8_t*>(p.kv_indices) + (long long)(it.kv0 + pos) * isz;
    const uint32_t dst = smem_u32(idx_win + ((tile % IDX_WIN) * BN + tok) * 8);
    if (isz == 8) asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src));
    else asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
  };
  // the prologue's first pair: slot ids read directly (the window is not filled yet)
  auto load_tile = [&](int tile, long long slot) {
    const int pos = it.p0 + tile * BN + ld_tok;
    const __nv_bfloat16* src = nullptr;
    if (pos < it.p1)
      src = pos < it.S ? p.kv + slot * p.kv_stride : p.kext + (long long)(it.qo0 + pos - it.S) * p.ext_stride;
    const int bytes = src ? 16 : 0;                      // past the range: zeros (P = 0 there)
    if (!src) src = p.kv;
    // chunk ld_lane + 16 i of the row: swz(ld_tok, ch) = swz(ld_tok, ld_lane) + 16 i (the swizzle's
    // XOR touches bits 0-2 only), so one base address and immediate offsets, not one register each
    const uint32_t dd = smem_u32(ring + (tile % STAGES) * (BN * D) + swz(ld_tok, ld_lane) * 8);
    const uint64_t pol = policy_evict_first();
    static_assert(TPT == 16, "the swizzle shortcut needs 16 loader threads per token");
#pragma unroll
    for (int i = 0; i < (CHUNKS + TPT - 1) / TPT; ++i) {
      if (ld_lane + TPT * i < CHUNKS) {
        const void* s = src + (bytes ? (ld_lane + TPT * i) * 8 : 0);
        if (evict_first) cp_async16_hint(dd + 256 * i, s, bytes, pol); else cp_async16(dd + 256 * i, s, bytes);
      }
    }
  };
  const bool loads = !(p.mode & MODE_NO_LOADS);
  if (!loads) {   // math-only diagnostics: defined tile contents, so no NaN path changes the timing
    for (int i = tid; i < RING_BYTES / 16; i += THREADS) reinterpret_cast<uint4*>(smem)[i] = make_uint4(0, 0, 0, 0);
    __syncthreads();
  }
  // prologue: pair 0 and the index window for tiles 2 .. 1 + IDX_AHEAD
  // (a tile past the range is zero-filled: sub-tile b of an odd last pair still feeds PV, with P = 0)
  if (loads) {
    load_tile(0, ids().slot_of(0));
    load_tile(1, ids().slot_of(1));
    for (int k = 2; k < 2 + IDX_AHEAD; ++k) ids().copy_index(k);
  }
  cp_async_commit();

  // Q A fragments, as rows64d: qa[kk][m] of this warp's dim quarter, its half's 2 m-tiles
  uint32_t qa[QK_STEPS][2][4];
  {
    const int rows = rows_of(), row_base = row_base_of();
    const long long grow0 = (long long)it.qo0 * H + row_base;
#pragma unroll
    for (int kk = 0; kk < QK_STEPS; ++kk) {
      const int k = 64 * kk + 16 * d;                    // chunks 8 kk + 2 d, + 1 (see qk)
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = r * 32 + m * 16 + g + 8 * h;
          const bool ok = row_base + row < rows;
          const uint32_t* src = reinterpret_cast<const uint32_t*>(p.q + (grow0 + (ok ? row : 0)) * D + k + 2 * qd);
          qa[kk][m][h] = ok ? __ldg(src) : 0u;
          qa[kk][m][2 + h] = ok ? __ldg(src + 4) : 0u;
        }
    }
  }

  // softmax thread: row srow of the tile, tokens 2qd, 2qd + 1, 8 + 2qd, 9 + 2qd of each sub-tile
  const int srow = r * 32 + (d >> 1) * 16 + (d & 1) * 8 + g;
  float* mrun_s = reinterpret_cast<float*>(smem + OFF_MRUN);
  float* lrun_s = reinterpret_cast<float*>(smem + OFF_LRUN);
  if (qd == 0) mrun_s[srow] = -INFINITY;                 // read by this quad only, after a barrier
  lrun_s[tid] = 0.f;
  float acc[2][16][4];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int n = 0; n < 16; ++n) acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.f;

  const bool math = !(p.mode & MODE_NO_MATH);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ != 900
  constexpr int DG = 0;   // the per-part diagnostics run on the H200 only
#else
  constexpr int DG = DIAG;
#endif
  const bool do_sm = math && !(DG && (p.mode & MODE_NO_SOFTMAX));
  const bool do_qk = math && !(DG && (p.mode & MODE_NO_QK));
  const bool do_pv = math && !(DG && (p.mode & MODE_NO_PV));

  // partial S of sub-tile `sub` (tile `tile`) over this warp's 32 rows and 144 dims: the 3 row
  // groups other warps softmax go to their inboxes, this warp's own row group to `own`
  auto qk = [&](int tile, int sub, float* own) {
    const __nv_bfloat16* kt = ring + (tile % STAGES) * (BN * D);
    float s[2][2][4];
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int n = 0; n < 2; ++n) s[m][n][0] = s[m][n][1] = s[m][n][2] = s[m][n][3] = 0.f;
    // B by n-tile (ldmatrix.x2: lanes 0-15 address tokens 8 nt + 0..7, k halves 0 / 1), the next
    // k-step's requested once the current one's two MMAs have issued (see the top: registers);
    // the lane is re-read (asm volatile) so the 18 addresses are computed here, not held
    int ln;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(ln));
    const int sb = (ln >> 3) & 1;
    // k-step kk reads chunks 8 kk + 2 d and + 1 of a row, i.e. 128-byte block kk, and n-tile 1 the
    // rows 8 below n-tile 0's (the same row mod 8): the swizzle permutes within a block by the row
    // mod 8, so every address is one base plus an immediate
    const uint32_t kb = smem_u32(kt + swz(ln & 7, 2 * d + sb) * 8);
    auto addr = [&](int kk, int nt) { return kb + 128 * kk + nt * 8 * CHUNKS * 16; };
    uint32_t b0[2], b1[2];
    ldsm_x2(addr(0, 0), b0[0], b0[1]);
    ldsm_x2(addr(0, 1), b1[0], b1[1]);
#pragma unroll
    for (int kk = 0; kk < QK_STEPS; ++kk) {
      mma16816(s[0][0], qa[kk][0], b0[0], b0[1]);
      mma16816(s[1][0], qa[kk][1], b0[0], b0[1]);
      if (kk + 1 < QK_STEPS) ldsm_x2(addr(kk + 1, 0), b0[0], b0[1]);
      mma16816(s[0][1], qa[kk][0], b1[0], b1[1]);
      mma16816(s[1][1], qa[kk][1], b1[0], b1[1]);
      if (kk + 1 < QK_STEPS) ldsm_x2(addr(kk + 1, 1), b1[0], b1[1]);
    }
#pragma unroll
    for (int rg = 0; rg < 4; ++rg) {                     // row group rg = (m, hr) is warp (r, rg)'s
      const int m = rg >> 1, hr = rg & 1;
      const float4 v = make_float4(s[m][0][2 * hr], s[m][0][2 * hr + 1], s[m][1][2 * hr], s[m][1][2 * hr + 1]);
      if (rg == d) {
        own[0] = v.x; own[1] = v.y; own[2] = v.z; own[3] = v.w;
      } else {
        const int slot = d - (d > rg);                   // this writer's slot in warp (r, rg)'s inbox
        xs[(r * 4 + rg) * INBOX + (slot * 2 + sub) * 32 + lane] = v;
      }
    }
  };

  // softmax of pass `pair` for row srow: 8 values, one max round, P of both sub-tiles over the
  // first 16 bytes per lane of this warp's inbox
  auto softmax = [&](int pair, const float (&own)[2][4]) {
    float m_run = mrun_s[srow], l_run = lrun_s[tid];
    float v[2][4];
#pragma unroll
    for (int sub = 0; sub < 2; ++sub)
#pragma unroll
      for (int i = 0; i < 4; ++i) v[sub][i] = own[sub][i];
    float4* inbox = xs + warp * INBOX;
#pragma unroll
    for (int slot = 0; slot < 3; ++slot)
#pragma unroll
      for (int sub = 0; sub < 2; ++sub) {
        const float4 t = inbox[(slot * 2 + sub) * 32 + lane];
        v[sub][0] += t.x; v[sub][1] += t.y; v[sub][2] += t.z; v[sub][3] += t.w;
      }
    const int tpos = it.p0 + pair * 2 * BN;
#pragma unroll
    for (int sub = 0; sub < 2; ++sub)
#pragma unroll
      for (int i = 0; i < 4; ++i) v[sub][i] *= p.scale_log2;
    if (tpos + 2 * BN > it.S || tpos + 2 * BN > it.p1) {   // rare: mask facts recomputed here
      const int rows = rows_of(), s_lr = row_base_of() + srow;
      const int s_tq = s_lr < rows ? s_lr / H : 0;
#pragma unroll
      for (int sub = 0; sub < 2; ++sub)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int pos = tpos + sub * BN + (i >> 1) * 8 + 2 * qd + (i & 1);
          bool ok = pos < it.p1;
          if (ok && pos >= it.S && s_lr < rows) {
            const int dj = pos - it.S;
            ok = p.mask ? __ldg(p.mask + it.m0 + (long long)s_tq * (it.S + it.T) + it.S + dj) != 0 : dj <= s_tq;
          }
          if (!ok) v[sub][i] = -INFINITY;
        }
    }
    float alpha;
    const bool any = stale_row_max(fmaxf(fmaxf(fmaxf(v[0][0], v[0][1]), fmaxf(v[0][2], v[0][3])),
                                         fmaxf(fmaxf(v[1][0], v[1][1]), fmaxf(v[1][2], v[1][3]))),
                                   RESCALE_LOG2, m_run, alpha);
    const float shift = m_run == -INFINITY ? 0.f : m_run;
    float pr[2][4];
    float sum = 0.f;
#pragma unroll
    for (int sub = 0; sub < 2; ++sub)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        pr[sub][i] = exp2f(v[sub][i] - shift);
        sum += pr[sub][i];
      }
    l_run = l_run * alpha + sum;
    lrun_s[tid] = l_run;
    if (qd == 0) mrun_s[srow] = m_run;
    // A-fragment words of rows g (d & 1 = 0: a0, a2) or g + 8 (a1, a3): tokens 2qd, 2qd + 1 and
    // 8 + 2qd, 9 + 2qd of each sub-tile; this thread read these 16 bytes above, nobody else does
    reinterpret_cast<uint4*>(inbox)[lane] = make_uint4(pack_bf16(pr[0][0], pr[0][1]), pack_bf16(pr[0][2], pr[0][3]),
                                                      pack_bf16(pr[1][0], pr[1][1]), pack_bf16(pr[1][2], pr[1][3]));
    if (qd == 0) alpha_s[srow] = alpha;
    if (lane == 0) flag_s[warp] = any;
  };

  // PV of pass `pair`: O[this half's 32 rows, my 128 columns] = alpha * O + P V over both sub-tiles
  auto pv = [&](int pair) {
    // the thread index re-read (asm volatile), so the V, P, alpha and flag addresses are formed in
    // the pass, not held through it (held, ptxas spilled them on sm_120 beside the lean loader)
    int tn;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tn));
    const int ln = tn & 31, wr = tn >> 7, wd = (tn >> 5) & 3, wg = ln >> 2;
    const int4 f = reinterpret_cast<const int4*>(flag_s)[wr];
    if ((f.x | f.y | f.z | f.w) != 0) {                   // uniform across the half
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const float a0 = alpha_s[wr * 32 + m * 16 + wg], a1 = alpha_s[wr * 32 + m * 16 + wg + 8];
#pragma unroll
        for (int n = 0; n < 16; ++n) {
          acc[m][n][0] *= a0; acc[m][n][1] *= a0;
          acc[m][n][2] *= a1; acc[m][n][3] *= a1;
        }
      }
    }
    const int tok = ((ln >> 3) & 1) * 8 + (ln & 7);
    const int sb = ln >> 4;
#pragma unroll
    for (int sub = 0; sub < 2; ++sub) {
      const __nv_bfloat16* vt = ring + ((2 * pair + sub) % STAGES) * (BN * D);
      uint32_t pa[2][4];
#pragma unroll
      for (int m = 0; m < 2; ++m) {                      // rows g from warp (r, 2m), g + 8 from (r, 2m + 1)
        const uint2 lo = reinterpret_cast<const uint2*>(xs + (wr * 4 + 2 * m) * INBOX + ln)[sub];
        const uint2 hi = reinterpret_cast<const uint2*>(xs + (wr * 4 + 2 * m + 1) * INBOX + ln)[sub];
        pa[m][0] = lo.x; pa[m][1] = hi.x; pa[m][2] = lo.y; pa[m][3] = hi.y;
      }
      // n-tiles 2 n2, 2 n2 + 1 are chunks 8 n2 + 2 wd, + 1 (columns 64 n2 + 16 wd .. + 15): block n2
      const uint32_t vb = smem_u32(vt + swz(tok, 2 * wd + sb) * 8);
      uint32_t b[2][4];
      ldsm_x4_t(vb, b[0][0], b[0][1], b[0][2], b[0][3]);
#pragma unroll
      for (int n2 = 0; n2 < 8; ++n2) {
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
  auto half_bar = [&]() { named_bar(1 + r, 128); };

  MLAV_TRACE_AT(TRACE_VERIFY, 2);
  for (int pass = 0; 2 * pass < n_tiles_of(); ++pass) {
    cp_async_wait<0>();                                   // pair `pass` landed (this thread's copies)
    // pair `pass` visible; every warp is past its PV of the pair before, whose stages take the
    // next pair, and past its reads of that pass's P, whose bytes the QK below overwrites
    __syncthreads();
    if (loads && 2 * pass + 2 < n_tiles_of()) {
      load_pair(2 * pass + 2);
      copy_ids(2 * pass + 2 + IDX_AHEAD);
    }
    cp_async_commit();
    float own[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    if (do_qk) {
      qk(2 * pass, 0, own[0]);
      qk(2 * pass + 1, 1, own[1]);
    }
    half_bar();
    if (do_sm) softmax(pass, own);
    half_bar();
    if (do_pv) pv(pass);
  }
  cp_async_wait<0>();
  MLAV_TRACE_AT(TRACE_VERIFY, 3);
  pdl_trigger();
  __syncthreads();                                        // every warp is past its last PV: the ring is free

  // ---- epilogue: finish each row's sum across its quad, then normalise (as rows64d)
  float* inv_s = reinterpret_cast<float*>(smem + OFF_INV);
  float* lse_s = reinterpret_cast<float*>(smem + OFF_LSE);
  {
    const float m_run = mrun_s[srow];
    float l = lrun_s[tid];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (qd == 0) {
      inv_s[srow] = l > 0.f ? 1.f / l : 0.f;
      lse_s[srow] = l > 0.f ? m_run + log2f(l) : -INFINITY;
    }
  }
  __syncthreads();
  __nv_bfloat16* osm = ring;
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const int r0 = r * 32 + m * 16 + g;
    const float i0 = inv_s[r0], i1 = inv_s[r0 + 8];
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      const int col = (n >> 1) * 64 + d * 16 + (n & 1) * 8 + 2 * qd;   // n-tile n: chunk 8 (n / 2) + 2 d + n % 2
      *reinterpret_cast<uint32_t*>(osm + r0 * OSTRIDE + col) = pack_bf16(acc[m][n][0] * i0, acc[m][n][1] * i0);
      *reinterpret_cast<uint32_t*>(osm + (r0 + 8) * OSTRIDE + col) = pack_bf16(acc[m][n][2] * i1, acc[m][n][3] * i1);
    }
  }
  __syncthreads();
  const int row_base = row_base_of();
  store_tile<BM, OSTRIDE, THREADS>(p, it, osm, lse_s, rows_of(), row_base, (long long)it.qo0 * H + row_base, tid);
}

}  // namespace rowspair
}  // namespace mlav

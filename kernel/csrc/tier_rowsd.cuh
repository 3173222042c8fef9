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
//        exceeds it by 2^8 (P <= 256 in bf16, so rescaling O is rare), writes P as A fragments.
//   PV:  warp (r, d) owns O[its 32 rows, columns 64 b + 16 d .. + 15 of blocks b = 0..7] (128
//        registers; V addresses one base plus immediates, as K's).
// A half synchronises its 4 warps with named barriers. With two halves, they meet once per
// tile, at the CTA barrier that also rotates the KV ring, at different points of their tile:
// half 0 runs QK(j), softmax(j), PV(j); half 1 runs softmax(j-1), PV(j-1), QK(j); so while
// one half waits on its softmax chain the other (same schedulers) issues MMAs. With one half
// per CTA, the two CTAs on an SM are independent and overlap the same way by themselves (each
// reads the KV range of its row tile: the second read comes from L2).
// KV: 4 stages of 16 tokens under L2 evict-first, AHEAD tiles in flight past the ones in use,
// slot ids by cp.async IDX_AHEAD tiles earlier into a shared window (in the loop by lanes 0-15 of
// warp 0, and the tile's copies issued by the lean loader, bf16 and fp8 alike; see
// tier_rows64d_pair.cuh and the overlap rung in kernel/NOTES.md); rows64d on bf16 has warp 4 copy
// the slot ids and half 1 alone the tile (see load_lean).
// Partials (normalised bf16 O, fp32 log2-LSE) use the common layout and merge (combine<32 HALVES>).
// FP8 (SGLang's fp8_e4m3 pool): the prefix rows stream as e4m3 bytes into S8 stages of their
// own; in iteration j tile j + 1 is widened (widen_rows: exact bf16, draft rows from k_extend)
// into the third of three bf16 stages (QK(j) and PV(j - 1) read the other two), so the math
// reads bf16 exactly as above: by all warps right after the CTA barrier (rows64d), or by the
// half after its MMAs (rows32d, Layout::WIDEN_LATE; with two halves, half r would take rows
// 8r .. 8r + 7). k_scale folds into the prefix logits' scale and v_scale into the prefix P (l
// sums the unscaled P).
#pragma once
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

template <int HALVES, bool FP8 = false>
struct Layout {
  static constexpr int BM = 32 * HALVES;               // query rows per CTA
  static constexpr int THREADS = 128 * HALVES;
  static constexpr int WARPS = THREADS / 32;
  static constexpr int TPT = THREADS / BN;             // loader threads per token
  static constexpr int AHEAD = HALVES == 2 ? 2 : 3;    // tiles issued ahead of the one in use
  static constexpr int XS_BYTES = WARPS * 4 * 32 * 16; // partial S: [warp][row group][lane] float4
  static constexpr int PS_BYTES = 2 * HALVES * 32 * 16;   // P: [m-tile][lane] A fragment (uint4)
  // fp8: NB bf16 stages and S8 e4m3 stages, as many as fit (at most IDX_AHEAD + 1: the slot-id
  // window runs that far ahead of the copies)
  static constexpr int NB = 3;
  static constexpr int OTHER = XS_BYTES + PS_BYTES + BM * 12 + WARPS * 4 + 16 + IDX_WIN * BN * 8 +
                               (int)((sizeof(Item) + 15) / 16 * 16);
  static constexpr int S8_FIT = (99 * 1024 - OTHER - NB * TILE_BYTES) / TILE8_BYTES;
  // (bf16: 1, unused, so that the fp8-only code's modulo stays defined where it is compiled)
  static constexpr int S8 = FP8 ? (S8_FIT < IDX_AHEAD + 1 ? S8_FIT : IDX_AHEAD + 1) : 1;
  static constexpr int KST = FP8 ? NB : STAGES;        // bf16 stages the MMAs read
  static constexpr int RING = FP8 ? NB * TILE_BYTES + S8 * TILE8_BYTES : RING_BYTES;
  static constexpr int OFF_XS = RING;
  static constexpr int OFF_PS = OFF_XS + XS_BYTES;
  static constexpr int OFF_ALPHA = OFF_PS + PS_BYTES;  // [BM] rescale of the running O
  static constexpr int OFF_FLAG = OFF_ALPHA + BM * 4;  // [WARPS] per softmax warp: some row rescaled
  static constexpr int OFF_INV = OFF_FLAG + WARPS * 4; // [BM] 1 / l at the end
  static constexpr int OFF_LSE = OFF_INV + BM * 4;     // [BM] log2-LSE at the end
  static constexpr int OFF_IDX = (OFF_LSE + BM * 4 + 15) / 16 * 16;   // [IDX_WIN][BN] slot ids, 8 B each
  static constexpr int OFF_ITEM = OFF_IDX + IDX_WIN * BN * 8;        // this CTA's Item
  static constexpr int SMEM = OFF_ITEM + (int)((sizeof(Item) + 15) / 16 * 16);
  static constexpr int MIN_BLOCKS = HALVES == 1 ? 2 : 1;
  static_assert(SMEM <= 99 * 1024, "sm_120 allows at most 99 KB of shared memory per block");
  static_assert(BM * OSTRIDE * 2 <= RING, "the output staging reuses the ring");
  static_assert(!FP8 || S8 >= 2, "fp8: one e4m3 stage widened while the next streams in");
  // fp8 widen schedule, measured on the H200 (kernel/NOTES.md): rows32d widens after its PV,
  // two chunks per shared-memory round trip (T = 4: 115 us against 123 for the plain loop
  // before the QK); rows64d keeps the plain loop before the QK, the only one of four
  // schedules without a spill on every target (the other three were at most 7 % faster)
  static constexpr bool WIDEN_LATE = HALVES == 1;
  static constexpr int WIDEN_BATCH = HALVES == 1 ? 2 : 0;
  static_assert(OFF_XS >= 64 * 4 && XS_BYTES >= 64 * 4, "the plan's scratch lives in xs");
};

// DIAG = 1 builds the diagnostic copy that also reads mode bits 16/32/64 (skip the softmax,
// QK or PV: per-part timings of the math); the production copy (DIAG = 0) never tests them.
template <int HALVES, int DIAG, bool FP8>
__device__ __forceinline__ void rowsd_body(const Params& p) {
  using Lo = Layout<HALVES, FP8>;
  constexpr int BM = Lo::BM, THREADS = Lo::THREADS, TPT = Lo::TPT, AHEAD = Lo::AHEAD;
  extern __shared__ __align__(128) uint8_t smem[];
  {
    Item item;
    if (!plan_item<BM, THREADS>(p, reinterpret_cast<int*>(smem + Lo::OFF_XS), item)) return;
    // the item's fields are read from shared memory where used, not held in registers through
    // the loop (at 255 registers every live value counts)
    if (threadIdx.x == 0) *reinterpret_cast<Item*>(smem + Lo::OFF_ITEM) = item;
    __syncthreads();
  }
  const Item& it = *reinterpret_cast<const Item*>(smem + Lo::OFF_ITEM);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, qd = lane & 3;
  const int r = warp >> 2, d = warp & 3;                 // half, quarter
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
  uint8_t* ring8 = smem + Lo::NB * TILE_BYTES;            // fp8 only: the e4m3 stages
  const bool evict_first = !(p.mode & MODE_PLAIN_CACHE);

  // ---- KV producer: thread -> token tid / TPT of a tile, 16-byte chunks (tid % TPT) + TPT i
  const int ld_tok = tid / TPT, ld_lane = tid % TPT;
  const int n_tiles = (it.p1 - it.p0 + BN - 1) / BN;
  const SlotWindow<BN, IDX_WIN> ids{p, it, idx_win, ld_tok, ld_lane, n_tiles, it.p1, it.S};
  auto load_tile = [&](int tile, long long slot) {
    int pos = it.p0 + tile * BN + ld_tok;
    const __nv_bfloat16* src = nullptr;
    if (tile < n_tiles && pos < it.p1)
      src = pos < it.S ? p.kv + slot * p.kv_stride : p.kext + (long long)(it.qo0 + pos - it.S) * p.ext_stride;
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
  // halves, half 1 alone copies (8 threads a token, 9 copies each) and warp 4 the slot ids: half 0
  // starts its QK right after the CTA barrier while half 1, whose tile starts with a softmax,
  // issues them (all 8 warps issuing at once left no MMA to cover the block, and half 0's first
  // K loads queued behind the copies: Nsight Compute, kernel/NOTES.md)
  constexpr bool HALF1_LOADS = HALVES == 2 && !FP8;
  constexpr int IDS_WARP = HALF1_LOADS ? 4 : 0;
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
  // fp8: the e4m3 prefix rows only; widen_rows writes the draft rows and zeros past p1
  // (the prologue's first tiles, slot ids read directly)
  auto load_tile8 = [&](int tile, long long slot) {
    const int pos = it.p0 + tile * BN + ld_tok;
    if (tile >= n_tiles || pos >= it.p1 || pos >= it.S) return;
    const uint8_t* src = p.kv8 + slot * p.kv_stride;
    uint8_t* dst = ring8 + (tile % Lo::S8) * TILE8_BYTES + ld_tok * D;
    const uint64_t pol = policy_evict_first();
#pragma unroll
    for (int i = 0; i < (CHUNKS8 + TPT - 1) / TPT; ++i) {
      const int ch = ld_lane + TPT * i;
      if (ch < CHUNKS8) {
        if (evict_first) cp_async16_hint(smem_u32(dst + ch * 16), src + ch * 16, 16, pol);
        else cp_async16(smem_u32(dst + ch * 16), src + ch * 16, 16);
      }
    }
  };
  // fp8 in the loop, the lean way (as load_lean): the slot id from the window, one base address
  // (a 32 x 32-bit product: slot ids and strides are below 2^31), the copies at immediate offsets
  // (chunk ld_lane + TPT i is 16 TPT i bytes past chunk ld_lane in the pool row and in the
  // unswizzled stage row), the L2 policy a select; draft rows and rows past p1 copy nothing, as
  // above (widen_rows does not read their e4m3 bytes)
  auto load_lean8 = [&](int tile) {
    const int pos = it.p0 + tile * BN + ld_tok;
    if (pos >= it.p1 || pos >= it.S) return;
    const uint2 e = *reinterpret_cast<const uint2*>(idx_win + ((tile % IDX_WIN) * BN + ld_tok) * 8);
    const unsigned slot = p.kv_indices ? e.x : (unsigned)it.kv0 + (unsigned)pos;   // (an 8-byte id's low word)
    const uint8_t* src = p.kv8 + (unsigned long long)slot * (unsigned)p.kv_stride + ld_lane * 16;
    const uint32_t dd = smem_u32(ring8 + (tile % Lo::S8) * TILE8_BYTES + ld_tok * D + ld_lane * 16);
    const uint64_t pol = policy_kv(evict_first);
    cp_async16_run<CHUNKS8 / TPT, TPT * 16>(dd, src, 16, pol);
    if constexpr (CHUNKS8 % TPT != 0)
      if (ld_lane < CHUNKS8 % TPT) cp_async16_at<CHUNKS8 / TPT * TPT * 16>(dd, src, 16, pol);
  };
  auto load = [&](int tile, long long slot) {
    if constexpr (FP8) load_tile8(tile, slot); else load_tile(tile, slot);
  };
  auto widen = [&](int tile) {     // by all threads
    widen_rows<THREADS, BN, Lo::WIDEN_BATCH>(p, it.p0, it.p1, it.S, it.qo0, tile, tid, 0, ring8 + (tile % Lo::S8) * TILE8_BYTES,
                            ring + (tile % Lo::KST) * (BN * D));
  };
  auto widen_half = [&](int tile) {   // by this half: its share of the rows
    widen_rows<128, BN / HALVES, Lo::WIDEN_BATCH>(p, it.p0, it.p1, it.S, it.qo0, tile, tid & 127, r * (BN / HALVES),
                                 ring8 + (tile % Lo::S8) * TILE8_BYTES, ring + (tile % Lo::KST) * (BN * D));
  };
  constexpr bool late = FP8 && Lo::WIDEN_LATE;
  constexpr int AH = FP8 ? Lo::S8 : AHEAD;                // tiles issued before the first is used
  const bool loads = !(p.mode & MODE_NO_LOADS);
  if (!loads) {   // math-only diagnostics: defined tile contents, so no NaN path changes the timing
    for (int i = tid; i < Lo::RING / 16; i += THREADS) reinterpret_cast<uint4*>(smem)[i] = make_uint4(0, 0, 0, 0);
    __syncthreads();
  }
  // prologue: tiles 0 .. AHEAD - 1 before anything else; the index window for the next IDX_AHEAD
#pragma unroll
  for (int t = 0; t < AH; ++t) {
    if (loads && t < n_tiles) load(t, ids.slot_of(t));
    if (t == 0 && loads)
      for (int k = AH; k < AH + IDX_AHEAD; ++k) ids.copy_index(k);
    cp_async_commit();
  }
  if constexpr (FP8) {                                    // tile 0 in bf16 before the loop's barrier
    cp_async_wait<AH - 1>();
    __syncthreads();
    if (n_tiles > 0) widen(0);
  }

  // ---- Q A fragments straight from global memory (L2-resident after the first CTA):
  // qa[kk][m] = {Q[g][k+2qd..], Q[g+8][k+2qd..], Q[g][k+8+2qd..], Q[g+8][k+8+2qd..]} of the
  // m-tile's 16 rows, k = this dim quarter's kk-th k-step
  uint32_t qa[QK_STEPS][2][4];
#pragma unroll
  for (int kk = 0; kk < QK_STEPS; ++kk) {
    const int k = 64 * kk + 16 * d;                      // chunks 8 kk + 2 d, + 1 (see qk)
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

  // softmax thread: row srow of the tile, tokens 2qd, 2qd + 1, 8 + 2qd, 9 + 2qd of a tile
  const int srow = r * 32 + (d >> 1) * 16 + (d & 1) * 8 + g;
  float m_run = -INFINITY, l_run = 0.f;

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

  // partial S of tile `tile` over this warp's 32 rows and 144 dims -> xs, stored per row
  // group (2 m + hr) in the order the softmax reads it
  auto qk = [&](int tile) {
    const __nv_bfloat16* kt = ring + (tile % Lo::KST) * (BN * D);
    float s[2][2][4];
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int n = 0; n < 2; ++n) s[m][n][0] = s[m][n][1] = s[m][n][2] = s[m][n][3] = 0.f;
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
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr)
        xs[(warp * 4 + m * 2 + hr) * 32 + lane] =
            make_float4(s[m][0][2 * hr], s[m][0][2 * hr + 1], s[m][1][2 * hr], s[m][1][2 * hr + 1]);
  };

  // softmax of tile j for row srow: sum the four dim-quarter partials of this half, mask,
  // online max with a stale-max threshold, P -> ps as the PV warps' A fragments
  auto softmax = [&](int j) {
    float v[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int dq = 0; dq < 4; ++dq) {
      const float4 t = xs[((r * 4 + dq) * 4 + d) * 32 + lane];
      v[0] += t.x; v[1] += t.y; v[2] += t.z; v[3] += t.w;
    }
    const int tpos = it.p0 + j * BN;
    const bool edge = tpos + BN > it.S || tpos + BN > it.p1;
#pragma unroll
    for (int i = 0; i < 4; ++i)   // fp8: k_scale on the prefix logits only
      v[i] *= (FP8 && tpos + (i >> 1) * 8 + 2 * qd + (i & 1) < it.S) ? p.kscale_log2 : p.scale_log2;
    if (edge) {                                           // rare: mask facts recomputed here
      const int s_lr = row_base + srow;                   // row within the request
      const int s_tq = s_lr < rows ? s_lr / H : 0;        // its draft token
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int pos = tpos + (i >> 1) * 8 + 2 * qd + (i & 1);
        bool ok = pos < it.p1;
        if (ok && pos >= it.S && s_lr < rows) {
          const int dj = pos - it.S;
          ok = p.mask ? __ldg(p.mask + it.m0 + (long long)s_tq * (it.S + it.T) + it.S + dj) != 0 : dj <= s_tq;
        }
        if (!ok) v[i] = -INFINITY;
      }
    }
    float mx = fmaxf(fmaxf(v[0], v[1]), fmaxf(v[2], v[3]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    // first finite max, or one 2^8 above the stale max: move it (m_run = -inf gives alpha 0)
    const bool bump = mx > m_run + RESCALE_LOG2;
    float alpha = 1.f;
    if (bump) {
      alpha = exp2f(m_run - mx);
      m_run = mx;
    }
    // a row that has seen only masked keys keeps m = -inf; shift by 0 to avoid inf - inf
    const float shift = m_run == -INFINITY ? 0.f : m_run;
    const float p0 = exp2f(v[0] - shift), p1 = exp2f(v[1] - shift);
    const float p2 = exp2f(v[2] - shift), p3 = exp2f(v[3] - shift);
    l_run = l_run * alpha + ((p0 + p1) + (p2 + p3));
    uint32_t* pw = reinterpret_cast<uint32_t*>(ps + (r * 2 + (d >> 1)) * 32 + lane);
    if constexpr (FP8) {                                  // v_scale rides on the prefix P
      const int t0 = tpos + 2 * qd;
      pw[d & 1] = pack_bf16(t0 < it.S ? p0 * p.v_scale : p0, t0 + 1 < it.S ? p1 * p.v_scale : p1);
      pw[2 + (d & 1)] = pack_bf16(t0 + 8 < it.S ? p2 * p.v_scale : p2, t0 + 9 < it.S ? p3 * p.v_scale : p3);
    } else {
      pw[d & 1] = pack_bf16(p0, p1);                      // a0 / a1: tokens 2qd, 2qd + 1
      pw[2 + (d & 1)] = pack_bf16(p2, p3);                // a2 / a3: tokens 8 + 2qd, 9 + 2qd
    }
    if (qd == 0) alpha_s[srow] = alpha;
    const bool any = __any_sync(0xffffffffu, bump);
    if (lane == 0) flag_s[warp] = any;
  };

  // PV(j): O[this half's 32 rows, my 128 columns] = alpha * O + P V
  auto pv = [&](int j) {
    const __nv_bfloat16* vt = ring + (j % Lo::KST) * (BN * D);
    const int4 f = reinterpret_cast<const int4*>(flag_s)[r];
    if ((f.x | f.y | f.z | f.w) != 0) {                   // uniform across the half
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const float a0 = alpha_s[r * 32 + m * 16 + g], a1 = alpha_s[r * 32 + m * 16 + g + 8];
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
      const uint4 t = ps[(r * 2 + m) * 32 + lane];
      pa[m][0] = t.x; pa[m][1] = t.y; pa[m][2] = t.z; pa[m][3] = t.w;
    }
    const int tok = ((lane >> 3) & 1) * 8 + (lane & 7);
    const int sub = lane >> 4;
    // n-tiles 2 n2, 2 n2 + 1 are chunks 8 n2 + 2 d, + 1 (columns 64 n2 + 16 d .. + 15): block n2
    const uint32_t vb = smem_u32(vt + swz(tok, 2 * d + sub) * 8);
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
  };
  auto half_bar = [&]() { named_bar(1 + r, 128); };

  MLAV_TRACE_AT(TRACE_VERIFY, 2);
  for (int j = 0; j < n_tiles; ++j) {
    // bf16: tile j landed (this thread's copies); fp8: e4m3 tile j + 1 landed
    if constexpr (FP8) cp_async_wait<AH - 2>(); else cp_async_wait<AHEAD - 1>();
    // tile j visible; every half is past its last read of tile j + AHEAD - STAGES, whose stage
    // takes tile j + AHEAD (fp8: tile j's e4m3 stage, widened in iteration j - 1, takes j + AH;
    // tile j - 2's bf16 stage, last read by PV(j - 2), takes tile j + 1)
    __syncthreads();
    if (loads) {
      if constexpr (FP8) {
        if (j + AH < n_tiles) load_lean8(j + AH);
        copy_ids(j + AH + IDX_AHEAD);
      } else {
        if (j + AH < n_tiles) load_lean(j + AH);
        copy_ids(j + AH + IDX_AHEAD);
      }
    }
    cp_async_commit();
    if constexpr (FP8) if (!late && j + 1 < n_tiles) widen(j + 1);
    if (HALVES == 1 || r == 0) {
      if (do_qk) qk(j);
      half_bar();
      if (do_sm) softmax(j);
      half_bar();
      if (do_pv) pv(j);
    } else {
      if (j > 0) {                                        // the CTA barrier ordered xs(j-1)
        if (do_sm) softmax(j - 1);
        half_bar();
        if (do_pv) pv(j - 1);
      }
      if (do_qk) qk(j);
    }
    if constexpr (FP8) if (late && j + 1 < n_tiles) widen_half(j + 1);
  }
  if (HALVES == 2 && r == 1 && n_tiles > 0) {             // half 1's last tile
    half_bar();
    if (do_sm) softmax(n_tiles - 1);
    half_bar();
    if (do_pv) pv(n_tiles - 1);
  }
  cp_async_wait<0>();
  MLAV_TRACE_AT(TRACE_VERIFY, 3);

  // ---- epilogue: finish each row's sum across its quad, then normalise
  {
    float l = l_run;
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (qd == 0) {
      inv_s[srow] = l > 0.f ? 1.f / l : 0.f;
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
  __syncthreads();
  store_tile<BM, OSTRIDE, THREADS>(p, it, osm, lse_s, rows, row_base, grow0, tid);
}

template <int HALVES, int DIAG>
__global__ void __launch_bounds__(Layout<HALVES>::THREADS, Layout<HALVES>::MIN_BLOCKS)
mla_verify_kernel_rowsd(const Params p) {
  rowsd_body<HALVES, DIAG, false>(p);
}
template <int HALVES>
__global__ void __launch_bounds__(Layout<HALVES>::THREADS, Layout<HALVES>::MIN_BLOCKS)
mla_verify_kernel_rowsd_fp8(const Params p) {
  rowsd_body<HALVES, 0, true>(p);
}

}  // namespace rowsd
}  // namespace mlav

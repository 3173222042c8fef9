// Tier small8: the small tier (8, 16 or 32-row tiles, operands swapped) on SGLang's fp8_e4m3
// pool. The MMAs take their operands from the e4m3 bytes in shared memory, converted in
// registers to f16 (exact; sm_89+ by cvt.rn.f16x2.e4m3x2, one instruction per two values), and
// run as f16 MMAs, so no bf16 copy of a tile is ever written (the widen-in-shared-memory copy put
// a round trip and a barrier between every tile's copy and its MMAs) and the widening costs a
// fifth of the bit moves a bf16 target needs. A tile is 32 tokens: 18 KB, the bytes of a bf16
// 16-token tile, so the ring holds as many bytes in flight as the bf16 tier's with half the tiles.
//   S^T[32 tokens, R] = K Q^T: warp (mt, kq) = (w / 4, w % 4) takes tokens 16 mt .. + 15 and the
//     9 k-steps 9 kq .. 9 kq + 8. ldmatrix reads e4m3 rows as b16 pairs, so a thread holds dims
//     4 qd .. 4 qd + 3 of its token where the A fragment wants 2 qd, 2 qd + 1, 2 qd + 8,
//     2 qd + 9: Q's B fragments are loaded with the same permutation of each 16 dims (the dot
//     product does not care about the order of its terms). Q enters as f16 times 2^-qe, qe
//     chosen per row tile so that its largest |q| stays below 2^15; 2^qe joins the logits' scale.
//   O^T[512, R] += V^T P^T: warp w owns dims 64 w .. 64 w + 63. A V^T fragment pairs two tokens
//     of one dim in a register, which no ldmatrix of bytes gives: each thread loads 4 bytes
//     (4 dims) of 4 tokens (2 qd, 2 qd + 1, 2 qd + 8, 2 qd + 9) and pairs them by byte_perm, so
//     the fragment's rows are the dims 4 g (+2) and 4 g + 1 (+3): a permutation of O's columns
//     that the epilogue undoes. P enters as f16 times 2^8.
// The draft rows (positions >= S, bf16 rows of k_extend, L2-resident) are the last tiles, run by
// their own copy of the tile step with bf16 MMAs into the same accumulators (fragments loaded from
// global memory in the same permuted order, q reloaded as bf16). The pipeline is the small tier's:
// 4 stages, two CTA barriers per tile, softmax(j) while tiles stream in, then PV(j) and QK(j + 1);
// slot ids by cp.async IDX_AHEAD tiles ahead (in the loop by warp 0, the tile's copies by the
// lean loader: the overlap rung in kernel/NOTES.md). No L2 evict-first hint (+2-4 % on the bf16
// stream): with it, ptxas 13.0 emits an illegal instruction for sm_90 here (the hinted copy with
// a uniform-register part in its shared address; compute-sanitizer). The lean copy with the hint
// still compiles to that form on sm_90 (LDGSTS [R+UR+imm], desc[UR]: cuobjdump), so it has none.
// k_scale folds into the prefix logits' scale; v_scale into the draft P (as 1 / v_scale) and the
// final normalisation, so the prefix P keeps f16's range.
#pragma once
#include "e4m3.cuh"
#include "slot_window.cuh"
#include "small_softmax.cuh"
#include "verify_common.cuh"

namespace mlav {
namespace small8 {

constexpr int BT = 32;                  // KV tokens per tile
constexpr int ROW8 = D + 16;            // 592 B a row: 37 16-byte groups, so 8 rows hit 8 bank groups
constexpr int STAGE = BT * ROW8;        // 18,944 B
constexpr int STAGES = 4;               // 2 in flight while PV(j) and QK(j + 1) read the other 2
constexpr int IDX_AHEAD = 4;            // tiles between a slot-id copy and its use
constexpr int IDX_WIN = 8;              // tiles in the slot-id window (> IDX_AHEAD)
constexpr int PS_STRIDE = BT + 8;       // 16-bit values per P^T row (f16 prefix, bf16 draft tiles):
                                        // 80 B, so the B-fragment reads miss no bank

template <int NT>
struct Layout {
  static constexpr int R = 8 * NT;
  static constexpr int TPR = NTHREADS / R;              // softmax threads per row (all threads busy)
  static constexpr int TOK = BT / TPR;                  // tokens per softmax thread (= NT)
  static constexpr int XS_BYTES = NWARPS * NT * 32 * 16;    // partial S^T, [warp][nt][lane][4] fp32
  static constexpr int RING = STAGES * STAGE;
  static constexpr int OFF_XS = RING;
  static constexpr int OFF_PS = OFF_XS + XS_BYTES;
  static constexpr int OFF_ALPHA = OFF_PS + R * PS_STRIDE * 2;   // [R] rescale of the running O
  static constexpr int OFF_INV = OFF_ALPHA + R * 4;     // [R] 1 / l at the end
  static constexpr int OFF_LSE = OFF_INV + R * 4;       // [R] log2-LSE at the end
  static constexpr int OFF_QMAX = OFF_LSE + R * 4;      // [NWARPS] max |q| per warp (q's f16 scale)
  static constexpr int OFF_IDX = (OFF_QMAX + NWARPS * 4 + 15) / 16 * 16;   // [IDX_WIN][BT] slot ids, 8 B each
  static constexpr int SMEM = OFF_IDX + IDX_WIN * BT * 8;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
  static constexpr int MIN_BLOCKS = 1;   // sm_120: 100 KB of shared memory per SM hold one CTA
#else
  static constexpr int MIN_BLOCKS = NT <= 2 ? 2 : 1;   // CTAs per SM the registers are capped for
#endif
  static_assert(TOK * TPR == BT, "every token of a tile has one softmax thread per row");
  static_assert(SMEM <= 99 * 1024, "sm_120 allows at most 99 KB of shared memory per block");
  static_assert(R * DV * 2 <= RING, "the output staging reuses the ring");
  static_assert(XS_BYTES >= 64 * 4, "the schedule's scratch lives in the partial-S area");
};

template <bool B>
struct DraftTile { static constexpr bool value = B; };

// N 16-byte copies global -> shared, STEP bytes apart from OFF past both bases (src_bytes 0:
// zero-fill), without an L2 hint: immediate offsets, one base register pair for them all
template <int N, int STEP, int OFF = 0>
__device__ __forceinline__ void copy16_run(uint32_t dst, const void* src, int src_bytes) {
  if constexpr (N > 0) {
    asm volatile("cp.async.cg.shared.global [%0+%3], [%1+%3], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes), "n"(OFF));
    copy16_run<N - 1, STEP, OFF + STEP>(dst, src, src_bytes);
  }
}
// Kind (verify_common.cuh): PROD fixes the loads and the math as constants, -4 to -5 % at T = 1 and
// at T = 8-32 (tier 4) against reading them at run time (three runs, rungs/overlap-fp8-h200-20261204T192*
// -modes-prod-small-run{1,2,3}.json; the bf16 small tier's were a tie there and it reads them still).
// -DMLAV_SMALL8_MODES_RUNTIME: PROD reads them at run time, the production before (diagnostic builds)
#ifdef MLAV_SMALL8_MODES_RUNTIME
constexpr bool FIX_MODES = false;
#else
constexpr bool FIX_MODES = true;
#endif

template <int NT, int KIND>
__device__ __forceinline__ void small8_body(const Params& p) {
  // tier 2 (NT = 2) was not timed so (no overlap shape), and with them fixed it spilled 4 bytes on
  // sm_89 at its 128 registers: it reads them at run time in every copy
  constexpr bool FIX = FIX_MODES && NT != 2;
  using Lo = Layout<NT>;
  constexpr int R = Lo::R, TPR = Lo::TPR, TOK = Lo::TOK;
  extern __shared__ __align__(128) uint8_t smem[];
  Item it;
  // plan_one for the 8- and 16-row tiles; the 32-row tiles' loop lost beside it (verify_common.cuh's plan)
  if (!plan<R, NTHREADS, 8, NT <= 2>(p, reinterpret_cast<int*>(smem + Lo::OFF_XS), it)) return;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, qd = lane & 3;
  const int H = p.H;
  const int rows = it.T * H;
  const int row_base = it.rt * R;
  const long long grow0 = (long long)it.qo0 * H + row_base;   // flat [N*H] row of tile row 0
  uint8_t* ring = smem;
  float* xs = reinterpret_cast<float*>(smem + Lo::OFF_XS);
  __nv_bfloat16* ps = reinterpret_cast<__nv_bfloat16*>(smem + Lo::OFF_PS);
  float* alpha_s = reinterpret_cast<float*>(smem + Lo::OFF_ALPHA);
  float* inv_s = reinterpret_cast<float*>(smem + Lo::OFF_INV);
  float* lse_s = reinterpret_cast<float*>(smem + Lo::OFF_LSE);
  float* qmax_s = reinterpret_cast<float*>(smem + Lo::OFF_QMAX);
  uint8_t* idx_win = smem + Lo::OFF_IDX;

  // tiles: n_main prefix tiles over [p0, pe) from the ring, then n_tail draft tiles over
  // [ts, p1) from k_extend
  const int pe = min(it.p1, it.S), ts = max(it.p0, it.S);
  const int n_main = pe > it.p0 ? (pe - it.p0 + BT - 1) / BT : 0;
  const int n_tiles = n_main + (it.p1 > ts ? (it.p1 - ts + BT - 1) / BT : 0);
  auto tile_pos = [&](int j) { return j < n_main ? it.p0 + j * BT : ts + (j - n_main) * BT; };
  auto ext_row = [&](int pos) { return p.kext + (long long)(it.qo0 + pos - it.S) * p.ext_stride; };

  // ---- KV producer: thread -> token tid / 8 of a tile, 16-byte chunks (tid % 8) + 8 i
  const int ld_tok = tid >> 3, ld_lane = tid & 7;
  const SlotWindow<BT, IDX_WIN> ids{p, it, idx_win, ld_tok, ld_lane, n_main, pe, pe};
  // rows past pe are zero-filled: their logits are masked, so P = 0 there, and V must not be
  // NaN (0 * NaN), which a stale 0x7f byte is after the hardware convert
  auto load_tile = [&](int tile, long long slot) {   // the prologue's first tiles (ids read directly)
    const int pos = it.p0 + tile * BT + ld_tok;
    if (tile >= n_main) return;
    const bool ok = pos < pe;
    const uint8_t* src = ok ? p.kv8 + slot * p.kv_stride : p.kv8;
    uint8_t* dst = ring + (tile % STAGES) * STAGE + ld_tok * ROW8;
#pragma unroll
    for (int i = 0; i < (CHUNKS8 + 7) / 8; ++i) {
      const int ch = ld_lane + 8 * i;
      if (ch < CHUNKS8) cp_async16(smem_u32(dst + ch * 16), src + (ok ? ch * 16 : 0), ok ? 16 : 0);
    }
  };
  // in the loop, the lean way (the overlap rung, kernel/NOTES.md): the slot id from the window,
  // one base address (a 32 x 32-bit product: slot ids and strides are below 2^31), the copies at
  // immediate offsets (chunk ld_lane + 8 i is 128 i bytes past chunk ld_lane, in the pool row and
  // in the unswizzled stage row alike); rows past pe read nothing from the pool's first row
  // (src_bytes 0 zero-fills, as above). No L2 hint (see the top of this file).
  auto load_lean = [&](int tile) {
    const int pos = it.p0 + tile * BT + ld_tok;
    const uint2 e = *reinterpret_cast<const uint2*>(idx_win + ((tile % IDX_WIN) * BT + ld_tok) * 8);
    const unsigned slot = p.kv_indices ? e.x : (unsigned)it.kv0 + (unsigned)pos;   // (an 8-byte id's low word)
    const bool ok = pos < pe;
    const uint8_t* src = (ok ? p.kv8 + (unsigned long long)slot * (unsigned)p.kv_stride : p.kv8) + ld_lane * 16;
    const int bytes = ok ? 16 : 0;
    const uint32_t dd = smem_u32(ring + (tile % STAGES) * STAGE + ld_tok * ROW8 + ld_lane * 16);
    copy16_run<CHUNKS8 / 8, 128>(dd, src, bytes);
    if (ld_lane < CHUNKS8 % 8) copy16_run<1, 0, CHUNKS8 / 8 * 128>(dd, src, bytes);
  };
  // the loop's slot-id copies: warp 0, one lane a token (BT = 32), so the other warps skip the
  // block whole; an 8-byte id is copied whole, its low word read
  static_assert(BT == 32, "one lane of warp 0 a token");
  auto copy_ids = [&](int t) {
    if (warp != 0 || !p.kv_indices) return;
    const int pos = it.p0 + t * BT + lane;
    if (t >= n_main || pos >= pe) return;
    const int isz = p.kv_indices_64 ? 8 : 4;
    const uint8_t* src = reinterpret_cast<const uint8_t*>(p.kv_indices) + (long long)(it.kv0 + pos) * isz;
    const uint32_t dst = smem_u32(idx_win + ((t % IDX_WIN) * BT + lane) * 8);
    if (isz == 8) asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src));
    else asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
  };
  constexpr int AH = STAGES - 1;                          // tiles issued before the first is used
  const bool loads = KIND == MATH_ALONE ? false : (KIND == PROD && FIX) || !(p.mode & MODE_NO_LOADS);
  if (!loads) {   // math-only diagnostics: defined tile contents
    for (int i = tid; i < Lo::RING / 16; i += NTHREADS) reinterpret_cast<uint4*>(smem)[i] = make_uint4(0, 0, 0, 0);
    __syncthreads();
  }
  // the AH tiles' slot ids are loaded before any copy, so that their latencies overlap (as in
  // tier_rowsd.cuh)
  long long slot0[AH];
#pragma unroll
  for (int t = 0; t < AH; ++t) slot0[t] = loads && t < n_main ? ids.slot_of(t) : -1;
#pragma unroll
  for (int t = 0; t < AH; ++t) {
    if (loads && t < n_main) load_tile(t, slot0[t]);
    if (t == 0 && loads)
      for (int k = AH; k < AH + IDX_AHEAD; ++k) ids.copy_index(k);
    cp_async_commit();
  }

  // ---- Q^T B fragments, dims permuted as the e4m3 A fragments hold them:
  // qb[kk][nt] = Q[row nt*8+g][16 k + 4 qd .. + 3], k = 9 kq + kk
  const int mt = warp >> 2, kq = warp & 3;
  uint32_t qb[9][NT][2];
#pragma unroll
  for (int kk = 0; kk < 9; ++kk)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int r = nt * 8 + g;
      const bool ok = row_base + r < rows;
      const uint2 v = ok ? __ldg(reinterpret_cast<const uint2*>(p.q + (grow0 + r) * D + (9 * kq + kk) * 16 + 4 * qd))
                         : make_uint2(0u, 0u);
      qb[kk][nt][0] = v.x;
      qb[kk][nt][1] = v.y;
    }
  auto each_q = [&](auto f) {   // f(x) on each register x of qb (two q values)
#pragma unroll
    for (int kk = 0; kk < 9; ++kk)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h) f(qb[kk][nt][h]);
  };
  {   // max |q| of the row tile, so that q fits f16's range (applied below)
    float m = 0.f;
    each_q([&](uint32_t x) { m = absmax_bf16x2(m, x); });
    m = warp_max(m);
    if (lane == 0) qmax_s[warp] = m;
  }

  // softmax thread: row sr, tokens st0 .. st0 + TOK - 1
  const int sr = tid / TPR, st0 = (tid % TPR) * TOK;
  const int s_lr = row_base + sr;                         // row within the request
  const int s_tq = s_lr < rows ? s_lr / H : 0;            // its draft token
  float m_run = -INFINITY, l_run = 0.f;
  const int L = it.S + it.T;

  float acc[4][NT][4];   // [2 grp + half][nt]: rows 4 g + 2 half (c0, c1) and + 1 (c2, c3) of dims 64 w + 32 grp
#pragma unroll
  for (int f = 0; f < 4; ++f)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) acc[f][nt][0] = acc[f][nt][1] = acc[f][nt][2] = acc[f][nt][3] = 0.f;

  const bool math = (KIND != ANY_MODE && FIX) || !(p.mode & MODE_NO_MATH);
  int qe = 0;                                             // q enters the f16 MMAs times 2^-qe
  // partial S^T of tile j over this warp's 9 k-steps and 16 tokens -> xs. The draft tiles
  // (DraftTile<true>) have their own copy of each step: inside the prefix loop their code
  // raised its register need past the 128 a 2-CTA SM allows
  auto qk = [&](int j, auto draft_tag) {
    constexpr bool DRAFT = decltype(draft_tag)::value;
    constexpr int CH = NT == 1 ? 2 : 1;                  // independent accumulator chains per n-tile
                                                          // (two at 16 rows spill on sm_90)
    float s[CH][NT][4];
#pragma unroll
    for (int c = 0; c < CH; ++c)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) s[c][nt][0] = s[c][nt][1] = s[c][nt][2] = s[c][nt][3] = 0.f;
    auto step = [&](int kk, const uint32_t (&a)[4]) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        mma16816<true>(s[kk % CH][nt], a, qb[kk][nt][0], qb[kk][nt][1]);
      }
    };
    if constexpr (!DRAFT) {
      const uint8_t* kt = ring + (j % STAGES) * STAGE;
      const int tok = 16 * mt + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
      for (int kk = 0; kk < 9; kk += 2) {
        const uint32_t addr = smem_u32(kt + tok * ROW8 + (9 * kq + kk + (lane >> 4)) * 16);
        uint32_t r[4], a[4];
        if (kk < 8) ldsm_x4(addr, r[0], r[1], r[2], r[3]);
        else ldsm_x2(addr, r[0], r[1]);
        a[0] = e4m3x2_to_f16x2(r[0]); a[2] = e4m3x2_hi_to_f16x2(r[0]);
        a[1] = e4m3x2_to_f16x2(r[1]); a[3] = e4m3x2_hi_to_f16x2(r[1]);
        step(kk, a);
        if (kk < 8) {
          a[0] = e4m3x2_to_f16x2(r[2]); a[2] = e4m3x2_hi_to_f16x2(r[2]);
          a[1] = e4m3x2_to_f16x2(r[3]); a[3] = e4m3x2_hi_to_f16x2(r[3]);
          step(kk + 1, a);
        }
      }
    } else {     // draft rows, bf16 from k_extend
      const int pos0 = tile_pos(j) + 16 * mt + g;
      const bool ok0 = pos0 < it.p1, ok1 = pos0 + 8 < it.p1;
      const __nv_bfloat16* k0 = ok0 ? ext_row(pos0) : p.kext;
      const __nv_bfloat16* k1 = ok1 ? ext_row(pos0 + 8) : p.kext;
      // bf16 MMAs on q as given (qb holds it as f16), one k-step at a time: a rare tile, so the
      // fewest live registers
#pragma unroll 1
      for (int kk = 0; kk < 9; ++kk) {
        const int d = (9 * kq + kk) * 16 + 4 * qd;
        const uint2 x = ok0 ? __ldg(reinterpret_cast<const uint2*>(k0 + d)) : make_uint2(0u, 0u);
        const uint2 y = ok1 ? __ldg(reinterpret_cast<const uint2*>(k1 + d)) : make_uint2(0u, 0u);
        const uint32_t a[4] = {x.x, y.x, x.y, y.y};
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int r = nt * 8 + g;
          const uint2 v = row_base + r < rows
              ? __ldg(reinterpret_cast<const uint2*>(p.q + (grow0 + r) * D + d)) : make_uint2(0u, 0u);
          mma16816(s[0][nt], a, v.x, v.y);
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      float4 v = make_float4(s[0][nt][0], s[0][nt][1], s[0][nt][2], s[0][nt][3]);
      if (CH > 1) {
        v.x += s[CH - 1][nt][0]; v.y += s[CH - 1][nt][1]; v.z += s[CH - 1][nt][2]; v.w += s[CH - 1][nt][3];
      }
      *reinterpret_cast<float4*>(xs + ((warp * NT + nt) * 32 + lane) * 4) = v;
    }
  };

  cp_async_wait<AH - 1>();
  __syncthreads();
  {   // q * 2^-qe as f16 (max below 2^15); 2^qe goes into the prefix logits' scale
    float m = 0.f;
#pragma unroll
    for (int w = 0; w < NWARPS; ++w) m = fmaxf(m, qmax_s[w]);
    qe = q_f16_exponent(m);
    const float s = ldexpf(1.f, -qe);
    each_q([&](uint32_t& x) { x = bf16x2_to_f16x2(x, s); });
  }
  const float pref_scale = p.kscale_log2 * ldexpf(1.f, qe + KV16_SHIFT);

  // one tile: softmax(j), PV(j), then QK(j + 1) when tile j + 1 is of the same kind
  auto tile_step = [&](int j, auto draft_tag) {
    constexpr bool DRAFT = decltype(draft_tag)::value;
    __syncthreads();                                      // barrier 1: xs(j) complete, PV(j-1) done
    if (loads && !DRAFT) {                                // (draft steps: j >= n_main, nothing to copy)
      const int jn = j + AH;                              // into the stage PV(j-1) released
      if (jn < n_main) load_lean(jn);
      copy_ids(jn + IDX_AHEAD);
    }
    cp_async_commit();
    constexpr bool pref = !DRAFT;
    const int tpos = tile_pos(j), tend = pref ? pe : it.p1;
    if (math) {
      // ---- softmax of tile j: sum the four partials, mask, online max/sum, P^T -> ps
      const bool edge = !pref || tpos + BT > tend;
      const float scale = pref ? pref_scale : p.scale_log2;   // fp8: k_scale on prefix logits
      float sv[TOK];
#pragma unroll
      for (int i = 0; i < TOK; ++i) {
        const int t = st0 + i, tm = t >> 4, tt = t & 15;
        const int ln = (tt & 7) * 4 + ((sr & 7) >> 1);
        const int e = ((tt >> 3) << 1) | (sr & 1);
        const int nt = sr >> 3;
        float v = 0.f;
#pragma unroll
        for (int q = 0; q < 4; ++q) v += xs[((((tm << 2) + q) * NT + nt) * 32 + ln) * 4 + e];
        v *= scale;
        if (edge) {
          const int pos = tpos + t;
          bool ok = pos < tend;
          if (ok && !pref && s_lr < rows) {
            const int dj = pos - it.S;
            ok = p.mask ? __ldg(p.mask + it.m0 + (long long)s_tq * L + it.S + dj) != 0 : dj <= s_tq;
          }
          if (!ok) v = -INFINITY;
        }
        sv[i] = v;
      }
      const SoftmaxShift sh = online_max<TOK, TPR>(sv, m_run);
      // prefix P * 2^8 as f16 (from 2^-22 up it keeps 11 bits), draft P * 2^(8 - KV16_SHIFT) /
      // v_scale as bf16 (l sums the unscaled P); the epilogue multiplies O by
      // v_scale * 2^(KV16_SHIFT - 8)
      const float pscale = pref ? 256.f : ldexpf(1.f, 8 - KV16_SHIFT) / p.v_scale;
      online_sum(sv, sh, l_run, [=](int i, float pv) {
        if constexpr (pref) reinterpret_cast<__half*>(ps)[sr * PS_STRIDE + st0 + i] = __float2half_rn(pv * pscale);
        else ps[sr * PS_STRIDE + st0 + i] = __float2bfloat16_rn(pv * pscale);
      });
      if (tid % TPR == 0) alpha_s[sr] = sh.alpha;
    }
    cp_async_wait<2>();                                   // tile j+1 landed (this thread's copies)
    __syncthreads();                                      // barrier 2: ps, alpha, tile j+1 visible
    if (math) {
      // ---- PV(j): O^T[my 64 dims, R] = alpha * O^T + V^T P^T
      float al[NT][2];
      bool moved = false;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const float2 a2 = *reinterpret_cast<const float2*>(alpha_s + nt * 8 + 2 * qd);
        al[nt][0] = a2.x; al[nt][1] = a2.y;
        moved |= a2.x != 1.f || a2.y != 1.f;
      }
      if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int f = 0; f < 4; ++f)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            acc[f][nt][0] *= al[nt][0]; acc[f][nt][1] *= al[nt][1];
            acc[f][nt][2] *= al[nt][0]; acc[f][nt][3] *= al[nt][1];
          }
      }
      const uint8_t* vt = ring + (j % STAGES) * STAGE;
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        uint32_t pb[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const __nv_bfloat16* prow = ps + (nt * 8 + g) * PS_STRIDE + 16 * kk + 2 * qd;
          pb[nt][0] = *reinterpret_cast<const uint32_t*>(prow);
          pb[nt][1] = *reinterpret_cast<const uint32_t*>(prow + 8);
        }
#pragma unroll
        for (int grp = 0; grp < 2; ++grp) {
          const int dim = warp * 64 + grp * 32 + 4 * g;
          uint32_t fa[4], fb[4];
          if constexpr (pref) {
            const uint8_t* b = vt + (16 * kk + 2 * qd) * ROW8 + dim;
            const uint32_t x0 = *reinterpret_cast<const uint32_t*>(b);
            const uint32_t x1 = *reinterpret_cast<const uint32_t*>(b + ROW8);
            const uint32_t x2 = *reinterpret_cast<const uint32_t*>(b + 8 * ROW8);
            const uint32_t x3 = *reinterpret_cast<const uint32_t*>(b + 9 * ROW8);
            // {x.b0, y.b0, x.b1, y.b1}: dim 4 g, then 4 g + 1, each for two tokens
            const uint32_t w0 = __byte_perm(x0, x1, 0x5140), w1 = __byte_perm(x2, x3, 0x5140);
            const uint32_t w2 = __byte_perm(x0, x1, 0x7362), w3 = __byte_perm(x2, x3, 0x7362);
            fa[0] = e4m3x2_to_f16x2(w0); fa[1] = e4m3x2_hi_to_f16x2(w0);
            fa[2] = e4m3x2_to_f16x2(w1); fa[3] = e4m3x2_hi_to_f16x2(w1);
            fb[0] = e4m3x2_to_f16x2(w2); fb[1] = e4m3x2_hi_to_f16x2(w2);
            fb[2] = e4m3x2_to_f16x2(w3); fb[3] = e4m3x2_hi_to_f16x2(w3);
          } else {   // draft rows: 4 bf16 of 4 tokens from k_extend, paired by token
            const int pos = tpos + 16 * kk + 2 * qd;
            uint2 x[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const int pi = pos + (i & 1) + (i >> 1) * 8;
              x[i] = pi < it.p1 ? __ldg(reinterpret_cast<const uint2*>(ext_row(pi) + dim)) : make_uint2(0u, 0u);
            }
            fa[0] = __byte_perm(x[0].x, x[1].x, 0x5410); fa[1] = __byte_perm(x[0].x, x[1].x, 0x7632);
            fa[2] = __byte_perm(x[2].x, x[3].x, 0x5410); fa[3] = __byte_perm(x[2].x, x[3].x, 0x7632);
            fb[0] = __byte_perm(x[0].y, x[1].y, 0x5410); fb[1] = __byte_perm(x[0].y, x[1].y, 0x7632);
            fb[2] = __byte_perm(x[2].y, x[3].y, 0x5410); fb[3] = __byte_perm(x[2].y, x[3].y, 0x7632);
          }
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            mma16816<pref>(acc[2 * grp][nt], fa, pb[nt][0], pb[nt][1]);
            mma16816<pref>(acc[2 * grp + 1][nt], fb, pb[nt][0], pb[nt][1]);
          }
        }
      }
      if (j + 1 < (DRAFT ? n_tiles : n_main)) qk(j + 1, draft_tag);
    }
  };
  if (math && n_main > 0) qk(0, DraftTile<false>());
  MLAV_TRACE_AT(TRACE_VERIFY, 2);
  for (int j = 0; j < n_main; ++j) tile_step(j, DraftTile<false>());
  if (math && n_tiles > n_main) qk(n_main, DraftTile<true>());   // xs is free: softmax(n_main - 1) is done
  for (int j = n_main; j < n_tiles; ++j) tile_step(j, DraftTile<true>());
  cp_async_wait<0>();
  MLAV_TRACE_AT(TRACE_VERIFY, 3);
  pdl_trigger();

  // ---- epilogue: finish each row's sum across its TPR threads, then normalise
  {
    float l = l_run;
#pragma unroll
    for (int o = TPR / 2; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (tid % TPR == 0) {
      inv_s[sr] = l > 0.f ? p.v_scale * ldexpf(1.f, KV16_SHIFT - 8) / l : 0.f;
      lse_s[sr] = l > 0.f ? m_run + log2f(l) : -INFINITY;
    }
  }
  __syncthreads();                                        // also: every warp is past its last PV
  // stage O (bf16, [R][512]) in the ring with the dims back in order, then 16-byte stores
  __nv_bfloat16* osm = reinterpret_cast<__nv_bfloat16*>(ring);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int r0 = nt * 8 + 2 * qd;
    const float i0 = inv_s[r0], i1 = inv_s[r0 + 1];
#pragma unroll
    for (int f = 0; f < 4; ++f) {
      const int col = warp * 64 + (f >> 1) * 32 + 4 * g + 2 * (f & 1);   // c0, c1 at col; c2, c3 at col + 1
      *reinterpret_cast<uint32_t*>(osm + r0 * DV + col) = pack_bf16(acc[f][nt][0] * i0, acc[f][nt][2] * i0);
      *reinterpret_cast<uint32_t*>(osm + (r0 + 1) * DV + col) = pack_bf16(acc[f][nt][1] * i1, acc[f][nt][3] * i1);
    }
  }
  __syncthreads();
  store_tile<R, DV, NTHREADS>(p, it, osm, lse_s, rows, row_base, grow0, tid);
}

template <int NT, int KIND>
__global__ void __launch_bounds__(NTHREADS, Layout<NT>::MIN_BLOCKS) mla_verify_kernel_small8(const Params p) {
  small8_body<NT, KIND>(p);
}

}  // namespace small8
}  // namespace mlav

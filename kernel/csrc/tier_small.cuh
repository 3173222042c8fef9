// Tier small (design C of the kernel memo): a row tile of R = 8 * NT query rows (NT = 1, 2
// or 4) with the operands swapped, so that few rows do not waste the MMA's M = 16:
//   S^T[16 tokens, R] = K[16 tokens, 576] Q^T        (A = K tile by ldmatrix, B = Q^T in registers)
//   O^T[512, R]      += V^T[512, 16 tokens] P^T      (A = V^T by ldmatrix.trans, B = P^T from smem)
// 8 warps. QK: warp w takes k-steps [k0(w), k0(w) + nk(w)) of the 36 (5 for warps 0-3, 4 for
// warps 4-7), so every K element is read from shared memory once; the eight partial S^T go
// through shared memory and are summed by the softmax threads (TPR threads per row). PV:
// warp w owns output columns [64 w, 64 w + 64), so every V element is read once too.
// Software pipelined with two CTA barriers per tile: after barrier 1 the softmax of tile j
// runs while tiles j+1..j+3 stream in; after barrier 2 each warp does PV(j) then QK(j+1),
// two independent MMA streams. Rows beyond 32 (T * H > 32) take more row tiles that read the
// same KV range side by side (through L2).
// KV: 4 stages of 16 tokens (3 tiles, 55 KB, in flight) under an L2 evict-first policy (mode
// bit 8 turns it off for the stream microbenchmark), slot indices copied by cp.async IDX_AHEAD
// tiles ahead into a shared window, so no register ever waits on an index load (in the loop by
// lanes 0-15 of warp 0, the copies by the lean loader: the overlap rung, kernel/NOTES.md). NT <= 2 fits
// two CTAs per SM where shared memory allows (H200: yes; sm_120's 100 KB per SM: no); the
// host sizes the schedule from the occupancy it measures.
// SGLang's fp8_e4m3 pool has its own copy of this tier (tier_small8.cuh).
#pragma once
#include "slot_window.cuh"
#include "small_softmax.cuh"
#include "verify_common.cuh"

namespace mlav {
namespace small {

constexpr int STAGES = 4;
constexpr int RING_BYTES = STAGES * TILE_BYTES;        // 73,728
constexpr int IDX_AHEAD = 4;                           // tiles between an index copy and its use
constexpr int IDX_WIN = 8;                             // tiles in the index window (> IDX_AHEAD)

template <int NT>
struct Layout {
  static constexpr int R = 8 * NT;
  static constexpr int TPR = R >= 32 ? 8 : 16;          // softmax threads per row
  static constexpr int TOK = BN / TPR;                  // tokens per softmax thread
  static constexpr int XS_BYTES = NWARPS * NT * 32 * 4 * 4;   // partial S^T, [warp][nt][lane][4]
  static constexpr int PS_BYTES = R * BN * 2;            // P^T as [row][token] bf16
  static constexpr int OFF_XS = RING_BYTES;
  static constexpr int OFF_PS = OFF_XS + XS_BYTES;
  static constexpr int OFF_ALPHA = OFF_PS + PS_BYTES;   // [R] rescale of the running O
  static constexpr int OFF_INV = OFF_ALPHA + R * 4;     // [R] 1 / l at the end
  static constexpr int OFF_LSE = OFF_INV + R * 4;       // [R] log2-LSE at the end
  static constexpr int OFF_IDX = (OFF_LSE + R * 4 + 15) / 16 * 16;   // [IDX_WIN][BN] slot ids, 8 B each
  static constexpr int SMEM = OFF_IDX + IDX_WIN * BN * 8;
  static constexpr int MIN_BLOCKS = NT <= 2 ? 2 : 1;    // CTAs per SM the registers are capped for
  static_assert(SMEM <= 99 * 1024, "sm_120 allows at most 99 KB of shared memory per block");
  static_assert(R * DV * 2 <= RING_BYTES, "the output staging reuses the ring");
};

template <int NT>
__global__ void __launch_bounds__(NTHREADS, Layout<NT>::MIN_BLOCKS) mla_verify_kernel_small(const Params p) {
  using Lo = Layout<NT>;
  constexpr int R = Lo::R, TPR = Lo::TPR, TOK = Lo::TOK;
  extern __shared__ __align__(128) uint8_t smem[];
  Item it;
  // plan_one for the 8-row tiles alone, the one tile a bf16 pool takes by default (rows32d serves 9-32 rows)
  if (!plan<R, NTHREADS, 8, NT == 1>(p, reinterpret_cast<int*>(smem + RING_BYTES), it)) return;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, qd = lane & 3;
  const int H = p.H;
  const int rows = it.T * H;
  const int row_base = it.rt * R;
  const long long grow0 = (long long)it.qo0 * H + row_base;   // flat [N*H] row of tile row 0
  __nv_bfloat16* ring = reinterpret_cast<__nv_bfloat16*>(smem);
  float* xs = reinterpret_cast<float*>(smem + Lo::OFF_XS);
  __nv_bfloat16* ps = reinterpret_cast<__nv_bfloat16*>(smem + Lo::OFF_PS);
  float* alpha_s = reinterpret_cast<float*>(smem + Lo::OFF_ALPHA);
  float* inv_s = reinterpret_cast<float*>(smem + Lo::OFF_INV);
  float* lse_s = reinterpret_cast<float*>(smem + Lo::OFF_LSE);
  uint8_t* idx_win = smem + Lo::OFF_IDX;
  const bool evict_first = !(p.mode & MODE_PLAIN_CACHE);
  const uint64_t pol = evict_first ? policy_evict_first() : 0ull;

  // ---- KV producer: thread -> token tid / 16 of a tile, 16-byte chunks (tid % 16) + 16 i
  const int ld_tok = tid >> 4, ld_lane = tid & 15;
  const int n_tiles = (it.p1 - it.p0 + BN - 1) / BN;
  const SlotWindow<BN, IDX_WIN> ids{p, it, idx_win, ld_tok, ld_lane, n_tiles, it.p1, it.S};
  auto row_src = [&](int tile, long long slot) -> const __nv_bfloat16* {
    int pos = it.p0 + tile * BN + ld_tok;
    if (tile >= n_tiles || pos >= it.p1) return nullptr;
    return pos < it.S ? p.kv + slot * p.kv_stride : p.kext + (long long)(it.qo0 + pos - it.S) * p.ext_stride;
  };
  auto load_tile = [&](int tile, long long slot) {
    const __nv_bfloat16* src = row_src(tile, slot);
    __nv_bfloat16* dst = ring + (tile % STAGES) * (BN * D);
    const int bytes = src ? 16 : 0;
    if (!src) src = p.kv;
#pragma unroll
    for (int i = 0; i < 5; ++i) {
      int ch = ld_lane + 16 * i;
      if (ch < CHUNKS) {
        uint32_t d = smem_u32(dst + swz(ld_tok, ch) * 8);
        const void* s = src + (bytes ? ch * 8 : 0);
        if (evict_first) cp_async16_hint(d, s, bytes, pol); else cp_async16(d, s, bytes);
      }
    }
  };
  // in the loop (bf16): the tile's copies and its slot ids, the lean way (slot_window.cuh)
  auto load_lean = [&](int tile) {
    copy_row_lean<16, BN, IDX_WIN, STAGES>(p, it, idx_win, ring, tile, ld_tok, ld_lane, evict_first);
  };
  // (the slot-id copy stays written out in rowsd and small: as a shared function ptxas ordered
  // its compares differently, and the measured machine code is kept byte for byte)
  auto copy_ids = [&](int t) {
    if (warp != 0 || lane >= BN || !p.kv_indices) return;
    const int pos = it.p0 + t * BN + lane;
    if (t >= n_tiles || pos >= it.p1 || pos >= it.S) return;
    const int isz = p.kv_indices_64 ? 8 : 4;
    const uint8_t* src = reinterpret_cast<const uint8_t*>(p.kv_indices) + (long long)(it.kv0 + pos) * isz;
    const uint32_t dst = smem_u32(idx_win + ((t % IDX_WIN) * BN + lane) * 8);
    if (isz == 8) asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src));
    else asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
  };
  const bool loads = !(p.mode & MODE_NO_LOADS);
  if (!loads) {   // math-only diagnostics: defined tile contents, so no NaN path changes the timing
    for (int i = tid; i < RING_BYTES / 16; i += NTHREADS) reinterpret_cast<uint4*>(smem)[i] = make_uint4(0, 0, 0, 0);
    __syncthreads();
  }
  // prologue: tiles 0..2 before anything else, so the DRAM stream starts at once; the index
  // window for tiles 3 .. 2 + IDX_AHEAD rides in the first group. The three tiles' slot ids are
  // loaded before any copy, so that their latencies overlap (as in tier_rowsd.cuh)
  long long slot0[3];
#pragma unroll
  for (int t = 0; t < 3; ++t) slot0[t] = loads && t < n_tiles ? ids.slot_of(t) : -1;
#pragma unroll
  for (int t = 0; t < 3; ++t) {
    if (loads && t < n_tiles) load_tile(t, slot0[t]);
    if (t == 0 && loads)
      for (int k = 3; k < 3 + IDX_AHEAD; ++k) ids.copy_index(k);
    cp_async_commit();
  }

  // ---- Q^T B fragments straight from global memory (L2-resident after the first CTA):
  // qb[kk][nt] = {Q[row nt*8+g][16 k + 2qd, +1], Q[row][16 k + 8 + 2qd, +1]}, k = k0 + kk
  const int k0 = warp < 4 ? 5 * warp : 4 * warp + 4;
  const int nk = warp < 4 ? 5 : 4;
  uint32_t qb[5][NT][2];
#pragma unroll
  for (int kk = 0; kk < 5; ++kk)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int r = nt * 8 + g;
      const bool ok = kk < nk && row_base + r < rows;
      const uint32_t* src = reinterpret_cast<const uint32_t*>(p.q + (grow0 + r) * D + (k0 + kk) * 16 + 2 * qd);
      qb[kk][nt][0] = ok ? __ldg(src) : 0u;
      qb[kk][nt][1] = ok ? __ldg(src + 4) : 0u;
    }

  // softmax thread: row sr, tokens st0 .. st0 + TOK - 1 (threads past R * TPR idle there)
  const bool sm_active = tid < R * TPR;
  const int sr = tid / TPR, st0 = (tid % TPR) * TOK;
  const int s_lr = row_base + sr;                         // row within the request
  const int s_tq = s_lr < rows ? s_lr / H : 0;            // its draft token
  float m_run = -INFINITY, l_run = 0.f;
  const float sl2 = p.scale_log2;
  const int L = it.S + it.T;

  float acc[4][NT][4];
#pragma unroll
  for (int mt = 0; mt < 4; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.f;

  const bool math = !(p.mode & MODE_NO_MATH);
  // partial S^T of tile `tile` over this warp's k-steps -> xs
  auto qk = [&](int tile) {
    const __nv_bfloat16* kt = ring + (tile % STAGES) * (BN * D);
    // CH independent accumulator chains per n-tile (k-steps alternate between them), so that
    // few rows still give the tensor pipe more than one MMA in flight per warp
    constexpr int CH = NT <= 2 ? 2 : 1;
    float s[CH][NT][4];
#pragma unroll
    for (int c = 0; c < CH; ++c)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) s[c][nt][0] = s[c][nt][1] = s[c][nt][2] = s[c][nt][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < 5; ++kk) {
      if (kk < nk) {
        const int mi = lane >> 3;
        const int tok = (lane & 7) + (mi & 1) * 8, ch = 2 * (k0 + kk) + (mi >> 1);
        uint32_t a[4];
        ldsm_x4(smem_u32(kt + swz(tok, ch) * 8), a[0], a[1], a[2], a[3]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mma16816(s[kk % CH][nt], a, qb[kk][nt][0], qb[kk][nt][1]);
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

  cp_async_wait<2>();
  __syncthreads();
  if (math && n_tiles > 0) qk(0);

  MLAV_TRACE_AT(TRACE_VERIFY, 2);
  for (int j = 0; j < n_tiles; ++j) {
    __syncthreads();                                      // barrier 1: xs(j) complete, PV(j-1) done
    if (loads) {
      const int jn = j + 3;                               // refill the stage PV(j-1) released
      if (jn < n_tiles) load_lean(jn);
      copy_ids(jn + IDX_AHEAD);
    }
    cp_async_commit();
    if (math) {
      // ---- softmax of tile j: sum the eight partials, mask, online max/sum, P^T -> ps
      if (sm_active) {
        const int tpos = it.p0 + j * BN;
        const bool edge = tpos + BN > it.S || tpos + BN > it.p1;
        float sv[TOK];
#pragma unroll
        for (int i = 0; i < TOK; ++i) {
          const int t = st0 + i;
          const int ln = (t & 7) * 4 + ((sr & 7) >> 1);
          const int e = ((t >> 3) << 1) | (sr & 1);
          const int nt = sr >> 3;
          float v = 0.f;
#pragma unroll
          for (int w = 0; w < NWARPS; ++w) v += xs[((w * NT + nt) * 32 + ln) * 4 + e];
          v *= sl2;
          if (edge) {
            const int pos = tpos + t;
            bool ok = pos < it.p1;
            if (ok && pos >= it.S && s_lr < rows) {
              const int dj = pos - it.S;
              ok = p.mask ? __ldg(p.mask + it.m0 + (long long)s_tq * L + it.S + dj) != 0 : dj <= s_tq;
            }
            if (!ok) v = -INFINITY;
          }
          sv[i] = v;
        }
        const SoftmaxShift sh = online_max<TOK, TPR>(sv, m_run);
        online_sum(sv, sh, l_run, [=](int i, float pv) { ps[sr * BN + st0 + i] = __float2bfloat16_rn(pv); });
        if (tid % TPR == 0) alpha_s[sr] = sh.alpha;
      }
    }
    cp_async_wait<2>();                                   // tile j+1 landed (this thread's copies)
    __syncthreads();                                      // barrier 2: ps, alpha, tile j+1 visible
    if (math) {
      // ---- PV(j): O^T[my 64 columns, R] = alpha * O^T + V^T P^T
      const __nv_bfloat16* vt = ring + (j % STAGES) * (BN * D);
      uint32_t pb[NT][2];
      float al[NT][2];
      bool moved = false;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const __nv_bfloat16* prow = ps + (nt * 8 + g) * BN + 2 * qd;
        pb[nt][0] = *reinterpret_cast<const uint32_t*>(prow);
        pb[nt][1] = *reinterpret_cast<const uint32_t*>(prow + 8);
        const float2 a2 = *reinterpret_cast<const float2*>(alpha_s + nt * 8 + 2 * qd);
        al[nt][0] = a2.x; al[nt][1] = a2.y;
        moved |= a2.x != 1.f || a2.y != 1.f;
      }
      if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int mt = 0; mt < 4; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            acc[mt][nt][0] *= al[nt][0]; acc[mt][nt][1] *= al[nt][1];
            acc[mt][nt][2] *= al[nt][0]; acc[mt][nt][3] *= al[nt][1];
          }
      }
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
        const int mi = lane >> 3;
        const int tok = (lane & 7) + (mi >> 1) * 8, ch = warp * 8 + mt * 2 + (mi & 1);
        uint32_t a[4];
        ldsm_x4_t(smem_u32(vt + swz(tok, ch) * 8), a[0], a[1], a[2], a[3]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mma16816(acc[mt][nt], a, pb[nt][0], pb[nt][1]);
      }
      if (j + 1 < n_tiles) qk(j + 1);
    }
  }
  cp_async_wait<0>();
  MLAV_TRACE_AT(TRACE_VERIFY, 3);
  pdl_trigger();

  // ---- epilogue: finish each row's sum across its TPR threads, then normalise
  if (sm_active) {
    float l = l_run;
#pragma unroll
    for (int o = TPR / 2; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (tid % TPR == 0) {
      inv_s[sr] = l > 0.f ? 1.f / l : 0.f;
      lse_s[sr] = l > 0.f ? m_run + log2f(l) : -INFINITY;
    }
  }
  __syncthreads();                                        // also: every warp is past its last PV
  // stage O (bf16, [R][512]) in the ring, then write it out with 16-byte stores
  __nv_bfloat16* osm = ring;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int r0 = nt * 8 + 2 * qd;
    const float i0 = inv_s[r0], i1 = inv_s[r0 + 1];
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
      const int col = warp * 64 + mt * 16 + g;
      osm[r0 * DV + col] = __float2bfloat16_rn(acc[mt][nt][0] * i0);
      osm[(r0 + 1) * DV + col] = __float2bfloat16_rn(acc[mt][nt][1] * i1);
      osm[r0 * DV + col + 8] = __float2bfloat16_rn(acc[mt][nt][2] * i0);
      osm[(r0 + 1) * DV + col + 8] = __float2bfloat16_rn(acc[mt][nt][3] * i1);
    }
  }
  __syncthreads();
  store_tile<R, DV, NTHREADS>(p, it, osm, lse_s, rows, row_base, grow0, tid);
}

}  // namespace small
}  // namespace mlav

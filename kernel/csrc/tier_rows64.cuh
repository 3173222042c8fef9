// Tier rows64 (v1c): one CTA = (request, 64-row tile, KV split), the query rows in the MMA's
// M dimension. 8 warps: warp w owns row group r = w & 3 (16 rows) and half c = w >> 2.
//   QK^T: warp (r, c) keeps Q[16 rows, its 288 dims (256 latent + 32 rope)] in registers and
//         computes a partial S over those dims; the two halves swap partials through shared
//         memory (a 64-thread named barrier), so both hold the full S.
//   PV:   warp (r, c) accumulates O[16 rows, 256 output columns] in registers.
// KV tiles of 16 tokens, 4 cp.async stages, XOR-swizzled rows (conflict-free ldmatrix).
// Partials are normalised bf16 O and an fp32 log2-LSE per row; combine.cuh merges them.
#pragma once
#include "verify_common.cuh"

namespace mlav {
namespace rows64 {

constexpr int BM = 64;          // query rows per CTA
constexpr int STAGES = 4;
constexpr int KSTEPS = 18;      // 288 dims / 16 per warp half
constexpr int ONT = 32;         // output n-tiles (8 columns) per warp: 256 columns
constexpr int KV_BYTES = STAGES * TILE_BYTES;
constexpr int Q_BYTES = BM * D * 2;
constexpr int XCHG_BYTES = 2 * NWARPS * 32 * 8 * 4;   // double-buffered partial S swap
constexpr int SMEM_BYTES = (KV_BYTES > Q_BYTES ? KV_BYTES : Q_BYTES) + XCHG_BYTES;
static_assert(SMEM_BYTES <= 99 * 1024, "sm_120 allows at most 99 KB of shared memory per block");

__global__ void __launch_bounds__(NTHREADS, 1) mla_verify_kernel_rows64(const Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  Item it;
  if (!plan_item<BM>(p, reinterpret_cast<int*>(smem), it)) return;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int r = warp & 3, c = warp >> 2;
  const int g = lane >> 2, qd = lane & 3;
  const int H = p.H;
  const int rows = it.T * H;
  const int row_base = it.rt * BM;
  const long long grow0 = (long long)it.qo0 * H + row_base;  // flat [N*H] row of tile row 0
  __nv_bfloat16* kvs = reinterpret_cast<__nv_bfloat16*>(smem);
  float* xbuf = reinterpret_cast<float*>(smem + (KV_BYTES > Q_BYTES ? KV_BYTES : Q_BYTES));

  // ---- Q tile -> shared (zero rows past the request) -> registers (A fragments)
  for (int i = tid; i < BM * CHUNKS; i += NTHREADS) {
    int row = i / CHUNKS, ch = i % CHUNKS;
    bool ok = row_base + row < rows;
    const __nv_bfloat16* src = p.q + (ok ? (grow0 + row) * D + ch * 8 : 0);
    cp_async16(smem_u32(kvs + swz(row, ch) * 8), src, ok ? 16 : 0);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  uint32_t qf[KSTEPS][4];
#pragma unroll
  for (int kk = 0; kk < KSTEPS; ++kk) {
    int dchunk = kk < 16 ? (c * 256 + kk * 16) / 8 : (512 + c * 32 + (kk - 16) * 16) / 8;
    int row = r * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
    int ch = dchunk + (lane >> 4);
    ldsm_x4(smem_u32(kvs + swz(row, ch) * 8), qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
  }
  __syncthreads();   // the Q staging area becomes the KV pipeline

  // rows of this thread: g and g + 8 of the warp's 16 (mask facts are recomputed in the
  // rare edge tiles rather than held in registers through the loop)
  const int L = it.S + it.T;
  // ---- KV producer: thread -> token tid/16 of the tile, chunks (tid%16) + 16 i
  const int ld_tok = tid >> 4, ld_lane = tid & 15;
  const int n_tiles = (it.p1 - it.p0 + BN - 1) / BN;
  auto slot_of = [&](int tile) -> long long {
    int pos = it.p0 + tile * BN + ld_tok;
    if (pos >= it.p1 || pos >= it.S) return -1;
    return p.kv_indices ? ld_index(p.kv_indices, p.kv_indices_64, it.kv0 + pos) : it.kv0 + pos;
  };
  auto load_tile = [&](int tile, int stage, long long slot) {
    int pos = it.p0 + tile * BN + ld_tok;
    const __nv_bfloat16* src = p.kv;
    int bytes = 0;
    if (pos < it.p1) {
      bytes = 16;
      src = pos < it.S ? p.kv + slot * p.kv_stride : p.kext + (long long)(it.qo0 + pos - it.S) * p.ext_stride;
    }
    __nv_bfloat16* dst = kvs + stage * (BN * D);
#pragma unroll
    for (int i = 0; i < 5; ++i) {
      int ch = ld_lane + 16 * i;
      if (ch < CHUNKS) cp_async16(smem_u32(dst + swz(ld_tok, ch) * 8), src + (bytes ? ch * 8 : 0), bytes);
    }
  };

#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < n_tiles) load_tile(st, st, slot_of(st));
    cp_async_commit();
  }
  long long next_slot = slot_of(STAGES - 1);

  float acc[ONT][4];
#pragma unroll
  for (int i = 0; i < ONT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  const float sl2 = p.scale_log2;
  const int partner = warp ^ 4;

  for (int j = 0; j < n_tiles; ++j) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    {
      int jn = j + STAGES - 1;
      if (jn < n_tiles && !(p.mode & MODE_NO_LOADS)) load_tile(jn, jn % STAGES, next_slot);
      cp_async_commit();
      next_slot = slot_of(jn + 1);
    }
    const __nv_bfloat16* tile = kvs + (j % STAGES) * (BN * D);
    if (p.mode & MODE_NO_MATH) continue;

    // partial S = Q[rows, my dims] K[tokens, my dims]^T
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
      int dchunk = kk < 16 ? (c * 256 + kk * 16) / 8 : (512 + c * 32 + (kk - 16) * 16) / 8;
      int tok = ((lane >> 4) << 3) + (lane & 7);
      int ch = dchunk + ((lane >> 3) & 1);
      uint32_t b0, b1, b2, b3;
      ldsm_x4(smem_u32(tile + swz(tok, ch) * 8), b0, b1, b2, b3);
      mma16816(s[0], qf[kk], b0, b1);
      mma16816(s[1], qf[kk], b2, b3);
    }

    // swap partials with the other half (same fragment layout, so lane-for-lane)
    {
      float* mine = xbuf + ((j & 1) * NWARPS + warp) * 256 + lane * 8;
      *reinterpret_cast<float4*>(mine) = make_float4(s[0][0], s[0][1], s[0][2], s[0][3]);
      *reinterpret_cast<float4*>(mine + 4) = make_float4(s[1][0], s[1][1], s[1][2], s[1][3]);
      named_bar(1 + r, 64);
      const float* theirs = xbuf + ((j & 1) * NWARPS + partner) * 256 + lane * 8;
      float4 t0 = *reinterpret_cast<const float4*>(theirs);
      float4 t1 = *reinterpret_cast<const float4*>(theirs + 4);
      // a + b == b + a in IEEE arithmetic: both halves hold bit-identical S
      s[0][0] += t0.x; s[0][1] += t0.y; s[0][2] += t0.z; s[0][3] += t0.w;
      s[1][0] += t1.x; s[1][1] += t1.y; s[1][2] += t1.z; s[1][3] += t1.w;
    }

    // scale to log2 units; mask positions past the split and, in the draft block, the tree
    const int tpos = it.p0 + j * BN;
    const bool edge = tpos + BN > it.S || tpos + BN > it.p1;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = s[n][e] * sl2;
        if (edge) {
          int pos = tpos + n * 8 + qd * 2 + (e & 1);
          int hr = e >> 1;
          bool ok = pos < it.p1;
          if (ok && pos >= it.S) {
            int dj = pos - it.S;
            int lr = row_base + r * 16 + g + 8 * hr;
            if (lr < rows) {
              int t = lr / H;
              ok = p.mask ? __ldg(p.mask + it.m0 + (long long)t * L + it.S + dj) != 0 : dj <= t;
            }
          }
          if (!ok) v = -INFINITY;
        }
        s[n][e] = v;
      }

    // online softmax for rows g (e = 0, 1) and g + 8 (e = 2, 3)
    float m_new[2], scale_old[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = fmaxf(fmaxf(s[0][2 * h], s[0][2 * h + 1]), fmaxf(s[1][2 * h], s[1][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      m_new[h] = fmaxf(m_run[h], mx);
      // a row that has seen only masked keys keeps m = -inf; shift by 0 to avoid inf - inf
      float shift = m_new[h] == -INFINITY ? 0.f : m_new[h];
      scale_old[h] = exp2f(m_run[h] - shift);
      m_run[h] = m_new[h];
      m_new[h] = shift;
    }
    uint32_t pa[4];
    float rs[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      float p0 = exp2f(s[n][0] - m_new[0]), p1 = exp2f(s[n][1] - m_new[0]);
      float p2 = exp2f(s[n][2] - m_new[1]), p3 = exp2f(s[n][3] - m_new[1]);
      rs[0] += p0 + p1;
      rs[1] += p2 + p3;
      pa[2 * n + 0] = pack_bf16(p0, p1);
      pa[2 * n + 1] = pack_bf16(p2, p3);
    }
    l_run[0] = l_run[0] * scale_old[0] + rs[0];
    l_run[1] = l_run[1] * scale_old[1] + rs[1];
    // rescale O only when some row's max moved (rare after the first tiles)
    if (__any_sync(0xffffffffu, scale_old[0] != 1.f || scale_old[1] != 1.f)) {
#pragma unroll
      for (int i = 0; i < ONT; ++i) {
        acc[i][0] *= scale_old[0]; acc[i][1] *= scale_old[0];
        acc[i][2] *= scale_old[1]; acc[i][3] *= scale_old[1];
      }
    }

    // O[16 rows, my 256 columns] += P[16 x 16] V[16 tokens, my columns]
#pragma unroll
    for (int n2 = 0; n2 < ONT / 2; ++n2) {
      int tok = ((lane >> 3) & 1) * 8 + (lane & 7);
      int ch = c * 32 + n2 * 2 + (lane >> 4);
      uint32_t b0, b1, b2, b3;
      ldsm_x4_t(smem_u32(tile + swz(tok, ch) * 8), b0, b1, b2, b3);
      mma16816(acc[2 * n2], pa, b0, b1);
      mma16816(acc[2 * n2 + 1], pa, b2, b3);
    }
  }
  cp_async_wait<0>();

  // ---- epilogue: finish the row sums across the quad, then normalise
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
  }
  float inv[2], lse2[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    inv[h] = l_run[h] > 0.f ? 1.f / l_run[h] : 0.f;
    lse2[h] = l_run[h] > 0.f ? m_run[h] + log2f(l_run[h]) : -INFINITY;
  }
  const bool final_out = it.ns == 1;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int tr = r * 16 + g + 8 * h;       // row within the tile
    if (row_base + tr >= rows) continue;
    const long long grow = grow0 + tr;
    if (final_out) {
      __nv_bfloat16* dst = p.o + grow * DV + c * 256 + qd * 2;
#pragma unroll
      for (int i = 0; i < ONT; ++i)
        *reinterpret_cast<uint32_t*>(dst + i * 8) = pack_bf16(acc[i][2 * h] * inv[h], acc[i][2 * h + 1] * inv[h]);
      if (p.lse && c == 0 && qd == 0) p.lse[grow] = lse2[h] * LN2;
    } else {
      __nv_bfloat16* dst = p.part_o + ((long long)it.part_slot * BM + tr) * DV + c * 256 + qd * 2;
#pragma unroll
      for (int i = 0; i < ONT; ++i)
        *reinterpret_cast<uint32_t*>(dst + i * 8) = pack_bf16(acc[i][2 * h] * inv[h], acc[i][2 * h + 1] * inv[h]);
      if (c == 0 && qd == 0) p.part_lse[(long long)it.part_slot * BM + tr] = lse2[h];
    }
  }
}

}  // namespace rows64
}  // namespace mlav

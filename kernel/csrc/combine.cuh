// Merge of the split partials: O = sum_s 2^(lse_s - M) O_s / sum_s 2^(lse_s - M) per output
// row, for any tier (BMR = the tier's rows per tile, which sets the partial layout).
// One CTA per (flat output row, column slice), one pass over the partials (bf16, L2-resident):
// each thread streams its share of the splits, UNR (4 or 9) in flight, each split's log2-LSE
// loaded with its 8 columns of O, into an online sum rescaled to its running max; the CTA
// adds up the threads' sums at the end. (The first version read every LSE in a pass of its
// own before any O: one more round of L2 latency and two barriers.) Requests of few rows
// (tiers of 8 and 16 rows: T = 1, 2) have few merge CTAs for their many splits, so their rows
// take 8 slices of 64 columns, others 4 of 128. Rows of requests with a single split were written by the
// main kernel, as were those of a tail row tile with one split (rows64d's tail splits: plan_item).
#pragma once
#include "verify_common.cuh"

namespace mlav {

constexpr int CT = 256;               // 8 warps
constexpr int CW = CT / 32;
// FEW: the launch has at most two merge CTAs per SM, so the registers of more loads in flight
// cost no residency: 9 splits in flight (one round of L2 loads for the ~260 splits of a lone
// request of few rows, against 3 to 5 rounds at 4) and 8 slices for 32-row tiles too. With more
// CTAs (many rows, few splits each) the 74 registers it takes against 46 cost more than the
// rounds it saves (T = 16: +1.6 us), so those launches keep 4 (rungs/merge-unr9-slices8-*).
template <int BMR, bool FEW = false>
struct CombineShape {
  static constexpr int SL = BMR <= 16 || (FEW && BMR <= 32) ? 8 : 4;   // column slices per row
  static constexpr int COLS = DV / SL;            // 64 or 128 columns per CTA
  static constexpr int LPS = COLS / 8;            // lanes per split, 16-byte loads: 8 or 16
  static constexpr int GROUPS = CW * (32 / LPS);  // threads sharing a column chunk: 32 or 16
  static constexpr int UNR = FEW ? 9 : 4;         // splits in flight per thread
};

template <int BMR, bool FEW>
__global__ void __launch_bounds__(CT) mla_verify_combine(const Params p) {
  using C = CombineShape<BMR, FEW>;
  __shared__ __align__(16) float acc_s[C::GROUPS * C::COLS];   // [group][column] partial sums
  __shared__ float m_s[C::GROUPS], w_s[C::GROUPS], f_s[C::GROUPS];
  __shared__ float inv_tot;
  __shared__ int req;
  __shared__ long long qo_start;
  const int row = blockIdx.x / C::SL;         // flat row n * H + h
  const int slice = blockIdx.x % C::SL;
  const int n = row / p.H;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  MLAV_TRACE_AT(TRACE_MERGE, 0);
  if (tid == 0) req = -1;
  __syncthreads();
  for (int b = tid; b < p.bs; b += CT) {      // the request holding token n
    long long a = ld_index(p.qo_indptr, p.qo_indptr_64, b), e = ld_index(p.qo_indptr, p.qo_indptr_64, b + 1);
    if (n >= a && n < e) { req = b; qo_start = a; }
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // launched as a programmatic dependent of the verify kernel (sm_90+, PDL): the lines above
  // read only inputs; the table and the partials below are the verify kernel's, so wait for
  // its completion here (without the launch attribute this returns at once)
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  __syncthreads();
  MLAV_TRACE_AT(TRACE_MERGE, 1);
  const int b = req;
  if (b < 0) return;
  const int ns_full = p.table[4 * b + 0], nrt = p.table[4 * b + 1], base = p.table[4 * b + 2];
  const int t3 = p.table[4 * b + 3];
  const int ns_t = t3 < 0 ? -t3 : 0;        // the tail row tile's splits (plan_item's TAIL_E), or 0
  if (ns_full <= 1) return;
  const int local = (int)((n - qo_start) * p.H + row % p.H);
  const int rt = local / BMR, ri = local % BMR;
  // slots: split s of full row tile rt at base + s * nf + rt, then the tail's ns_t at base + nf * ns
  const int nf = nrt - (ns_t > 0);
  const bool tail = rt >= nf;
  const int ns = tail ? ns_t : ns_full;
  if (ns <= 1) return;                      // the verify kernel wrote this row tile's output
  const long long first = tail ? base + (long long)nf * ns_full : base + rt;
  const int stride = tail ? 1 : nf;
  const int g = warp * (32 / C::LPS) + lane / C::LPS;   // this thread's split group
  const int ch = lane % C::LPS;                          // its 16-byte chunk of the slice
  const int col = slice * C::COLS + ch * 8;
  float m = -INFINITY, wsum = 0.f, acc[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i] = 0.f;
  for (int s0 = g; s0 < ns; s0 += C::GROUPS * C::UNR) {
    uint4 raw[C::UNR];
    float l[C::UNR];
#pragma unroll
    for (int u = 0; u < C::UNR; ++u) {
      const int s = s0 + u * C::GROUPS;
      const long long slot = (first + (long long)s * stride) * BMR + ri;
      l[u] = s < ns ? p.part_lse[slot] : -INFINITY;
      raw[u] = s < ns ? *reinterpret_cast<const uint4*>(p.part_o + slot * DV + col) : make_uint4(0u, 0u, 0u, 0u);
    }
    float mb = m;
#pragma unroll
    for (int u = 0; u < C::UNR; ++u) mb = fmaxf(mb, l[u]);
    if (mb == -INFINITY) continue;            // only empty splits so far
    const float r = exp2f(m - mb);            // 0 while m is still -inf
    wsum *= r;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] *= r;
#pragma unroll
    for (int u = 0; u < C::UNR; ++u) {
      if (l[u] > -INFINITY) {                 // an empty split's partial is never read (it may be NaN)
        const float wt = exp2f(l[u] - mb);
        const uint32_t w4[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 v = unpack_bf16(w4[i]);
          acc[2 * i] += wt * v.x;
          acc[2 * i + 1] += wt * v.y;
        }
        wsum += wt;
      }
    }
    m = mb;
  }
  MLAV_TRACE_AT(TRACE_MERGE, 2);
  // the CTA's sum: warp 0 turns the groups' maxima into factors, then one thread per column
  // adds the groups' columns (independent loads, no serial chain per output chunk)
  float4* mine = reinterpret_cast<float4*>(acc_s + g * C::COLS + ch * 8);
  mine[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  mine[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
  if (ch == 0) { m_s[g] = m; w_s[g] = wsum; }
  __syncthreads();
  if (warp == 0) {
    const float mg = lane < C::GROUPS ? m_s[lane] : -INFINITY;
    const float M = warp_max(mg);
    const float shift = M == -INFINITY ? 0.f : M;
    const float f = mg == -INFINITY ? 0.f : exp2f(mg - shift);
    float tot = lane < C::GROUPS ? f * w_s[lane] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) tot += __shfl_xor_sync(0xffffffffu, tot, o);
    if (lane < C::GROUPS) f_s[lane] = f;
    if (lane == 0) {
      inv_tot = tot > 0.f ? 1.f / tot : 0.f;
      if (p.lse && slice == 0) p.lse[row] = tot > 0.f ? (shift + log2f(tot)) * LN2 : -INFINITY;
    }
  }
  __syncthreads();
  if (tid < C::COLS) {
    float a = 0.f;
#pragma unroll 8
    for (int i = 0; i < C::GROUPS; ++i) a += f_s[i] * acc_s[i * C::COLS + tid];
    p.o[(long long)row * DV + slice * C::COLS + tid] = __float2bfloat16_rn(a * inv_tot);
  }
  MLAV_TRACE_AT(TRACE_MERGE, 3);
}

}  // namespace mlav

// Merge of the split partials: O = sum_s 2^(lse_s - M) O_s / sum_s 2^(lse_s - M) per output
// row, for any tier (BMR = the tier's rows per tile, which sets the partial layout).
// One CTA per (flat output row, 128-column slice): 4 slices per row, so even the centre
// point's 64 rows give 256 CTAs streaming the bf16 partials (8.5 MB, L2-resident) in
// parallel; 8 warps x 8 loads keep 64 splits of a slice in flight, so a row of T = 1 (130
// splits) takes three rounds of L2 latency. Rows of requests with a single split were
// written by the main kernel.
#pragma once
#include "verify_common.cuh"

namespace mlav {

constexpr int CT = 256;               // 8 warps
constexpr int CW = CT / 32;
constexpr int SLICES = 4;             // 128 columns each; a lane holds 4 columns
constexpr int MAX_SPLITS_SMEM = 1024;   // > the 4 x SMs items a launch can have

template <int BMR>
__global__ void __launch_bounds__(CT) mla_verify_combine(const Params p) {
  __shared__ float w[MAX_SPLITS_SMEM];
  __shared__ float red[CW];
  __shared__ float4 part[CW][32];
  __shared__ int req;
  __shared__ long long qo_start;
  const int row = blockIdx.x / SLICES;        // flat row n * H + h
  const int slice = blockIdx.x % SLICES;
  const int n = row / p.H;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
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
  const int b = req;
  if (b < 0) return;
  const int ns = p.table[4 * b + 0], nrt = p.table[4 * b + 1], base = p.table[4 * b + 2];
  if (ns <= 1) return;
  const int local = (int)((n - qo_start) * p.H + row % p.H);
  const int rt = local / BMR, ri = local % BMR;
  // ns <= part_cap <= 4 x SMs < MAX_SPLITS_SMEM: every split's log2-LSE, then weight, in smem
  float M = -INFINITY;
  for (int s = tid; s < ns; s += CT) {
    float v = p.part_lse[(long long)(base + s * nrt + rt) * BMR + ri];
    w[s] = v;
    M = fmaxf(M, v);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
  if (lane == 0) red[warp] = M;
  __syncthreads();
  M = red[0];
#pragma unroll
  for (int i = 1; i < CW; ++i) M = fmaxf(M, red[i]);
  const float shift = M == -INFINITY ? 0.f : M;
  for (int s = tid; s < ns; s += CT) w[s] = exp2f(w[s] - shift);
  __syncthreads();
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  float wsum = 0.f;
  const int col = slice * 128 + lane * 4;
  // UNR loads in flight per warp before any is used: a row's splits stream in parallel
  constexpr int UNR = 8;
  for (int s0 = warp; s0 < ns; s0 += CW * UNR) {
    uint2 raw[UNR];
    float wt[UNR];
#pragma unroll
    for (int u = 0; u < UNR; ++u) {
      const int s = s0 + u * CW;
      wt[u] = s < ns ? w[s] : 0.f;
      raw[u] = s < ns ? *reinterpret_cast<const uint2*>(p.part_o + ((base + (long long)s * nrt + rt) * BMR + ri) * DV + col)
                      : make_uint2(0u, 0u);
    }
#pragma unroll
    for (int u = 0; u < UNR; ++u) {
      if (wt[u] > 0.f) {      // an empty split's partial is 0 * anything: never read it as NaN
        float2 v0 = unpack_bf16(raw[u].x), v1 = unpack_bf16(raw[u].y);
        acc.x += wt[u] * v0.x; acc.y += wt[u] * v0.y; acc.z += wt[u] * v1.x; acc.w += wt[u] * v1.y;
      }
      wsum += wt[u];
    }
  }
  __syncthreads();                            // red[] is reused for the weight sums
  if (lane == 0) red[warp] = wsum;
  part[warp][lane] = acc;
  __syncthreads();
  if (tid < 32) {
    float tot = 0.f;
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int i = 0; i < CW; ++i) {
      float4 v = part[i][tid];
      a.x += v.x; a.y += v.y; a.z += v.z; a.w += v.w;
      tot += red[i];
    }
    const float inv = tot > 0.f ? 1.f / tot : 0.f;
    uint2 out = make_uint2(pack_bf16(a.x * inv, a.y * inv), pack_bf16(a.z * inv, a.w * inv));
    *reinterpret_cast<uint2*>(p.o + (long long)row * DV + col) = out;
    if (p.lse && slice == 0 && tid == 0) p.lse[row] = tot > 0.f ? (shift + log2f(tot)) * LN2 : -INFINITY;
  }
}

}  // namespace mlav

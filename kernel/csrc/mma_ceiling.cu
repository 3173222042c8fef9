// The mma.sync bf16 ceiling: register-resident m16n8k16 MMAs (fp32 accumulate) with eight
// independent accumulators per warp, so the roofline's compute term is measured on the same
// card, with the same instruction the verify kernel uses.
#include <cuda_runtime.h>
#include <stdint.h>

#include "mma_sync.cuh"

namespace {
constexpr int CHAINS = 8;


// operands: random non-zero bf16 pairs, [threads_total][4 + 2 * CHAINS] uint32
__global__ void mma_ceiling_kernel(const uint32_t* operands, float* out, int iters) {
  const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t* src = operands + t * (4 + 2 * CHAINS);
  uint32_t a[4], b[CHAINS][2];
#pragma unroll
  for (int i = 0; i < 4; ++i) a[i] = src[i];
#pragma unroll
  for (int k = 0; k < CHAINS; ++k) { b[k][0] = src[4 + 2 * k]; b[k][1] = src[5 + 2 * k]; }
  float acc[CHAINS][4] = {};
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) mma16816(acc[k], a, b[k][0], b[k][1]);
  }
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < CHAINS; ++k) s += acc[k][0] + acc[k][1] + acc[k][2] + acc[k][3];
  out[t] = s;
}
}  // namespace

extern "C" {
// FLOPs of one launch: blocks * threads / 32 warps * iters * CHAINS * (2 * 16 * 8 * 16).
int mma_ceiling_operand_words() { return 4 + 2 * CHAINS; }
int mma_ceiling_chains() { return CHAINS; }
int mma_ceiling_launch(const void* operands, float* out, int iters, int blocks, int threads, void* stream) {
  mma_ceiling_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint32_t*>(operands), out, iters);
  return (int)cudaGetLastError();
}
}

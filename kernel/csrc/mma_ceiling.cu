// The mma.sync bf16 ceiling: register-resident m16n8k16 MMAs (fp32 accumulate) with eight
// independent accumulators per warp, so the roofline's compute term is measured on the same
// card, with the same instruction the verify kernel uses. The e4m3 launch times m16n8k32 with
// e4m3 inputs instead (sm_89 and newer; the same registers hold twice the k): what an fp8 pool
// read by fp8 MMAs, without the e4m3 -> f16 converts, could reach.
#include <cuda_runtime.h>
#include <stdint.h>

#include "mma_sync.cuh"

namespace {
constexpr int CHAINS = 8;


// m16n8k32, e4m3 in, fp32 accumulate; before sm_89 (no such instruction) it leaves c unchanged and
// the launch writes NaN, never a rate
__device__ __forceinline__ void mma16832_e4m3(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
               "{%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
constexpr bool HAS_E4M3_MMA =
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
    false;
#else
    true;
#endif

// operands: random non-zero bf16 pairs (E4M3: four e4m3 values a word), [threads_total][4 + 2 * CHAINS] uint32
template <bool E4M3>
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
    for (int k = 0; k < CHAINS; ++k) {
      if constexpr (E4M3) mma16832_e4m3(acc[k], a, b[k][0], b[k][1]);
      else mma16816(acc[k], a, b[k][0], b[k][1]);
    }
  }
  if (E4M3 && !HAS_E4M3_MMA) {
    out[t] = __int_as_float(0x7fc00000);
    return;
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
  mma_ceiling_kernel<false><<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint32_t*>(operands), out, iters);
  return (int)cudaGetLastError();
}
// FLOPs: as above with (2 * 16 * 8 * 32) an MMA; out holds NaN where the device has no e4m3 MMA
int mma_ceiling_e4m3_launch(const void* operands, float* out, int iters, int blocks, int threads, void* stream) {
  mma_ceiling_kernel<true><<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint32_t*>(operands), out, iters);
  return (int)cudaGetLastError();
}
}

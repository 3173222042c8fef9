// mma.sync m16n8k16's rate by the form of its accumulation, register-resident, fp32 accumulate:
// why the ceiling kernel's bf16 chains reach ~640 TFLOP/s on the H200 while the e4m3 launch beside
// it, which ptxas emulates on sm_90 with two f16 HMMAs from a zero accumulator and FADDs, reached
// ~990 (kernel/bench/mma_forms.py, kernel/NOTES.md). Built and checked by mma_forms.py, apart from
// the verify library (its source hash stays the measured kernel's).
//   form 0 bf16 chain:  acc[k] = A B[k] + acc[k], CHAINS accumulators a warp (the ceiling kernel)
//   form 1 f16 chain:   the same in f16
//   form 2 bf16 fresh:  d = A B[k] + 0, then acc[k] += d by four FADDs (the emulation's shape)
//   form 3 f16 fresh:   the same in f16
//   form 4 bf16 chain with 2 CHAINS accumulators a warp: whether the chains' latency is the limit
//   form 5 e4m3 m16n8k32 chain (sm_89 and newer; what ptxas makes of it on sm_90 is the question)
#include <cuda_runtime.h>
#include <stdint.h>

#include "../csrc/mma_sync.cuh"

namespace {
constexpr int CHAINS = 8;
constexpr int WORDS = 4 + 2 * 2 * CHAINS;   // A, then B of up to 2 CHAINS accumulators

template <int KIND>   // 0 bf16, 1 f16 (the verify kernels' mma16816), 2 e4m3
__device__ __forceinline__ void mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  if constexpr (KIND < 2) {
    mma16816<KIND == 1>(c, a, b0, b1);
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
  }
}

// operands: [threads_total][WORDS] uint32, random finite values; out[thread]: the sums (kept live)
template <int KIND, bool FRESH, int N>
__global__ void mma_forms_kernel(const uint32_t* operands, float* out, int iters) {
  const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t* src = operands + t * WORDS;
  uint32_t a[4], b[N][2];
#pragma unroll
  for (int i = 0; i < 4; ++i) a[i] = src[i];
#pragma unroll
  for (int k = 0; k < N; ++k) { b[k][0] = src[4 + 2 * k]; b[k][1] = src[5 + 2 * k]; }
  float acc[N][4] = {};
  for (int i = 0; i < iters; ++i) {
    // A's low bits follow the iteration (values stay in their range): a fresh MMA is otherwise
    // the same instruction every iteration, and ptxas issued one for four unrolled iterations
    const uint32_t ai[4] = {a[0] ^ (uint32_t)(i & 7), a[1], a[2], a[3]};
#pragma unroll
    for (int k = 0; k < N; ++k) {
      if constexpr (FRESH) {
        float d[4] = {0.f, 0.f, 0.f, 0.f};
        mma<KIND>(d, ai, b[k][0], b[k][1]);
        acc[k][0] += d[0]; acc[k][1] += d[1]; acc[k][2] += d[2]; acc[k][3] += d[3];
      } else {
        mma<KIND>(acc[k], ai, b[k][0], b[k][1]);
      }
    }
  }
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < N; ++k) s += acc[k][0] + acc[k][1] + acc[k][2] + acc[k][3];
  out[t] = s;
}
}  // namespace

extern "C" {
int mma_forms_count() { return 6; }
int mma_forms_words() { return WORDS; }
// MMAs a warp issues per loop iteration, and the MMA's k (16, or 32 for e4m3): FLOPs of a launch
// are blocks * threads / 32 * iters * mmas * 2 * 16 * 8 * k
int mma_forms_mmas(int form) { return form == 4 ? 2 * CHAINS : CHAINS; }
int mma_forms_k(int form) { return form == 5 ? 32 : 16; }
// -1: no such form; -2: e4m3 before sm_89 (the launch would time nothing); else a cudaError_t
int mma_forms_launch(int form, const void* operands, float* out, int iters, int blocks, int threads, void* stream) {
  const auto* o = static_cast<const uint32_t*>(operands);
  const auto st = static_cast<cudaStream_t>(stream);
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  switch (form) {
    case 0: mma_forms_kernel<0, false, CHAINS><<<blocks, threads, 0, st>>>(o, out, iters); break;
    case 1: mma_forms_kernel<1, false, CHAINS><<<blocks, threads, 0, st>>>(o, out, iters); break;
    case 2: mma_forms_kernel<0, true, CHAINS><<<blocks, threads, 0, st>>>(o, out, iters); break;
    case 3: mma_forms_kernel<1, true, CHAINS><<<blocks, threads, 0, st>>>(o, out, iters); break;
    case 4: mma_forms_kernel<0, false, 2 * CHAINS><<<blocks, threads, 0, st>>>(o, out, iters); break;
    case 5:
      if (major * 10 + minor < 89) return -2;
      mma_forms_kernel<2, false, CHAINS><<<blocks, threads, 0, st>>>(o, out, iters);
      break;
    default: return -1;
  }
  return (int)cudaGetLastError();
}
}

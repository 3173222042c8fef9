// Probe: does ldmatrix traffic overlap mma.sync, or do the two share a limit? Each warp runs
// the mma.sync ceiling's eight independent m16n8k16 chains and, every `per` MMAs, one
// ldmatrix.x4 from shared memory (conflict-free rows) whose registers become the B operands
// of the chains DIST and DIST + 1 MMAs later (so the loads are live; DIST sets how much of
// their latency the MMAs in between cover). The
// verify kernel's design D tiers issue one ldmatrix.x4 per 2-4 MMAs plus partial-S and P
// traffic; this measures the MMA rate at those ratios with nothing else in the loop.
#include <cuda_runtime.h>
#include <stdint.h>

#include "mma_sync.cuh"

namespace {
constexpr int CHAINS = 8;
constexpr int SMEM_ROWS = 512;   // 16-byte rows: 8 KB, read round-robin

__device__ __forceinline__ void ldsm4(uint32_t addr, uint32_t& a, uint32_t& b, uint32_t& c, uint32_t& d) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(addr));
}

// PER = MMAs per ldmatrix.x4 (0: none); DIST = MMAs between a load and its first use
template <int PER, int DIST>
__global__ void mma_ldsm_probe_kernel(float* out, int iters) {
  __shared__ __align__(16) uint32_t rows[SMEM_ROWS * 4];
  for (int i = threadIdx.x; i < SMEM_ROWS * 4; i += blockDim.x)
    rows[i] = 0x3c003c00u ^ (uint32_t)(i * 2654435761u & 0x00ff00ffu);   // bf16 pairs near 1
  __syncthreads();
  const int lane = threadIdx.x & 31;
  uint32_t a[4] = {0x3c003c01u, 0x3c013c00u, 0x3c003c02u, 0x3c023c00u};
  uint32_t b[CHAINS][2];
#pragma unroll
  for (int k = 0; k < CHAINS; ++k) { b[k][0] = 0x3c003c00u + k; b[k][1] = 0x3c003c00u + 2 * k; }
  float acc[CHAINS][4] = {};
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(rows));
  int row = (threadIdx.x >> 5) * 32 + lane;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) {
      if (PER > 0 && k % PER == 0) {
        // refill the B operands of chains k+DIST and k+DIST+1
        const int j = (k + DIST) % CHAINS;
        ldsm4(base + (row % SMEM_ROWS) * 16, b[j][0], b[j][1], b[(j + 1) % CHAINS][0], b[(j + 1) % CHAINS][1]);
        row += 32;
      }
      mma16816(acc[k], a, b[k][0], b[k][1]);
    }
  }
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < CHAINS; ++k) s += acc[k][0] + acc[k][1] + acc[k][2] + acc[k][3];
  out[(long long)blockIdx.x * blockDim.x + threadIdx.x] = s;
}
}  // namespace

extern "C" {
// MMAs per launch: blocks * threads / 32 * iters * 8 (each 2 * 16 * 8 * 16 FLOP). dist: 1, 4 or 7.
int mma_ldsm_probe_launch(float* out, int iters, int per, int dist, int blocks, int threads, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
#define PROBE(P, DST) \
  if (per == P && dist == DST) { mma_ldsm_probe_kernel<P, DST><<<blocks, threads, 0, st>>>(out, iters); return (int)cudaGetLastError(); }
  PROBE(0, 4)
  PROBE(8, 1) PROBE(8, 4) PROBE(8, 7)
  PROBE(4, 1) PROBE(4, 4) PROBE(4, 7)
  PROBE(2, 1) PROBE(2, 4) PROBE(2, 7)
  PROBE(1, 1) PROBE(1, 4) PROBE(1, 7)
#undef PROBE
  return (int)cudaErrorInvalidValue;
}
}

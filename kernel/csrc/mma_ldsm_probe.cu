// Probe: does ldmatrix traffic overlap mma.sync, or do the two share a limit? Each warp runs
// 24 m16n8k16 MMAs per loop iteration into DEP independent accumulators (MMA i accumulates into
// chain i % DEP, so it reads the result of the MMA DEP before it), and, for PER > 0, one
// ldmatrix.x4 per PER MMAs. The x4's four registers are two B fragments; the PER MMAs of a group
// use them with the two A fragments (as the verify kernel's QK and PV use one x4 for 2 m-tiles x 2
// n-tiles). Three rotating B buffers: group g's MMAs read buffer g % 3 while its ldmatrix fills
// buffer (g + 2) % 3, so every load is first used 2 PER MMAs after it issues (with one buffer
// less, the load for the next group would wait on the group that reads it).
// Every operand comes from memory at run time (A and the no-load variant's B from global memory,
// the loaded table from global memory through shared memory), so the compiler cannot fold them
// (the first probe's never-reloaded operands were constants, and ptxas regrouped the chains
// around them: kernel/NOTES.md). Operands alone do not pin the schedule: ptxas still moved loads
// next to their first use (across the loop's back edge: no MMA in between) and reordered MMAs of
// different chains, on sm_90 and sm_120 alike, and a never-taken exit after each MMA was not
// enough either (ptxas renamed accumulators and hoisted later MMAs above it). So after every MMA
// a branch that is never taken (`it == stop`, stop = -1, so it cannot be hoisted out of the loop)
// leads to a loop that reads every B buffer and adds to every accumulator, then rejoins: a later
// MMA cannot be hoisted above it (its accumulator depends on that path), and no MMA or load can
// sink below it (the path reads them). The steady state is then the source order, at the cost of
// one BRA (and a NOP) per MMA, the same in every variant, the no-load ones included, so they
// measure it too. kernel/bench/probe_sass.py checks the machine code of every variant (HMMA and
// LDSM per iteration, the distance between an HMMA and the HMMA whose accumulator it reads, the
// MMAs between a load and its first use) before a figure is cited.
#include <cuda_runtime.h>
#include <stdint.h>

#include "mma_sync.cuh"

namespace {
constexpr int BODY = 24;            // MMAs per loop iteration: a multiple of every PER, DEP and of 3 groups
constexpr int NA = 2;               // A fragments per warp
constexpr int BLOCK = 512;          // bytes one ldmatrix.x4 reads: 32 rows of 16 bytes, conflict-free
constexpr int WRAP = 16384;         // the read offset cycles over this many bytes
constexpr int TABLE = WRAP + (BODY + 2) * BLOCK;   // + the immediate offsets of one iteration's loads

__device__ __forceinline__ void ldsm4(uint32_t addr, uint32_t* r) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// operands: [threads][4 NA + 12] uint32 (A fragments, then the no-load variant's three B
// buffers); table: TABLE / 4 uint32 copied into shared memory; out: [threads] (keeps the MMAs live).
template <int PER, int DEP>
__global__ void __launch_bounds__(256) mma_ldsm_probe_kernel(const uint32_t* operands, const uint32_t* table,
                                                             float* out, int iters, int stop) {
  static_assert(BODY % DEP == 0 && (PER == 0 || (BODY % PER == 0 && (BODY / PER) % 3 == 0)),
                "an iteration must hold whole chains and whole rotations of the three buffers");
  constexpr int G = PER ? PER : 8;  // MMAs per group (the no-load variant rotates its buffers too)
  __shared__ __align__(128) uint32_t rows[TABLE / 4];
  for (int i = threadIdx.x; i < TABLE / 4; i += blockDim.x) rows[i] = table[i];
  __syncthreads();
  const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t* src = operands + t * (4 * NA + 12);
  uint32_t a[NA][4], b[3][4];
#pragma unroll
  for (int m = 0; m < NA; ++m)
#pragma unroll
    for (int i = 0; i < 4; ++i) a[m][i] = src[4 * m + i];
#pragma unroll
  for (int k = 0; k < 3; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) b[k][i] = PER ? 0u : src[4 * NA + 4 * k + i];
  float acc[DEP][4];
#pragma unroll
  for (int c = 0; c < DEP; ++c) acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0.f;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(rows)) + (threadIdx.x & 31) * 16;
  uint32_t off = 0;
  if (PER) {                        // groups 0 and 1
    ldsm4(base, b[0]);
    ldsm4(base + BLOCK, b[1]);
  }
#pragma unroll 1
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < BODY; ++i) {
      const int g = i / G, q = i % G;
      if (PER && q == 0) ldsm4(base + off + (g + 2) * BLOCK, b[(g + 2) % 3]);   // group g + 2
      const int h = G >= 2 ? q & 1 : g & 1;           // which B fragment of the x4
      const uint32_t* bb = b[g % 3];
      mma16816(acc[i % DEP], a[(G >= 2 ? q >> 1 : 0) % NA], bb[2 * h], bb[2 * h + 1]);
      if (it == stop) {               // never taken (see the top): pins this MMA and the loads before it
        const float e = __uint_as_float(b[0][0] ^ b[1][0] ^ b[2][0]);
#pragma unroll 1
        for (int k = 0; k < iters; ++k)
#pragma unroll
          for (int c = 0; c < DEP; ++c) acc[c][0] += e;
      }
    }
    if (PER) off = (off + BODY / G * BLOCK) & (WRAP - 1);
  }
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < DEP; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  out[t] = s;
}
}  // namespace

extern "C" {
// The probe's buffer sizes: uint32 words of operands per thread, of the shared-memory table.
int mma_ldsm_probe_operand_words() { return 4 * NA + 12; }
int mma_ldsm_probe_table_words() { return TABLE / 4; }
int mma_ldsm_probe_body() { return BODY; }
// One launch: blocks * threads / 32 warps * iters * BODY MMAs of 2 * 16 * 8 * 16 FLOP each
// (threads <= 256, a multiple of 32; operands and table as the two functions above size them).
// per: MMAs per ldmatrix.x4 (0: none; 8, 4, 2, 1); dep: accumulator chains (8, 4, 2; 1 with per 0).
int mma_ldsm_probe_launch(const void* operands, const void* table, float* out, int iters, int per, int dep,
                          int blocks, int threads, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const uint32_t* ops = static_cast<const uint32_t*>(operands);
  const uint32_t* tab = static_cast<const uint32_t*>(table);
#define PROBE(P, C) \
  if (per == P && dep == C) { mma_ldsm_probe_kernel<P, C><<<blocks, threads, 0, st>>>(ops, tab, out, iters, -1); return (int)cudaGetLastError(); }
  PROBE(0, 8) PROBE(0, 4) PROBE(0, 2) PROBE(0, 1)
  PROBE(8, 8) PROBE(8, 4) PROBE(8, 2)
  PROBE(4, 8) PROBE(4, 4) PROBE(4, 2)
  PROBE(2, 8) PROBE(2, 4) PROBE(2, 2)
  PROBE(1, 8) PROBE(1, 4) PROBE(1, 2)
#undef PROBE
  return (int)cudaErrorInvalidValue;
}
}

// Minimal reproductions of rowsd's epilogue (tier_rowsd.cuh, store_tile in verify_common.cuh), for
// compute-sanitizer's racecheck: it reports hazards between the epilogue's STS of the staged O and
// store_tile's LDS.128 of it, across a __syncthreads. Each variant adds one ingredient of the
// kernel, so the first variant racecheck flags names what the tool trips on:
//   plain        STS of the staging, __syncthreads, LDS.128 of other threads' data, global stores
//   named        + a loop before it: CTA barrier (aligned) at the top, each 128-thread half's own
//                  shared-memory traffic ordered by bar.sync 1+half, 128 (the kernel on main)
//   named_split  + each half runs its loop in code of its own, the loop-top CTA barrier an
//                  unaligned barrier.sync 0 (the kernel as on the rung, 7315fe3)
//   cpasync      plain, with the staging bytes first filled by cp.async.cg (some zero-filled) from
//                  the other half, cp.async.wait_group 0, __syncthreads
//   full         named_split with the ring filled by cp.async through the loop, as the kernel does
//                  (half 1 copies, 9 copies a thread a stage, two stages ahead of the reads)
// and what the kernel has beside them (the five above were clean under racecheck on an H200):
//   uneven       named, with half 0 passing three half barriers a step and half 1 one: the halves
//                  reach the CTA barriers having passed different numbers of named ones, as in
//                  rowsd (half 0: 2 a tile; half 1: 1 a tile after the first, 2 at its tail)
//   uneven_split named_split with the uneven counts
//   waves        full in 4x the CTAs (several waves: a CTA's shared memory is a finished one's), a
//                  quarter of them leaving after a planning barrier, as plan_item's surplus CTAs do
// On an H200 (compute-sanitizer 2025.3.1) uneven and uneven_split alone are flagged, with the
// kernel's signature: writes by half 0, reads by half 1, outputs exact.
// Standalone (no project headers):  nvcc -O3 -arch=sm_90 -lineinfo -o race_probe race_probe.cu
//   ./race_probe [VARIANT]   runs every variant, or one; exit 1 if an output is wrong, 2 on an error
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_runtime.h>

namespace {

constexpr int THREADS = 256, ROWS = 64, PAIRS = 256;     // O tile: 64 rows of 512 bf16 = 256 pairs
constexpr int OSTRIDE_W = 260;                            // a staged row: 520 bf16, as OSTRIDE = DV + 8
constexpr int ROW_BYTES = OSTRIDE_W * 4;                  // 1040 = 65 16-byte chunks
constexpr int STAGE_BYTES = 18432, STAGES = 4;            // the bf16 ring: 4 stages of 18 KB
constexpr int RING_BYTES = STAGE_BYTES * STAGES;          // 73,728: the staging (66,560) reuses it
constexpr int STAGE_CHUNKS = STAGE_BYTES / 16;            // 1152: 9 per thread of the copying half
constexpr int STAGING_CHUNKS = ROWS * ROW_BYTES / 16;     // 4160
constexpr int ITERS = 8, AHEAD = 2;                       // loop steps; stages in flight ahead
constexpr int SCRATCH_OFF = RING_BYTES;                   // each half's 128 words, outside the ring
constexpr int SMEM = RING_BYTES + 2 * 128 * 4;            // 74,752 bytes: above the 48 KB default
constexpr int BLOCKS = 264;                               // one wave on the H200's 132 SMs (3 CTAs fit each)
constexpr int WAVES = 4;                                  // waves: 4x the CTAs, about 2.7 waves
constexpr int SRC_BYTES = ITERS * STAGE_BYTES;            // cp.async source per CTA (one-shot uses less)

static_assert(ROWS * ROW_BYTES <= RING_BYTES, "the staging reuses the ring");

__host__ __device__ inline uint32_t mix(uint32_t x) {
  x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
  return x;
}
// the halves fold differently, so that the split loops cannot be one code (different PCs)
__host__ __device__ inline uint32_t fold(uint32_t acc, uint32_t v, int half, int k) {
  return half == 0 ? acc * 31u + v : (acc ^ v) + (uint32_t)k * 0x9e3779b9u;
}
__host__ __device__ inline uint32_t loop_word(uint32_t seed, int blk, int tid, int k) {
  return mix(seed ^ (uint32_t)((blk * THREADS + tid) * ITERS + k));
}
// waves: the CTAs that plan no item and leave
__host__ __device__ inline bool leaves(int blk) { return blk % 4 == 3; }
// a cp.async of src-size 0 zero-fills: the kernel's copies past a split's end do that
__host__ __device__ inline bool zero_chunk(int c) { return c % 5 == 4; }
// the ring chunk thread tid reads at loop step k (full) or once (cpasync): another thread's copy
__host__ __device__ inline int read_chunk(int tid, int k, int n) { return (tid * 7 + 3 + k * 131) % n; }

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
__device__ __forceinline__ void named_bar(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void cta_bar_unaligned() { asm volatile("barrier.sync 0;\n" ::: "memory"); }

__device__ __forceinline__ uint32_t fold4(uint32_t acc, uint4 v, int half, int k) {
  acc = fold(acc, v.x, half, k); acc = fold(acc, v.y, half, k);
  acc = fold(acc, v.z, half, k); return fold(acc, v.w, half, k);
}

// one stage of the pipelined ring (full): tile t into stage t % STAGES, copied by half 1 alone
__device__ __forceinline__ void copy_tile(uint8_t* smem, const uint8_t* src, int t, int lt) {
#pragma unroll
  for (int i = 0; i < STAGE_CHUNKS / 128; ++i) {
    const int c = lt + 128 * i;
    cp_async16(smem_u32(smem + (t % STAGES) * STAGE_BYTES + c * 16), src + t * STAGE_BYTES + c * 16,
               zero_chunk(c) ? 0 : 16);
  }
}

// the ingredients, one bit each
constexpr int NAMED = 1, SPLIT = 2, CPASYNC = 4, UNEVEN = 8, EXITS = 16;

// one loop step of one half: [cp.async ring: the wait, CTA barrier, the next copies, a ring read],
// then the half's scratch: write, bar.sync 1+half, read a neighbour's word; with UNEVEN half 0
// does that twice, a half barrier between (its reads before the rewrite): 3 half barriers to 1
template <int F>
__device__ __forceinline__ uint32_t step(uint8_t* smem, const uint8_t* src, uint32_t seed, int half, int k,
                                         uint32_t acc) {
  const int tid = threadIdx.x, lt = tid & 127;
  if (F & CPASYNC) cp_async_wait<AHEAD - 1>();            // tile k landed (this thread's copies)
  if (F & SPLIT) cta_bar_unaligned(); else __syncthreads();
  if (F & CPASYNC) {
    if (half == 1 && k + AHEAD < ITERS) copy_tile(smem, src, k + AHEAD, lt);
    cp_async_commit();
    const int c = read_chunk(tid, k, STAGE_CHUNKS);
    acc = fold4(acc, *reinterpret_cast<const uint4*>(smem + (k % STAGES) * STAGE_BYTES + c * 16), half, k);
  }
  uint32_t* scratch = reinterpret_cast<uint32_t*>(smem + SCRATCH_OFF) + half * 128;
  scratch[lt] = loop_word(seed, blockIdx.x, tid, k);
  named_bar(1 + half, 128);
  acc = fold(acc, scratch[(lt + 1 + k) & 127], half, k);
  if ((F & UNEVEN) && half == 0) {
    named_bar(1 + half, 128);
    scratch[lt] = loop_word(seed, blockIdx.x, tid, k + ITERS);
    named_bar(1 + half, 128);
    acc = fold(acc, scratch[(lt + 2 + k) & 127], half, k);
  }
  return acc;
}
// inlined like the kernel's lambdas; the halves' folds differ, so the two loops stay two
template <int F, int HALF>
__device__ __forceinline__ uint32_t half_loop(uint8_t* smem, const uint8_t* src, uint32_t seed) {
  uint32_t acc = 0;
#pragma unroll 1   // a loop, as the kernel's (its trip count is the request's): one PC per barrier
  for (int k = 0; k < ITERS; ++k) acc = step<F>(smem, src, seed, HALF, k, acc);
  return acc;
}

template <int F>
__device__ __forceinline__ void body(const uint32_t* __restrict__ in, const uint8_t* __restrict__ src,
                                     uint32_t* __restrict__ out, uint32_t* __restrict__ aux, uint32_t seed) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int half = warp >> 2, quarter = warp & 3, g = lane >> 2, qd = lane & 3;
  const int blk = blockIdx.x;
  src += (size_t)blk * SRC_BYTES;
  uint32_t acc = 0;

  if (F & EXITS) {               // plan_item's shape: scratch outside the ring, a barrier, some CTAs leave
    uint32_t* plan = reinterpret_cast<uint32_t*>(smem + SCRATCH_OFF);
    if (tid == 0) plan[0] = leaves(blk);
    __syncthreads();
    const bool leave = plan[0] != 0;
    __syncthreads();         // the scratch is reused next
    if (leave) return;
  }

  if ((F & CPASYNC) && !(F & NAMED)) {   // one-shot: the other half copies each row's chunks, padding included
    for (int c = (tid & 127) + (1 - half) * (STAGING_CHUNKS / 2); c < (2 - half) * (STAGING_CHUNKS / 2); c += 128)
      cp_async16(smem_u32(smem + c * 16), src + c * 16, zero_chunk(c) ? 0 : 16);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    const int c = read_chunk(tid, 0, STAGING_CHUNKS);
    acc = fold4(acc, *reinterpret_cast<const uint4*>(smem + c * 16), half, 0);
  }
  if (F & NAMED) {
    if (F & CPASYNC) {           // prologue: tiles 0 .. AHEAD-1, one group each, as the kernel's
#pragma unroll
      for (int t = 0; t < AHEAD; ++t) {
        if (half == 1) copy_tile(smem, src, t, tid & 127);
        cp_async_commit();
      }
    }
    if (F & SPLIT) {         // the two halves' loops at instructions of their own
      acc = half == 0 ? half_loop<F, 0>(smem, src, seed) : half_loop<F, 1>(smem, src, seed);
    } else {
#pragma unroll 1
      for (int k = 0; k < ITERS; ++k) acc = step<F>(smem, src, seed, half, k, acc);
    }
    if (F & CPASYNC) cp_async_wait<0>();
  }

  // ---- the epilogue as in rowsd_body: barrier, STS of bf16 pairs, barrier, LDS.128 -> global
  __syncthreads();
  uint32_t* osm = reinterpret_cast<uint32_t*>(smem);
  const uint32_t* tile = in + (size_t)blk * ROWS * PAIRS;
  const int col0 = quarter * 16 + 2 * qd;
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const int r0 = half * 32 + m * 16 + g;
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      const int pc = ((n >> 1) * 64 + (n & 1) * 8 + col0) / 2;   // the pair at the kernel's column
      osm[r0 * OSTRIDE_W + pc] = tile[r0 * PAIRS + pc];
      osm[(r0 + 8) * OSTRIDE_W + pc] = tile[(r0 + 8) * PAIRS + pc];
    }
  }
  __syncthreads();
  uint4* o = reinterpret_cast<uint4*>(out + (size_t)blk * ROWS * PAIRS);
  for (int i = tid; i < ROWS * (PAIRS / 4); i += THREADS) {   // store_tile's loop
    const int r = i / (PAIRS / 4), ch = i % (PAIRS / 4);
    o[i] = *reinterpret_cast<const uint4*>(smem + r * ROW_BYTES + ch * 16);
  }
  aux[blk * THREADS + tid] = acc;
}

}  // namespace

#define PROBE_ARGS const uint32_t* in, const uint8_t* src, uint32_t* out, uint32_t* aux, uint32_t seed
#define PROBE(NAME, F) \
  extern "C" __global__ void __launch_bounds__(THREADS) probe_##NAME(PROBE_ARGS) { body<F>(in, src, out, aux, seed); }
PROBE(plain, 0)
PROBE(named, NAMED)
PROBE(named_split, NAMED | SPLIT)
PROBE(cpasync, CPASYNC)
PROBE(full, NAMED | SPLIT | CPASYNC)
PROBE(uneven, NAMED | UNEVEN)
PROBE(uneven_split, NAMED | SPLIT | UNEVEN)
PROBE(waves, NAMED | SPLIT | CPASYNC | EXITS)

namespace {

using Kernel = void (*)(PROBE_ARGS);
struct Variant { const char* name; Kernel fn; int f; int blocks; };
// the names kernel/bench/race_probe.py runs, in this order
const Variant VARIANTS[] = {
    {"plain", probe_plain, 0, BLOCKS},
    {"named", probe_named, NAMED, BLOCKS},
    {"named_split", probe_named_split, NAMED | SPLIT, BLOCKS},
    {"cpasync", probe_cpasync, CPASYNC, BLOCKS},
    {"full", probe_full, NAMED | SPLIT | CPASYNC, BLOCKS},
    {"uneven", probe_uneven, NAMED | UNEVEN, BLOCKS},
    {"uneven_split", probe_uneven_split, NAMED | SPLIT | UNEVEN, BLOCKS},
    {"waves", probe_waves, NAMED | SPLIT | CPASYNC | EXITS, WAVES * BLOCKS},
};

uint32_t load_word(const std::vector<uint8_t>& b, size_t off) {
  uint32_t w;
  std::memcpy(&w, b.data() + off, 4);
  return w;
}
// a thread's chunk of the ring as its copies left it: the source's bytes, or zeros
uint32_t fold_chunk(uint32_t acc, const std::vector<uint8_t>& src, size_t base, int c, int half, int k) {
  for (int w = 0; w < 4; ++w) acc = fold(acc, zero_chunk(c) ? 0u : load_word(src, base + c * 16 + w * 4), half, k);
  return acc;
}
uint32_t expected_acc(const Variant& v, const std::vector<uint8_t>& src, uint32_t seed, int blk, int tid) {
  const int half = tid >> 7, lt = tid & 127;
  const size_t base = (size_t)blk * SRC_BYTES;
  uint32_t acc = 0;
  if ((v.f & CPASYNC) && !(v.f & NAMED)) acc = fold_chunk(acc, src, base, read_chunk(tid, 0, STAGING_CHUNKS), half, 0);
  if (v.f & NAMED)
    for (int k = 0; k < ITERS; ++k) {
      if (v.f & CPASYNC)
        acc = fold_chunk(acc, src, base + (size_t)k * STAGE_BYTES, read_chunk(tid, k, STAGE_CHUNKS), half, k);
      acc = fold(acc, loop_word(seed, blk, half * 128 + ((lt + 1 + k) & 127), k), half, k);
      if ((v.f & UNEVEN) && half == 0) acc = fold(acc, loop_word(seed, blk, (lt + 2 + k) & 127, k + ITERS), half, k);
    }
  return acc;
}

bool check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "race_probe: %s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

// 1 ok, 0 wrong output, -1 CUDA error
int run(const Variant& v, std::mt19937& rng) {
  const int blocks = v.blocks;
  const size_t n_in = (size_t)blocks * ROWS * PAIRS, n_src = (size_t)blocks * SRC_BYTES, n_aux = (size_t)blocks * THREADS;
  std::vector<uint32_t> in(n_in), out(n_in), aux(n_aux);
  std::vector<uint8_t> src(n_src);
  for (auto& x : in) x = rng();
  for (auto& x : src) x = (uint8_t)rng();
  const uint32_t seed = rng();
  uint32_t *d_in = nullptr, *d_out = nullptr, *d_aux = nullptr;
  uint8_t* d_src = nullptr;
  bool ok = check(cudaMalloc(&d_in, n_in * 4), "cudaMalloc in") && check(cudaMalloc(&d_out, n_in * 4), "cudaMalloc out") &&
            check(cudaMalloc(&d_aux, n_aux * 4), "cudaMalloc aux") && check(cudaMalloc(&d_src, n_src), "cudaMalloc src") &&
            check(cudaMemcpy(d_in, in.data(), n_in * 4, cudaMemcpyHostToDevice), "copy in") &&
            check(cudaMemcpy(d_src, src.data(), n_src, cudaMemcpyHostToDevice), "copy src") &&
            check(cudaMemset(d_out, 0xff, n_in * 4), "poison out") &&   // a row left unstored shows
            check(cudaMemset(d_aux, 0xff, n_aux * 4), "poison aux") &&
            check(cudaFuncSetAttribute(v.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM), v.name);
  if (ok) {
    v.fn<<<blocks, THREADS, SMEM>>>(d_in, d_src, d_out, d_aux, seed);
    ok = check(cudaGetLastError(), v.name) && check(cudaDeviceSynchronize(), v.name) &&
         check(cudaMemcpy(out.data(), d_out, n_in * 4, cudaMemcpyDeviceToHost), "copy out") &&
         check(cudaMemcpy(aux.data(), d_aux, n_aux * 4, cudaMemcpyDeviceToHost), "copy aux");
  }
  cudaFree(d_in); cudaFree(d_out); cudaFree(d_aux); cudaFree(d_src);
  if (!ok) return -1;
  size_t bad_out = 0, bad_aux = 0;
  for (size_t i = 0; i < n_in; ++i) {   // a CTA that left stored nothing: its poison stays
    const bool left = (v.f & EXITS) && leaves((int)(i / (ROWS * PAIRS)));
    bad_out += out[i] != (left ? 0xffffffffu : in[i]);
  }
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < THREADS; ++t)
      bad_aux += aux[b * THREADS + t] != ((v.f & EXITS) && leaves(b) ? 0xffffffffu : expected_acc(v, src, seed, b, t));
  if (bad_out || bad_aux)
    std::printf("race_probe %s: %zu of %zu output words and %zu of %zu loop checksums wrong\n", v.name, bad_out, n_in,
                bad_aux, n_aux);
  return bad_out == 0 && bad_aux == 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* want = argc > 1 ? argv[1] : nullptr;
  bool found = false, all_ok = true;
  std::random_device rd;
  const uint32_t seed = rd();
  std::mt19937 rng(seed);
  std::printf("race_probe: seed %u, %d CTAs (waves: %d) of %d threads, %d bytes of shared memory\n", seed, BLOCKS,
              WAVES * BLOCKS, THREADS, SMEM);
  for (const Variant& v : VARIANTS) {
    if (want && std::strcmp(want, v.name) != 0) continue;
    found = true;
    const int r = run(v, rng);
    if (r < 0) return 2;
    std::printf("variant %s %s\n", v.name, r ? "ok" : "FAIL");
    all_ok = all_ok && r;
  }
  if (!found) {
    std::fprintf(stderr, "race_probe: variant %s unknown; expected one of plain, named, named_split, cpasync, full, uneven, uneven_split, waves\n", want);
    return 2;
  }
  return all_ok ? 0 : 1;
}

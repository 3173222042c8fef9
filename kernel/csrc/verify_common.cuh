// What every tier of the verify kernel shares: the launch parameters, the sm_80-class
// instruction wrappers (cp.async, ldmatrix, named barriers), and the on-device schedule
// (which request, row tile and KV split a CTA serves), templated on the rows per tile.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "mma_sync.cuh"

namespace mlav {

constexpr int D = 576;          // latent 512 + rope 64
constexpr int DV = 512;         // V = first 512 columns of the latent row
constexpr int CHUNKS = D / 8;   // 16-byte chunks per row
constexpr int BN = 16;          // KV tokens per pipeline stage
constexpr int NWARPS = 8;
constexpr int NTHREADS = NWARPS * 32;
constexpr int MIN_CHUNK = 128;  // fewest KV tokens per split: a split must outweigh its partial
constexpr int TILE_BYTES = BN * D * 2;
constexpr int CHUNKS8 = D / 16;       // 16-byte chunks per fp8 row
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

// mode bits: diagnostics drop stages (1: math, 2: KV loads, 4: merge); 8: the plain L2 policy
// on the small tier's KV stream instead of evict-first (for the stream microbenchmark)
constexpr int MODE_NO_MATH = 1, MODE_NO_LOADS = 2, MODE_NO_MERGE = 4, MODE_PLAIN_CACHE = 8;
// rows64d's diagnostic copy only: leave out one part of the per-tile math
constexpr int MODE_NO_SOFTMAX = 16, MODE_NO_QK = 32, MODE_NO_PV = 64;
constexpr int MODE_PARTS = MODE_NO_SOFTMAX | MODE_NO_QK | MODE_NO_PV;
// launch the merge as an ordinary kernel, not as a programmatic dependent (PDL, sm_90+)
constexpr int MODE_NO_PDL = 128;
// with MODE_NO_LOADS (rowsd, tiers 6 and 8): the resident tiles hold finite pseudo-random values, not
// zeros, so that the math-only timing sees the tensor pipe toggle as on real KV (power, clocks)
constexpr int MODE_NOISE_RING = 256;

// The copies of a tier's body that the mode bits pick at launch (mla_verify.cu): runtime mode tests
// in a loop cost issue slots whether taken or not, so the verify kernel (PROD) fixes the ones its
// tier measured faster fixed (tier_rowsd.cuh, tier_small8.cuh); MATH_ALONE is PROD without its
// loads (the micro's and overlap's no_loads); ANY_MODE reads every mode bit at run time; PARTS
// (rowsd's bf16 copy only) also reads bits 16/32/64
enum Kind { PROD = 0, PARTS = 1, MATH_ALONE = 2, ANY_MODE = 3 };
// the copy a tier with PROD, MATH_ALONE and ANY_MODE runs for a call's mode bits: none of loads off,
// math off and plain cache, the verify kernel; loads off alone, its math alone; any other, the copy
// that reads them all
inline int copy_kind(int mode) {
  const int diag = mode & (MODE_NO_LOADS | MODE_NO_MATH | MODE_PLAIN_CACHE);
  return !diag ? PROD : diag == MODE_NO_LOADS ? MATH_ALONE : ANY_MODE;
}

// Phase timestamps, in the diagnostic build only (-DMLAV_TRACE: kernel/bench/trace.py, `gpu_run
// --stages trace`): thread 0 of each CTA records %globaltimer (ns) at fixed points of the verify
// kernel (TRACE_VERIFY) and the merge (TRACE_MERGE). The production build compiles none of it.
#ifdef MLAV_TRACE
constexpr int TRACE_CTAS = 8192, TRACE_POINTS = 8, TRACE_VERIFY = 0, TRACE_MERGE = 1;
__device__ unsigned long long g_trace[2][TRACE_CTAS][TRACE_POINTS];
__device__ __forceinline__ void trace_point(int kernel, int k) {
  if (threadIdx.x == 0 && blockIdx.x < TRACE_CTAS) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    g_trace[kernel][blockIdx.x][k] = t;
  }
}
#define MLAV_TRACE_AT(kernel, k) ::mlav::trace_point(::mlav::kernel, k)
#else
#define MLAV_TRACE_AT(kernel, k) ((void)0)
#endif

// The merge's early launch: each verify CTA lets the merge's grid launch once its loop is done, so
// that the merge's launch and its lines before griddepcontrol.wait run during the last CTAs'
// epilogues instead of after them; that wait still waits for the whole verify grid and its stores.
// Measured on an H100 against the launch at the grid's exit (overlap --merge, five rounds, the loops'
// machine code identical; two runs): the call with its merge 0.5-1.5 us faster at T = 1-32 on both
// pools, except rows64d at the centre, a tie (rungs/overlap*-h100-20261205T18{30,39}-*.json,
// kernel/NOTES.md). A trigger at the
// kernel's start was slower at few-row shapes, where merge CTAs then shared SMs with verify CTAs (L6a).
// -DMLAV_NO_PDL_TRIGGER: the launch at the grid's exit, the production before (diagnostic builds)
#ifdef MLAV_NO_PDL_TRIGGER
constexpr bool PDL_TRIGGER = false;
#else
constexpr bool PDL_TRIGGER = true;
#endif
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (PDL_TRIGGER) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Where rowsd's warps wait, in the diagnostic build only (-DMLAV_BARWAIT: kernel/bench/barwait.py):
// each warp sums the SM clocks it spends in the loop-top cp.async wait, the loop-top CTA barrier,
// its half's named barriers and the whole loop, and counts its tiles; lane 0 adds them into
// g_barwait[half][BW_*] at the end. The production build compiles none of it.
#ifdef MLAV_BARWAIT
constexpr int BW_DATA = 0, BW_CTA = 1, BW_HALF = 2, BW_LOOP = 3, BW_TILES = 4, BW_WARPS = 5, BW_N = 6;
__device__ unsigned long long g_barwait[2][BW_N];
#define MLAV_BW(...) __VA_ARGS__
#else
#define MLAV_BW(...)
#endif

struct Params {
  const __nv_bfloat16* q;        // [N, H, 576] contiguous
  const __nv_bfloat16* kv;       // pool rows, stride kv_stride elements
  long long kv_stride;
  const void* kv_indptr; int kv_indptr_64;
  const void* kv_indices; int kv_indices_64;   // null: identity (slot = kv_indptr[b] + p)
  const __nv_bfloat16* kext;     // [N, 1, 576] rows, stride ext_stride elements
  long long ext_stride;
  const uint8_t* mask;           // FULL_MASK layout, null: causal chain
  const void* mask_indptr; int mask_indptr_64;
  const void* qo_indptr; int qo_indptr_64;
  int bs, num_tokens, H;
  float scale_log2;              // sm_scale * log2(e)
  __nv_bfloat16* o;              // [N, H, 512]
  float* lse;                    // [N, H] or null
  int* table;                    // [bs][4]: ns, nrt, part_base, chunk or -(tail splits) (written by CTA 0)
  float* part_lse;               // [part_cap][rows per tile] (log2 units)
  __nv_bfloat16* part_o;         // [part_cap][rows per tile][512], normalised partial O
  int part_cap;
  int target_ctas;
  int mode;
  // fp8_e4m3 pool only (the fp8 kernels; appended so the bf16 kernels' parameter offsets stay):
  const uint8_t* kv8;            // pool rows as e4m3 bytes, stride kv_stride bytes
  float kscale_log2;             // sm_scale * k_scale * log2(e): the prefix logits
  float v_scale;                 // multiplies the prefix part of P.V (applied to P)
};

__device__ __forceinline__ long long ld_index(const void* p, int is64, long long i) {
  return is64 ? __ldg(reinterpret_cast<const long long*>(p) + i)
              : (long long)__ldg(reinterpret_cast<const int*>(p) + i);
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte chunk c of row `row` in a [rows][72 chunks] tile, XOR-swizzled so that the eight
// rows an ldmatrix reads land in eight different bank groups.
__device__ __forceinline__ int swz(int row, int c) { return row * CHUNKS + (c ^ (row & 7)); }

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
// The same copy with an L2 cache policy (createpolicy), sm_80+.
__device__ __forceinline__ void cp_async16_hint(uint32_t dst, const void* src, int src_bytes, uint64_t pol) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n"
               ::"r"(dst), "l"(src), "r"(src_bytes), "l"(pol));
}
__device__ __forceinline__ uint64_t policy_evict_first() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
// 16 bytes global -> shared at a compile-time offset from both bases (src_bytes 0: zero-fill)
template <int OFF>
__device__ __forceinline__ void cp_async16_at(uint32_t dst, const void* src, int src_bytes, uint64_t pol) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0+%4], [%1+%4], 16, %2, %3;\n"
               ::"r"(dst), "l"(src), "r"(src_bytes), "l"(pol), "n"(OFF));
}
// N such copies STEP bytes apart: one base register pair for a loader thread's whole row share
template <int N, int STEP, int I = 0>
__device__ __forceinline__ void cp_async16_run(uint32_t dst, const void* src, int src_bytes, uint64_t pol) {
  if constexpr (I < N) {
    cp_async16_at<I * STEP>(dst, src, src_bytes, pol);
    cp_async16_run<N, STEP, I + 1>(dst, src, src_bytes, pol);
  }
}
// L2 policy for the KV stream: evict-first, or evict-normal (MODE_PLAIN_CACHE), by a select
__device__ __forceinline__ uint64_t policy_kv(bool evict_first) {
  uint64_t pf, pn;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pf));
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(pn));
  return evict_first ? pf : pn;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& a, uint32_t& b, uint32_t& c, uint32_t& d) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(uint32_t addr, uint32_t& a, uint32_t& b) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(a), "=r"(b) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2_t(uint32_t addr, uint32_t& a, uint32_t& b) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(a), "=r"(b) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t& a, uint32_t& b, uint32_t& c, uint32_t& d) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(addr));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ float2 unpack_bf16(uint32_t v) {
  return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&v));
}
// the largest m across the warp, in every lane
__device__ __forceinline__ float warp_max(float m) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  return m;
}

// The stale running max of a row whose logits lie with a quad (4 adjacent lanes; mx = this lane's
// largest, m_run the same in all four). It moves only when the row's max passes it by
// 2^rescale_log2; alpha = 2^(m_run - new max) then rescales the row's sum and O, else 1. A lane's
// own max decides, by one vote, whether any row of the warp moves, and only then does each quad
// reduce its max (two shuffles): the usual tile, where no row moves, skips the shuffles' latency.
// The result equals the quad reduction's in every case (a quad's max passes the bound iff one of its
// lanes' does). Returns whether a row of the warp moved (the same in every lane).
__device__ __forceinline__ bool stale_row_max(float mx, float rescale_log2, float& m_run, float& alpha) {
  const bool any = __any_sync(0xffffffffu, mx > m_run + rescale_log2);
  alpha = 1.f;
  if (any) {
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    if (mx > m_run + rescale_log2) {
      alpha = exp2f(m_run - mx);
      m_run = mx;
    }
  }
  return any;
}

__device__ __forceinline__ void named_bar(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// The math-only diagnostics' resident tiles (MODE_NO_LOADS): zeros, or with MODE_NOISE_RING
// finite pseudo-random values, bf16 pairs in [0.5, 2) with random signs and mantissas, or e4m3
// bytes below 2 (bit 6 clear: never the NaN pattern), so no NaN path changes the timing
template <bool FP8>
__device__ __forceinline__ void fill_resident(uint8_t* smem, int bytes, int tid, int threads, int mode) {
  const bool noise = mode & MODE_NOISE_RING;
  for (int i = tid; i < bytes / 16; i += threads) {
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      uint32_t h = (uint32_t)(4 * i + k) * 2654435761u;   // Knuth's multiplicative hash
      h ^= h >> 15;
      h *= 2246822519u;
      h ^= h >> 13;
      w[k] = !noise ? 0u : FP8 ? h & 0xbfbfbfbfu : (h & 0x80ff80ffu) | 0x3f003f00u;
    }
    reinterpret_cast<uint4*>(smem)[i] = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// a CTA barrier that the warps may reach at different instructions (__syncthreads is
// barrier.sync.aligned: every thread of the CTA at the same one, or the behaviour is undefined)
__device__ __forceinline__ void cta_bar_unaligned() {
  asm volatile("barrier.sync 0;\n" ::: "memory");
}

struct Item {
  int b, rt, split, ns, nrt;
  int p0, p1;          // KV positions [p0, p1) of this split (prefix then draft)
  int S, T, qo0, part_slot;
  long long kv0, m0;   // kv_indptr[b], mask_indptr[b]
};

// The chunk both plans aim at, from the launch's work `total` (token-rows of every row tile; in eighths
// where TAIL_E < 8) and its row tiles `U`, with `p`, TAIL_E, BN and MIN_CHUNK in scope. It declares:
// - chunk (= chunk_safe): aimed at (target - U) items. Every request rounds its split count up, at most
//   one extra item per row tile, so the whole schedule stays within one wave. More row tiles than CTAs:
//   one split each. A chunk of 2^31 tokens is as good as any longer one and keeps the per-request
//   divisions 32-bit.
// - chunk_fit: aimed at target itself. chunk_safe leaves up to U SMs idle where fewer are enough (the
//   centre: 130 items on 132 SMs; T = 32 at 8 heads: 128), so where `two` the plan counts chunk_fit's
//   items too and takes it where they fit in one wave (kernel/NOTES.md, the wave fit).
// - tail_chunk and chunk_t: the tail row tile's chunk, 8 / TAIL_E times the full ones', rounded up to BN.
// A macro, not a function: plan_one's item must stay plan_item's bit for bit, and the two function forms
// tried (a struct returned, references written) each reshaped all 31 verify kernels' machine code on every
// arch; the macro keeps the measured code (kernel/NOTES.md, thirty-ninth section).
#ifdef MLAV_WAVE_SAFE   // the old schedule, chunk_safe always (overlap's wave_safe variant)
#define MLAV_PLAN_TWO false
#else
#define MLAV_PLAN_TWO chunk_fit != chunk_safe && p.target_ctas < (1 << 14)
#endif
#define MLAV_PLAN_CHUNKS(total, U)                                                                                   \
  long long chunk64 = U < p.target_ctas ? (total + (p.target_ctas - U) - 1) / (p.target_ctas - U) : (1LL << 40);   \
  if constexpr (TAIL_E < 8) {                                                                                          \
    if (U < p.target_ctas) chunk64 = (total + 8 * (p.target_ctas - U) - 1) / (8 * (p.target_ctas - U));              \
  }                                                                                                                    \
  if (chunk64 < MIN_CHUNK) chunk64 = MIN_CHUNK;                                                                        \
  unsigned chunk = (unsigned)(min(chunk64, 1LL << 31) + BN - 1) / BN * BN;                                            \
  const unsigned chunk_safe = chunk;                                                                                   \
  unsigned chunk_fit = chunk;                                                                                          \
  if (U < p.target_ctas) {                                                                                             \
    long long c = TAIL_E < 8 ? (total + 8LL * p.target_ctas - 1) / (8LL * p.target_ctas)                               \
                             : (total + p.target_ctas - 1) / p.target_ctas;                                            \
    if (c < MIN_CHUNK) c = MIN_CHUNK;                                                                                  \
    chunk_fit = (unsigned)(min(c, 1LL << 31) + BN - 1) / BN * BN;                                                     \
  }                                                                                                                    \
  const bool two = MLAV_PLAN_TWO;                                                                                      \
  auto tail_chunk = [](unsigned c) {                                                                                   \
    return (unsigned)(min(((long long)c * 8 + TAIL_E - 1) / TAIL_E, 1LL << 31) + BN - 1) / BN * BN;                   \
  };                                                                                                                   \
  unsigned chunk_t = tail_chunk(chunk)

// Every CTA derives the whole schedule from the sequence lengths (under 2 us, no
// extra launch) and picks its own item. Returns false when this CTA has no work.
// A request's T_b * H query rows form nrt_b = ceil(T_b * H / BMR) row tiles. Splits: with
// U = sum_b nrt_b, chunk = max(MIN_CHUNK, ceil(sum_b nrt_b * L_b / (target - U))) tokens
// rounded to BN and ns_b = ceil(L_b / chunk), so that sum_b nrt_b * ns_b <= target: one
// wave (a second, nearly empty wave would double the time). Items are ordered (request,
// split, row tile) so that the row tiles reading the same KV range run side by side and
// share it through L2. With more row tiles than CTAs (an EXTEND of thousands of tokens) every
// request takes one split and its row tiles stream the KV range in waves, each wave's reads
// shared through L2. Without a mask (a causal chain) a row tile's items end at its last
// token's own key. `smem_i` needs 64 ints. THREADS: the block size (a multiple of 32, <= 256).
// Its cost is latency: one round trip to global memory for the indptr pairs (pass 1 loads
// them all at once; passes 2 and 3 find them in L1), the item's mask offset (its finder only:
// loading it in pass 1 cost rows32d_fp8 12 bytes of spills on sm_120), three CTA barriers,
// 32-bit divisions wherever the values fit.
// TAIL_E < 8 (rows64d, whose tail CTAs leave half 1 idle: tier_rowsd.cuh's TAIL): a request of
// two or more row tiles whose last holds at most BMR / 2 rows gives that row tile splits 8 / TAIL_E
// times as long as its full row tiles' (ns_t of them, after its ns x (nrt - 1) full items; their
// partial slots follow the full ones', and the table's fourth int is -ns_t for the merge), so that
// a tail CTA, which costs about TAIL_E / 8 of a full one a tile, ends with them; the work that sets
// the chunk counts the tail at that weight (in eighths: fp8's tail CTAs cost 0.81-0.86 of a full
// one, between the quarters). TAIL_E = 8: every row tile alike, and the code of
// before (the tail's parts stand in `if constexpr` blocks beside the statements they replace, so
// that the other tiers compile to the same machine code; a `constexpr bool` local naming TAIL_E < 8,
// though unused by them, changed sm_80-90's code of every tier, so there is none).
template <int BMR, int THREADS = NTHREADS, int TAIL_E = 8>
__device__ bool plan_item(const Params& p, int* smem_i, Item& it) {
  static_assert(TAIL_E >= 1 && TAIL_E <= 8, "plan_item: TAIL_E is a tail split's cost in eighths");
  constexpr int W = THREADS / 32;
  static_assert(W <= 8, "plan_item's scratch holds 8 warps");
  MLAV_TRACE_AT(TRACE_VERIFY, 0);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int* nrt_w = smem_i;                                          // [8] row tiles per warp
  long long* work_w = reinterpret_cast<long long*>(smem_i + 8);   // [8] work per warp
  long long* scan_w = reinterpret_cast<long long*>(smem_i + 24);  // [8] packed (items, parts)
  int* found = smem_i + 40;                                     // 24 ints: the item
  const int per = (p.bs + THREADS - 1) / THREADS;
  const int b0 = tid * per, b1 = min(p.bs, b0 + per);
  struct Req { long long kv0, qo0; int S, T; };
  auto load_req = [&](int b) {
    Req r;
    r.kv0 = ld_index(p.kv_indptr, p.kv_indptr_64, b);
    r.qo0 = ld_index(p.qo_indptr, p.qo_indptr_64, b);
    r.S = (int)(ld_index(p.kv_indptr, p.kv_indptr_64, b + 1) - r.kv0);
    r.T = (int)(ld_index(p.qo_indptr, p.qo_indptr_64, b + 1) - r.qo0);
    return r;
  };
  auto row_tiles = [&](const Req& r) { return (int)(((long long)r.T * p.H + BMR - 1) / BMR); };
  // 1 where the request's last row tile is a tail (with TAIL_E < 8), else 0
  auto tail_of = [&](const Req& r, int nrt) {
    return nrt >= 2 && (long long)r.T * p.H - (long long)(nrt - 1) * BMR <= BMR / 2 ? 1 : 0;
  };
  if (tid == 0) found[0] = -1;
  // pass 1: total work and row tiles, one barrier
  long long work = 0;
  int nrt_sum = 0;
  for (int b = b0; b < b1; ++b) {
    const Req r = load_req(b);
    const int nrt = row_tiles(r);
    if constexpr (TAIL_E < 8)   // in eighths of a full row tile's work
      work += (long long)(8 * nrt - (8 - TAIL_E) * tail_of(r, nrt)) * (r.S + r.T);
    else
      work += (long long)nrt * (r.S + r.T);
    nrt_sum += nrt;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    work += __shfl_xor_sync(0xffffffffu, work, o);
    nrt_sum += __shfl_xor_sync(0xffffffffu, nrt_sum, o);
  }
  if (lane == 0) { work_w[warp] = work; nrt_w[warp] = nrt_sum; }
  __syncthreads();
  long long total = 0, U = 0;
#pragma unroll
  for (int w = 0; w < W; ++w) { total += work_w[w]; U += nrt_w[w]; }
  MLAV_PLAN_CHUNKS(total, U);
  // a request's splits; TAIL_E < 8: its tail row tile's splits, and its items, ns x (nrt - tail) full ones,
  // then ns_t of the tail
  auto splits = [&](const Req& r, int nrt) { return nrt ? (int)(((unsigned)(r.S + r.T) + chunk - 1) / chunk) : 0; };
  const unsigned chunk_fit_t = tail_chunk(chunk_fit);
  auto splits_t = [&](const Req& r, int nrt) { return tail_of(r, nrt) ? (int)(((unsigned)(r.S + r.T) + chunk_t - 1) / chunk_t) : 0; };
  auto items_t = [&](const Req& r, int nrt, int ns) { return (nrt - tail_of(r, nrt)) * ns + splits_t(r, nrt); };
  // pass 2: items and partial slots per request, one packed exclusive scan, one barrier
  long long packed = 0;   // items << 32 | parts, each below 2^31; two: chunk_fit's, then chunk_safe's, 16 bits each
  for (int b = b0; b < b1; ++b) {
    const Req r = load_req(b);
    const int nrt = row_tiles(r), ns = splits(r, nrt);
    const int n_items = TAIL_E < 8 ? items_t(r, nrt, ns) : nrt * ns;
    if (two) {   // items < target + U < 2 target: no field carries into the next
      const unsigned L = (unsigned)(r.S + r.T);
      const int ns_a = nrt ? (int)((L + chunk_fit - 1) / chunk_fit) : 0;
      const int n_a = TAIL_E < 8 ? (nrt - tail_of(r, nrt)) * ns_a + (tail_of(r, nrt) ? (int)((L + chunk_fit_t - 1) / chunk_fit_t) : 0)
                                 : nrt * ns_a;
      packed += ((long long)n_a << 48) | ((long long)(ns_a > 1 ? n_a : 0) << 32) | ((long long)n_items << 16) | (ns > 1 ? n_items : 0);
    } else {
      packed += ((long long)n_items << 32) | (unsigned)(ns > 1 ? n_items : 0);
    }
  }
  long long incl = packed;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const long long y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) scan_w[warp] = incl;
  __syncthreads();
  long long excl = incl - packed, all = 0;
#pragma unroll
  for (int w = 0; w < W; ++w) {
    excl += w < warp ? scan_w[w] : 0;
    all += scan_w[w];
  }
  int item_excl = (int)(excl >> 32), part_excl = (int)(excl & 0xffffffffLL);
  if (two) {   // chunk_fit where its items fit in one wave
    const bool fit = (int)((unsigned long long)all >> 48) <= p.target_ctas;
    const int sh = fit ? 32 : 0;
    item_excl = (int)((excl >> (sh + 16)) & 0xffff);
    part_excl = (int)((excl >> sh) & 0xffff);
    if (fit) { chunk = chunk_fit; chunk_t = chunk_fit_t; }
  }
  // pass 3: the thread whose requests hold this CTA's item publishes it
  const int me = blockIdx.x;
  for (int b = b0; b < b1; ++b) {
    const Req r = load_req(b);
    const int L = r.S + r.T, nrt = row_tiles(r), ns = splits(r, nrt);
    const int chunk_b = ns ? (int)(((unsigned)L + ns - 1) / ns + BN - 1) / BN * BN : 0;
    const int ns_t = TAIL_E < 8 ? splits_t(r, nrt) : 0;
    if (blockIdx.x == 0) {
      p.table[4 * b + 0] = ns;
      p.table[4 * b + 1] = nrt;
      p.table[4 * b + 2] = ns > 1 ? part_excl : -1;
      p.table[4 * b + 3] = ns_t > 0 ? -ns_t : chunk_b;   // the chunk: read by no one
    }
    const int n_items = TAIL_E < 8 ? items_t(r, nrt, ns) : nrt * ns;
    if (me >= item_excl && me < item_excl + n_items) {
      const int local = me - item_excl;
      int split = local / nrt, rt = local - split * nrt, ns_i = ns, chunk_i = chunk_b;
      if constexpr (TAIL_E < 8) {   // a full row tile's item, or the tail row tile's (its own splits)
        const int nf = nrt - (ns_t > 0);
        if (local >= nf * ns) {
          split = local - nf * ns; rt = nrt - 1; ns_i = ns_t;
          chunk_i = (int)(((unsigned)L + ns_t - 1) / ns_t + BN - 1) / BN * BN;
        } else {
          split = local / nf; rt = local - split * nf;
        }
      }
      found[0] = b; found[1] = rt; found[2] = split; found[3] = ns_i; found[4] = nrt;
      found[5] = split * chunk_i;
      int p1 = min(L, (split + 1) * chunk_i);
      if (!p.mask) {
        // a causal chain: no row of this tile sees a key past its last token's own, so the item
        // stops there (a causal EXTEND of T new tokens walks its draft block's lower triangle,
        // not the square); an item wholly past it keeps one key, masked for all its rows, so
        // every tier still runs at least one tile and stores an empty partial
        const int last_tok = (int)((min((long long)(rt + 1) * BMR, (long long)r.T * p.H) - 1) / p.H);
        p1 = min(p1, max(found[5] + 1, r.S + last_tok + 1));
      }
      found[6] = p1;
      found[7] = r.S; found[8] = r.T; found[9] = (int)r.qo0;
      found[10] = ns_i > 1 ? part_excl + local : -1;
      reinterpret_cast<long long*>(found + 12)[0] = r.kv0;   // 8-byte aligned (smem_i + 52)
      reinterpret_cast<long long*>(found + 12)[1] = p.mask ? ld_index(p.mask_indptr, p.mask_indptr_64, b) : 0;
    }
    item_excl += n_items;
    part_excl += ns > 1 ? n_items : 0;
  }
  __syncthreads();
  MLAV_TRACE_AT(TRACE_VERIFY, 1);
  if (found[0] < 0) return false;
  it.b = found[0]; it.rt = found[1]; it.split = found[2]; it.ns = found[3]; it.nrt = found[4];
  it.p0 = found[5]; it.p1 = found[6]; it.S = found[7]; it.T = found[8]; it.qo0 = found[9];
  it.part_slot = found[10];
  it.kv0 = reinterpret_cast<long long*>(found + 12)[0];
  it.m0 = reinterpret_cast<long long*>(found + 12)[1];
  __syncthreads();   // the planning scratch is reused by the caller next
  return it.part_slot < p.part_cap;
}

// plan_item's schedule for a launch of one request (bs == 1: every long-context step), in closed form:
// every thread computes its CTA's item from the four indptr values alone, with no scratch, no shuffle and
// no barrier, a few dozen instructions where plan_item runs its three passes (their 2.2 us are waits that
// neither 32-bit divisions nor fewer barriers shortened: kernel/NOTES.md, thirtieth section). Each value
// is plan_item's expression for b = 0 with both exclusive prefixes 0, in the same types and order, so the
// item and the merge's table are plan_item's bit for bit (thirty-seventh section: about 1 us a call).
template <int BMR, int TAIL_E = 8>
__device__ __forceinline__ bool plan_one(const Params& p, Item& it) {
  static_assert(TAIL_E >= 1 && TAIL_E <= 8, "plan_one: TAIL_E is a tail split's cost in eighths");
  MLAV_TRACE_AT(TRACE_VERIFY, 0);
  const long long kv0 = ld_index(p.kv_indptr, p.kv_indptr_64, 0);
  const long long qo0 = ld_index(p.qo_indptr, p.qo_indptr_64, 0);
  const int S = (int)(ld_index(p.kv_indptr, p.kv_indptr_64, 1) - kv0);
  const int T = (int)(ld_index(p.qo_indptr, p.qo_indptr_64, 1) - qo0);
  const long long m0 = p.mask ? ld_index(p.mask_indptr, p.mask_indptr_64, 0) : 0;
  const int nrt = (int)(((long long)T * p.H + BMR - 1) / BMR);
  const int tail = nrt >= 2 && (long long)T * p.H - (long long)(nrt - 1) * BMR <= BMR / 2 ? 1 : 0;
  const unsigned L = (unsigned)(S + T);
  const long long total = TAIL_E < 8 ? (long long)(8 * nrt - (8 - TAIL_E) * tail) * (S + T)
                                     : (long long)nrt * (S + T);
  const long long U = nrt;
  MLAV_PLAN_CHUNKS(total, U);
  if (two) {   // plan_item's pass 2 for one request: chunk_fit where its items fit in one wave
    const int ns_a = nrt ? (int)((L + chunk_fit - 1) / chunk_fit) : 0;
    const unsigned chunk_fit_t = tail_chunk(chunk_fit);
    const int n_a = TAIL_E < 8 ? (nrt - tail) * ns_a + (tail ? (int)((L + chunk_fit_t - 1) / chunk_fit_t) : 0)
                               : nrt * ns_a;
    if (n_a <= p.target_ctas) { chunk = chunk_fit; chunk_t = chunk_fit_t; }
  }
  // pass 3
  const int ns = nrt ? (int)((L + chunk - 1) / chunk) : 0;
  const int chunk_b = ns ? (int)((L + ns - 1) / ns + BN - 1) / BN * BN : 0;
  const int ns_t = TAIL_E < 8 && tail ? (int)((L + chunk_t - 1) / chunk_t) : 0;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    p.table[0] = ns;
    p.table[1] = nrt;
    p.table[2] = ns > 1 ? 0 : -1;
    p.table[3] = ns_t > 0 ? -ns_t : chunk_b;
  }
  const int n_items = TAIL_E < 8 ? (nrt - tail) * ns + ns_t : nrt * ns;
  const int local = blockIdx.x;
  MLAV_TRACE_AT(TRACE_VERIFY, 1);
  if (local >= n_items) return false;
  int split = local / nrt, rt = local - split * nrt, ns_i = ns, chunk_i = chunk_b;
  if constexpr (TAIL_E < 8) {
    const int nf = nrt - (ns_t > 0);
    if (local >= nf * ns) {
      split = local - nf * ns; rt = nrt - 1; ns_i = ns_t;
      chunk_i = (int)((L + ns_t - 1) / ns_t + BN - 1) / BN * BN;
    } else {
      split = local / nf; rt = local - split * nf;
    }
  }
  const int Li = S + T;
  it.b = 0; it.rt = rt; it.split = split; it.ns = ns_i; it.nrt = nrt;
  it.p0 = split * chunk_i;
  int p1 = min(Li, (split + 1) * chunk_i);
  if (!p.mask) {   // plan_item's causal chain
    const int last_tok = (int)((min((long long)(rt + 1) * BMR, (long long)T * p.H) - 1) / p.H);
    p1 = min(p1, max(it.p0 + 1, S + last_tok + 1));
  }
  it.p1 = p1; it.S = S; it.T = T; it.qo0 = (int)qo0;
  it.part_slot = ns_i > 1 ? local : -1;
  it.kv0 = kv0; it.m0 = m0;
  return it.part_slot < p.part_cap;
}

// The CTA's item: plan_one for a one-request launch where ONE, else plan_item. ONE is each kernel's choice
// (tier_rowsd.cuh, tier_small.cuh, tier_small8.cuh): true where its loop kept its machine code beside the
// second plan path (rows64d, small's 8-row tiles, small8's 8- and 16-row tiles); where ptxas reshaped the
// loop around it (rows32d, small8's 32-row tiles) the call lost up to 12.6 us, so those and small's 16- and
// 32-row tiles keep plan_item alone (kernel/NOTES.md, thirty-seventh section).
// -DMLAV_PLAN_GENERAL: plan_item everywhere, the production before (overlap's plan_general).
template <int BMR, int THREADS, int TAIL_E, bool ONE>
__device__ __forceinline__ bool plan(const Params& p, int* smem_i, Item& it) {
#ifndef MLAV_PLAN_GENERAL
  if constexpr (ONE) return p.bs == 1 ? plan_one<BMR, TAIL_E>(p, it) : plan_item<BMR, THREADS, TAIL_E>(p, smem_i, it);
  else
#endif
  return plan_item<BMR, THREADS, TAIL_E>(p, smem_i, it);
}

// A row tile's result, staged in shared memory (osm: normalised O, [RT][OSTRIDE] bf16; lse_s:
// [RT] log2-LSE), stored by THREADS threads with 16-byte stores: to o and lse (natural log) when
// the request has one split, else to this item's partial slot for the merge. Rows past the
// request are not stored.
template <int RT, int OSTRIDE, int THREADS>
__device__ __forceinline__ void store_tile(const Params& p, const Item& it, const __nv_bfloat16* osm,
                                           const float* lse_s, int rows, int row_base, long long grow0, int tid) {
  const bool final_out = it.ns == 1;
  for (int i = tid; i < RT * (DV / 8); i += THREADS) {
    const int r = i / (DV / 8), ch = i % (DV / 8);
    if (row_base + r >= rows) continue;
    const uint4 v = *reinterpret_cast<const uint4*>(osm + r * OSTRIDE + ch * 8);
    __nv_bfloat16* dst = final_out ? p.o + (grow0 + r) * DV : p.part_o + ((long long)it.part_slot * RT + r) * DV;
    *reinterpret_cast<uint4*>(dst + ch * 8) = v;
  }
  if (tid < RT && row_base + tid < rows) {
    if (final_out) {
      if (p.lse) p.lse[grow0 + tid] = lse_s[tid] * LN2;
    } else {
      p.part_lse[(long long)it.part_slot * RT + tid] = lse_s[tid];
    }
  }
  MLAV_TRACE_AT(TRACE_VERIFY, 4);
}

// A request of `rows` query rows ends in a tail for rows64d (64-row tiles): two or more row tiles,
// the last holding at most 32 (half 0's); plan_item's TAIL_E and tier_rowsd.cuh's TL kernels
__host__ __device__ inline bool tail_rows(long long rows) {
  return rows > 64 && rows % 64 != 0 && rows % 64 <= 32;
}

// Upper bound on the items of a launch: at most target + sum_b nrt_b, and sum_b nrt_b <=
// ceil(N * H / BMR) + bs.
__host__ __device__ inline int grid_for(int bmr, int target_ctas, int num_tokens, int H, int bs) {
  return target_ctas + (int)(((long long)num_tokens * H + bmr - 1) / bmr) + bs;
}

}  // namespace mlav

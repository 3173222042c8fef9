// Split-KV, paged, bf16 MLA tree-verify attention (SGLang TARGET_VERIFY contract): the C API.
//
// One CTA = (request b, row tile, KV split). A request's query rows are its T_b draft tokens
// x H heads, packed row = t * H + h. The KV sequence of a request is its S_b prefix tokens
// (pool rows through kv_indices) followed by its T_b draft tokens (rows of k_extend); the
// tree mask applies to the draft part only. Three kernel families share the schedule and the
// merge:
//   tier 0        rows64 (tier_rows64.cuh): 64-row tiles, Q rows in the MMA's M dimension
//   tier 1, 2, 4  small (tier_small.cuh): 8, 16 or 32-row tiles, operands swapped
//   tier 6, 8     rows32d, rows64d (tier_rowsd.cuh): design D, 32-row pipelines of 4 warps (QK by
//                 dim quarter, PV by column quarter); one per CTA (two CTAs per SM) or two
//   tier 9        rows64d_pair (tier_rows64d_pair.cuh): rows64d with one barrier pair per 32
//                 tokens (opt-in, never picked by default; issue 25)
// Any tier serves any input (more rows take more row tiles); the host picks the tier from
// static shapes only, so a launch can be captured in a CUDA graph and replayed with new
// lengths and trees. Only sm_80-class instructions (mma.sync, ldmatrix, cp.async).
// SGLang's fp8_e4m3 pool (576-byte rows, per-layer k_scale / v_scale) is read by fp8 copies of
// the small tier (tier_small8.cuh: e4m3 MMA operands converted to f16 in registers) and of the
// design D tiers (`_fp8` kernels); both convert the e4m3 MMA operands to f16 in registers.
#include "combine.cuh"
#include "tier_rows64.cuh"
#include "tier_rowsd.cuh"
#include "tier_rows64d_pair.cuh"
#include "tier_small.cuh"
#include "tier_small8.cuh"

namespace {
using namespace mlav;

// The workspace holds partials for up to CAP_MULT x SMs items (two per CTA of a tier that runs
// two CTAs per SM) of up to 64 rows, so every tier's layout fits the same buffer.
constexpr int CAP_MULT = 4;
size_t table_bytes(int max_bs) { return ((size_t)max_bs * 4 * sizeof(int) + 255) / 256 * 256; }
size_t lse_floats(int target_ctas) { return (size_t)CAP_MULT * target_ctas * rows64::BM; }
int rows_of_tier(int tier) { return tier == 0 || tier == 9 ? rows64::BM : tier == 6 ? 32 : 8 * tier; }   // tier 8: 64

// The >48 KB opt-in is per device and per kernel; set it once, outside any later graph capture.
template <typename K>
cudaError_t allow_smem(K kernel, int bytes, int dev, bool* done) {
  if (dev < 64 && done[dev]) return cudaSuccess;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess && dev < 64) done[dev] = true;
  return err;
}

// CTAs of `kernel` one SM holds (registers and shared memory of this device), asked once
// per device outside any graph capture; the schedule aims at SMs x this many CTAs.
template <typename K>
int blocks_per_sm(K kernel, int smem, int dev, int* cache, int threads = NTHREADS) {
  if (dev < 64 && cache[dev] > 0) return cache[dev];
  int n = 1;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem) != cudaSuccess || n < 1) n = 1;
  if (dev < 64) cache[dev] = n;
  return n;
}

// The small tier (bf16 pool) or its fp8 copy (tier_small8.cuh), whose copy the mode bits pick
// (copy_kind). The bf16 tier reads them at run time in its one copy.
template <int NT, bool FP8>
cudaError_t launch_small(Params p, int num_tokens, int bs, cudaStream_t st, int dev) {
  static bool done[4][64] = {};
  static int occ[4][64] = {};
  constexpr int smem = FP8 ? small8::Layout<NT>::SMEM : small::Layout<NT>::SMEM;
  const int kind = FP8 ? copy_kind(p.mode) : PROD;
  using K = void (*)(const Params);
  const K kernels[4] = {FP8 ? small8::mla_verify_kernel_small8<NT, PROD> : small::mla_verify_kernel_small<NT>, nullptr,
                        small8::mla_verify_kernel_small8<NT, MATH_ALONE>, small8::mla_verify_kernel_small8<NT, ANY_MODE>};
  const K kernel = kernels[kind];
  cudaError_t err = allow_smem(kernel, smem, dev, done[kind]);
  if (err != cudaSuccess) return err;
  const int per_sm = blocks_per_sm(kernel, smem, dev, occ[kind]);
  p.target_ctas *= per_sm < CAP_MULT / 2 ? per_sm : CAP_MULT / 2;
  p.part_cap = 2 * p.target_ctas;
  kernel<<<grid_for(8 * NT, p.target_ctas, num_tokens, p.H, bs), NTHREADS, smem, st>>>(p);
  return cudaGetLastError();
}

// Programmatic dependent launch (sm_90 and newer, sm_120 included): the merge's grid is
// set up once every verify CTA is past its loop (pdl_trigger, verify_common.cuh) and waits for the
// verify grid inside (griddepcontrol.wait), instead of starting only after the kernel boundary.
// Asked once per device.
bool pdl_capable(int dev) {
  static int major[64] = {};
  if (dev < 64 && major[dev] > 0) return major[dev] >= 9;
  int m = 0;
  if (cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) m = 0;
  if (dev < 64 && m > 0) major[dev] = m;
  return m >= 9;
}

// p.target_ctas is still the SM count here (each tier's launch scales its own copy).
template <int BMR>
cudaError_t launch_combine(const Params& p, long long rows, cudaStream_t st, bool pdl) {
  const bool few = rows * CombineShape<BMR, true>::SL <= 2LL * p.target_ctas;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)(rows * (few ? CombineShape<BMR, true>::SL : CombineShape<BMR, false>::SL)));
  cfg.blockDim = dim3(CT);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  cudaError_t err = few ? cudaLaunchKernelEx(&cfg, mla_verify_combine<BMR, true>, p)
                        : cudaLaunchKernelEx(&cfg, mla_verify_combine<BMR, false>, p);
  return err != cudaSuccess ? err : cudaGetLastError();
}

// Design D tiers: HALVES 32-row pipelines per CTA; the one-half CTA runs two per SM where
// registers and shared memory allow (the occupancy query decides, as for the small tier).
// The mode bits pick the body's copy (tier_rowsd.cuh, Kind): on bf16 the per-part bits PARTS, else
// copy_kind's; on fp8 loads off the math alone, else the verify kernel, which reads no-math and
// plain-cache itself (the per-part bits time bf16 only and are ignored on fp8).
// rows64d's tail kernels (tier_rowsd.cuh, TAIL) where every request's rows end in a tail as far as
// the launch's static shape says (num_tokens / bs tokens each: DDTree's padded D); a ragged batch
// runs the others, which are correct for any shape. Graph-safe: num_tokens and bs are a graph's own.
template <int HALVES, bool FP8>
cudaError_t launch_rowsd(Params p, int num_tokens, int bs, cudaStream_t st, int dev, bool parts) {
  using Lo = rowsd::Layout<HALVES, FP8>;
  static bool done[6][64] = {};
  static int occ[6][64] = {};
  const int kind = FP8 ? (p.mode & MODE_NO_LOADS ? MATH_ALONE : PROD) : parts ? PARTS : copy_kind(p.mode);
  const bool tails = HALVES == 2 && rowsd::TAIL >= 1 && (kind == PROD || kind == MATH_ALONE) && bs > 0 &&
                     num_tokens % bs == 0 && tail_rows((long long)(num_tokens / bs) * p.H);
  using K = void (*)(const Params);
  K kernels[6] = {
      FP8 ? rowsd::mla_verify_kernel_rowsd_fp8<HALVES, PROD> : rowsd::mla_verify_kernel_rowsd<HALVES, PROD>,
      FP8 ? nullptr : rowsd::mla_verify_kernel_rowsd<HALVES, PARTS>,
      FP8 ? rowsd::mla_verify_kernel_rowsd_fp8<HALVES, MATH_ALONE> : rowsd::mla_verify_kernel_rowsd<HALVES, MATH_ALONE>,
      FP8 ? nullptr : rowsd::mla_verify_kernel_rowsd<HALVES, ANY_MODE>, nullptr, nullptr};
  if constexpr (HALVES == 2) {   // (rows32d has no tails: none instantiated)
    kernels[4] = FP8 ? rowsd::mla_verify_kernel_rowsd_fp8<2, PROD, true> : rowsd::mla_verify_kernel_rowsd<2, PROD, true>;
    kernels[5] = FP8 ? rowsd::mla_verify_kernel_rowsd_fp8<2, MATH_ALONE, true>
                     : rowsd::mla_verify_kernel_rowsd<2, MATH_ALONE, true>;
  }
  const int slot = tails ? (kind == PROD ? 4 : 5) : kind;
  const K kernel = kernels[slot];
  cudaError_t err = allow_smem(kernel, Lo::SMEM, dev, done[slot]);
  if (err != cudaSuccess) return err;
  if (HALVES == 1) {
    const int per_sm = blocks_per_sm(kernel, Lo::SMEM, dev, occ[slot], Lo::THREADS);
    p.target_ctas *= per_sm < CAP_MULT / 2 ? per_sm : CAP_MULT / 2;
    p.part_cap = 2 * p.target_ctas;
  }
  kernel<<<grid_for(Lo::BM, p.target_ctas, num_tokens, p.H, bs), Lo::THREADS, Lo::SMEM, st>>>(p);
  return cudaGetLastError();
}

// rows64d_pair (tier 9): one CTA of 8 warps per SM, as rows64d.
cudaError_t launch_rows64d_pair(const Params& p, int num_tokens, int bs, cudaStream_t st, int dev, int diag) {
  static bool done[2][64] = {};
  auto kernel = diag ? rowspair::mla_verify_kernel_rows64d_pair<1> : rowspair::mla_verify_kernel_rows64d_pair<0>;
  cudaError_t err = allow_smem(kernel, rowspair::SMEM, dev, done[diag]);
  if (err != cudaSuccess) return err;
  kernel<<<grid_for(rowspair::BM, p.target_ctas, num_tokens, p.H, bs), rowspair::THREADS, rowspair::SMEM, st>>>(p);
  return cudaGetLastError();
}

}  // namespace

extern "C" {

// Largest dynamic shared memory of any tier (bytes); tests check it against sm_120's 99 KB.
int mla_verify_smem_bytes() {
  int m = rows64::SMEM_BYTES;
  m = m > small::Layout<1>::SMEM ? m : small::Layout<1>::SMEM;
  m = m > small::Layout<2>::SMEM ? m : small::Layout<2>::SMEM;
  m = m > small::Layout<4>::SMEM ? m : small::Layout<4>::SMEM;
  m = m > rowsd::Layout<1>::SMEM ? m : rowsd::Layout<1>::SMEM;
  m = m > rowsd::Layout<2>::SMEM ? m : rowsd::Layout<2>::SMEM;
  m = m > small8::Layout<1>::SMEM ? m : small8::Layout<1>::SMEM;
  m = m > small8::Layout<2>::SMEM ? m : small8::Layout<2>::SMEM;
  m = m > small8::Layout<4>::SMEM ? m : small8::Layout<4>::SMEM;
  m = m > rowsd::Layout<1, true>::SMEM ? m : rowsd::Layout<1, true>::SMEM;
  m = m > rowsd::Layout<2, true>::SMEM ? m : rowsd::Layout<2, true>::SMEM;
  m = m > rowspair::SMEM ? m : rowspair::SMEM;
  return m;
}
int mla_verify_rows_per_cta(int tier) { return rows_of_tier(tier); }
// Dynamic shared memory of one tier's kernel (bytes), -1 for an unknown tier.
int mla_verify_tier_smem_bytes(int tier) {
  switch (tier) {
    case 0: return rows64::SMEM_BYTES;
    case 1: return small::Layout<1>::SMEM;
    case 2: return small::Layout<2>::SMEM;
    case 4: return small::Layout<4>::SMEM;
    case 6: return rowsd::Layout<1>::SMEM;
    case 8: return rowsd::Layout<2>::SMEM;
    case 9: return rowspair::SMEM;
    default: return -1;
  }
}
// The same for a tier's fp8 copy, -1 for a tier without one (rows64, rows64d_pair).
int mla_verify_tier_smem_bytes_fp8(int tier) {
  switch (tier) {
    case 1: return small8::Layout<1>::SMEM;
    case 2: return small8::Layout<2>::SMEM;
    case 4: return small8::Layout<4>::SMEM;
    case 6: return rowsd::Layout<1, true>::SMEM;
    case 8: return rowsd::Layout<2, true>::SMEM;
    default: return -1;
  }
}

// Workspace for a device with `target_ctas` resident CTAs and up to `max_bs` requests
// (sized for the tier with the most rows per tile; bf16 partials).
long long mla_verify_workspace_bytes(int target_ctas, int max_bs) {
  return (long long)(table_bytes(max_bs) + lse_floats(target_ctas) * sizeof(float) + lse_floats(target_ctas) * DV * 2);
}


// Launches the verify kernel of `tier` and the merge of split partials on `stream`. Returns a
// cudaError_t value (0 on success). No host synchronisation and no allocation. `mode` is 0
// in production; its bits drop stages for the benchmark's diagnostics or switch the small
// tier's cache policy (verify_common.cuh). kv_fp8 = 1: `kv` is SGLang's fp8_e4m3 pool (e4m3
// bytes, kv_stride in bytes), read as prefix K = e4m3 * k_scale, prefix V = e4m3 * v_scale;
// with kv_fp8 = 0 the scales are ignored.
int mla_verify_launch(const void* q, const void* kv, long long kv_stride, const void* kv_indptr, int kv_indptr_64,
                      const void* kv_indices, int kv_indices_64, const void* kext, long long ext_stride,
                      const void* mask, const void* mask_indptr, int mask_indptr_64, const void* qo_indptr,
                      int qo_indptr_64, int bs, int num_tokens, int H, float sm_scale, void* o, float* lse,
                      void* workspace, int target_ctas, int max_bs, void* stream, int mode, int tier,
                      int kv_fp8, float k_scale, float v_scale) {
  if (num_tokens == 0 || bs == 0) return 0;
  if (tier != 0 && tier != 1 && tier != 2 && tier != 4 && tier != 6 && tier != 8 && tier != 9)
    return (int)cudaErrorInvalidValue;
  if (kv_fp8 && (tier == 0 || tier == 9)) return (int)cudaErrorInvalidValue;   // rows64, rows64d_pair: bf16 only
  Params p;
  p.q = static_cast<const __nv_bfloat16*>(q);
  p.kv = static_cast<const __nv_bfloat16*>(kv);
  p.kv_stride = kv_stride;
  p.kv_indptr = kv_indptr; p.kv_indptr_64 = kv_indptr_64;
  p.kv_indices = kv_indices; p.kv_indices_64 = kv_indices_64;
  p.kext = static_cast<const __nv_bfloat16*>(kext);
  p.ext_stride = ext_stride;
  p.mask = static_cast<const uint8_t*>(mask);
  p.mask_indptr = mask_indptr; p.mask_indptr_64 = mask_indptr_64;
  p.qo_indptr = qo_indptr; p.qo_indptr_64 = qo_indptr_64;
  p.bs = bs; p.num_tokens = num_tokens; p.H = H;
  p.scale_log2 = sm_scale * LOG2E;
  p.o = static_cast<__nv_bfloat16*>(o);
  p.lse = lse;
  uint8_t* ws = static_cast<uint8_t*>(workspace);
  p.table = reinterpret_cast<int*>(ws);
  p.part_cap = 2 * target_ctas;   // the small tier raises it with its CTAs per SM
  p.part_lse = reinterpret_cast<float*>(ws + table_bytes(max_bs));
  p.part_o = reinterpret_cast<__nv_bfloat16*>(p.part_lse + lse_floats(target_ctas));
  p.target_ctas = target_ctas;
  p.mode = mode;
  p.kv8 = kv_fp8 ? static_cast<const uint8_t*>(kv) : nullptr;
  p.kscale_log2 = sm_scale * (kv_fp8 ? k_scale : 1.f) * LOG2E;
  p.v_scale = kv_fp8 ? v_scale : 1.f;
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return (int)err;
  if (tier == 0) {
    static bool done[64] = {};
    err = allow_smem(rows64::mla_verify_kernel_rows64, rows64::SMEM_BYTES, dev, done);
    if (err != cudaSuccess) return (int)err;
    rows64::mla_verify_kernel_rows64<<<grid_for(rows64::BM, target_ctas, num_tokens, H, bs), NTHREADS,
                                       rows64::SMEM_BYTES, st>>>(p);
    err = cudaGetLastError();
  } else if (tier == 6 || tier == 8) {
    const bool parts = mode & MODE_PARTS;
    if (kv_fp8) err = tier == 6 ? launch_rowsd<1, true>(p, num_tokens, bs, st, dev, parts)
                                : launch_rowsd<2, true>(p, num_tokens, bs, st, dev, parts);
    else err = tier == 6 ? launch_rowsd<1, false>(p, num_tokens, bs, st, dev, parts)
                         : launch_rowsd<2, false>(p, num_tokens, bs, st, dev, parts);
  } else if (tier == 9) {
    err = launch_rows64d_pair(p, num_tokens, bs, st, dev,
                              (mode & MODE_PARTS) ? 1 : 0);
  } else if (tier == 1) {
    err = kv_fp8 ? launch_small<1, true>(p, num_tokens, bs, st, dev) : launch_small<1, false>(p, num_tokens, bs, st, dev);
  } else if (tier == 2) {
    err = kv_fp8 ? launch_small<2, true>(p, num_tokens, bs, st, dev) : launch_small<2, false>(p, num_tokens, bs, st, dev);
  } else {
    err = kv_fp8 ? launch_small<4, true>(p, num_tokens, bs, st, dev) : launch_small<4, false>(p, num_tokens, bs, st, dev);
  }
  if (err != cudaSuccess) return (int)err;
  if (mode & MODE_NO_MERGE) return 0;
  const long long rows = (long long)num_tokens * H;
  const bool pdl = !(mode & MODE_NO_PDL) && pdl_capable(dev);
  if (tier == 0 || tier == 8 || tier == 9) err = launch_combine<rows64::BM>(p, rows, st, pdl);
  else if (tier == 6 || tier == 4) err = launch_combine<32>(p, rows, st, pdl);
  else if (tier == 1) err = launch_combine<8>(p, rows, st, pdl);
  else err = launch_combine<16>(p, rows, st, pdl);
  return (int)err;
}

#ifdef MLAV_TRACE
// The diagnostic build's phase timestamps (verify_common.cuh): reset = 1 zeroes them (on the
// current stream's device, synchronously), else copies [2][TRACE_CTAS][TRACE_POINTS] uint64 ns
// to `host`. dims (may be null) receives TRACE_CTAS and TRACE_POINTS.
int mla_verify_trace(void* host, int reset, int* dims) {
  if (dims) { dims[0] = TRACE_CTAS; dims[1] = TRACE_POINTS; }
  void* d = nullptr;
  cudaError_t err = cudaGetSymbolAddress(&d, g_trace);
  if (err != cudaSuccess) return (int)err;
  return (int)(reset ? cudaMemset(d, 0, sizeof(g_trace)) : cudaMemcpy(host, d, sizeof(g_trace), cudaMemcpyDeviceToHost));
}
#endif

#ifdef MLAV_BARWAIT
// The diagnostic build's wait clocks (verify_common.cuh): reset = 1 zeroes them (synchronously),
// else copies [2][BW_N] uint64 to `host`.
int mla_verify_barwait(void* host, int reset) {
  void* d = nullptr;
  cudaError_t err = cudaGetSymbolAddress(&d, g_barwait);
  if (err != cudaSuccess) return (int)err;
  return (int)(reset ? cudaMemset(d, 0, sizeof(g_barwait)) : cudaMemcpy(host, d, sizeof(g_barwait), cudaMemcpyDeviceToHost));
}
#endif

const char* mla_verify_error_string(int err) { return cudaGetErrorString(static_cast<cudaError_t>(err)); }

int mla_verify_num_sms(int device) {
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return -1;
  return n;
}

}  // extern "C"

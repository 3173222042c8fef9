// Split-KV, paged, bf16 MLA tree-verify attention (SGLang TARGET_VERIFY contract): the C API.
//
// One CTA = (request b, row tile, KV split). A request's query rows are its T_b draft tokens
// x H heads, packed row = t * H + h. The KV sequence of a request is its S_b prefix tokens
// (pool rows through kv_indices) followed by its T_b draft tokens (rows of k_extend); the
// tree mask applies to the draft part only. Two tiers share the schedule and the merge:
//   tier 0        rows64 (tier_rows64.cuh): 64-row tiles, Q rows in the MMA's M dimension
//   tier 1, 2, 4  small (tier_small.cuh): 8, 16 or 32-row tiles, operands swapped
// Any tier serves any input (more rows take more row tiles); the host picks the tier from
// static shapes only, so a launch can be captured in a CUDA graph and replayed with new
// lengths and trees. Only sm_80-class instructions (mma.sync, ldmatrix, cp.async).
#include "combine.cuh"
#include "tier_rows64.cuh"
#include "tier_small.cuh"

namespace {
using namespace mlav;

size_t table_bytes(int max_bs) { return ((size_t)max_bs * 4 * sizeof(int) + 255) / 256 * 256; }
int part_cap(int target_ctas) { return 2 * target_ctas; }
int rows_of_tier(int tier) { return tier == 0 ? rows64::BM : 8 * tier; }

// The >48 KB opt-in is per device and per kernel; set it once, outside any later graph capture.
template <typename K>
cudaError_t allow_smem(K kernel, int bytes, int dev, bool* done) {
  if (dev < 64 && done[dev]) return cudaSuccess;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess && dev < 64) done[dev] = true;
  return err;
}

template <int NT, int PF>
cudaError_t launch_small(const Params& p, int grid, cudaStream_t st, int dev) {
  static bool done[64] = {};
  constexpr int smem = small::Layout<NT>::SMEM;
  cudaError_t err = allow_smem(small::mla_verify_kernel_small<NT, PF>, smem, dev, done);
  if (err != cudaSuccess) return err;
  small::mla_verify_kernel_small<NT, PF><<<grid, NTHREADS, smem, st>>>(p);
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
  return m;
}
int mla_verify_rows_per_cta(int tier) { return rows_of_tier(tier); }

// Workspace for a device with `target_ctas` resident CTAs and up to `max_bs` requests
// (sized for the tier with the most rows per tile; bf16 partials).
long long mla_verify_workspace_bytes(int target_ctas, int max_bs) {
  size_t cap = part_cap(target_ctas);
  return (long long)(table_bytes(max_bs) + cap * rows64::BM * sizeof(float) + cap * rows64::BM * DV * 2);
}

int mla_verify_grid(int tier, int target_ctas, int num_tokens, int H, int bs) {
  return grid_for(rows_of_tier(tier), target_ctas, num_tokens, H, bs);
}

// Launches the verify kernel of `tier` and the merge of split partials on `stream`. Returns a
// cudaError_t value (0 on success). No host synchronisation and no allocation. `mode` is 0
// in production; its bits drop stages for the benchmark's diagnostics or pick the small
// tier's streaming options (verify_common.cuh).
int mla_verify_launch(const void* q, const void* kv, long long kv_stride, const void* kv_indptr, int kv_indptr_64,
                      const void* kv_indices, int kv_indices_64, const void* kext, long long ext_stride,
                      const void* mask, const void* mask_indptr, int mask_indptr_64, const void* qo_indptr,
                      int qo_indptr_64, int bs, int num_tokens, int H, float sm_scale, void* o, float* lse,
                      void* workspace, int target_ctas, int max_bs, void* stream, int mode, int tier) {
  if (num_tokens == 0 || bs == 0) return 0;
  if (tier != 0 && tier != 1 && tier != 2 && tier != 4) return (int)cudaErrorInvalidValue;
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
  p.part_cap = part_cap(target_ctas);
  p.part_lse = reinterpret_cast<float*>(ws + table_bytes(max_bs));
  p.part_o = reinterpret_cast<__nv_bfloat16*>(p.part_lse + (size_t)p.part_cap * rows64::BM);
  p.target_ctas = target_ctas;
  p.mode = mode;
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return (int)err;
  const int rows = rows_of_tier(tier);
  const int grid = grid_for(rows, target_ctas, num_tokens, H, bs);
  const bool pf = mode & MODE_PREFETCH;
  if (tier == 0) {
    static bool done[64] = {};
    err = allow_smem(rows64::mla_verify_kernel_rows64, rows64::SMEM_BYTES, dev, done);
    if (err != cudaSuccess) return (int)err;
    rows64::mla_verify_kernel_rows64<<<grid, NTHREADS, rows64::SMEM_BYTES, st>>>(p);
    err = cudaGetLastError();
  } else if (tier == 1) {
    err = pf ? launch_small<1, 4>(p, grid, st, dev) : launch_small<1, 0>(p, grid, st, dev);
  } else if (tier == 2) {
    err = pf ? launch_small<2, 4>(p, grid, st, dev) : launch_small<2, 0>(p, grid, st, dev);
  } else {
    err = pf ? launch_small<4, 4>(p, grid, st, dev) : launch_small<4, 0>(p, grid, st, dev);
  }
  if (err != cudaSuccess) return (int)err;
  if (mode & MODE_NO_MERGE) return 0;
  const unsigned cgrid = (unsigned)((long long)num_tokens * H * SLICES);
  if (tier == 0) mla_verify_combine<rows64::BM><<<cgrid, CT, 0, st>>>(p);
  else if (tier == 1) mla_verify_combine<8><<<cgrid, CT, 0, st>>>(p);
  else if (tier == 2) mla_verify_combine<16><<<cgrid, CT, 0, st>>>(p);
  else mla_verify_combine<32><<<cgrid, CT, 0, st>>>(p);
  return (int)cudaGetLastError();
}

const char* mla_verify_error_string(int err) { return cudaGetErrorString(static_cast<cudaError_t>(err)); }

int mla_verify_num_sms(int device) {
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return -1;
  return n;
}

}  // extern "C"

// The online-softmax step of the small tiers (included by tier_small.cuh and tier_small8.cuh):
// a row's logits of one tile lie with TPR adjacent threads, TOK each, and so do the row's running
// max and sum. Two calls, with small8's P scale made between them (one call around both parts
// moved an exp2 in the bf16 tier's sm_120 code).
#pragma once
#include "verify_common.cuh"

namespace mlav {

struct SoftmaxShift {
  float shift;   // the row's new max, or 0 while it has seen only masked keys (no inf - inf)
  float alpha;   // rescale of the row's running sum and O
};

// Takes this thread's TOK logits sv (-inf where masked) into its row's running max m_run.
template <int TOK, int TPR>
__device__ __forceinline__ SoftmaxShift online_max(const float (&sv)[TOK], float& m_run) {
  float mx = sv[0];
#pragma unroll
  for (int i = 1; i < TOK; ++i) mx = fmaxf(mx, sv[i]);
#pragma unroll
  for (int o = TPR / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const float m_new = fmaxf(m_run, mx);
  const float shift = m_new == -INFINITY ? 0.f : m_new;
  const float alpha = exp2f(m_run - shift);
  m_run = m_new;
  return {shift, alpha};
}

// Hands each P = exp2(sv[i] - shift) to put(i, P) and folds the P into this thread's share l_run
// of its row's running sum.
template <int TOK, class Put>
__device__ __forceinline__ void online_sum(const float (&sv)[TOK], SoftmaxShift sh, float& l_run, Put put) {
  float rs = 0.f;
#pragma unroll
  for (int i = 0; i < TOK; ++i) {
    const float pv = exp2f(sv[i] - sh.shift);
    rs += pv;
    put(i, pv);
  }
  l_run = l_run * sh.alpha + rs;
}

}  // namespace mlav

// The f16 MMA operands of the tiers that read SGLang's fp8_e4m3 pool straight from the e4m3 bytes
// in shared memory (tier_small8.cuh, and tier_rowsd.cuh's fp8 copies): e4m3 -> f16 in registers,
// and q's f16 scale.
#pragma once
#include <cuda_fp16.h>
#include <stdint.h>

#include "verify_common.cuh"

namespace mlav {

// e4m3 -> f16 is exact. sm_89 and newer convert two values in one instruction;
// sm_80/86 move the bits, which reads each value times 2^-8 (KV16_SHIFT), folded into the scales.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
constexpr int KV16_SHIFT = 8;
#else
constexpr int KV16_SHIFT = 0;
#endif
// the e4m3 values in bits 7..0 and 15..8 of x as f16x2 {lo, hi}, times 2^-KV16_SHIFT
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t d;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(d) : "h"((unsigned short)(x & 0xffffu)));
  return d;
#else
  const uint32_t a = __byte_perm(x, 0u, 0x1404);   // bytes 0, 1 -> bits 15..8, 31..24
  return (a & 0x80008000u) | ((a >> 1) & 0x3f803f80u);
#endif
}
// the e4m3 values in bits 23..16 and 31..24 of x, as above. The convert reads the high half in place
// (F2FP's .H1 operand); a shift by 16 first is one more instruction a pair on sm_90
__device__ __forceinline__ uint32_t e4m3x2_hi_to_f16x2(uint32_t x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t d;
  asm("{.reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, hi;}\n" : "=r"(d) : "r"(x));
  return d;
#else
  const uint32_t a = __byte_perm(x, 0u, 0x3424);   // bytes 2, 3 -> bits 15..8, 31..24
  return (a & 0x80008000u) | ((a >> 1) & 0x3f803f80u);
#endif
}
__device__ __forceinline__ uint32_t f16x2_of(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}


// q enters the f16 MMAs as bf16 q times 2^-qe, qe from the largest |q| the CTA holds, so that every
// value stays below 2^15 (bf16 is exact in f16 from 2^-14 up); 2^qe joins the prefix logits' scale.
// m folded with the larger |value| of the bf16 pair x
__device__ __forceinline__ float absmax_bf16x2(float m, uint32_t x) {
  const float2 f = unpack_bf16(x);
  return fmaxf(m, fmaxf(fabsf(f.x), fabsf(f.y)));
}
__device__ __forceinline__ int q_f16_exponent(float max_abs_q) {
  return max_abs_q >= 16384.f ? ilogbf(max_abs_q) - 13 : 0;
}
// the bf16 pair x times s (= 2^-qe) as f16x2
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t x, float s) {
  const float2 f = unpack_bf16(x);
  return f16x2_of(f.x * s, f.y * s);
}

}  // namespace mlav

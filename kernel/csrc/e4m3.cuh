// e4m3 -> f16 in registers, for the tiers that feed SGLang's fp8_e4m3 pool to f16 MMAs straight
// from the e4m3 bytes in shared memory (tier_small8.cuh, and tier_rowsd.cuh's fp8 copies).
#pragma once
#include <cuda_fp16.h>
#include <stdint.h>

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
__device__ __forceinline__ uint32_t f16x2_of(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

}  // namespace mlav

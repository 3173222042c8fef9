// The tensor-core instruction every kernel uses: mma.sync m16n8k16, bf16 (or, for the fp8 pool's
// small tier, f16) in, fp32 accumulate, D = A x B + D in place. sm_80 and newer, sm_120 included.
#pragma once
#include <stdint.h>

// F16: f16 inputs (the fp8 pool's prefix tiles, widened to f16), else bf16. PTX names the input
// type inside the instruction, so the two differ only in the asm text.
template <bool F16 = false>
__device__ __forceinline__ void mma16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
#define MLAV_MMA16816(T)                                                                              \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." T "." T ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, " \
               "{%8,%9}, {%0,%1,%2,%3};\n"                                                            \
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                       \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
  if constexpr (F16) MLAV_MMA16816("f16");
  else MLAV_MMA16816("bf16");
#undef MLAV_MMA16816
}

// The slot-id window of the tiers that prefetch KV slot ids (included by tier_small.cuh,
// tier_small8.cuh and tier_rowsd.cuh): one thread per token copies the token's slot id by
// cp.async into a shared ring of WIN tiles; the tile's loads read it back IDX_AHEAD tiles later,
// after a wait_group and a CTA barrier have passed in between, so that no register ever waits on
// an index load.
#pragma once
#include "verify_common.cuh"

namespace mlav {

// TILE tokens a tile. A token has a slot id when its tile is below n and its position below
// both end1 and end2 (p1 and S; small8, which has their minimum already, passes it twice).
// The bounds are references, so rowsd reads its item's fields from shared memory where used, and
// the test is one condition written out: with the test as a callable the tier passes in, nvcc
// emitted different code (PTX and SASS) for every tier.
template <int TILE, int WIN>
struct SlotWindow {
  const Params& p;
  const Item& it;
  uint8_t* win;      // [WIN][TILE] slot ids, 8 B each
  int tok, lane;     // this thread's token of a tile; lane 0 of a token copies its id
  int n;
  const int& end1;
  const int& end2;
  int isz = p.kv_indices_64 ? 8 : 4;   // bytes of a slot id in kv_indices

  // direct load: the prologue's first tiles only
  __device__ __forceinline__ long long slot_of(int tile) const {
    const int pos = it.p0 + tile * TILE + tok;
    if (tile >= n || pos >= end1 || pos >= end2) return -1;
    return p.kv_indices ? ld_index(p.kv_indices, p.kv_indices_64, it.kv0 + pos) : it.kv0 + pos;
  }
  // the same id as a 32-bit load (an 8-byte id's low word: slot ids are below 2^31), zero-extended
  // where used: slot_of's sign extension sits right behind each load, inside the bounds test's
  // branch, so each of the prologue's loads waited for the one before it
  __device__ __forceinline__ unsigned slot32_of(int tile) const {
    const int pos = it.p0 + tile * TILE + tok;
    if (tile >= n || pos >= end1 || pos >= end2) return 0u;
    return p.kv_indices ? __ldg(reinterpret_cast<const unsigned*>(p.kv_indices) + (it.kv0 + pos) * (isz / 4))
                        : (unsigned)(it.kv0 + pos);
  }
  __device__ __forceinline__ void copy_index(int tile) const {
    const int pos = it.p0 + tile * TILE + tok;
    if (lane != 0 || !p.kv_indices || tile >= n || pos >= end1 || pos >= end2) return;
    const uint8_t* src = reinterpret_cast<const uint8_t*>(p.kv_indices) + (it.kv0 + pos) * isz;
    const uint32_t dst = smem_u32(win + ((tile % WIN) * TILE + tok) * 8);
    if (isz == 8) asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src));
    else asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
  }
  __device__ __forceinline__ long long window_slot(int tile) const {
    const int pos = it.p0 + tile * TILE + tok;
    if (!p.kv_indices) return it.kv0 + pos;
    const uint8_t* e = win + ((tile % WIN) * TILE + tok) * 8;
    return isz == 8 ? *reinterpret_cast<const long long*>(e) : (long long)*reinterpret_cast<const int*>(e);
  }
};

// The loop's copies of one tile, the lean way (kernel/NOTES.md, the overlap rung), for the tiers
// with one 16-token tile a step (rowsd, small; tier_rows64d_pair.cuh has the two-tile form).
// copy_row_lean: one loader thread's share of its token's row (`part` of TPT threads a token) into
// stage tile % STAGES of `ring`: the slot id from the window, one base address (a 32 x 32-bit
// product: slot ids and strides are below 2^31), the copies at immediate offsets; past the range
// the base is the pool's first row and nothing is read (src_bytes 0 zero-fills).
template <int TPT, int TILE, int WIN, int STAGES>
__device__ __forceinline__ void copy_row_lean(const Params& p, const Item& it, const uint8_t* win,
                                              __nv_bfloat16* ring, int tile, int tok, int part, bool evict_first) {
  const int pos = it.p0 + tile * TILE + tok;
  const uint2 e = *reinterpret_cast<const uint2*>(win + ((tile % WIN) * TILE + tok) * 8);
  const unsigned slot = p.kv_indices ? e.x : (unsigned)it.kv0 + (unsigned)pos;   // (an 8-byte id's low word)
  const bool pre = pos < it.S, in = pos < it.p1;
  const char* base = reinterpret_cast<const char*>(pre ? p.kv : p.kext);
  const unsigned row = pre ? slot : (unsigned)(it.qo0 + pos - it.S);
  const unsigned stride = 2u * (unsigned)(pre ? p.kv_stride : p.ext_stride);
  const char* src = (in ? base + (unsigned long long)row * stride : reinterpret_cast<const char*>(p.kv)) + part * 16;
  const int bytes = in ? 16 : 0;
  const uint32_t dd = smem_u32(ring + (tile % STAGES) * (TILE * D) + swz(tok, part) * 8);
  const uint64_t pol = policy_kv(evict_first);
  cp_async16_run<CHUNKS / TPT, TPT * 16>(dd, src, bytes, pol);
  if constexpr (CHUNKS % TPT != 0)
    if (part < CHUNKS % TPT) cp_async16_at<CHUNKS / TPT * TPT * 16>(dd, src, bytes, pol);
}

}  // namespace mlav

// Tiling of chunk_gated_delta_rule: filled by the host planner
// (chunk_gated_delta_rule_tiling.cpp), read by the mixed AIC+AIV kernel
// (../op_kernel). The single source of the layout for the stand-in and the
// CANN build, including the buffer sizes both the kernel (InitBuffer) and the
// planner (budget checks) compute from it. Device-safe: no standard library.
#ifndef QWEN_ASCENDC_CHUNK_GATED_DELTA_RULE_TILING_H
#define QWEN_ASCENDC_CHUNK_GATED_DELTA_RULE_TILING_H

#include "qwen_tiling_common.h"

// The size helpers below run on both sides: device code has __aicore__ (a
// macro in CANN and in the stand-in), the host planner does not.
#ifdef __aicore__
#define QWEN_GDN_CHUNK_FN __aicore__ inline
#else
#define QWEN_GDN_CHUNK_FN inline
#endif

namespace qwen_ascendc {

// Tokens per chunk, and the largest head dims the on-chip buffers hold
// (a Dk x Dv float state is exactly one 64 KB L0B).
constexpr uint32_t kGdnChunk = 64;
constexpr uint32_t kGdnMaxHeadDim = 128;

struct GdnChunkTiling {
  uint32_t numSeqs;          // N
  uint32_t seqLen;           // T per sequence when there is no cu_seqlens
  uint32_t totalTokens;      // B * T
  uint32_t numKHeads;        // Hk
  uint32_t numVHeads;        // Hv
  uint32_t dk;               // multiple of 16, <= kGdnMaxHeadDim
  uint32_t dv;               // multiple of 16, <= kGdnMaxHeadDim
  uint32_t qkvDtype;
  uint32_t betaDtype;
  uint32_t cuDtype;          // QWEN_DT_INT32 / QWEN_DT_INT64 when cu_seqlens is given
  uint32_t idxDtype;         // QWEN_DT_INT32 / QWEN_DT_INT64 when ssm_state_indices is given
  uint32_t hasCuSeqlens;
  uint32_t hasInitialState;
  uint32_t hasIndices;
  uint32_t hasHasInitial;
  uint32_t writeFinal;
  uint32_t useL2Norm;
  uint32_t usedCores;        // AIC+2 AIV groups; units (sequence, value head) go round-robin
  uint32_t wsFloatsPerGroup; // GM workspace of one group, floats
  float scale;
};

// The GM workspace of one group: float matrices handed between its AIC and AIVs.
enum GdnChunkSlot : uint32_t {
  WS_KC,     // 64 x Dk  k (l2-normalised), float
  WS_QS,     // 64 x Dk  q * scale (l2-normalised)
  WS_QD,     // 64 x Dk  qs * exp(gc)
  WS_KB,     // 64 x Dk  k * beta * exp(gc)
  WS_VB,     // 64 x Dv  v * beta
  WS_KENDT,  // Dk x 64  (k * exp(gc_last - gc))^T
  WS_G,      // 64 x 64  k k^T        (cube)
  WS_P,      // 64 x 64  qs k^T       (cube)
  WS_T,      // 64 x 64  (I + A)^-1
  WS_ATT,    // 64 x 64  P * causal decay
  WS_W,      // 64 x Dk  T Kb         (cube)
  WS_U,      // 64 x Dv  T Vb         (cube)
  WS_WS,     // 64 x Dv  W S          (cube)
  WS_VNEW,   // 64 x Dv  U - W S
  WS_SPART,  // Dk x Dv  Kend^T Vnew  (cube)
  WS_STATE,  // Dk x Dv  the state entering the chunk
  WS_SLOTS
};

QWEN_GDN_CHUNK_FN uint32_t GdnChunkSlotFloats(uint32_t slot, uint32_t dk, uint32_t dv) {
  switch (slot) {
    case WS_KC: case WS_QS: case WS_QD: case WS_KB: case WS_KENDT: case WS_W: return kGdnChunk * dk;
    case WS_VB: case WS_U: case WS_WS: case WS_VNEW: return kGdnChunk * dv;
    case WS_G: case WS_P: case WS_T: case WS_ATT: return kGdnChunk * kGdnChunk;
    default: return dk * dv;  // WS_SPART, WS_STATE
  }
}
QWEN_GDN_CHUNK_FN uint32_t GdnChunkSlotOffset(uint32_t slot, uint32_t dk, uint32_t dv) {
  uint32_t off = 0;
  for (uint32_t s = 0; s < slot; ++s) off += GdnChunkSlotFloats(s, dk, dv);
  return off;
}

// Unified buffer of an AIV, in the kernel's InitBuffer order: a 64x64 causal
// mask and three 64x64 float matrices, two 64 x max(Dk, Dv) float row blocks,
// one raw row block in the inputs' dtype, six 64-float vectors, a 32-byte
// reduction result and the ReduceSum work area.
QWEN_GDN_CHUNK_FN uint32_t GdnChunkRowFloats(uint32_t dk, uint32_t dv) { return kGdnChunk * (dk > dv ? dk : dv); }
QWEN_GDN_CHUNK_FN uint32_t GdnChunkUbBytes(uint32_t dk, uint32_t dv, uint32_t elemBytes) {
  const uint32_t mat = kGdnChunk * kGdnChunk * 4;
  const uint32_t rows = GdnChunkRowFloats(dk, dv);
  const uint32_t work = ((dk + 63) / 64 + 7) / 8 * 8 * 4;
  return 4 * mat + 2 * rows * 4 + (rows * elemBytes + 31) / 32 * 32 + 6 * kGdnChunk * 4 + 32 + work;
}
// L1 (A1 + B1) and L0A / L0B / L0C of the AIC, in the kernel's InitBuffer order.
QWEN_GDN_CHUNK_FN uint32_t GdnChunkL0ABytes() { return kGdnMaxHeadDim * kGdnChunk * 4; }
QWEN_GDN_CHUNK_FN uint32_t GdnChunkL0BBytes() { return kGdnMaxHeadDim * kGdnMaxHeadDim * 4; }
QWEN_GDN_CHUNK_FN uint32_t GdnChunkL0CBytes() { return kGdnMaxHeadDim * kGdnMaxHeadDim * 4; }

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_CHUNK_GATED_DELTA_RULE_TILING_H

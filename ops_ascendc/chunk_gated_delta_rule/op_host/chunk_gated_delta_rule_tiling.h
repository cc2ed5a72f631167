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

// Tokens per chunk; the cube tile the head dims are padded to; the largest
// head dims: a 64 x Dk float operand is loaded whole into L0A (64 KB at 256).
constexpr uint32_t kGdnChunk = 64;
constexpr uint32_t kGdnCubeTile = 16;
constexpr uint32_t kGdnMaxHeadDim = 256;
// The AIC's memories the kernel takes whole (A2/A3: L0A, L0B 64 KB; L0C 128 KB).
constexpr uint32_t kGdnL0ABytes = 64u * 1024u;
constexpr uint32_t kGdnL0BBytes = 64u * 1024u;
constexpr uint32_t kGdnL0CBytes = 128u * 1024u;

struct GdnChunkTiling {
  uint32_t numSeqs;          // N
  uint32_t seqLen;           // T per sequence when there is no cu_seqlens
  uint32_t totalTokens;      // B * T
  uint32_t numKHeads;        // Hk
  uint32_t numVHeads;        // Hv
  uint32_t dk;               // 1..kGdnMaxHeadDim
  uint32_t dv;               // 1..kGdnMaxHeadDim
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
  uint32_t dkPad;            // dk, dv rounded up to kGdnCubeTile: every on-chip and workspace
  uint32_t dvPad;            //   matrix is this wide, its padding zeros
  uint32_t rowTile;          // chunk rows an AIV holds at once (64, 32, 16 or 8)
  uint32_t colTile;          // columns of one cube product per Mmad (a multiple of 16)
  uint32_t numCheckpoints;   // P: requested chunk-boundary states (0: none, no checkpoint plan)
  float scale;
};

QWEN_GDN_CHUNK_FN uint32_t GdnPadDim(uint32_t d) { return (d + kGdnCubeTile - 1) / kGdnCubeTile * kGdnCubeTile; }

// The checkpoint plan: an int32 GM array the host builds from the op's
// checkpoint_boundaries [P, 2] (rows (sequence r, j): the state after r's
// first 64 * j tokens goes to checkpoints[p], float32 [P, Hv, Dk, Dv]), so that
// the AIV running unit (r, h) finds its sequence's requests without a search:
//   [0, N]              first entry of each sequence: entries [plan[r], plan[r + 1])
//                       are sequence r's, the entries sorted by (sequence, j);
//   N + 1 + 2e, + 1     entry e: j (the state after j chunks) and p (its output row).
// Every p is in [0, P) and each entry is read only by its own sequence's
// units, which write row p only at the end of a whole chunk j - 1 they
// compute: an entry whose j no chunk of the sequence ends on writes nothing.
QWEN_GDN_CHUNK_FN uint32_t GdnCheckpointPlanInts(uint32_t numSeqs, uint32_t numCheckpoints) {
  return numSeqs + 1 + 2 * numCheckpoints;
}
QWEN_GDN_CHUNK_FN uint32_t GdnCheckpointEntry(uint32_t numSeqs, uint32_t e) { return numSeqs + 1 + 2 * e; }

// The GM workspace of one group: float matrices handed between its AIC and
// AIVs, Dk and Dv padded (Dkp, Dvp) with zeros in the padding.
enum GdnChunkSlot : uint32_t {
  WS_KC,     // 64 x Dkp  k (l2-normalised), float
  WS_QS,     // 64 x Dkp  q * scale (l2-normalised)
  WS_QD,     // 64 x Dkp  qs * exp(gc)
  WS_KB,     // 64 x Dkp  k * beta * exp(gc)
  WS_VB,     // 64 x Dvp  v * beta
  WS_KENDT,  // Dkp x 64  (k * exp(gc_last - gc))^T
  WS_G,      // 64 x 64   k k^T        (cube)
  WS_P,      // 64 x 64   qs k^T       (cube)
  WS_T,      // 64 x 64   (I + A)^-1
  WS_ATT,    // 64 x 64   P * causal decay
  WS_W,      // 64 x Dkp  T Kb         (cube)
  WS_U,      // 64 x Dvp  T Vb         (cube)
  WS_WS,     // 64 x Dvp  W S          (cube)
  WS_VNEW,   // 64 x Dvp  U - W S
  WS_SPART,  // Dkp x Dvp Kend^T Vnew  (cube)
  WS_STATE,  // Dkp x Dvp the state entering the chunk
  WS_SLOTS
};

// Slot sizes and offsets in floats; dkp, dvp are the padded head dims.
QWEN_GDN_CHUNK_FN uint32_t GdnChunkSlotFloats(uint32_t slot, uint32_t dkp, uint32_t dvp) {
  switch (slot) {
    case WS_KC: case WS_QS: case WS_QD: case WS_KB: case WS_KENDT: case WS_W: return kGdnChunk * dkp;
    case WS_VB: case WS_U: case WS_WS: case WS_VNEW: return kGdnChunk * dvp;
    case WS_G: case WS_P: case WS_T: case WS_ATT: return kGdnChunk * kGdnChunk;
    default: return dkp * dvp;  // WS_SPART, WS_STATE
  }
}
QWEN_GDN_CHUNK_FN uint32_t GdnChunkSlotOffset(uint32_t slot, uint32_t dkp, uint32_t dvp) {
  uint32_t off = 0;
  for (uint32_t s = 0; s < slot; ++s) off += GdnChunkSlotFloats(s, dkp, dvp);
  return off;
}

// Unified buffer of an AIV, in the kernel's InitBuffer order: a 64x64 causal
// mask and three 64x64 float matrices, two blocks of rowTile x max(Dkp, Dvp)
// floats, one raw block of as many elements in the inputs' dtype, six
// 64-float vectors, a 32-byte reduction result and the ReduceSum work area.
QWEN_GDN_CHUNK_FN uint32_t GdnChunkRowFloats(uint32_t rowTile, uint32_t dkp, uint32_t dvp) {
  return rowTile * (dkp > dvp ? dkp : dvp);
}
QWEN_GDN_CHUNK_FN uint32_t GdnChunkWorkBytes(uint32_t dkp) { return ((dkp + 63) / 64 + 7) / 8 * 8 * 4; }
QWEN_GDN_CHUNK_FN uint32_t GdnChunkUbBytes(uint32_t rowTile, uint32_t dkp, uint32_t dvp, uint32_t elemBytes) {
  const uint32_t mat = kGdnChunk * kGdnChunk * 4;
  const uint32_t rows = GdnChunkRowFloats(rowTile, dkp, dvp);
  return 4 * mat + 2 * rows * 4 + (rows * elemBytes + 31) / 32 * 32 + 6 * kGdnChunk * 4 + 32 + GdnChunkWorkBytes(dkp);
}
// The widest column tile of a product whose inner (k) and outer (m) dims are
// at most `maxDim`: k x colTile floats fill at most L0B, m x colTile at most L0C.
QWEN_GDN_CHUNK_FN uint32_t GdnChunkColTileLimit(uint32_t maxDim) {
  const uint32_t byL0B = kGdnL0BBytes / 4 / maxDim, byL0C = kGdnL0CBytes / 4 / maxDim;
  return (byL0B < byL0C ? byL0B : byL0C) / kGdnCubeTile * kGdnCubeTile;
}

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_CHUNK_GATED_DELTA_RULE_TILING_H

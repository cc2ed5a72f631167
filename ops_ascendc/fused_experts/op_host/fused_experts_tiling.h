// Tiling of fused_experts: filled by the host planner (fused_experts_tiling.cpp)
// from the shapes and the routing counts, read by the mixed AIC + AIV kernel
// (../op_kernel). The single source of the layout for the stand-in and the
// CANN build. Device-safe: no standard library.
//
// Every on-chip buffer size the kernel passes to TPipe::InitBuffer is a field
// here, computed once by the planner, so the planner's totals are the
// kernel's buffers byte for byte.
#ifndef QWEN_ASCENDC_FUSED_EXPERTS_TILING_H
#define QWEN_ASCENDC_FUSED_EXPERTS_TILING_H

#include "qwen_tiling_common.h"

namespace qwen_ascendc {

// Cross-core flag ids of the per-unit hand-off (strictly alternating).
constexpr uint16_t kFlagGateUp = 0;  // AIC -> AIVs: the unit's gate/up rows [m, 2I] (float) are in the workspace
constexpr uint16_t kFlagAct = 1;     // AIVs -> AIC: SwiGLU rows [m, I] (operand dtype) are in the workspace

// The largest tiles: rows (pairs) of a unit, output columns and k of one Mmad.
constexpr uint32_t kExpertsMaxRows = 128;
constexpr uint32_t kExpertsMaxCols = 128;
constexpr uint32_t kExpertsMaxK = 256;

struct FusedExpertsTiling {
  uint32_t numTokens;   // T
  uint32_t topK;        // K
  uint32_t numExperts;  // E
  uint32_t hidden;      // H
  uint32_t inter;       // I
  uint32_t dtype;       // hidden_states / w13 / w2 dtype: the cube's operand dtype
  uint32_t numPairs;    // P = T * K
  // A unit is (expert, up to mTile consecutive pairs of its range in expert order);
  // units go round-robin over the groups in expert order.
  uint32_t numUnits;
  uint32_t mTile;       // rows per unit, a multiple of 16 (planned from the largest expert count)
  uint32_t nTile;       // output columns per Mmad and Fixpipe, a multiple of 16
  uint32_t kTile;       // k per Mmad (accumulated in L0C over the whole k), a multiple of 16
  uint32_t colTile;     // AIV: floats per vector step (SwiGLU and the weighted sum), a multiple of 8
  uint32_t usedCores;   // AIC groups (each with two AIVs)
  // Cube buffers (bytes): L1 A (a unit's rows, the whole k), L1 B (one weight tile), L0A, L0B, L0C.
  uint32_t l1A, l1B, l0a, l0b, l0c;
  // Vector buffers (bytes) of one AIV: three float rows and one raw row of colTile elements.
  uint32_t ubFloat, ubRaw;
  // GM workspace of one group (bytes from the group's base, group * wsGroupBytes).
  uint32_t wsGroupBytes;
  uint32_t wsGateUp;    // [mTile, 2I] float: x . w13[e]^T
  uint32_t wsAct;       // [mTile, actPitch] operand dtype: silu(gate) * up
  uint32_t actPitch;    // I rounded up to 16: rows start on 32-byte blocks, so the two AIVs never share a word
};

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_FUSED_EXPERTS_TILING_H

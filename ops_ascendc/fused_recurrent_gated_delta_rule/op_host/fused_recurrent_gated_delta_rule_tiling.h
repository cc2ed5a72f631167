// Tiling of fused_recurrent_gated_delta_rule: filled by the host planner (fused_recurrent_gated_delta_rule_tiling.cpp), read by the
// kernel (../op_kernel). The single source of the layout for the stand-in and
// the CANN build. Device-safe: no standard library.
#ifndef QWEN_ASCENDC_FUSED_RECURRENT_GATED_DELTA_RULE_TILING_H
#define QWEN_ASCENDC_FUSED_RECURRENT_GATED_DELTA_RULE_TILING_H

#include "qwen_tiling_common.h"

namespace qwen_ascendc {

struct GdnRecurrentTiling {
  uint32_t numSeqs;          // N
  uint32_t seqLen;           // T per sequence when there is no cu_seqlens
  uint32_t totalTokens;      // B * T
  uint32_t numKHeads;        // Hk
  uint32_t numVHeads;        // Hv
  uint32_t dk;
  uint32_t dv;
  uint32_t qkvDtype;
  uint32_t betaDtype;
  uint32_t cuDtype;          // QWEN_DT_INT32 / QWEN_DT_INT64 when cu_seqlens is given
  uint32_t idxDtype;         // QWEN_DT_INT32 / QWEN_DT_INT64 when ssm_state_indices is given
  uint32_t hasCuSeqlens;
  uint32_t hasInitialState;
  uint32_t hasIndices;
  uint32_t hasHasInitial;
  uint32_t writeFinal;       // final_state output [N, Hv, Dk, Dv]
  uint32_t useL2Norm;
  uint32_t dvTile;           // state columns per tile
  uint32_t pitchDv;          // dvTile rounded up to 8 floats
  uint32_t unitsPerCore;     // units are (sequence, value head, Dv tile)
  uint32_t usedCores;
  uint32_t numDvTiles;
  float scale;
};

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_FUSED_RECURRENT_GATED_DELTA_RULE_TILING_H

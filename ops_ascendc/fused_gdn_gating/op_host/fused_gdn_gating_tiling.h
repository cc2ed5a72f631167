// Tiling of fused_gdn_gating: filled by the host planner (fused_gdn_gating_tiling.cpp),
// read by the kernel (../op_kernel). The single source of the layout for the
// stand-in and the CANN build. Device-safe: no standard library.
#ifndef QWEN_ASCENDC_FUSED_GDN_GATING_TILING_H
#define QWEN_ASCENDC_FUSED_GDN_GATING_TILING_H

#include "qwen_tiling_common.h"

namespace qwen_ascendc {

struct FusedGdnGatingTiling {
  uint32_t numTokens;        // T
  uint32_t numHeads;         // Hv
  uint32_t aDtype;
  uint32_t bDtype;           // also beta's dtype
  uint32_t aLogDtype;
  uint32_t dtBiasDtype;
  uint32_t tileRows;         // token rows per tile: a tile is tileRows * Hv contiguous elements
  uint32_t numTiles;
  uint32_t unitsPerCore;     // units are tiles, in token order
  uint32_t usedCores;
};

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_FUSED_GDN_GATING_TILING_H

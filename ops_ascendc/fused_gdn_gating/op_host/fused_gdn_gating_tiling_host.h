// Host planner of fused_gdn_gating (fused_gdn_gating_tiling.cpp).
#ifndef QWEN_ASCENDC_FUSED_GDN_GATING_TILING_HOST_H
#define QWEN_ASCENDC_FUSED_GDN_GATING_TILING_HOST_H

#include "tiling_host.h"
#include "fused_gdn_gating_tiling.h"

namespace qwen_ascendc {

// `shape` carries every field but the tiling ones (tileRows, numTiles, unitsPerCore, usedCores).
FusedGdnGatingTiling PlanFusedGdnGating(const FusedGdnGatingTiling& shape, const LaunchConfig& cfg);
// Unified-buffer bytes the kernel asks TPipe for under tiling `t` (its InitBuffer calls, byte for byte).
uint64_t FusedGdnGatingUb(const FusedGdnGatingTiling& t);

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_FUSED_GDN_GATING_TILING_HOST_H

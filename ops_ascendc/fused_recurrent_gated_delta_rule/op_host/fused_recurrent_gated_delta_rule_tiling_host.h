// Host planner of fused_recurrent_gated_delta_rule (fused_recurrent_gated_delta_rule_tiling.cpp).
#ifndef QWEN_ASCENDC_FUSED_RECURRENT_GATED_DELTA_RULE_TILING_HOST_H
#define QWEN_ASCENDC_FUSED_RECURRENT_GATED_DELTA_RULE_TILING_HOST_H

#include "tiling_host.h"
#include "fused_recurrent_gated_delta_rule_tiling.h"

namespace qwen_ascendc {

// `shape` carries every field but the tiling ones (dvTile, pitchDv, numDvTiles, unitsPerCore, usedCores).
GdnRecurrentTiling PlanGdnRecurrent(const GdnRecurrentTiling& shape, const LaunchConfig& cfg);
// Unified-buffer bytes the kernel asks TPipe for under tiling `t` (its InitBuffer calls, byte for byte).
uint64_t GdnRecurrentUb(const GdnRecurrentTiling& t);

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_FUSED_RECURRENT_GATED_DELTA_RULE_TILING_HOST_H

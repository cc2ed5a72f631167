// Host planner of causal_conv1d_update (causal_conv1d_update_tiling.cpp).
#ifndef QWEN_ASCENDC_CAUSAL_CONV1D_UPDATE_TILING_HOST_H
#define QWEN_ASCENDC_CAUSAL_CONV1D_UPDATE_TILING_HOST_H

#include "tiling_host.h"
#include "causal_conv1d_update_tiling.h"

namespace qwen_ascendc {

// `shape` carries every field but the tiling ones (tileChannels, numTiles, unitsPerCore, usedCores).
CausalConv1dUpdateTiling PlanCausalConv1dUpdate(const CausalConv1dUpdateTiling& shape, const LaunchConfig& cfg);
// Unified-buffer bytes the kernel asks TPipe for under tiling `t` (its InitBuffer calls, byte for byte).
uint64_t CausalConv1dUpdateUb(const CausalConv1dUpdateTiling& t);

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_CAUSAL_CONV1D_UPDATE_TILING_HOST_H

// Host planner of causal_conv1d_fn (causal_conv1d_fn_tiling.cpp).
#ifndef QWEN_ASCENDC_CAUSAL_CONV1D_FN_TILING_HOST_H
#define QWEN_ASCENDC_CAUSAL_CONV1D_FN_TILING_HOST_H

#include "tiling_host.h"
#include "causal_conv1d_fn_tiling.h"

namespace qwen_ascendc {

// `shape` carries every field but the tiling ones (tileChannels, tileTokens, numTiles, unitsPerCore, usedCores).
CausalConv1dFnTiling PlanCausalConv1dFn(const CausalConv1dFnTiling& shape, const LaunchConfig& cfg);
// Unified-buffer bytes the kernel asks TPipe for under tiling `t` (its InitBuffer calls, byte for byte).
uint64_t CausalConv1dFnUb(const CausalConv1dFnTiling& t);

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_CAUSAL_CONV1D_FN_TILING_HOST_H

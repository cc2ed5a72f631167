// Tiling of causal_conv1d_update: filled by the host planner (causal_conv1d_update_tiling.cpp), read by the
// kernel (../op_kernel). The single source of the layout for the stand-in and
// the CANN build. Device-safe: no standard library.
#ifndef QWEN_ASCENDC_CAUSAL_CONV1D_UPDATE_TILING_H
#define QWEN_ASCENDC_CAUSAL_CONV1D_UPDATE_TILING_H

#include "qwen_tiling_common.h"

namespace qwen_ascendc {

struct CausalConv1dUpdateTiling {
  uint32_t batch;
  uint32_t channels;
  uint32_t width;            // K
  uint32_t numStates;        // S
  uint32_t xDtype;
  uint32_t stateDtype;
  uint32_t weightDtype;
  uint32_t biasDtype;
  uint32_t idxDtype;
  uint32_t hasBias;
  uint32_t silu;
  uint32_t tileChannels;     // channels per tile (multiple of 32 or all of them)
  uint32_t numTiles;
  uint32_t unitsPerCore;     // units are (channel tile, batch row), tile-major
  uint32_t usedCores;
};

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_CAUSAL_CONV1D_UPDATE_TILING_H

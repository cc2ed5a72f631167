// Tiling of causal_conv1d_fn: filled by the host planner (causal_conv1d_fn_tiling.cpp),
// read by the kernel (../op_kernel). The single source of the layout for the
// stand-in and the CANN build. Device-safe: no standard library.
#ifndef QWEN_ASCENDC_CAUSAL_CONV1D_FN_TILING_H
#define QWEN_ASCENDC_CAUSAL_CONV1D_FN_TILING_H

#include "qwen_tiling_common.h"

namespace qwen_ascendc {

struct CausalConv1dFnTiling {
  uint32_t numTokens;        // T
  uint32_t channels;         // C
  uint32_t width;            // K
  uint32_t numStates;        // S
  uint32_t numSeqs;          // N
  uint32_t xDtype;
  uint32_t stateDtype;
  uint32_t weightDtype;
  uint32_t biasDtype;
  uint32_t qslDtype;         // query_start_loc: QWEN_DT_INT32 / QWEN_DT_INT64
  uint32_t idxDtype;         // cache_indices: QWEN_DT_INT32 / QWEN_DT_INT64
  uint32_t hasBias;
  uint32_t silu;
  uint32_t tileChannels;     // channels per tile (a multiple of 32)
  uint32_t tileTokens;       // tokens per chunk of a sequence
  uint32_t numTiles;
  uint32_t unitsPerCore;     // units are (channel tile, sequence), tile-major
  uint32_t usedCores;
};

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_CAUSAL_CONV1D_FN_TILING_H

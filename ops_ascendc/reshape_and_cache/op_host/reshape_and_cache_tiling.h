// Tiling of reshape_and_cache: filled by the host planner (reshape_and_cache_tiling.cpp), read by the
// kernel (../op_kernel). The single source of the layout for the stand-in and
// the CANN build. Device-safe: no standard library.
#ifndef QWEN_ASCENDC_RESHAPE_AND_CACHE_TILING_H
#define QWEN_ASCENDC_RESHAPE_AND_CACHE_TILING_H

#include "qwen_tiling_common.h"

namespace qwen_ascendc {

struct ReshapeAndCacheTiling {
  uint32_t numTokens;
  uint32_t numKvHeads;
  uint32_t headDim;
  uint32_t blockSize;
  uint32_t numSlots;       // NB * Bs
  uint32_t kvDtype;        // key/value
  uint32_t cacheDtype;     // cache (same as kvDtype, or QWEN_DT_INT8)
  uint32_t slotDtype;      // QWEN_DT_INT32 or QWEN_DT_INT64
  uint32_t pitch;          // elements per head row in UB: headDim rounded up to 32
  uint32_t headsPerTile;   // heads moved per tile (<= numKvHeads)
  uint32_t tokensPerCore;  // core i handles tokens [i * tokensPerCore, ...)
  uint32_t usedCores;
};

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_RESHAPE_AND_CACHE_TILING_H

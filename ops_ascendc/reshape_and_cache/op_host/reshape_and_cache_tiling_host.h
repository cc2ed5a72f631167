// Host planner of reshape_and_cache (reshape_and_cache_tiling.cpp).
#ifndef QWEN_ASCENDC_RESHAPE_AND_CACHE_TILING_HOST_H
#define QWEN_ASCENDC_RESHAPE_AND_CACHE_TILING_HOST_H

#include "tiling_host.h"
#include "reshape_and_cache_tiling.h"

namespace qwen_ascendc {

ReshapeAndCacheTiling PlanReshapeAndCache(uint32_t numTokens, uint32_t numKvHeads, uint32_t headDim,
                                          uint32_t blockSize, uint32_t numBlocks, uint32_t kvDtype,
                                          uint32_t cacheDtype, uint32_t slotDtype, const LaunchConfig& cfg);
// Unified-buffer bytes the kernel asks TPipe for under tiling `t` (its InitBuffer calls, byte for byte).
uint64_t ReshapeAndCacheUb(const ReshapeAndCacheTiling& t);

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_RESHAPE_AND_CACHE_TILING_HOST_H

// Host-only declarations of the tiling planners (ops_ascendc/host/tiling.cpp).
#ifndef QWEN_ASCENDC_TILING_HOST_H
#define QWEN_ASCENDC_TILING_HOST_H

#include <cstdint>

#include "tiling.h"

namespace qwen_ascendc {

// Vector cores a launch uses when the caller does not say: the CPU stand-in
// simulates 8 (threads); the CANN build asks the device (see bindings).
constexpr uint32_t kDefaultCores = 8;

struct LaunchConfig {
  uint32_t numCores = 0;       // 0: kDefaultCores
  uint32_t ubBytes = 0;        // 0: all the usable unified buffer (less a small reserve)
  uint32_t maxTileTokens = 0;  // 0: no cap; tests use it to force many tiles
};

uint32_t DtypeBytes(uint32_t dt);

ReshapeAndCacheTiling PlanReshapeAndCache(uint32_t numTokens, uint32_t numKvHeads, uint32_t headDim,
                                          uint32_t blockSize, uint32_t numBlocks, uint32_t kvDtype,
                                          uint32_t cacheDtype, uint32_t slotDtype, const LaunchConfig& cfg);
PagedAttentionTiling PlanPagedAttention(uint32_t numReqs, uint32_t numQHeads, uint32_t numKvHeads, uint32_t headDim,
                                        uint32_t blockSize, uint32_t numBlocks, uint32_t maxBlocksPerReq,
                                        uint32_t qDtype, uint32_t cacheDtype, float scale, const LaunchConfig& cfg);
// `shape` carries every field but the tiling ones (dvTile, pitchDv, numDvTiles, unitsPerCore, usedCores).
GdnRecurrentTiling PlanGdnRecurrent(const GdnRecurrentTiling& shape, const LaunchConfig& cfg);
CausalConv1dUpdateTiling PlanCausalConv1dUpdate(const CausalConv1dUpdateTiling& shape, const LaunchConfig& cfg);

uint64_t ReshapeAndCacheUb(const ReshapeAndCacheTiling& t);
uint64_t PagedAttentionUb(const PagedAttentionTiling& t);
uint64_t GdnRecurrentUb(const GdnRecurrentTiling& t);
uint64_t CausalConv1dUpdateUb(const CausalConv1dUpdateTiling& t);

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_TILING_HOST_H

// Host tiling of reshape_and_cache: mirrors the kernel's InitBuffer calls byte for
// byte (every buffer rounded up to 32 bytes), so the kernel never asks TPipe
// for more than the budget. Serves the stand-in and the CANN build alike.
#include "reshape_and_cache_tiling_host.h"

#include <algorithm>
#include <string>

namespace qwen_ascendc {

uint64_t ReshapeAndCacheUb(const ReshapeAndCacheTiling& t) {
  const uint64_t e = static_cast<uint64_t>(t.headsPerTile) * t.pitch;
  uint64_t b = 2 * R32(e * DtypeBytes(t.kvDtype)) + 2 * R32(e * DtypeBytes(t.cacheDtype));
  if (t.cacheDtype == QWEN_DT_INT8) b += R32(e * 4) + R32(e * 2) + R32(2 * e * 4);
  return b;
}

ReshapeAndCacheTiling PlanReshapeAndCache(uint32_t numTokens, uint32_t numKvHeads, uint32_t headDim,
                                          uint32_t blockSize, uint32_t numBlocks, uint32_t kvDtype,
                                          uint32_t cacheDtype, uint32_t slotDtype, const LaunchConfig& cfg) {
  ReshapeAndCacheTiling t{};
  t.numTokens = numTokens;
  t.numKvHeads = numKvHeads;
  t.headDim = headDim;
  t.blockSize = blockSize;
  t.numSlots = numBlocks * blockSize;
  t.kvDtype = kvDtype;
  t.cacheDtype = cacheDtype;
  t.slotDtype = slotDtype;
  t.pitch = static_cast<uint32_t>((headDim + 31) / 32 * 32);
  const uint32_t budget = Budget(cfg);
  t.headsPerTile = 0;
  for (uint32_t h = numKvHeads; h >= 1; --h) {
    t.headsPerTile = h;
    if (ReshapeAndCacheUb(t) <= budget) break;
    t.headsPerTile = 0;
  }
  if (t.headsPerTile == 0) NoFit("reshape_and_cache", "one head of D = " + std::to_string(headDim), budget);
  Split(numTokens, Cores(cfg), &t.tokensPerCore, &t.usedCores);
  return t;
}

}  // namespace qwen_ascendc

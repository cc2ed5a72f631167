// Host tiling of paged_decode_attention: mirrors the kernel's InitBuffer calls byte for
// byte (every buffer rounded up to 32 bytes), so the kernel never asks TPipe
// for more than the budget. Serves the stand-in and the CANN build alike.
#include "paged_decode_attention_tiling_host.h"

#include <algorithm>
#include <string>

namespace qwen_ascendc {

uint64_t PagedAttentionUb(const PagedAttentionTiling& t) {
  const uint64_t d = t.headDim, tile = t.tileTokens, gd = static_cast<uint64_t>(t.groupSize) * d;
  const uint64_t esC = DtypeBytes(t.cacheDtype), esQ = DtypeBytes(t.qDtype);
  uint64_t b = 4 * R32(tile * d * esC) + 2 * R32(gd * esQ) + 2 * R32(gd * 4);
  if (t.cacheDtype != QWEN_DT_FLOAT) b += 2 * R32(tile * d * 4);
  if (t.cacheDtype == QWEN_DT_INT8) b += R32(tile * d * 2) + R32(2 * d * 4);
  b += R32(R8(tile) * 4) + R32(d * 4) + R32(2 * R8(t.groupSize) * 4) + 32 + 32;
  const uint64_t longest = std::max(d, tile);
  b += R32(R8(2 * ((longest + 63) / 64)) * 4);
  return b;
}

PagedAttentionTiling PlanPagedAttention(uint32_t numReqs, uint32_t numQHeads, uint32_t numKvHeads, uint32_t headDim,
                                        uint32_t blockSize, uint32_t numBlocks, uint32_t maxBlocksPerReq,
                                        uint32_t qDtype, uint32_t cacheDtype, float scale, const LaunchConfig& cfg) {
  PagedAttentionTiling t{};
  t.numReqs = numReqs;
  t.numQHeads = numQHeads;
  t.numKvHeads = numKvHeads;
  t.headDim = headDim;
  t.blockSize = blockSize;
  t.numBlocks = numBlocks;
  t.maxBlocksPerReq = maxBlocksPerReq;
  t.qDtype = qDtype;
  t.cacheDtype = cacheDtype;
  t.groupSize = numQHeads / numKvHeads;
  t.scale = scale;
  const uint32_t budget = Budget(cfg);
  uint32_t maxTile = blockSize;
  if (cfg.maxTileTokens != 0) maxTile = std::min(maxTile, cfg.maxTileTokens);
  t.tileTokens = 0;
  for (uint32_t tile = maxTile; tile >= 1; --tile) {
    t.tileTokens = tile;
    if (PagedAttentionUb(t) <= budget) break;
    t.tileTokens = 0;
  }
  if (t.tileTokens == 0)
    NoFit("paged_decode_attention",
          "a GQA group of " + std::to_string(t.groupSize) + " heads of D = " + std::to_string(headDim), budget);
  Split(static_cast<uint64_t>(numReqs) * numKvHeads, Cores(cfg), &t.unitsPerCore, &t.usedCores);
  return t;
}

}  // namespace qwen_ascendc

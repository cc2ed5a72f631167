// Host-side tiling for the qwen_ops Ascend C kernels. Serves the CPU stand-in
// and the CANN build alike: it depends only on shapes, the core count and the
// unified-buffer budget. Each Plan* mirrors the kernel's InitBuffer calls
// byte for byte (every buffer rounded up to 32 bytes), so the kernel never
// asks TPipe for more than the budget.
#include "tiling_host.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace qwen_ascendc {

namespace {

uint64_t R32(uint64_t x) { return (x + 31) / 32 * 32; }
uint64_t R8(uint64_t x) { return (x + 7) / 8 * 8; }
uint32_t CeilDiv(uint64_t a, uint64_t b) { return static_cast<uint32_t>((a + b - 1) / b); }

uint32_t Budget(const LaunchConfig& cfg) {
  const uint32_t limit = kUbUsableBytes - kUbReserveBytes;
  // An explicit budget is taken as given, even past the device's 184 KB: the
  // tests use that to watch the stand-in's TPipe refuse an oversized plan.
  return cfg.ubBytes == 0 ? limit : cfg.ubBytes;
}

uint32_t Cores(const LaunchConfig& cfg) { return cfg.numCores == 0 ? kDefaultCores : cfg.numCores; }

// Contiguous split of `units` over at most `cores`: (per core, cores used).
void Split(uint64_t units, uint32_t cores, uint32_t* perCore, uint32_t* used) {
  if (units == 0) {
    *perCore = 1;
    *used = 1;
    return;
  }
  *perCore = CeilDiv(units, cores);
  *used = CeilDiv(units, *perCore);
}

[[noreturn]] void NoFit(const char* op, const std::string& what, uint32_t budget) {
  throw std::invalid_argument(std::string(op) + ": " + what + " does not fit the unified-buffer budget of " +
                              std::to_string(budget) + " bytes per core");
}

}  // namespace

uint32_t DtypeBytes(uint32_t dt) {
  switch (dt) {
    case DT_FLOAT: case DT_INT32: return 4;
    case DT_HALF: case DT_BF16: return 2;
    case DT_INT64: return 8;
    default: return 1;
  }
}

uint64_t ReshapeAndCacheUb(const ReshapeAndCacheTiling& t) {
  const uint64_t e = static_cast<uint64_t>(t.headsPerTile) * t.pitch;
  uint64_t b = 2 * R32(e * DtypeBytes(t.kvDtype)) + 2 * R32(e * DtypeBytes(t.cacheDtype));
  if (t.cacheDtype == DT_INT8) b += R32(e * 4) + R32(e * 2) + R32(2 * e * 4);
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

uint64_t PagedAttentionUb(const PagedAttentionTiling& t) {
  const uint64_t d = t.headDim, tile = t.tileTokens, gd = static_cast<uint64_t>(t.groupSize) * d;
  const uint64_t esC = DtypeBytes(t.cacheDtype), esQ = DtypeBytes(t.qDtype);
  uint64_t b = 4 * R32(tile * d * esC) + 2 * R32(gd * esQ) + 2 * R32(gd * 4);
  if (t.cacheDtype != DT_FLOAT) b += 2 * R32(tile * d * 4);
  if (t.cacheDtype == DT_INT8) b += R32(tile * d * 2) + R32(2 * d * 4);
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

uint64_t GdnRecurrentUb(const GdnRecurrentTiling& t) {
  const uint64_t dk = t.dk, p = t.pitchDv, es = DtypeBytes(t.qkvDtype);
  uint64_t b = 2 * R32(dk * es) + 2 * R32(static_cast<uint64_t>(t.dvTile) * es) + R32(dk * p * 4);
  b += 2 * R32(dk * 4) + 3 * R32(p * 4) + R32(std::max(dk, p) * 4) + 32 + 32;
  b += R32(R8((dk + 63) / 64) * 4);
  return b;
}

GdnRecurrentTiling PlanGdnRecurrent(const GdnRecurrentTiling& shape, const LaunchConfig& cfg) {
  GdnRecurrentTiling t = shape;
  const uint32_t budget = Budget(cfg);
  uint32_t maxTile = t.dv;
  if (cfg.maxTileTokens != 0) maxTile = std::min(maxTile, std::max<uint32_t>(8, cfg.maxTileTokens));
  t.dvTile = 0;
  for (uint32_t tile = maxTile; tile >= 1;) {
    t.dvTile = tile;
    t.pitchDv = static_cast<uint32_t>(R8(tile));
    if (GdnRecurrentUb(t) <= budget) break;
    t.dvTile = 0;
    // keep tiles a multiple of 8 columns (32 bytes of float) below the full width
    tile = (tile % 8 == 0) ? tile - 8 : tile / 8 * 8;
  }
  if (t.dvTile == 0) NoFit("fused_recurrent_gated_delta_rule", "a state column tile with Dk = " + std::to_string(t.dk), budget);
  t.numDvTiles = CeilDiv(t.dv, t.dvTile);
  Split(static_cast<uint64_t>(t.numSeqs) * t.numVHeads * t.numDvTiles, Cores(cfg), &t.unitsPerCore, &t.usedCores);
  return t;
}

uint64_t CausalConv1dUpdateUb(const CausalConv1dUpdateTiling& t) {
  const uint64_t p = t.tileChannels, k = t.width;
  const uint64_t esX = DtypeBytes(t.xDtype), esS = DtypeBytes(t.stateDtype), esW = DtypeBytes(t.weightDtype);
  uint64_t b = 2 * R32(p * esX) + 2 * R32((k - 1) * p * esS) + R32(p * k * esW) + R32(R8(p * k) * 4);
  b += R32(k * p * 4) + R32(p * 4) + R32((k - 1) * p * 4) + 3 * R32(p * 4);
  return b;
}

CausalConv1dUpdateTiling PlanCausalConv1dUpdate(const CausalConv1dUpdateTiling& shape, const LaunchConfig& cfg) {
  CausalConv1dUpdateTiling t = shape;
  const uint32_t budget = Budget(cfg);
  uint32_t maxTile = static_cast<uint32_t>((t.channels + 31) / 32 * 32);
  if (cfg.maxTileTokens != 0) maxTile = std::min(maxTile, std::max<uint32_t>(32, cfg.maxTileTokens / 32 * 32));
  t.tileChannels = 0;
  for (uint32_t tile = maxTile; tile >= 32; tile -= 32) {
    t.tileChannels = tile;
    if (CausalConv1dUpdateUb(t) <= budget) break;
    t.tileChannels = 0;
  }
  if (t.tileChannels == 0) NoFit("causal_conv1d_update", "32 channels of width K = " + std::to_string(t.width), budget);
  t.numTiles = CeilDiv(t.channels, t.tileChannels);
  Split(static_cast<uint64_t>(t.numTiles) * t.batch, Cores(cfg), &t.unitsPerCore, &t.usedCores);
  return t;
}

}  // namespace qwen_ascendc

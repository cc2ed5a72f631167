// Host tiling of causal_conv1d_update: mirrors the kernel's InitBuffer calls byte for
// byte (every buffer rounded up to 32 bytes), so the kernel never asks TPipe
// for more than the budget. Serves the stand-in and the CANN build alike.
#include "causal_conv1d_update_tiling_host.h"

#include <algorithm>
#include <string>

namespace qwen_ascendc {

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

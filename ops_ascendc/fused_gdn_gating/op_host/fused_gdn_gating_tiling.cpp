// Host tiling of fused_gdn_gating: mirrors the kernel's InitBuffer calls byte
// for byte (every buffer rounded up to 32 bytes), so the kernel never asks
// TPipe for more than the budget. Serves the stand-in and the CANN build alike.
#include "fused_gdn_gating_tiling_host.h"

#include <algorithm>
#include <string>

namespace qwen_ascendc {

uint64_t FusedGdnGatingUb(const FusedGdnGatingTiling& t) {
  const uint64_t n = static_cast<uint64_t>(t.tileRows) * t.numHeads;
  const uint64_t esIn = std::max({DtypeBytes(t.aDtype), DtypeBytes(t.bDtype), DtypeBytes(t.aLogDtype),
                                  DtypeBytes(t.dtBiasDtype)});
  // inQ (raw inputs), outQ (g in float32, beta in b's dtype), then the float
  // buffers: dt_bias and -exp(A_log) repeated per row, the working tile, a scratch.
  return R32(n * esIn) + R32(n * 4) + 4 * R32(n * 4);
}

FusedGdnGatingTiling PlanFusedGdnGating(const FusedGdnGatingTiling& shape, const LaunchConfig& cfg) {
  FusedGdnGatingTiling t = shape;
  const uint32_t budget = Budget(cfg);
  const uint32_t cores = Cores(cfg);
  // Rows enough for every core to get a tile, but no more than fit (or the test cap).
  uint32_t maxRows = std::max<uint32_t>(1, CeilDiv(std::max<uint32_t>(t.numTokens, 1), cores));
  if (cfg.maxTileTokens != 0) maxRows = std::min(maxRows, cfg.maxTileTokens);
  // The largest row count that fits: the buffers grow linearly in it.
  uint32_t lo = 1, hi = maxRows;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo + 1) / 2;
    t.tileRows = mid;
    if (FusedGdnGatingUb(t) <= budget) lo = mid; else hi = mid - 1;
  }
  t.tileRows = lo;
  if (FusedGdnGatingUb(t) > budget)
    NoFit("fused_gdn_gating", "one token row of Hv = " + std::to_string(t.numHeads) + " heads", budget);
  t.numTiles = CeilDiv(t.numTokens, t.tileRows);
  Split(t.numTiles, cores, &t.unitsPerCore, &t.usedCores);
  return t;
}

}  // namespace qwen_ascendc

// Host tiling of fused_recurrent_gated_delta_rule: mirrors the kernel's InitBuffer calls byte for
// byte (every buffer rounded up to 32 bytes), so the kernel never asks TPipe
// for more than the budget. Serves the stand-in and the CANN build alike.
#include "fused_recurrent_gated_delta_rule_tiling_host.h"

#include <algorithm>
#include <string>

namespace qwen_ascendc {

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

}  // namespace qwen_ascendc

// Host tiling of chunk_gated_delta_rule: the head-dim limit, the padded head
// dims, the rows an AIV holds at once (the unified buffer, through the size
// helpers of chunk_gated_delta_rule_tiling.h that the kernel's InitBuffer
// calls use too), the column tile of the cube products (L0B / L0C), the GM
// workspace of a group, and the split of (sequence, value head) units over
// AIC+2 AIV groups.
#include "chunk_gated_delta_rule_tiling_host.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace qwen_ascendc {

uint64_t GdnChunkUb(const GdnChunkTiling& t) {
  return GdnChunkUbBytes(t.rowTile, t.dkPad, t.dvPad, DtypeBytes(t.qkvDtype));
}

GdnChunkTiling PlanGdnChunk(const GdnChunkTiling& shape, const LaunchConfig& cfg) {
  GdnChunkTiling t = shape;
  const char* op = "chunk_gated_delta_rule";
  for (uint32_t d : {t.dk, t.dv})
    if (d == 0 || d > kGdnMaxHeadDim)
      throw std::invalid_argument(std::string(op) + ": backend 'ascendc' serves head dims Dk and Dv from 1 to " +
                                  std::to_string(kGdnMaxHeadDim) + " (a 64 x Dk float operand is loaded whole into "
                                  "the cube's 64 KB L0A), got Dk = " + std::to_string(t.dk) + ", Dv = " +
                                  std::to_string(t.dv));
  t.dkPad = GdnPadDim(t.dk);
  t.dvPad = GdnPadDim(t.dv);
  // A tile cap (tests) applies to both tiles: rows as the largest power of two from 8 to 64 under it,
  // columns as the largest multiple of 16 under it.
  const uint32_t cap = cfg.maxTileTokens;
  t.rowTile = kGdnChunk;
  while (cap != 0 && t.rowTile > 8 && t.rowTile > cap) t.rowTile /= 2;
  const uint32_t budget = Budget(cfg);
  while (GdnChunkUb(t) > budget && t.rowTile > 8) t.rowTile /= 2;
  if (GdnChunkUb(t) > budget) NoFit(op, "8 chunk rows with Dk = " + std::to_string(t.dk) + ", Dv = " +
                                    std::to_string(t.dv), budget);
  // Products are at most max(64, Dkp) deep and tall (A is 64 x Dkp, 64 x 64 or Dkp x 64).
  t.colTile = GdnChunkColTileLimit(std::max(kGdnChunk, t.dkPad));
  if (cap != 0) t.colTile = std::min(t.colTile, std::max(kGdnCubeTile, cap / kGdnCubeTile * kGdnCubeTile));
  static_assert(kGdnChunk * kGdnMaxHeadDim * 4 <= kGdnL0ABytes, "a 64 x Dk float A operand fits L0A whole");
  static_assert(kGdnL0BBytes / 4 / kGdnMaxHeadDim >= kGdnCubeTile && kGdnL0CBytes / 4 / kGdnMaxHeadDim >= kGdnCubeTile,
                "one 16-column tile of the deepest and tallest products fits L0B and L0C");
  t.wsFloatsPerGroup = GdnChunkSlotOffset(WS_SLOTS, t.dkPad, t.dvPad);
  uint32_t perCore = 0;
  Split(static_cast<uint64_t>(t.numSeqs) * t.numVHeads, Cores(cfg), &perCore, &t.usedCores);
  return t;
}

}  // namespace qwen_ascendc

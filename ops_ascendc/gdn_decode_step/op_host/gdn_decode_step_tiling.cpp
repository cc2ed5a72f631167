// Host tiling of gdn_decode_step: mirrors the kernel's InitBuffer calls byte for byte (every buffer rounded
// up to 32 bytes), so the kernel never asks TPipe for more than the budget. Serves the stand-in and the
// CANN build alike.
//
// What must fit: the conv outputs of one unit's channels for all its tokens (W * tokenPitch floats) and its
// outputs of one value head (W * pitchV floats), which are never tiled; then the largest conv channel tile
// and state column tile that fit beside them (conv tiles first: they are small).
#include "gdn_decode_step_tiling_host.h"

#include <algorithm>
#include <string>

namespace qwen_ascendc {

uint64_t GdnDecodeStepUb(const GdnDecodeStepTiling& t) {
  const uint64_t p = t.chanTile, k = t.width, w = t.rowsWidth, pk = t.pitchK, pv = t.pitchV, pd = t.pitchDv;
  const uint64_t vec = std::max(pk, pv);
  uint64_t b = R32((k - 1) * p * 4) + R32(k * p * 4) + 2 * R32(p * 4);   // conv window, taps, x, acc
  b += R32(w * t.tokenPitch * 4) + R32(w * pv * 4);                     // conv outputs, one head's outputs
  b += R32(t.dk * pd * 4) + 2 * R32(pk * 4) + 2 * R32(pd * 4);          // state tile, q, k, u, o
  b += 2 * R32(pv * 4) + R32(std::max(vec, p) * 4) + 32 + 32;           // norm weight, z, tmp, red, one
  b += R32(R8((vec + 63) / 64) * 4);                                    // ReduceSum's work buffer
  return b;
}

GdnDecodeStepTiling PlanGdnDecodeStep(const GdnDecodeStepTiling& shape, const LaunchConfig& cfg) {
  GdnDecodeStepTiling t = shape;
  const uint32_t budget = Budget(cfg);
  t.pitchK = static_cast<uint32_t>(R8(t.dk));
  t.pitchV = static_cast<uint32_t>(R8(t.dv));
  t.tokenPitch = 2 * t.pitchK + (t.numVHeads / t.numKHeads) * t.pitchV;
  // Conv tiles cover one segment of a head (Dk or Dv channels), so the smallest tile that still serves
  // both takes the larger of the two; below it tiles are multiples of 8 channels (32 bytes of float).
  uint32_t maxChan = std::max(t.pitchK, t.pitchV);
  uint32_t maxCols = t.dv;
  if (cfg.maxTileTokens != 0) {
    maxChan = std::min(maxChan, std::max<uint32_t>(8, cfg.maxTileTokens / 8 * 8));
    maxCols = std::min(maxCols, std::max<uint32_t>(8, cfg.maxTileTokens));
  }
  t.chanTile = 8;
  t.dvTile = 8 < t.dv ? 8 : t.dv;
  t.pitchDv = static_cast<uint32_t>(R8(t.dvTile));
  if (GdnDecodeStepUb(t) > budget)
    NoFit("gdn_decode_step", "the conv outputs of " + std::to_string(t.rowsWidth) + " tokens of a key head group "
          "with Dk = " + std::to_string(t.dk) + ", Dv = " + std::to_string(t.dv), budget);
  for (uint32_t tile = maxChan; tile > 8; tile -= 8) {
    t.chanTile = tile;
    if (GdnDecodeStepUb(t) <= budget) break;
    t.chanTile = 8;
  }
  for (uint32_t tile = maxCols; tile >= 1;) {
    t.dvTile = tile;
    t.pitchDv = static_cast<uint32_t>(R8(tile));
    if (GdnDecodeStepUb(t) <= budget) break;
    // keep tiles a multiple of 8 columns (32 bytes of float) below the full width
    const uint32_t next = (tile % 8 == 0) ? tile - 8 : tile / 8 * 8;
    if (next == 0) break;  // 8 columns fit (checked above)
    tile = next;
  }
  t.numDvTiles = CeilDiv(t.dv, t.dvTile);
  Split(static_cast<uint64_t>(t.numSeqs) * t.numKHeads, Cores(cfg), &t.unitsPerCore, &t.usedCores);
  return t;
}

}  // namespace qwen_ascendc

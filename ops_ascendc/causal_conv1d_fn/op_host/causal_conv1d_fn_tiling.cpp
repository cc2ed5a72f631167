// Host tiling of causal_conv1d_fn: mirrors the kernel's InitBuffer calls byte
// for byte (every buffer rounded up to 32 bytes), so the kernel never asks
// TPipe for more than the budget. Serves the stand-in and the CANN build alike.
#include "causal_conv1d_fn_tiling_host.h"

#include <algorithm>
#include <string>

namespace qwen_ascendc {

namespace {
// Widest channel tile tried first: 512 channels leave room for a few dozen
// tokens per chunk in bfloat16, and Qwen3.5's 8192 conv channels still make
// 16 tiles per sequence to spread over the cores.
constexpr uint32_t kMaxTileChannels = 512;
// Longest chunk tried: past this, chunks only save DMA descriptors.
constexpr uint32_t kMaxTileTokens = 1024;
}  // namespace

uint64_t CausalConv1dFnUb(const CausalConv1dFnTiling& t) {
  const uint64_t p = t.tileChannels, k = t.width, tt = t.tileTokens;
  const uint64_t esX = DtypeBytes(t.xDtype), esS = DtypeBytes(t.stateDtype), esW = DtypeBytes(t.weightDtype);
  uint64_t b = 2 * R32(tt * p * esX) + 2 * R32((k - 1) * p * esS);           // xIn, outQ, stateIn, stateOut
  b += R32(p * k * esW) + R32(R8(p * k) * 4) + R32(k * p * 4) + R32(p * 4);  // weights raw, linear, tap-major, bias
  b += R32((k - 1 + tt) * p * 4) + R32(tt * p * 4) + R32(p * 4);             // history window, accumulator, scratch
  return b;
}

CausalConv1dFnTiling PlanCausalConv1dFn(const CausalConv1dFnTiling& shape, const LaunchConfig& cfg) {
  CausalConv1dFnTiling t = shape;
  const uint32_t budget = Budget(cfg);
  uint32_t maxChannels = std::min(kMaxTileChannels, static_cast<uint32_t>(R32(t.channels)));
  uint32_t maxTokens = std::min(kMaxTileTokens, std::max<uint32_t>(1, t.numTokens));
  if (cfg.maxTileTokens != 0) {
    maxChannels = std::min(maxChannels, std::max<uint32_t>(32, cfg.maxTileTokens / 32 * 32));
    maxTokens = std::min(maxTokens, cfg.maxTileTokens);
  }
  t.tileChannels = 0;
  for (uint32_t p = maxChannels; p >= 32 && t.tileChannels == 0; p -= 32) {
    t.tileChannels = p;
    // The longest chunk that fits with this tile: the buffers grow linearly in it.
    uint32_t lo = 0, hi = maxTokens;
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo + 1) / 2;
      t.tileTokens = mid;
      if (CausalConv1dFnUb(t) <= budget) lo = mid; else hi = mid - 1;
    }
    t.tileTokens = lo;
    if (lo == 0) t.tileChannels = 0;
  }
  if (t.tileChannels == 0)
    NoFit("causal_conv1d_fn", "one token of 32 channels of width K = " + std::to_string(t.width), budget);
  t.numTiles = CeilDiv(t.channels, t.tileChannels);
  Split(static_cast<uint64_t>(t.numTiles) * t.numSeqs, Cores(cfg), &t.unitsPerCore, &t.usedCores);
  return t;
}

}  // namespace qwen_ascendc

// Host tiling of chunk_gated_delta_rule: the head-dim limit, the unified
// buffer and the cube memories the kernel asks for (the size helpers of
// chunk_gated_delta_rule_tiling.h, which the kernel's InitBuffer calls use
// too), the GM workspace of a group, and the split of (sequence, value head)
// units over AIC+2 AIV groups.
#include "chunk_gated_delta_rule_tiling_host.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace qwen_ascendc {

uint64_t GdnChunkUb(const GdnChunkTiling& t) { return GdnChunkUbBytes(t.dk, t.dv, DtypeBytes(t.qkvDtype)); }

GdnChunkTiling PlanGdnChunk(const GdnChunkTiling& shape, const LaunchConfig& cfg) {
  GdnChunkTiling t = shape;
  const char* op = "chunk_gated_delta_rule";
  for (uint32_t d : {t.dk, t.dv})
    if (d == 0 || d % 16 != 0 || d > kGdnMaxHeadDim)
      throw std::invalid_argument(std::string(op) + ": backend 'ascendc' needs head dims Dk and Dv that are multiples "
                                  "of 16 up to " + std::to_string(kGdnMaxHeadDim) + " (a Dk x Dv float32 state fills "
                                  "one 64 KB L0B), got Dk = " + std::to_string(t.dk) + ", Dv = " + std::to_string(t.dv));
  const uint32_t budget = Budget(cfg);
  if (GdnChunkUb(t) > budget) NoFit(op, "the chunk buffers with Dk = " + std::to_string(t.dk) + ", Dv = " +
                                    std::to_string(t.dv), budget);
  // The cube memories hold the largest operands at kGdnMaxHeadDim (L1: A1 + B1 of 512 KB; L0A, L0B 64 KB; L0C 128 KB).
  static_assert(kGdnMaxHeadDim * kGdnChunk * 4 <= 64 * 1024, "L0A");
  static_assert(kGdnMaxHeadDim * kGdnMaxHeadDim * 4 <= 64 * 1024, "L0B");
  t.wsFloatsPerGroup = GdnChunkSlotOffset(WS_SLOTS, t.dk, t.dv);
  uint32_t perCore = 0;
  Split(static_cast<uint64_t>(t.numSeqs) * t.numVHeads, Cores(cfg), &perCore, &t.usedCores);
  return t;
}

}  // namespace qwen_ascendc

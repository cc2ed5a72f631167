// Host planner of chunk_gated_delta_rule (chunk_gated_delta_rule_tiling.cpp).
#ifndef QWEN_ASCENDC_CHUNK_GATED_DELTA_RULE_TILING_HOST_H
#define QWEN_ASCENDC_CHUNK_GATED_DELTA_RULE_TILING_HOST_H

#include "tiling_host.h"
#include "chunk_gated_delta_rule_tiling.h"

namespace qwen_ascendc {

// `shape` carries every shape field (not dkPad, dvPad, rowTile, colTile,
// usedCores, wsFloatsPerGroup). Throws std::invalid_argument for head dims the
// kernel does not take (0 or past kGdnMaxHeadDim) or a unified buffer that
// cannot hold 8 chunk rows.
GdnChunkTiling PlanGdnChunk(const GdnChunkTiling& shape, const LaunchConfig& cfg);
// Unified-buffer bytes an AIV asks TPipe for under tiling `t` (its InitBuffer calls, byte for byte).
uint64_t GdnChunkUb(const GdnChunkTiling& t);

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_CHUNK_GATED_DELTA_RULE_TILING_HOST_H

// Host planner of mixed_attention (mixed_attention_tiling.cpp).
#ifndef QWEN_ASCENDC_MIXED_ATTENTION_TILING_HOST_H
#define QWEN_ASCENDC_MIXED_ATTENTION_TILING_HOST_H

#include "tiling_host.h"
#include "mixed_attention_tiling.h"

namespace qwen_ascendc {

// `numReqs` requests, the first `numDecodes` of them decodes (one row each).
MixedAttentionTiling PlanMixedAttention(uint32_t numReqs, uint32_t numDecodes, uint32_t numQHeads,
                                        uint32_t numKvHeads, uint32_t headDim, uint32_t blockSize,
                                        uint32_t numBlocks, uint32_t maxBlocksPerReq, uint32_t qDtype,
                                        uint32_t cacheDtype, float scale, const LaunchConfig& cfg);

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_MIXED_ATTENTION_TILING_HOST_H

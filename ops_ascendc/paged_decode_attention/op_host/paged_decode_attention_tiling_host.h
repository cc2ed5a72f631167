// Host planner of paged_decode_attention (paged_decode_attention_tiling.cpp).
#ifndef QWEN_ASCENDC_PAGED_DECODE_ATTENTION_TILING_HOST_H
#define QWEN_ASCENDC_PAGED_DECODE_ATTENTION_TILING_HOST_H

#include "tiling_host.h"
#include "paged_decode_attention_tiling.h"

namespace qwen_ascendc {

PagedAttentionTiling PlanPagedAttention(uint32_t numReqs, uint32_t numQHeads, uint32_t numKvHeads, uint32_t headDim,
                                        uint32_t blockSize, uint32_t numBlocks, uint32_t maxBlocksPerReq,
                                        uint32_t qDtype, uint32_t cacheDtype, float scale, const LaunchConfig& cfg);
// Unified-buffer bytes the kernel asks TPipe for under tiling `t` (its InitBuffer calls, byte for byte).
uint64_t PagedAttentionUb(const PagedAttentionTiling& t);

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_PAGED_DECODE_ATTENTION_TILING_HOST_H

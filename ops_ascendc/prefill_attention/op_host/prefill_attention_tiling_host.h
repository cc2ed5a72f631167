// Host planner of prefill_attention (prefill_attention_tiling.cpp).
#ifndef QWEN_ASCENDC_PREFILL_ATTENTION_TILING_HOST_H
#define QWEN_ASCENDC_PREFILL_ATTENTION_TILING_HOST_H

#include "tiling_host.h"
#include "prefill_attention_tiling.h"

namespace qwen_ascendc {

// Largest head dim the kernel serves (L0B holds a 16-key slice of K for D = 256 in float32).
constexpr uint32_t kPrefillMaxHeadDim = 256;

PrefillAttentionTiling PlanPrefillAttention(uint32_t numReqs, uint32_t numQHeads, uint32_t numKvHeads,
                                            uint32_t headDim, uint32_t blockSize, uint32_t maxBlocksPerReq,
                                            bool hasContext, bool causal, uint32_t qDtype, uint32_t cacheDtype,
                                            float scale, const LaunchConfig& cfg);
// Unified-buffer bytes one AIV asks TPipe for under `t`.
uint64_t PrefillAttentionUb(const PrefillAttentionTiling& t);
// L1 bytes the AIC asks TPipe for under `t`.
uint64_t PrefillAttentionL1(const PrefillAttentionTiling& t);

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_PREFILL_ATTENTION_TILING_HOST_H

// Host tiling of mixed_attention: the two parts' own planners, on one launch.
//
// The launch has N groups of one AIC and two AIVs. Decode units (request, KV
// head) are split evenly over the 2N AIVs (part 1's planner asked for 2N
// cores); prefill units (request, KV head, L tokens) go round robin to the N
// groups (the cube kernel's planner). Every AIV first finishes its decode
// units, then serves its group's prefill units; the AIC starts its first
// prefill tile at once and waits for the AIVs' probabilities. Each part's
// unified-buffer plan fits the whole budget on its own: the AIV's decode
// TPipe is destroyed before the prefill one is built.
#include "mixed_attention_tiling_host.h"

#include "../../paged_decode_attention/op_host/paged_decode_attention_tiling_host.h"
#include "../../prefill_attention/op_host/prefill_attention_tiling_host.h"

namespace qwen_ascendc {

MixedAttentionTiling PlanMixedAttention(uint32_t numReqs, uint32_t numDecodes, uint32_t numQHeads,
                                        uint32_t numKvHeads, uint32_t headDim, uint32_t blockSize,
                                        uint32_t numBlocks, uint32_t maxBlocksPerReq, uint32_t qDtype,
                                        uint32_t cacheDtype, float scale, const LaunchConfig& cfg) {
  MixedAttentionTiling t{};
  t.numDecodes = numDecodes;
  t.prefill = PlanPrefillAttention(numReqs - numDecodes, numQHeads, numKvHeads, headDim, blockSize,
                                   maxBlocksPerReq, /*hasContext=*/true, /*causal=*/true, qDtype, cacheDtype, scale,
                                   cfg);
  t.usedCores = t.prefill.usedCores;
  LaunchConfig vector = cfg;
  vector.numCores = 2 * t.usedCores;  // the AIVs of the launch
  t.decode = PlanPagedAttention(numDecodes, numQHeads, numKvHeads, headDim, blockSize, numBlocks, maxBlocksPerReq,
                                qDtype, cacheDtype, scale, vector);
  return t;
}

}  // namespace qwen_ascendc

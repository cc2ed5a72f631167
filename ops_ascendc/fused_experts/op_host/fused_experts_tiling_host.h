// Host planner of fused_experts (fused_experts_tiling.cpp).
#ifndef QWEN_ASCENDC_FUSED_EXPERTS_TILING_HOST_H
#define QWEN_ASCENDC_FUSED_EXPERTS_TILING_HOST_H

#include <cstdint>
#include <vector>

#include "tiling_host.h"
#include "fused_experts_tiling.h"

namespace qwen_ascendc {

// `shape` carries numTokens, topK, numExperts, hidden, inter, dtype and
// numPairs; `counts[e]` is the number of (token, slot) pairs routed to expert
// e (the routing read once on the host). Plans the unit rows from the largest
// count, the Mmad tiles from the cube memories, the vector step from the
// unified-buffer budget, the workspace and the groups. Throws
// std::invalid_argument (naming the op and the limit) for hidden/intermediate
// sizes whose 16 rows do not fit L1, or a budget that holds no vector step.
FusedExpertsTiling PlanFusedExperts(const FusedExpertsTiling& shape, const std::vector<int64_t>& counts,
                                    const LaunchConfig& cfg);
// Unified-buffer bytes an AIV asks TPipe for under tiling `t` (its InitBuffer calls, byte for byte).
uint64_t FusedExpertsUb(const FusedExpertsTiling& t);

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_FUSED_EXPERTS_TILING_HOST_H

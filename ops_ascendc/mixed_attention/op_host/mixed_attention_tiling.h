// Tiling of mixed_attention: filled by the host planner (mixed_attention_tiling.cpp),
// read by the mixed AIC + AIV kernel (../op_kernel). The single source of the
// layout for the stand-in and the CANN build. Device-safe: no standard library.
//
// One launch of N groups (one AIC, two AIVs each): the decode rows' tiling
// (part 1's vector kernel, its units split over the 2N AIVs) and the prefill
// rows' tiling (the cube kernel over the N groups), side by side.
#ifndef QWEN_ASCENDC_MIXED_ATTENTION_TILING_H
#define QWEN_ASCENDC_MIXED_ATTENTION_TILING_H

#include "../../paged_decode_attention/op_host/paged_decode_attention_tiling.h"
#include "../../prefill_attention/op_host/prefill_attention_tiling.h"

namespace qwen_ascendc {

struct MixedAttentionTiling {
  PagedAttentionTiling decode;    // numReqs = num_decodes; usedCores counts AIVs (<= 2 * usedCores)
  PrefillAttentionTiling prefill; // numReqs = the prefill chunks; usedCores counts groups
  uint32_t numDecodes;            // rows (= requests) before the first prefill row
  uint32_t usedCores;             // groups of the launch (the mixed kernel's blockDim)
};

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_MIXED_ATTENTION_TILING_H

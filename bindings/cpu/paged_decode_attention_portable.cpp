// Paged decode attention with the baseline flags (SSE2 on x86-64, NEON on arm64): 4 float32 lanes. The body is
// paged_decode_attention_simd.h, shared by every variant.
#define QWEN_OPS_DECODE_LANES 4
#include "bindings/cpu/paged_decode_attention_simd.h"

namespace qwen_ops::cpu {

void paged_decode_attention_pairs_portable(const DecodeAttentionProblem& problem, int64_t begin, int64_t end,
                                           float* workspace) {
  attend_pairs_any(problem, begin, end, workspace);
}

}  // namespace qwen_ops::cpu

// Paged decode attention with AVX2 + FMA (compiled with -mavx2 -mfma; called only where cpu_features says the CPU
// has both): 8 float32 lanes. The body is paged_decode_attention_simd.h, shared by every variant.
#define QWEN_OPS_DECODE_LANES 8
#include "bindings/cpu/paged_decode_attention_simd.h"

namespace qwen_ops::cpu {

void paged_decode_attention_pairs_avx2(const DecodeAttentionProblem& problem, int64_t begin, int64_t end,
                                       float* workspace) {
  attend_pairs_any(problem, begin, end, workspace);
}

}  // namespace qwen_ops::cpu

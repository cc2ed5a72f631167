// The gated delta rule's one-head decode step with AVX2 + FMA (-mavx2 -mfma -ffp-contract=off; called only where
// cpu_features says the CPU has both): 8 float32 lanes. The body is gdn_head_update.h, shared by every variant.
#include "bindings/cpu/gdn_head_update.h"
#include "bindings/cpu/gdn_head_update_kernels.h"

namespace qwen_ops::cpu {

void gdn_head_decode_avx2(float* s, const float* k, const float* q, const float* v, float g, float beta, int64_t dk,
                          int64_t dv, float* scratch, float* o) {
  gdn_head_decode_any(s, k, q, v, g, beta, dk, dv, scratch, o);
}

}  // namespace qwen_ops::cpu

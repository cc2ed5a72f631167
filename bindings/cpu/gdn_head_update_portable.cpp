// The gated delta rule's one-head decode step with the default flags (and -ffp-contract=off): the body is
// gdn_head_update.h, shared by every variant.
#include "bindings/cpu/gdn_head_update.h"
#include "bindings/cpu/gdn_head_update_kernels.h"

namespace qwen_ops::cpu {

void gdn_head_decode_portable(float* s, const float* k, const float* q, const float* v, float g, float beta, int64_t dk,
                              int64_t dv, float* scratch, float* o) {
  gdn_head_decode_any(s, k, q, v, g, beta, dk, dv, scratch, o);
}

}  // namespace qwen_ops::cpu

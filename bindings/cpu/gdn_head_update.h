// One (sequence, value head) step of the gated delta rule on a float32 [Dk, Dv] state, in place: the body of
// every instruction-set variant of gdn_head_decode (gdn_head_update_kernels.h). Included only by the variant
// files (gdn_head_update_{portable,avx2,avx512}.cpp), each compiled with its own -m flags and
// -ffp-contract=off, so the compiler vectorises the loops over Dv at that width and every variant computes the
// same products and sums in the same order: the same bits. The function is in an unnamed namespace and calls
// no standard-library template, so no out-of-line copy compiled with one file's flags can serve another file.
//
// Math (ops/gdn/vectorized_recurrent.py's form, see its docstring): with d = exp(g), corr = beta * (v - d * S^T k),
//   o = d * (S^T q) + (k . q) * corr,   S <- d * S + k corr^T.
// The state is read once for both products, then decayed and written once (the second pass hits the cache).
#pragma once

#include <cstdint>

namespace qwen_ops::cpu {
namespace {

// s: [dk, dv] state (updated); k, q: [dk] (q already normalised and scaled); v: [dv]; g: log-decay; beta: the
// write strength; scratch: 3 * dv floats; writes o: [dv].
inline void gdn_head_decode_any(float* s, const float* k, const float* q, const float* v, float g, float beta,
                                int64_t dk, int64_t dv, float* scratch, float* o) {
  float* k_state = scratch;
  float* q_state = scratch + dv;
  float* correction = scratch + 2 * dv;
  for (int64_t j = 0; j < 2 * dv; ++j) scratch[j] = 0.0f;
  float kq = 0.0f;
  for (int64_t i = 0; i < dk; ++i) {  // both products in one pass over the state
    const float ki = k[i], qi = q[i];
    const float* row = s + i * dv;
    for (int64_t j = 0; j < dv; ++j) {
      k_state[j] += ki * row[j];
      q_state[j] += qi * row[j];
    }
    kq += ki * qi;
  }
  const float decay = __builtin_expf(g);
  for (int64_t j = 0; j < dv; ++j) {
    correction[j] = beta * (v[j] - decay * k_state[j]);
    o[j] = decay * q_state[j] + kq * correction[j];
  }
  for (int64_t i = 0; i < dk; ++i) {  // decay and rank-1 write, in place (the state is in cache now)
    const float ki = k[i];
    float* row = s + i * dv;
    for (int64_t j = 0; j < dv; ++j) row[j] = decay * row[j] + ki * correction[j];
  }
}

}  // namespace
}  // namespace qwen_ops::cpu

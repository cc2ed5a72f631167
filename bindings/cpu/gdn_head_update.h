// One (sequence, value head) step of the gated delta rule on a float32 [Dk, Dv] state, in place: shared by
// the GDN decode kernels (bindings/cpu/gdn_recurrent_decode.cpp, gdn_decode_step_cpu.cpp).
//
// Math (ops/gdn/vectorized_recurrent.py's form, see its docstring): with d = exp(g), corr = beta * (v - d * S^T k),
//   o = d * (S^T q) + (k . q) * corr,   S <- d * S + k corr^T.
// The state is read once for both products, then decayed and written once (the second pass hits the cache).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace qwen_ops::cpu {

// s: [dk, dv] state (updated); k, q: [dk] (q already normalised and scaled); v: [dv]; g: log-decay; beta: the
// write strength; scratch: 3 * dv floats; writes o: [dv].
inline void gdn_head_decode(float* s, const float* k, const float* q, const float* v, float g, float beta, int64_t dk,
                            int64_t dv, float* scratch, float* o) {
  float* k_state = scratch;
  float* q_state = scratch + dv;
  float* correction = scratch + 2 * dv;
  std::fill(scratch, scratch + 2 * dv, 0.0f);
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
  const float decay = std::exp(g);
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

}  // namespace qwen_ops::cpu

// The float32 dot product of the portable CPU kernels (small_m_linear_portable.cpp,
// int8_linear_portable.cpp): x [K] float32 against one weight row [K] of float32 or int8 (each element
// converted to float32, exactly). kLanes independent partial sums so the compiler can keep several
// multiply-adds in flight (and vectorise where it may), added in lane order, then the K tail.
#pragma once

#include <cstdint>

namespace qwen_ops::cpu {

template <class W>
inline float portable_dot(const float* x, const W* w, int64_t K) {
  constexpr int kLanes = 8;
  float partial[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes)
    for (int l = 0; l < kLanes; ++l) partial[l] += x[k + l] * static_cast<float>(w[k + l]);
  float sum = 0.f;
  for (int l = 0; l < kLanes; ++l) sum += partial[l];
  for (; k < K; ++k) sum += x[k] * static_cast<float>(w[k]);
  return sum;
}

}  // namespace qwen_ops::cpu

// The float32 dot product of the portable CPU kernels (small_m_linear_portable.cpp,
// int8_linear_portable.cpp): x [K] float32 (or bfloat16) against one weight row [K] of float32, int8 or
// bfloat16 (each element converted to float32, exactly). kLanes independent partial sums so the compiler can keep several
// multiply-adds in flight (and vectorise where it may), added in lane order, then the K tail.
#pragma once

#include <cstdint>

namespace qwen_ops::cpu {

// bfloat16's bits, as the bfloat16 kernels pass them (a distinct type, so that as_float reads them as such).
struct Bf16Bits {
  uint16_t bits;
};

inline float as_float(float v) { return v; }
inline float as_float(int8_t v) { return static_cast<float>(v); }
inline float as_float(Bf16Bits v) {  // exact: the 16 bits are a float32's upper half
  const uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

// float32 -> bfloat16, round to nearest even (NaN stays a quiet NaN).
inline uint16_t bf16_bits_of(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

template <class X, class W>
inline float portable_dot(const X* x, const W* w, int64_t K) {
  constexpr int kLanes = 8;
  float partial[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes)
    for (int l = 0; l < kLanes; ++l) partial[l] += as_float(x[k + l]) * as_float(w[k + l]);
  float sum = 0.f;
  for (int l = 0; l < kLanes; ++l) sum += partial[l];
  for (; k < K; ++k) sum += as_float(x[k]) * as_float(w[k]);
  return sum;
}

}  // namespace qwen_ops::cpu

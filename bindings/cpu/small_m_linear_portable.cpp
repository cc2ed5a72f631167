// Portable small-M linear (any CPU, no -m flags): the fallback when neither AVX2 nor AVX-512 is there (float32),
// or AVX-512 BF16 is not (bfloat16).
#include "portable_dot.h"
#include "small_m_linear_kernels.h"

namespace qwen_ops::cpu {

void small_m_linear_f32_portable(const float* x, const float* w, const float* bias, float* out, int64_t M,
                                 int64_t N, int64_t K, int64_t n_begin, int64_t n_end) {
  for (int64_t n = n_begin; n < n_end; ++n) {
    for (int64_t m = 0; m < M; ++m) {
      const float sum = portable_dot(x + m * K, w + n * K, K);
      out[m * N + n] = bias ? sum + bias[n] : sum;
    }
  }
}

void small_m_linear_bf16_portable(const uint16_t* x, const uint16_t* w, const uint16_t* bias, uint16_t* out,
                                  int64_t M, int64_t N, int64_t K, int64_t n_begin, int64_t n_end) {
  const auto* xb = reinterpret_cast<const Bf16Bits*>(x);
  const auto* wb = reinterpret_cast<const Bf16Bits*>(w);
  for (int64_t n = n_begin; n < n_end; ++n) {
    for (int64_t m = 0; m < M; ++m) {
      const float sum = portable_dot(xb + m * K, wb + n * K, K);
      out[m * N + n] = bf16_bits_of(bias ? sum + as_float(Bf16Bits{bias[n]}) : sum);
    }
  }
}

}  // namespace qwen_ops::cpu

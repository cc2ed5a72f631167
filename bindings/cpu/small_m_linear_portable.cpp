// Portable small-M linear (any CPU, no -m flags): the fallback when neither AVX2 nor AVX-512 is there.
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

}  // namespace qwen_ops::cpu

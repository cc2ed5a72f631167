// Portable small-M linear (any CPU, no -m flags): the fallback when neither AVX2 nor AVX-512 is there.
#include "small_m_linear_kernels.h"

namespace qwen_ops::cpu {

namespace {
// Independent partial sums so the compiler can keep several FMAs in flight (and vectorise if it may).
constexpr int kLanes = 8;
}  // namespace

void small_m_linear_f32_portable(const float* x, const float* w, const float* bias, float* out, int64_t M,
                                 int64_t N, int64_t K, int64_t n_begin, int64_t n_end) {
  for (int64_t n = n_begin; n < n_end; ++n) {
    const float* wn = w + n * K;
    for (int64_t m = 0; m < M; ++m) {
      const float* xm = x + m * K;
      float partial[kLanes] = {};
      int64_t k = 0;
      for (; k + kLanes <= K; k += kLanes) {
        for (int l = 0; l < kLanes; ++l) partial[l] += wn[k + l] * xm[k + l];
      }
      float sum = 0.f;
      for (int l = 0; l < kLanes; ++l) sum += partial[l];
      for (; k < K; ++k) sum += wn[k] * xm[k];
      out[m * N + n] = bias ? sum + bias[n] : sum;
    }
  }
}

}  // namespace qwen_ops::cpu

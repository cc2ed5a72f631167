// Portable INT8-weight linear (any CPU, no -m flags): the fallback where AVX-512 VNNI is missing.
#include "int8_linear_kernels.h"
#include "portable_dot.h"

namespace qwen_ops::cpu {

void w8a8_linear_portable(const int8_t* x, const float* x_scale, const int8_t* w, const float* w_scale,
                          const int32_t* quant_bias, const float* bias, float* out, int64_t M, int64_t N, int64_t K,
                          int64_t n_begin, int64_t n_end) {
  for (int64_t n = n_begin; n < n_end; ++n) {
    const int8_t* wn = w + n * K;
    for (int64_t m = 0; m < M; ++m) {
      const int8_t* xm = x + m * K;
      int32_t dot = 0;  // |dot| <= 128 * 128 * K < 2^31 for K <= 65536 (the dispatcher's limit)
      for (int64_t k = 0; k < K; ++k) dot += static_cast<int32_t>(xm[k]) * static_cast<int32_t>(wn[k]);
      out[m * N + n] = w8a8_output(dot, m, n, x_scale, w_scale, quant_bias, bias);
    }
  }
}

void weight_only_int8_linear_portable(const float* x, const int8_t* w, const float* w_scale, const float* bias,
                                      float* out, int64_t M, int64_t N, int64_t K, int64_t n_begin, int64_t n_end) {
  for (int64_t n = n_begin; n < n_end; ++n) {
    for (int64_t m = 0; m < M; ++m) {
      const float value = portable_dot(x + m * K, w + n * K, K) * w_scale[n];
      out[m * N + n] = bias ? value + bias[n] : value;
    }
  }
}

}  // namespace qwen_ops::cpu

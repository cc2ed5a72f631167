// AVX2 + FMA small-M linear (compiled with -mavx2 -mfma; called only where cpu_features says the CPU has them).
//
// 16 ymm registers: 4 rows of w against 2 rows of x per pass (8 accumulators of 8 lanes). The K tail
// (K not a multiple of 8) is summed in scalar after the lanes, so no element is read past a row.
#include <immintrin.h>

#include "small_m_linear_kernels.h"

namespace qwen_ops::cpu {

namespace {

constexpr int kWidth = 8;
constexpr int kRowsN = 4;
constexpr int kRowsM = 2;

inline float reduce_add(__m256 v) {
  const __m128 sum4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 sum2 = _mm_add_ps(sum4, _mm_movehl_ps(sum4, sum4));
  const __m128 sum1 = _mm_add_ss(sum2, _mm_shuffle_ps(sum2, sum2, 0x55));
  return _mm_cvtss_f32(sum1);
}

template <int RN, int RM>
inline void block(const float* x, const float* w, const float* bias, float* out, int64_t N, int64_t K,
                  int64_t n, int64_t m) {
  __m256 acc[RN][RM];
  for (int j = 0; j < RN; ++j)
    for (int i = 0; i < RM; ++i) acc[j][i] = _mm256_setzero_ps();
  const float* wr[RN];
  for (int j = 0; j < RN; ++j) wr[j] = w + (n + j) * K;
  const float* xr[RM];
  for (int i = 0; i < RM; ++i) xr[i] = x + (m + i) * K;

  int64_t k = 0;
  for (; k + kWidth <= K; k += kWidth) {
    __m256 wv[RN];
    for (int j = 0; j < RN; ++j) wv[j] = _mm256_loadu_ps(wr[j] + k);
    for (int i = 0; i < RM; ++i) {
      const __m256 xv = _mm256_loadu_ps(xr[i] + k);
      for (int j = 0; j < RN; ++j) acc[j][i] = _mm256_fmadd_ps(wv[j], xv, acc[j][i]);
    }
  }
  for (int j = 0; j < RN; ++j) {
    const float b = bias ? bias[n + j] : 0.f;
    for (int i = 0; i < RM; ++i) {
      float sum = reduce_add(acc[j][i]);
      for (int64_t t = k; t < K; ++t) sum += wr[j][t] * xr[i][t];
      out[(m + i) * N + n + j] = sum + b;
    }
  }
}

template <int RN>
inline void column_block(const float* x, const float* w, const float* bias, float* out, int64_t M, int64_t N,
                         int64_t K, int64_t n) {
  int64_t m = 0;
  for (; m + kRowsM <= M; m += kRowsM) block<RN, kRowsM>(x, w, bias, out, N, K, n, m);
  if (m < M) block<RN, 1>(x, w, bias, out, N, K, n, m);
}

}  // namespace

void small_m_linear_f32_avx2(const float* x, const float* w, const float* bias, float* out, int64_t M,
                             int64_t N, int64_t K, int64_t n_begin, int64_t n_end) {
  int64_t n = n_begin;
  for (; n + kRowsN <= n_end; n += kRowsN) column_block<kRowsN>(x, w, bias, out, M, N, K, n);
  for (; n < n_end; ++n) column_block<1>(x, w, bias, out, M, N, K, n);
}

}  // namespace qwen_ops::cpu

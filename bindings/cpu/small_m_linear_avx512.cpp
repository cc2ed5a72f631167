// AVX-512F small-M linear (compiled with -mavx512f -mfma; called only where cpu_features says the CPU has it).
//
// Register blocking: 4 rows of w (kRowsN) against up to 4 rows of x (kRowsM) per pass, 16 accumulators
// of 16 lanes. Each row of w is streamed from memory once per pass over x's rows; with M > 4 the later
// passes find the 4 rows of w (4 * K floats) in L1/L2, so the memory traffic stays one read of w.
// The K tail (K not a multiple of 16) goes through masked loads, so no element is read past a row.
#include <immintrin.h>

#include "small_m_linear_kernels.h"

namespace qwen_ops::cpu {

namespace {

constexpr int kWidth = 16;
constexpr int kRowsN = 4;
constexpr int kRowsM = 4;

// Sum of the 16 lanes: the 256-bit halves folded first, then within 256 and 128 bits (one fixed order,
// the same in every column, so a result does not depend on which thread computed it).
inline float reduce_add(__m512 v) {
  const __m512 halves = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m256 sum8 = _mm512_castps512_ps256(halves);
  const __m128 sum4 = _mm_add_ps(_mm256_castps256_ps128(sum8), _mm256_extractf128_ps(sum8, 1));
  const __m128 sum2 = _mm_add_ps(sum4, _mm_movehl_ps(sum4, sum4));
  return _mm_cvtss_f32(_mm_add_ss(sum2, _mm_shuffle_ps(sum2, sum2, 0x55)));
}

template <int RN, int RM>
inline void block(const float* x, const float* w, const float* bias, float* out, int64_t N, int64_t K,
                  int64_t n, int64_t m) {
  __m512 acc[RN][RM];
  for (int j = 0; j < RN; ++j)
    for (int i = 0; i < RM; ++i) acc[j][i] = _mm512_setzero_ps();
  const float* wr[RN];
  for (int j = 0; j < RN; ++j) wr[j] = w + (n + j) * K;
  const float* xr[RM];
  for (int i = 0; i < RM; ++i) xr[i] = x + (m + i) * K;

  int64_t k = 0;
  for (; k + kWidth <= K; k += kWidth) {
    __m512 wv[RN];
    for (int j = 0; j < RN; ++j) wv[j] = _mm512_loadu_ps(wr[j] + k);
    for (int i = 0; i < RM; ++i) {
      const __m512 xv = _mm512_loadu_ps(xr[i] + k);
      for (int j = 0; j < RN; ++j) acc[j][i] = _mm512_fmadd_ps(wv[j], xv, acc[j][i]);
    }
  }
  if (k < K) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (K - k)) - 1u);
    __m512 wv[RN];
    for (int j = 0; j < RN; ++j) wv[j] = _mm512_maskz_loadu_ps(mask, wr[j] + k);
    for (int i = 0; i < RM; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, xr[i] + k);
      for (int j = 0; j < RN; ++j) acc[j][i] = _mm512_fmadd_ps(wv[j], xv, acc[j][i]);
    }
  }
  for (int j = 0; j < RN; ++j) {
    const float b = bias ? bias[n + j] : 0.f;
    for (int i = 0; i < RM; ++i) out[(m + i) * N + n + j] = reduce_add(acc[j][i]) + b;
  }
}

template <int RN>
inline void column_block(const float* x, const float* w, const float* bias, float* out, int64_t M, int64_t N,
                         int64_t K, int64_t n) {
  int64_t m = 0;
  for (; m + kRowsM <= M; m += kRowsM) block<RN, kRowsM>(x, w, bias, out, N, K, n, m);
  switch (M - m) {
    case 3: block<RN, 3>(x, w, bias, out, N, K, n, m); break;
    case 2: block<RN, 2>(x, w, bias, out, N, K, n, m); break;
    case 1: block<RN, 1>(x, w, bias, out, N, K, n, m); break;
    default: break;
  }
}

}  // namespace

void small_m_linear_f32_avx512(const float* x, const float* w, const float* bias, float* out, int64_t M,
                               int64_t N, int64_t K, int64_t n_begin, int64_t n_end) {
  int64_t n = n_begin;
  for (; n + kRowsN <= n_end; n += kRowsN) column_block<kRowsN>(x, w, bias, out, M, N, K, n);
  for (; n < n_end; ++n) column_block<1>(x, w, bias, out, M, N, K, n);
}

}  // namespace qwen_ops::cpu

// AVX-512F small-M linear (compiled with -mavx512f -mfma; called only where cpu_features says the CPU has it):
// the 16-lane vector type of the shared tiles (small_m_linear_tiles.h). 32 zmm registers hold a tile's 16
// accumulators with its weight and x vectors; the K tail goes through masked loads, so no element is
// read past a row.
#include <immintrin.h>

#include "small_m_linear_kernels.h"
#include "small_m_linear_tiles.h"

namespace qwen_ops::cpu {

namespace {

struct Avx512Lanes {
  using V = __m512;
  static constexpr int kWidth = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_first(const float* p, int64_t count) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << count) - 1u), p);
  }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static void store_first(float* p, V v, int count) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << count) - 1u), v);
  }
  static V lanes_from(V v, int first) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_permutexvar_ps(_mm512_add_epi32(lane, _mm512_set1_epi32(first)), v);
  }

  // [a0+a1, a2+a3, b0+b1, b2+b3] within each 128-bit block (what _mm256_hadd_ps does per block).
  static V pair_sums(V a, V b) {
    return _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  }
  // Lane l = the sum of v[l]'s 16 lanes: two levels of pair sums leave, in block q of quad[r], the sums
  // of v[4r..4r+3] over block q; then the four 128-bit blocks are added across (0+2, 1+3, then the two).
  static V sum_each(const V (&v)[16]) {
    V pairs[8], quad[4];
    for (int p = 0; p < 8; ++p) pairs[p] = pair_sums(v[2 * p], v[2 * p + 1]);
    for (int r = 0; r < 4; ++r) quad[r] = pair_sums(pairs[2 * r], pairs[2 * r + 1]);
    const V s01 = _mm512_add_ps(_mm512_shuffle_f32x4(quad[0], quad[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                _mm512_shuffle_f32x4(quad[0], quad[1], _MM_SHUFFLE(3, 2, 3, 2)));
    const V s23 = _mm512_add_ps(_mm512_shuffle_f32x4(quad[2], quad[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                _mm512_shuffle_f32x4(quad[2], quad[3], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
  }
};

}  // namespace

void small_m_linear_f32_avx512(const float* x, const float* w, const float* bias, float* out, int64_t M,
                               int64_t N, int64_t K, int64_t n_begin, int64_t n_end) {
  tiles::small_m_linear<Avx512Lanes>(x, w, bias, out, M, N, K, n_begin, n_end);
}

}  // namespace qwen_ops::cpu

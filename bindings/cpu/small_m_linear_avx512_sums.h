// The 16 float32 lanes of sums shared by the AVX-512 small-M linear variants (small_m_linear_avx512.cpp for
// float32 operands, small_m_linear_avx512_bf16.cpp for bfloat16): everything of a tiles lane type
// (small_m_linear_tiles.h) that acts on the sums, so both reduce and place them the same way. Included only
// by files compiled with at least -mavx512f; the functions are inline in an unnamed namespace, so each file
// keeps its own copy.
#pragma once

#include <immintrin.h>

namespace qwen_ops::cpu {

namespace {

struct Avx512Sums {
  using V = __m512;
  static constexpr int kWidth = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
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

}  // namespace qwen_ops::cpu

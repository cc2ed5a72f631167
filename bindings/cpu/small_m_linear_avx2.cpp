// AVX2 + FMA small-M linear (compiled with -mavx2 -mfma; called only where cpu_features says the CPU has
// them): the 8-lane vector type of the shared tiles (small_m_linear_tiles.h). The K tail goes through
// masked loads and the output's short rows through masked stores (vmaskmovps does not touch
// masked-out elements), so no element is read past a row.
#include <immintrin.h>

#include "small_m_linear_kernels.h"
#include "small_m_linear_tiles.h"

namespace qwen_ops::cpu {

namespace {

struct Avx2Lanes {
  using V = __m256;
  static constexpr int kWidth = 8;
  using Elem = float;
  using In = V;  // a step's operands are float32 vectors themselves
  static constexpr int kStep = kWidth;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static __m256i lane() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
  static __m256i first_lanes(int64_t count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), lane());
  }
  static V load_first(const float* p, int64_t count) { return _mm256_maskload_ps(p, first_lanes(count)); }
  static V load_bias(const float* p, int64_t count) { return load_first(p, count); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static void store_first(float* p, V v, int count) { _mm256_maskstore_ps(p, first_lanes(count), v); }
  static V lanes_from(V v, int first) {
    return _mm256_permutevar8x32_ps(v, _mm256_add_epi32(lane(), _mm256_set1_epi32(first)));
  }

  // Lane l = the sum of v[l]'s 8 lanes: two levels of hadd leave v[0..3]'s sums over each 128-bit half
  // in quad0 and v[4..7]'s in quad1; the halves are then added across.
  static V sum_each(const V (&v)[8]) {
    const V quad0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const V quad1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(quad0, quad1, 0x20), _mm256_permute2f128_ps(quad0, quad1, 0x31));
  }
};

}  // namespace

void small_m_linear_f32_avx2(const float* x, const float* w, const float* bias, float* out, int64_t M,
                             int64_t N, int64_t K, int64_t n_begin, int64_t n_end) {
  tiles::small_m_linear<Avx2Lanes>(x, w, bias, out, M, N, K, n_begin, n_end);
}

}  // namespace qwen_ops::cpu

// AVX-512F small-M linear (compiled with -mavx512f -mfma; called only where cpu_features says the CPU has it):
// the 16-lane vector type of the shared tiles (small_m_linear_tiles.h). 32 zmm registers hold a tile's 16
// accumulators with its weight and x vectors; the K tail goes through masked loads, so no element is
// read past a row.
#include <immintrin.h>

#include "small_m_linear_avx512_sums.h"
#include "small_m_linear_kernels.h"
#include "small_m_linear_tiles.h"

namespace qwen_ops::cpu {

namespace {

struct Avx512Lanes : Avx512Sums {
  using Elem = float;
  using In = V;  // a step's operands are float32 vectors themselves
  static constexpr int kStep = kWidth;
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_first(const float* p, int64_t count) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << count) - 1u), p);
  }
  static V load_bias(const float* p, int64_t count) { return load_first(p, count); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static void store_first(float* p, V v, int count) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << count) - 1u), v);
  }
};

}  // namespace

void small_m_linear_f32_avx512(const float* x, const float* w, const float* bias, float* out, int64_t M,
                               int64_t N, int64_t K, int64_t n_begin, int64_t n_end) {
  tiles::small_m_linear<Avx512Lanes>(x, w, bias, out, M, N, K, n_begin, n_end);
}

}  // namespace qwen_ops::cpu

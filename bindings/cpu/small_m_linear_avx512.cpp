// AVX-512F small-M linear (compiled with -mavx512f -mfma; called only where cpu_features says the CPU has it):
// the 16-lane vector type of the shared tiles (small_m_linear_tiles.h). 32 zmm registers hold a tile's 16
// accumulators with its weight and x vectors; the K tail goes through masked loads, so no element is
// read past a row. From kRowLanesMinRows rows of x on, the row-lanes form below replaces the shared tiles.
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

// The row-lanes form: a lane per row of x. Each step k multiplies weight element w[n, k] (broadcast from
// memory, no shuffle) by x_lanes' vector of the step (x[16g + l, k] in lane l) into the accumulator of
// column n, so every FMA does 16 useful products where the dot form's tiles also spend loads on the x
// operand and a reduction at the end (measured at 16 rows: bench/RESULTS.md, "The projection kernel").
// kLaneTileColumns accumulators: 8 weight rows read side by side (8 streams; 12 and 16 were slower, the
// row pointers no longer fit the general registers) and enough independent FMA chains to cover the FMA's
// latency. Each output is summed as one chain, k = 0, 1, ..., K - 1, then the bias added: the same at
// every M that takes this form. Any K: one element per step, so there is no tail.
namespace {

constexpr int kLaneTileColumns = 8;

// Columns [n, n + rn) against the row group g (rows [16g, min(16g + 16, M)) of out).
void row_lanes_tile(const float* x_lanes, const float* w, const float* bias, float* out, int64_t M, int64_t N,
                    int64_t K, int64_t n, int rn, int64_t g) {
  __m512 acc[kLaneTileColumns];
  int64_t column[kLaneTileColumns];
  const float* wr[kLaneTileColumns];
  for (int j = 0; j < kLaneTileColumns; ++j) {
    acc[j] = _mm512_setzero_ps();
    // Columns past this thread's range (rn < 8) re-read the last valid weight row and bias: in bounds, never
    // stored.
    column[j] = n + (j < rn ? j : rn - 1);
    wr[j] = w + column[j] * K;
  }
  const float* xg = x_lanes + g * K * kRowLanes;
#pragma GCC unroll 4
  for (int64_t k = 0; k < K; ++k) {
    const __m512 xv = _mm512_loadu_ps(xg + k * kRowLanes);
    for (int j = 0; j < kLaneTileColumns; ++j) acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(wr[j][k]), xv, acc[j]);
  }
  alignas(64) float sums[kLaneTileColumns][kRowLanes];
  for (int j = 0; j < kLaneTileColumns; ++j) {
    const __m512 with_bias = bias ? _mm512_add_ps(acc[j], _mm512_set1_ps(bias[column[j]])) : acc[j];
    _mm512_store_ps(sums[j], with_bias);
  }
  const int64_t rows = M - g * kRowLanes < kRowLanes ? M - g * kRowLanes : kRowLanes;
  for (int64_t l = 0; l < rows; ++l) {
    float* o = out + (g * kRowLanes + l) * N + n;
    for (int j = 0; j < rn; ++j) o[j] = sums[j][l];
  }
}

}  // namespace

void pack_row_lanes_avx512(const float* x, int64_t M, int64_t K, float* x_lanes) {
  for (int64_t g = 0; g < row_lane_groups(M); ++g) {
    float* group = x_lanes + g * K * kRowLanes;
    for (int64_t l = 0; l < kRowLanes; ++l) {
      const int64_t row = g * kRowLanes + l;
      if (row < M) {
        const float* xr = x + row * K;
        for (int64_t k = 0; k < K; ++k) group[k * kRowLanes + l] = xr[k];
      } else {
        for (int64_t k = 0; k < K; ++k) group[k * kRowLanes + l] = 0.0f;  // lanes past the last row
      }
    }
  }
}

void small_m_linear_f32_row_lanes_avx512(const float* x_lanes, const float* w, const float* bias, float* out,
                                         int64_t M, int64_t N, int64_t K, int64_t n_begin, int64_t n_end) {
  const int64_t groups = row_lane_groups(M);
  // Each tile's 8 weight rows are read from memory by the first row group; the later groups (M > 16) find
  // them in L1/L2.
  for (int64_t n = n_begin; n < n_end; n += kLaneTileColumns) {
    const int rn = static_cast<int>(n_end - n < kLaneTileColumns ? n_end - n : kLaneTileColumns);
    for (int64_t g = 0; g < groups; ++g) row_lanes_tile(x_lanes, w, bias, out, M, N, K, n, rn, g);
  }
}

void small_m_linear_f32_avx512(const float* x, const float* w, const float* bias, float* out, int64_t M,
                               int64_t N, int64_t K, int64_t n_begin, int64_t n_end) {
  tiles::small_m_linear<Avx512Lanes>(x, w, bias, out, M, N, K, n_begin, n_end);
}

}  // namespace qwen_ops::cpu

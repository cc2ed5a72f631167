// AVX-512 INT8-weight linear (compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mfma
// -ffp-contract=off; called only where cpu_has_avx512_vnni()).
//
// W8A8: vpdpbusd multiplies unsigned by signed bytes, so x (signed) is read as x + 128 (an XOR of the sign
// bit) and the excess 128 * sum_k w[n, k] is taken off once per output; the weight's row sums come from the
// same instruction against a vector of ones. The int32 sums wrap modulo 2^32 on the way, and the true dot
// product (|.| <= 128 * 128 * K < 2^31 for K <= 65536) is what remains: the sums are exact, so this variant's
// outputs are bitwise those of the portable one (the shared epilogue w8a8_output does the float part).
//
// A tile is up to 4 weight rows (output columns) against up to 4 rows of x: 16 accumulators, read 64 bytes
// of K at a time, the K tail through masked loads (lanes past K read as 0 and never touch memory). Every
// weight row is read from memory once; the later x tiles of a column block find it in L1.
#include <immintrin.h>

#include <type_traits>

#include "int8_linear_kernels.h"
#include "int8_linear_m1_streams.h"

namespace qwen_ops::cpu {

namespace {

constexpr int kRows = 4;  // weight rows per tile (and x rows per tile)

inline __mmask64 first_bytes(int64_t count) { return count >= 64 ? ~__mmask64{0} : ((__mmask64{1} << count) - 1); }

template <int RM>
void w8a8_tile(const int8_t* x, const float* x_scale, const int8_t* w, const float* w_scale,
               const int32_t* quant_bias, const float* bias, float* out, int64_t N, int64_t K, int64_t n, int rn,
               int64_t m) {
  __m512i acc[RM][kRows];
  __m512i row_sum[kRows];
  for (int j = 0; j < kRows; ++j) {
    row_sum[j] = _mm512_setzero_si512();
    for (int i = 0; i < RM; ++i) acc[i][j] = _mm512_setzero_si512();
  }
  const int8_t* wr[kRows];
  for (int j = 0; j < kRows; ++j) wr[j] = w + (n + (j < rn ? j : rn - 1)) * K;  // short tiles re-read a valid row
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t k = 0; k < K; k += 64) {
    const __mmask64 mask = first_bytes(K - k);
    __m512i wv[kRows];
    for (int j = 0; j < kRows; ++j) {
      wv[j] = _mm512_maskz_loadu_epi8(mask, wr[j] + k);
      row_sum[j] = _mm512_dpbusd_epi32(row_sum[j], ones, wv[j]);
    }
    for (int i = 0; i < RM; ++i) {
      // Lanes past K: x + 128 = 128 against a weight of 0 there, so they add nothing.
      const __m512i xv = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, x + (m + i) * K + k), sign);
      for (int j = 0; j < kRows; ++j) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], xv, wv[j]);
    }
  }
  for (int j = 0; j < rn; ++j) {
    const uint32_t excess = 128u * static_cast<uint32_t>(_mm512_reduce_add_epi32(row_sum[j]));
    for (int i = 0; i < RM; ++i) {
      const uint32_t biased = static_cast<uint32_t>(_mm512_reduce_add_epi32(acc[i][j]));
      const int32_t dot = static_cast<int32_t>(biased - excess);  // modulo 2^32: the exact dot product
      out[(m + i) * N + n + j] = w8a8_output(dot, m + i, n + j, x_scale, w_scale, quant_bias, bias);
    }
  }
}

inline __mmask16 first_floats(int64_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << count) - 1u);
}

// RN weight rows (any rows of w: row[j] for j < rn, the rest repeat row[rn - 1] and are not stored) against RM
// rows of x. Each accumulator takes its k in order, 16 at a time, the K tail last (masked), whatever RN, RM
// and the rows: so the output does not depend on the tile (bitwise batch invariance). The main loop reads 64
// bytes of each weight row a step (its four 16-byte quarters converted and multiplied in turn).
template <int RM, int RN>
void weight_only_tile(const float* x, const int8_t* w, const float* w_scale, const float* bias, float* out, int64_t N,
                      int64_t K, const int64_t* row, int rn, int64_t m) {
  __m512 acc[RM][RN];
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) acc[i][j] = _mm512_setzero_ps();
  const int8_t* wr[RN];
  for (int j = 0; j < RN; ++j) wr[j] = w + row[j < rn ? j : rn - 1] * K;
  auto step = [&](int64_t k, __mmask16 mask) {
    __m512 wv[RN];
    for (int j = 0; j < RN; ++j)
      wv[j] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, wr[j] + k)));
    for (int i = 0; i < RM; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + (m + i) * K + k);
      for (int j = 0; j < RN; ++j) acc[i][j] = _mm512_fmadd_ps(wv[j], xv, acc[i][j]);
    }
  };
  int64_t k = 0;
  for (; k + 64 <= K; k += 64)
    for (int q = 0; q < 64; q += 16) step(k + q, static_cast<__mmask16>(0xFFFF));
  for (; k < K; k += 16) step(k, first_floats(K - k));
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < rn; ++j) {
      const int64_t n = row[j];
      const float value = _mm512_reduce_add_ps(acc[i][j]) * w_scale[n];
      out[(m + i) * N + n] = bias ? value + bias[n] : value;
    }
}

// Rows n, n + 1, ..., n + rn - 1 of w.
template <int RM, int RN>
void weight_only_block(const float* x, const int8_t* w, const float* w_scale, const float* bias, float* out,
                       int64_t N, int64_t K, int64_t n, int rn, int64_t m) {
  int64_t row[RN];
  for (int j = 0; j < RN; ++j) row[j] = n + j;
  weight_only_tile<RM, RN>(x, w, w_scale, bias, out, N, K, row, rn, m);
}

// At M = 1: 4 sequential streams (int8_linear_m1_streams.h), chosen in a standalone copy of this loop (a
// throwaway harness, not in the repository; 2 threads, weights in 2 MB pages, medians of 7;
// bench/e2e/bench_int8_linear.py measures the kernel itself), GB/s at [N, K]:
//   - one row at a time (a single stream, one chain: the FMA latency is the limit): [248320, 1024] 29.3-29.7,
//     [3584, 1024] 32.9-33.6, [1024, 3584] 28.0-28.2, [1024, 2048] 34.4;
//   - 2, 4 or 8 neighbouring rows interleaved (the rows are 1-3.5 KB apart, which the hardware prefetcher
//     did not follow): 14-19 at K = 1024, 19-32 at K = 2048 and 3584;
//   - 4 streams: 32.8-33.1, 40.1-40.8, 35.1-37.6, 46.7, the rate of a plain sum of the same bytes (33.8,
//     36.9, 42.2) or above it.
// In the engine (bench/e2e/profile_decode.py --quantization int8_weight_only --batch-sizes 1 --prompt-len 128
// --breakdown) the step's INT8 projections went from 30 to 17 ms, the lm_head [248320, 1024] from 9.9 to 4.9.
void weight_only_m1(const float* x, const int8_t* w, const float* w_scale, const float* bias, float* out, int64_t N,
                    int64_t K, int64_t n_begin, int64_t n_end) {
  over_m1_streams(
      n_begin, n_end,
      [&](const int64_t* row) { weight_only_tile<1, kM1Streams>(x, w, w_scale, bias, out, N, K, row, kM1Streams, 0); },
      [&](int64_t n) { weight_only_block<1, 1>(x, w, w_scale, bias, out, N, K, n, 1, 0); });
}

// Columns [n_begin, n_end) kRows at a time, every row of x against each column tile (4 rows of x per tile,
// the last 1-3 in a smaller one).
template <class Tile1, class Tile2, class Tile3, class Tile4>
void over_tiles(int64_t M, int64_t n_begin, int64_t n_end, Tile1 t1, Tile2 t2, Tile3 t3, Tile4 t4) {
  for (int64_t n = n_begin; n < n_end; n += kRows) {
    const int rn = static_cast<int>(n_end - n < kRows ? n_end - n : kRows);
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) t4(n, rn, m);
    switch (M - m) {
      case 3: t3(n, rn, m); break;
      case 2: t2(n, rn, m); break;
      case 1: t1(n, rn, m); break;
      default: break;
    }
  }
}

}  // namespace

void w8a8_linear_avx512_vnni(const int8_t* x, const float* x_scale, const int8_t* w, const float* w_scale,
                             const int32_t* quant_bias, const float* bias, float* out, int64_t M, int64_t N,
                             int64_t K, int64_t n_begin, int64_t n_end) {
  auto tile = [&](auto rows) {
    return [&, rows](int64_t n, int rn, int64_t m) {
      w8a8_tile<decltype(rows)::value>(x, x_scale, w, w_scale, quant_bias, bias, out, N, K, n, rn, m);
    };
  };
  over_tiles(M, n_begin, n_end, tile(std::integral_constant<int, 1>{}), tile(std::integral_constant<int, 2>{}),
             tile(std::integral_constant<int, 3>{}), tile(std::integral_constant<int, 4>{}));
}

void weight_only_int8_linear_avx512_vnni(const float* x, const int8_t* w, const float* w_scale, const float* bias,
                                         float* out, int64_t M, int64_t N, int64_t K, int64_t n_begin,
                                         int64_t n_end) {
  if (M == 1) {
    weight_only_m1(x, w, w_scale, bias, out, N, K, n_begin, n_end);
    return;
  }
  auto tile = [&](auto rows) {
    return [&, rows](int64_t n, int rn, int64_t m) {
      weight_only_block<decltype(rows)::value, kRows>(x, w, w_scale, bias, out, N, K, n, rn, m);
    };
  };
  over_tiles(M, n_begin, n_end, tile(std::integral_constant<int, 1>{}), tile(std::integral_constant<int, 2>{}),
             tile(std::integral_constant<int, 3>{}), tile(std::integral_constant<int, 4>{}));
}

}  // namespace qwen_ops::cpu

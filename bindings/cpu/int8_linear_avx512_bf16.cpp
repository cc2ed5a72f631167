// AVX-512 BF16 weight-only INT8 linear for bfloat16 activations (compiled with -mavx512bf16 and the F/BW/VL flags
// it builds on, -ffp-contract=off; called only where cpu_has_avx512_bf16()).
//
// An int8 weight is exact in bfloat16 (8 significant bits), and its product with a bfloat16 x is exact in
// float32 (16 significant bits). So 32 weights are widened to bfloat16 (int8 -> int32 -> float32 -> bfloat16,
// each step exact) and vdpbf16ps adds each lane's two products to its float32 sum: twice the products of one
// float32 FMA. out[m, n] = bfloat16(sum * w_scale[n] (+ bias[n])), one rounding (to nearest even), as the
// reference rounds. vdpbf16ps reads denormal inputs as 0: an x below 2^-126 in magnitude adds nothing.
//
// Every output is summed in one order whatever M or the tile: lane l of its accumulator takes the pair
// (2l, 2l + 1) of each 32 elements of K in turn, the K tail last (lanes past K are 0 in both operands), then
// _mm512_reduce_add_ps; so row m of the result does not depend on the batch (bitwise batch invariance).
//
//   M = 1: the weight is the whole memory traffic; as the float32 kernel, kM1Streams sequential streams
//     (int8_linear_m1_streams.h), each row widened in registers.
//   M > 1: each kBlockRows weight rows are widened once into a bfloat16 buffer (L1 for K <= 2048), then every
//     tile of up to 4 rows of x runs against it: the widening is paid once per weight, not once per tile.
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "int8_linear_kernels.h"
#include "int8_linear_m1_streams.h"

namespace qwen_ops::cpu {

namespace {

constexpr int64_t kStep = 32;  // K elements per vdpbf16ps
constexpr int kBlockRows = 4;

inline __mmask32 first_elements(int64_t count) {
  return count >= kStep ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << count) - 1u);
}

// 32 int8 weights -> 32 bfloat16, exactly.
inline __m512bh widen(__m256i bytes) {
  const __m512 low = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(bytes)));
  const __m512 high = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(bytes, 1)));
  return _mm512_cvtne2ps_pbh(high, low);  // elements 0-15 from low, 16-31 from high
}

inline __m512bh load_x(const uint16_t* p, __mmask32 mask) {
  return reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, p));
}

// float32 -> bfloat16 bits, rounding to nearest even (NaN stays a quiet NaN): torch's rounding.
inline uint16_t to_bfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

inline uint16_t output(float sum, int64_t n, const float* w_scale, const float* bias) {
  const float value = sum * w_scale[n];
  return to_bfloat16(bias ? value + bias[n] : value);
}

// One row of x against S weight rows (row[s]), each widened as it is read (written as block_tile).
template <int S>
void m1_tile(const uint16_t* x, const int8_t* w, const float* w_scale, const float* bias, uint16_t* out, int64_t K,
             const int64_t* row) {
  __m512 acc[S];
  const int8_t* wr[S];
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s) {
    acc[s] = _mm512_setzero_ps();
    wr[s] = w + row[s] * K;
  }
  for (int64_t k = 0; k < K; k += kStep) {
    const __mmask32 mask = first_elements(K - k);
    const __m512bh xv = load_x(x + k, mask);
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s)
      acc[s] = _mm512_dpbf16_ps(acc[s], widen(_mm256_maskz_loadu_epi8(mask, wr[s] + k)), xv);
  }
  float sums[S];
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s) sums[s] = _mm512_reduce_add_ps(acc[s]);
  for (int s = 0; s < S; ++s) out[row[s]] = output(sums[s], row[s], w_scale, bias);
}

// RM rows of x from m against the rn (<= kBlockRows) widened weight rows of `block` ([kBlockRows][padded K],
// zero past K), which are columns n, n + 1, ...
// The accumulators are one flat array, every loop over them unrolled, and each reduced to a float before the
// run-time rn picks which are stored: written otherwise (a [RM][kBlockRows] array, or the stores indexed by
// rn), GCC 12 kept a copy of every accumulator in memory and stored all of them at each step of the loop,
// and those stores, not vdpbf16ps, bounded the kernel (16 rows of x ran no faster than the float32 kernel).
template <int RM>
void block_tile(const uint16_t* x, const uint16_t* block, int64_t padded, const float* w_scale, const float* bias,
                uint16_t* out, int64_t N, int64_t K, int64_t n, int rn, int64_t m) {
  constexpr int kAcc = RM * kBlockRows;
  __m512 acc[kAcc];
#pragma GCC unroll 16
  for (int a = 0; a < kAcc; ++a) acc[a] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += kStep) {
    const __mmask32 mask = first_elements(K - k);
    __m512bh wv[kBlockRows];
#pragma GCC unroll 4
    for (int j = 0; j < kBlockRows; ++j)
      wv[j] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(block + j * padded + k));
#pragma GCC unroll 4
    for (int i = 0; i < RM; ++i) {
      const __m512bh xv = load_x(x + (m + i) * K + k, mask);
#pragma GCC unroll 4
      for (int j = 0; j < kBlockRows; ++j) acc[i * kBlockRows + j] = _mm512_dpbf16_ps(acc[i * kBlockRows + j], wv[j], xv);
    }
  }
  float sums[kAcc];
#pragma GCC unroll 16
  for (int a = 0; a < kAcc; ++a) sums[a] = _mm512_reduce_add_ps(acc[a]);
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < rn; ++j) out[(m + i) * N + n + j] = output(sums[i * kBlockRows + j], n + j, w_scale, bias);
}

}  // namespace

void weight_only_int8_linear_bf16_avx512(const uint16_t* x, const int8_t* w, const float* w_scale, const float* bias,
                                         uint16_t* out, int64_t M, int64_t N, int64_t K, int64_t n_begin,
                                         int64_t n_end) {
  if (M == 1) {
    over_m1_streams(
        n_begin, n_end, [&](const int64_t* row) { m1_tile<kM1Streams>(x, w, w_scale, bias, out, K, row); },
        [&](int64_t n) { m1_tile<1>(x, w, w_scale, bias, out, K, &n); });
    return;
  }
  const int64_t padded = (K + kStep - 1) / kStep * kStep;
  std::vector<uint16_t> block(static_cast<size_t>(kBlockRows * padded));
  for (int64_t n = n_begin; n < n_end; n += kBlockRows) {
    const int rn = static_cast<int>(n_end - n < kBlockRows ? n_end - n : kBlockRows);
    // Rows past rn (a short last block) repeat the last valid row: read in bounds, summed, never stored.
    for (int j = 0; j < kBlockRows; ++j) {
      const int8_t* wr = w + (n + (j < rn ? j : rn - 1)) * K;
      for (int64_t k = 0; k < padded; k += kStep)
        _mm512_storeu_si512(block.data() + j * padded + k,
                            reinterpret_cast<__m512i>(widen(_mm256_maskz_loadu_epi8(first_elements(K - k), wr + k))));
    }
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) block_tile<4>(x, block.data(), padded, w_scale, bias, out, N, K, n, rn, m);
    switch (M - m) {
      case 3: block_tile<3>(x, block.data(), padded, w_scale, bias, out, N, K, n, rn, m); break;
      case 2: block_tile<2>(x, block.data(), padded, w_scale, bias, out, N, K, n, rn, m); break;
      case 1: block_tile<1>(x, block.data(), padded, w_scale, bias, out, N, K, n, rn, m); break;
      default: break;
    }
  }
}

}  // namespace qwen_ops::cpu

// AVX-512 BF16 small-M linear for bfloat16 operands (compiled with -mavx512bf16 and the F/BW/VL flags it
// builds on; called only where cpu_features says the CPU has AVX512_BF16): the shared tiles
// (small_m_linear_tiles.h) with one vdpbf16ps per 32 bfloat16 elements of a weight row. The weight is
// read as bfloat16, half float32's bytes, which is what a memory-bound decode step pays for; the products
// and their sums are float32 (vdpbf16ps adds each lane's two products to its float32 accumulator), and
// only the result is rounded to bfloat16 (round to nearest even), as F.linear on bfloat16 does.
#include <immintrin.h>

#include "small_m_linear_avx512_sums.h"
#include "small_m_linear_kernels.h"
#include "small_m_linear_tiles.h"

namespace qwen_ops::cpu {

namespace {

struct Avx512Bf16Lanes : Avx512Sums {
  using Elem = uint16_t;  // bfloat16's bits
  using In = __m512bh;    // 32 bfloat16 elements of a step, against 16 float32 sums (V)
  static constexpr int kStep = 32;
  static In load(const Elem* p) { return reinterpret_cast<In>(_mm512_loadu_si512(p)); }
  static In load_first(const Elem* p, int64_t count) {
    const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << count) - 1u);
    return reinterpret_cast<In>(_mm512_maskz_loadu_epi16(mask, p));
  }
  // Lane l += w[2l] * x[2l] + w[2l + 1] * x[2l + 1], in float32 (denormal inputs read as 0).
  static V fmadd(In w, In x, V acc) { return _mm512_dpbf16_ps(acc, w, x); }
  // bfloat16 -> float32 is exact: the 16 bits become a float32's upper half.
  static V load_bias(const Elem* p, int64_t count) {
    const __m256i bits = _mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << count) - 1u), p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
  static void store_first(Elem* p, V v, int count) {
    const __m256i bits = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
    _mm256_mask_storeu_epi16(p, static_cast<__mmask16>((1u << count) - 1u), bits);
  }
};

}  // namespace

void small_m_linear_bf16_avx512(const uint16_t* x, const uint16_t* w, const uint16_t* bias, uint16_t* out,
                                int64_t M, int64_t N, int64_t K, int64_t n_begin, int64_t n_end) {
  tiles::small_m_linear<Avx512Bf16Lanes>(x, w, bias, out, M, N, K, n_begin, n_end);
}

}  // namespace qwen_ops::cpu

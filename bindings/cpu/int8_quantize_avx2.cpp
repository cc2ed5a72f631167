// INT8 row quantization with AVX2 (compiled with -mavx2 -mfma; called only where cpu_features says the CPU has
// them; int8_quantize_kernels.h): 8 quotients per step, the tail through the portable loop.
#include <immintrin.h>

#include "bindings/cpu/int8_quantize_kernels.h"

namespace qwen_ops::cpu {

void quantize_int8_row_avx2(const float* x, const float* scale, int8_t* out, int64_t n) {
  const __m256 low = _mm256_set1_ps(-128.0f), high = _mm256_set1_ps(127.0f);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 v = _mm256_div_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(scale + j));
    // max/min return their second operand when either is NaN: a NaN quotient passes both, then is zeroed.
    v = _mm256_min_ps(high, _mm256_max_ps(low, v));
    v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
    const __m256i q = _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + j), _mm_packs_epi16(q16, q16));
  }
  if (j < n) quantize_int8_row_portable(x + j, scale + j, out + j, n - j);
}

}  // namespace qwen_ops::cpu

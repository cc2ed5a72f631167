// INT8 row quantization with AVX-512F (compiled with -mavx512f -mavx2 -mfma; called only where cpu_features says
// the CPU has it; int8_quantize_kernels.h): 16 quotients per step, the tail through masked loads and stores, so no
// element past the row is read or written.
#include <immintrin.h>

#include "bindings/cpu/int8_quantize_kernels.h"

namespace qwen_ops::cpu {

namespace {

// 16 quotients (lanes outside `lanes` divide 0 by 1 and are not stored) rounded and clamped to int32.
inline __m512i quantize16(const float* x, const float* scale, __mmask16 lanes) {
  const __m512 quotient = _mm512_div_ps(_mm512_maskz_loadu_ps(lanes, x),
                                        _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), lanes, scale));
  // max/min return their second operand when either is NaN: a NaN quotient passes both, then is zeroed.
  __m512 v = _mm512_min_ps(_mm512_set1_ps(127.0f), _mm512_max_ps(_mm512_set1_ps(-128.0f), quotient));
  v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
  return _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

}  // namespace

void quantize_int8_row_avx512(const float* x, const float* scale, int8_t* out, int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j), _mm512_cvtepi32_epi8(quantize16(x + j, scale + j, 0xFFFF)));
  }
  if (j < n) {
    const __mmask16 lanes = static_cast<__mmask16>((1u << (n - j)) - 1u);
    _mm512_mask_cvtepi32_storeu_epi8(out + j, lanes, quantize16(x + j, scale + j, lanes));
  }
}

}  // namespace qwen_ops::cpu

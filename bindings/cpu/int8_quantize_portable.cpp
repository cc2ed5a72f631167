// INT8 row quantization with the baseline flags (int8_quantize_kernels.h): a plain loop that GCC vectorises with
// SSE2 once -fno-trapping-math lets it turn the NaN/clamp selects into masks (CMakeLists.txt). Also the tail of
// the AVX2 variant.
#include "bindings/cpu/int8_quantize_kernels.h"

namespace qwen_ops::cpu {

namespace {
constexpr float kRoundingShift = 12582912.0f;  // 1.5 * 2^23: at this magnitude the float grid step is 1
}  // namespace

void quantize_int8_row_portable(const float* __restrict x, const float* __restrict scale, int8_t* __restrict out,
                                int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    float v = x[j] / scale[j];
    v = v > 127.0f ? 127.0f : v;    // +inf too
    v = v < -128.0f ? -128.0f : v;  // -inf too
    v = v == v ? v : 0.0f;          // NaN (no comparison above is true for it)
    v = (v + kRoundingShift) - kRoundingShift;  // on [-128, 127]: round to nearest, ties to even
    out[j] = static_cast<int8_t>(static_cast<int32_t>(v));
  }
}

}  // namespace qwen_ops::cpu

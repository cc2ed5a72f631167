// The INT8 KV-cache quantization of one row, one function per instruction set (reshape_and_cache_cpu.cpp picks
// the one the CPU supports, cpu_features.h). Plain C++ on raw pointers, each variant its own translation unit
// with its own -m flags (CMakeLists.txt), none including torch.
//
// Every variant is bit-identical to reference.quantize_int8: out[j] = clamp(round_half_even(x[j] / scale[j]),
// -128, 127) with the quotient a float32 division (a multiply by the reciprocal would round differently),
// NaN -> 0, +-inf -> 127 / -128. Clamping before rounding gives the same integer as after (the bounds are
// integers), and every rounding is an explicit round-to-nearest-even (or, in the portable variant, the
// 1.5 * 2^23 shift in the default rounding mode), whatever the caller's rounding mode.
#pragma once

#include <cstdint>

namespace qwen_ops::cpu {

using QuantizeInt8Row = void (*)(const float* x, const float* scale, int8_t* out, int64_t n);

void quantize_int8_row_portable(const float* x, const float* scale, int8_t* out, int64_t n);
#if defined(QWEN_OPS_X86_KERNELS)
void quantize_int8_row_avx2(const float* x, const float* scale, int8_t* out, int64_t n);
void quantize_int8_row_avx512(const float* x, const float* scale, int8_t* out, int64_t n);
#endif

}  // namespace qwen_ops::cpu

// The INT8-weight linear kernels of qwen_ops._C (bindings/cpu/): out = x @ dequant(w)^T for int8 weights with a
// float32 scale per output channel, in two forms (ops/int8_linear/op.py states the contract):
//
//   W8A8 (int8 activations, msModelSlim's W8A8 and W8A8_DYNAMIC schemes): the products are summed in int32,
//     exactly, then out[m, n] = float(acc[m, n] + quant_bias[n]) * x_scale[m] * w_scale[n] (+ bias[n]), in that
//     order, each a float32 operation (the files are compiled with -ffp-contract=off so no multiply and add
//     fuse): every variant gives the same bits as ops/int8_linear/reference.py.
//   weight-only (float32 activations): out[m, n] = (sum_k x[m, k] * float(w[n, k])) * w_scale[n] (+ bias[n]),
//     summed in float32 in each variant's own order (float32 rounding apart from the reference). bfloat16
//     activations: the same in float32, rounded once to bfloat16 (the dispatcher widens x for the float32
//     kernels; the AVX-512 BF16 one reads it as it is).
//
// Plain C++ on raw pointers, each instruction-set variant its own translation unit with its own -m flags
// (CMakeLists.txt), none including torch; the dispatcher (int8_linear_cpu.cpp) checks the tensors and splits
// the output columns [n_begin, n_end) over torch's threads. Row-major operands: x [M, K], w [N, K] (the
// nn.Linear layout), out [M, N]; x_scale [M], w_scale [N], quant_bias [N] (or nullptr), bias [N] (or nullptr).
#pragma once

#include <cstdint>

namespace qwen_ops::cpu {

using W8A8Linear = void (*)(const int8_t* x, const float* x_scale, const int8_t* w, const float* w_scale,
                            const int32_t* quant_bias, const float* bias, float* out, int64_t M, int64_t N,
                            int64_t K, int64_t n_begin, int64_t n_end);
using WeightOnlyInt8Linear = void (*)(const float* x, const int8_t* w, const float* w_scale, const float* bias,
                                      float* out, int64_t M, int64_t N, int64_t K, int64_t n_begin, int64_t n_end);

void w8a8_linear_portable(const int8_t* x, const float* x_scale, const int8_t* w, const float* w_scale,
                          const int32_t* quant_bias, const float* bias, float* out, int64_t M, int64_t N, int64_t K,
                          int64_t n_begin, int64_t n_end);
void weight_only_int8_linear_portable(const float* x, const int8_t* w, const float* w_scale, const float* bias,
                                      float* out, int64_t M, int64_t N, int64_t K, int64_t n_begin, int64_t n_end);
#if defined(QWEN_OPS_X86_KERNELS)
// AVX-512 F/BW/VL with VNNI (vpdpbusd): only where cpu_has_avx512_vnni().
void w8a8_linear_avx512_vnni(const int8_t* x, const float* x_scale, const int8_t* w, const float* w_scale,
                             const int32_t* quant_bias, const float* bias, float* out, int64_t M, int64_t N,
                             int64_t K, int64_t n_begin, int64_t n_end);
void weight_only_int8_linear_avx512_vnni(const float* x, const int8_t* w, const float* w_scale, const float* bias,
                                         float* out, int64_t M, int64_t N, int64_t K, int64_t n_begin,
                                         int64_t n_end);
// Weight-only with bfloat16 x and out (uint16_t holding bfloat16's bits), AVX-512 F/BW/VL with BF16 (vdpbf16ps):
// only where cpu_has_avx512_bf16(). out[m, n] = bfloat16(sum_k float(x[m, k]) * float(w[n, k]) * w_scale[n]
// (+ bias[n])), float32 sums in its own order, one rounding.
void weight_only_int8_linear_bf16_avx512(const uint16_t* x, const int8_t* w, const float* w_scale, const float* bias,
                                         uint16_t* out, int64_t M, int64_t N, int64_t K, int64_t n_begin,
                                         int64_t n_end);
#endif

// The W8A8 epilogue of one output, shared by every variant so that all give the same bits. The int32 dot
// product plus the int32 quant_bias is formed in int64 (no overflow), converted to float32 once (round to
// nearest even, as torch's int64 -> float32), then scaled per token and per channel.
inline float w8a8_output(int32_t dot, int64_t m, int64_t n, const float* x_scale, const float* w_scale,
                         const int32_t* quant_bias, const float* bias) {
  const int64_t acc = static_cast<int64_t>(dot) + (quant_bias ? quant_bias[n] : 0);
  float value = static_cast<float>(acc) * x_scale[m];
  value = value * w_scale[n];
  return bias ? value + bias[n] : value;
}

}  // namespace qwen_ops::cpu

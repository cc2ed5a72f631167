// The small-M linear kernels of qwen_ops._C (bindings/cpu/): out = x @ w^T (+ bias) for few rows of x.
//
// Plain C++ on raw pointers, so each instruction-set variant is its own translation unit compiled with
// its own -m flags (CMakeLists.txt) and none of them includes torch: the dispatcher
// (small_m_linear.cpp) checks the tensors, splits the output columns over torch's threads and calls
// the variant the CPU supports (cpu_features.h).
#pragma once

#include <cstdint>

namespace qwen_ops::cpu {

// Row-major float32 operands:
//   x    [M, K]   (contiguous rows, M small: the decode-path projections, M = batch <= SMALL_M_MAX_ROWS = 64)
//   w    [N, K]   (the nn.Linear weight layout)
//   bias [N] or nullptr
//   out  [M, N]
// Each kernel writes out[m, n] for n in [n_begin, n_end) and every m, reading those rows of w once
// from memory (x stays in cache), so the columns can be split across threads with no write overlap.
// Sums over K are float32, taken in SIMD-lane order (not torch's order): results differ from
// F.linear by rounding only.
using SmallMLinearF32 = void (*)(const float* x, const float* w, const float* bias, float* out, int64_t M,
                                 int64_t N, int64_t K, int64_t n_begin, int64_t n_end);

// The same for bfloat16 operands and result (uint16_t holding bfloat16's bits): products and sums in
// float32, the result rounded to bfloat16 (nearest even). The AVX-512 BF16 variant (vdpbf16ps) is the fast
// one; the portable one serves CPUs without it (and checks it).
using SmallMLinearBf16 = void (*)(const uint16_t* x, const uint16_t* w, const uint16_t* bias, uint16_t* out,
                                  int64_t M, int64_t N, int64_t K, int64_t n_begin, int64_t n_end);

// Lanes of the row-lanes form (one AVX-512 vector of float32) and the fewest rows of x it serves: below, the
// dot form reads the weight at the memory's rate (M = 1) or is as fast (measured: bench/RESULTS.md, "The
// projection kernel").
constexpr int64_t kRowLanes = 16;
constexpr int64_t kRowLanesMinRows = 10;
// Groups of kRowLanes rows that x_lanes holds for m rows of x (the last one padded with zero lanes).
constexpr int64_t row_lane_groups(int64_t m) { return (m + kRowLanes - 1) / kRowLanes; }

void small_m_linear_bf16_portable(const uint16_t* x, const uint16_t* w, const uint16_t* bias, uint16_t* out,
                                  int64_t M, int64_t N, int64_t K, int64_t n_begin, int64_t n_end);
void small_m_linear_f32_portable(const float* x, const float* w, const float* bias, float* out, int64_t M,
                                 int64_t N, int64_t K, int64_t n_begin, int64_t n_end);
#if defined(QWEN_OPS_X86_KERNELS)
void small_m_linear_f32_avx2(const float* x, const float* w, const float* bias, float* out, int64_t M,
                             int64_t N, int64_t K, int64_t n_begin, int64_t n_end);
void small_m_linear_f32_avx512(const float* x, const float* w, const float* bias, float* out, int64_t M,
                               int64_t N, int64_t K, int64_t n_begin, int64_t n_end);
// The row-lanes form of the float32 AVX-512 variant, which small_m_linear.cpp calls in its place from
// kRowLanesMinRows rows of x on: x given as x_lanes [ceil(M / 16), K, 16] (lane l of step k of group g is
// x[16g + l, k], 0 past row M - 1), each output summed as one chain of FMAs over k = 0..K-1
// (the dot form sums 16 interleaved chains, then adds them in a tree: the two forms round differently).
// x [M, K] -> x_lanes [ceil(M / 16), K, 16] for it, before the threads start (M * K elements read once).
void pack_row_lanes_avx512(const float* x, int64_t M, int64_t K, float* x_lanes);
void small_m_linear_f32_row_lanes_avx512(const float* x_lanes, const float* w, const float* bias, float* out,
                                         int64_t M, int64_t N, int64_t K, int64_t n_begin, int64_t n_end);
void small_m_linear_bf16_avx512(const uint16_t* x, const uint16_t* w, const uint16_t* bias, uint16_t* out,
                                int64_t M, int64_t N, int64_t K, int64_t n_begin, int64_t n_end);
#endif

}  // namespace qwen_ops::cpu

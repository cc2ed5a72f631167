// How the weight-only INT8 kernels (int8_linear_avx512.cpp, int8_linear_avx512_bf16.cpp) split one row of x's
// columns: at M = 1 the weight is the whole memory traffic, and reading it as kM1Streams sequential streams, one
// row from each of kM1Streams contiguous parts of the columns at a time, keeps kM1Streams chains of sums in
// flight where one row at a time waits on each one, and neighbouring rows interleaved defeat the hardware
// prefetcher. The measurements that chose it are beside the float32 kernel (int8_linear_avx512.cpp).
// Each row is still read whole and in order, so the split does not change any output's bits.
//
// No standard-library calls here: this header is compiled into files with different -m flags.
#pragma once

#include <cstdint>

namespace qwen_ops::cpu {

constexpr int kM1Streams = 4;

// Columns [n_begin, n_end): tile(row) for kM1Streams rows at a time (row[s] from part s), then one_row(n) for
// each column the parts leave over.
template <class Tile, class OneRow>
inline void over_m1_streams(int64_t n_begin, int64_t n_end, Tile tile, OneRow one_row) {
  const int64_t part = (n_end - n_begin) / kM1Streams;
  for (int64_t i = 0; i < part; ++i) {
    int64_t row[kM1Streams];
    for (int s = 0; s < kM1Streams; ++s) row[s] = n_begin + s * part + i;
    tile(row);
  }
  for (int64_t n = n_begin + kM1Streams * part; n < n_end; ++n) one_row(n);
}

}  // namespace qwen_ops::cpu

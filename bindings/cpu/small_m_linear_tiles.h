// The register-blocked small-M linear shared by the SIMD variants (AVX2, AVX-512): one template over an
// instruction-set "lane" type S, included only by the file compiled with S's -m flags
// (small_m_linear_avx2.cpp, small_m_linear_avx512.cpp), so each variant gets its own copy of the code.
//
// S provides Elem (the element type of x, w, bias and out: float, or uint16_t holding bfloat16), V (kWidth
// float32 lanes of sums), In (one step's operand vector: kStep elements of x or w; V itself for float32),
//   zero(), load(p) -> In, load_first(p, count) -> In (elements >= count are 0 and not read: the K tail),
//   fmadd(w, x, acc) -> V (acc plus the products of the step's elements, lane by lane), add(a, b),
//   load_bias(p, count) -> V (count elements as float32 lanes), store_first(p, v, count) (v's first count
//   lanes written as Elem, the rest not touched), lanes_from(v, first) (lane l = v's lane first + l) and
//   sum_each(v[kWidth]) -> V whose lane l is the sum of v[l]'s lanes.
//
// No standard-library calls here: an out-of-line copy of one, compiled with another file's -m flags,
// could be the one the linker keeps for every file.
//
// A tile is RN rows of w (columns n of out) against RM rows of x, RN * RM <= kWidth accumulators, each
// one vector of partial sums over K. One pass over K reads each of the RN weight rows once; the
// accumulators are then reduced all together by sum_each (a transpose-add tree), which at small K (the
// tiny model's K = 128) costs far less than one horizontal sum per output. Tile shapes: RN * RM =
// kWidth (M = 1: kWidth rows of w; M = 2: kWidth / 2; M >= 3: 4 rows of w against kWidth / 4 rows of x,
// the last few rows of x in a smaller tile). With M > RM the later tiles find the weight rows in L1/L2,
// so the memory traffic stays one read of w.
//
// Every output is summed in the same order whatever the tile (lane t of its accumulator takes its elements
// of each kStep-wide step in turn: k = t, t + kWidth, ... for float32, the pair 2t, 2t + 1 of each 32 for
// bfloat16; the masked K tail last, then sum_each's fixed tree), so row m of the result does not depend on
// M, the tile shape or the thread split: bitwise batch invariance.
#pragma once

#include <cstdint>

namespace qwen_ops::cpu::tiles {

// ahead: floats from a weight row to the same offset of the row one column block later (0 where there
// is none). Tiles with several rows of x prefetch that line into L2 as they read this one: their FMAs
// per weight line fill the out-of-order window, so without it too few lines are in flight (measured:
// the tiny lm_head at M = 32 took 1.2-1.5x longer). At M = 1 the same prefetches made the read slower
// (21 against 30 GB/s on one core), so one row of x leaves the weight to the hardware prefetcher.
//
// G: the weight rows read at a time (the M = 1 choice is in small_m_linear below); RN unless given.
template <class S, int RN, int RM, int G = RN>
inline void tile(const typename S::Elem* x, const typename S::Elem* w, const typename S::Elem* bias,
                 typename S::Elem* out, int64_t N, int64_t K, int64_t n, int rn, int64_t m, int64_t ahead) {
  static_assert(RN * RM <= S::kWidth, "a tile holds at most one vector of sums per lane");
  using V = typename S::V;
  using In = typename S::In;
  using E = typename S::Elem;
  V acc[S::kWidth];
  for (int a = 0; a < S::kWidth; ++a) acc[a] = S::zero();
  // Columns past the end of this thread's range (rn < RN) re-read the last valid row: in bounds, and
  // their sums are computed but never stored.
  const E* wr[RN];
  for (int j = 0; j < RN; ++j) wr[j] = w + (n + (j < rn ? j : rn - 1)) * K;
  const E* xr[RM];
  for (int i = 0; i < RM; ++i) xr[i] = x + (m + i) * K;

  // The weight rows are read G at a time, each row whole before the next group; each accumulator still
  // takes its k in the same order, so the result is the same bitwise whatever G.
  static_assert(G >= 1 && RN % G == 0, "row groups split the tile");
  for (int g = 0; g < RN; g += G) {
    int64_t k = 0;
    for (; k + S::kStep <= K; k += S::kStep) {
      In wv[G];
      for (int j = 0; j < G; ++j) {
        if constexpr (RM > 1) __builtin_prefetch(wr[g + j] + k + ahead, 0, 2);
        wv[j] = S::load(wr[g + j] + k);
      }
      for (int i = 0; i < RM; ++i) {
        const In xv = S::load(xr[i] + k);
        for (int j = 0; j < G; ++j) acc[i * RN + g + j] = S::fmadd(wv[j], xv, acc[i * RN + g + j]);
      }
    }
    if (k < K) {
      const int64_t rest = K - k;
      In wv[G];
      for (int j = 0; j < G; ++j) wv[j] = S::load_first(wr[g + j] + k, rest);
      for (int i = 0; i < RM; ++i) {
        const In xv = S::load_first(xr[i] + k, rest);
        for (int j = 0; j < G; ++j) acc[i * RN + g + j] = S::fmadd(wv[j], xv, acc[i * RN + g + j]);
      }
    }
  }

  // Lane i * RN + j of sums is out[m + i, n + j] before the bias; each row's RN lanes are moved down to
  // lane 0 and stored under a mask of rn lanes, in registers (a vector stored to the stack and read
  // back in pieces stalls on store forwarding).
  const V sums = S::sum_each(acc);
  const V bias_v = bias ? S::load_bias(bias + n, rn) : S::zero();
  for (int i = 0; i < RM; ++i) {
    const V row = S::lanes_from(sums, i * RN);
    S::store_first(out + (m + i) * N + n, bias ? S::add(row, bias_v) : row, rn);
  }
}

// Rows [m, m + RM) of x against the weight rows [n, n_end) of one column block, RN at a time.
template <class S, int RN, int RM, int G = RN>
inline void row_tile_across(const typename S::Elem* x, const typename S::Elem* w, const typename S::Elem* bias,
                            typename S::Elem* out, int64_t N, int64_t K, int64_t n, int64_t n_end, int64_t m,
                            int64_t ahead) {
  for (; n < n_end; n += RN)
    tile<S, RN, RM, G>(x, w, bias, out, N, K, n, static_cast<int>(n_end - n < RN ? n_end - n : RN), m, ahead);
}

// Columns [n_begin, n_end) in blocks of kBlockColumns: within a block every tile of rows of x runs across
// the whole block before the next, so each row of out gets its block's 64 bytes (a full cache line where
// rows are aligned) written back to back; tiles of one row per column that write 16 bytes into each of
// 32 rows 1 MB apart (the tiny lm_head at M = 32) lose those lines before they are complete and run
// several times slower. The block's weight rows (16 * K floats) stay in L1/L2 across the tiles of x,
// so the memory traffic stays one read of w.
constexpr int64_t kBlockColumns = 16;

// At M = 1, weight rows up to this many bytes are read one at a time (see small_m_linear below).
constexpr int64_t kSequentialRowBytes = 4096;

template <class S, int RN, int RM, int G = RN>
inline void columns(const typename S::Elem* x, const typename S::Elem* w, const typename S::Elem* bias,
                    typename S::Elem* out, int64_t M, int64_t N, int64_t K, int64_t n_begin, int64_t n_end) {
  static_assert(kBlockColumns % RN == 0 && RM <= 4, "tiles fill a block; remainders of at most 3 rows of x");
  for (int64_t n = n_begin; n < n_end; n += kBlockColumns) {
    const int64_t block_end = n_end - n < kBlockColumns ? n_end : n + kBlockColumns;
    // Only the first tile of rows of x prefetches the weight: the later ones find this block's lines in
    // cache. The next block's line of each row of out is prefetched for writing: without it every tile
    // of the tiny lm_head at M = 32 waited on a write miss (1.1-1.3x longer, measured).
    const int64_t ahead = n_end - block_end >= kBlockColumns ? kBlockColumns * K : 0;
    if (ahead)
      for (int64_t r = 0; r < M; ++r) __builtin_prefetch(out + r * N + n + kBlockColumns, 1, 3);
    int64_t m = 0;
    for (; m + RM <= M; m += RM)
      row_tile_across<S, RN, RM, G>(x, w, bias, out, N, K, n, block_end, m, m == 0 ? ahead : 0);
    const int64_t rest = M - m;  // the last rows of x, in one smaller tile
    if constexpr (RM > 1) {
      if (rest == 1) row_tile_across<S, RN, 1>(x, w, bias, out, N, K, n, block_end, m, m == 0 ? ahead : 0);
    }
    if constexpr (RM > 2) {
      if (rest == 2) row_tile_across<S, RN, 2>(x, w, bias, out, N, K, n, block_end, m, m == 0 ? ahead : 0);
    }
    if constexpr (RM > 3) {
      if (rest == 3) row_tile_across<S, RN, 3>(x, w, bias, out, N, K, n, block_end, m, m == 0 ? ahead : 0);
    }
  }
}

// The kernel entry of a SIMD variant (the SmallMLinearF32 contract of small_m_linear_kernels.h).
template <class S>
inline void small_m_linear(const typename S::Elem* x, const typename S::Elem* w, const typename S::Elem* bias,
                           typename S::Elem* out, int64_t M, int64_t N, int64_t K, int64_t n_begin, int64_t n_end) {
  constexpr int W = S::kWidth;
  if (M == 1) {
    // One row of x: the weight is the whole memory traffic, and how its rows are streamed sets the rate.
    // Rows of at most 4 KB are read one after another, a single sequential stream; longer rows 8 at a time.
    // Measured from memory (bench/e2e/small_m_linear_ab.sh against the 8-row rule, float32, 2 threads, paired
    // medians; bench/RESULTS.md "The projection kernel"): one stream read the lm_head [248320, 1024] 8-13 %
    // faster in three runs (35.1 against 30.7 GB/s in the first, a plain sum's rate); the 4 KB-row shapes were
    // 0-10 % faster in two runs and 9-15 % slower in one; at K = 3584 (14 KB rows) 8 streams were 12 % faster,
    // where one stream's single chain of dependent sums per row is the limit.
    if (K * static_cast<int64_t>(sizeof(typename S::Elem)) <= kSequentialRowBytes)
      columns<S, W, 1, 1>(x, w, bias, out, M, N, K, n_begin, n_end);
    else
      columns<S, W, 1, 8>(x, w, bias, out, M, N, K, n_begin, n_end);
  } else if (M == 2) {
    columns<S, W / 2, 2>(x, w, bias, out, M, N, K, n_begin, n_end);
  } else {
    columns<S, 4, W / 4>(x, w, bias, out, M, N, K, n_begin, n_end);
  }
}

}  // namespace qwen_ops::cpu::tiles

// Paired A/B of two revisions of the AVX-512 small-M kernel and a plain AVX-512 sum over the same bytes,
// in one process (the extension cannot load two revisions of qwen_ops._C at once). Built and run by
// bench/e2e/small_m_linear_ab.sh, which compiles revision A's small_m_linear_avx512.cpp with its entry
// renamed to small_m_linear_f32_avx512_a.
//
//   small_m_linear_ab M N K REPEATS      (env: WALL=1 wall clock, else process CPU time; OMP_NUM_THREADS)
//
// B's row-lanes form (with its per-call packing of x) runs as a fourth variant, "B row lanes", at any M.
// The four variants run interleaved (sum, A, B, B row lanes, sum, ...), each call on the next of enough weight
// copies (256 MB in all) that every call reads its weight from memory; the columns are split over the
// OpenMP threads in 16-column units as the extension does. Prints the median and best rate of each.
#include <immintrin.h>
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bindings/cpu/small_m_linear_kernels.h"

namespace qwen_ops::cpu {
void small_m_linear_f32_avx512_a(const float*, const float*, const float*, float*, int64_t, int64_t, int64_t,
                                 int64_t, int64_t);
}

namespace {

float sum_range(const float* p, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
  }
  float tail = 0.f;
  for (; i < n; ++i) tail += p[i];
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))) + tail;
}

double now(bool wall) {
  timespec t;
  clock_gettime(wall ? CLOCK_MONOTONIC : CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace qwen_ops::cpu;
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s M N K REPEATS\n", argv[0]);
    return 2;
  }
  const int64_t M = atol(argv[1]), N = atol(argv[2]), K = atol(argv[3]);
  const int repeats = atoi(argv[4]);
  const bool wall = getenv("WALL") != nullptr;
  const int64_t bytes = N * K * 4;
  const int64_t copies = std::max<int64_t>(1, (256ll << 20) / bytes + 1);
  std::vector<std::vector<float>> weights(copies, std::vector<float>(N * K, 0.01f));
  std::vector<float> x(M * K, 0.5f), out(M * N), sums(omp_get_max_threads());
  std::vector<float> lanes(row_lane_groups(M) * K * kRowLanes);
  const int threads = omp_get_max_threads();
  constexpr int kVariants = 4;
  std::vector<double> times[kVariants];
  int64_t call = 0;
  for (int r = 0; r <= repeats; ++r) {
    for (int v = 0; v < kVariants; ++v) {
      const float* w = weights[call++ % copies].data();
      const double t0 = now(wall);
      if (v == 3) pack_row_lanes_avx512(x.data(), M, K, lanes.data());  // as the dispatcher, before the threads
#pragma omp parallel
      {
        const int64_t units = (N + 15) / 16, per = (units + threads - 1) / threads;
        const int tid = omp_get_thread_num();
        const int64_t a = std::min(N, tid * per * 16), b = std::min(N, (tid + 1) * per * 16);
        if (v == 0) sums[tid] = sum_range(w + a * K, (b - a) * K);
        else if (v == 1) small_m_linear_f32_avx512_a(x.data(), w, nullptr, out.data(), M, N, K, a, b);
        else if (v == 2) small_m_linear_f32_avx512(x.data(), w, nullptr, out.data(), M, N, K, a, b);
        else small_m_linear_f32_row_lanes_avx512(lanes.data(), w, nullptr, out.data(), M, N, K, a, b);
      }
      if (r) times[v].push_back(now(wall) - t0);  // the first round warms up
    }
  }
  const char* names[kVariants] = {"sum (same bytes)", "A", "B", "B row lanes"};
  for (int v = 0; v < kVariants; ++v) {
    std::sort(times[v].begin(), times[v].end());
    const double med = times[v][times[v].size() / 2];
    std::printf("M=%ld N=%ld K=%ld %s: median %.3f ms %.1f GB/s (best %.1f GB/s) %.1f GFLOP/s\n", static_cast<long>(M),
                static_cast<long>(N), static_cast<long>(K), names[v], med * 1e3, bytes / med / 1e9,
                bytes / times[v][0] / 1e9, 2.0 * M * N * K / med / 1e9);
  }
  return 0;
}

// Paged decode attention reading each KV block where it lies: the CPU kernel behind
// ops/attention/vectorized_decode.py (qwen_ops._C.paged_decode_attention_cpu).
//
// The torch form gathers every block of a tile of requests into a buffer (index_select), then runs two small
// bmms over it: each KV byte crosses memory once from the cache and twice more through the buffer. Here each
// (request, KV head) pair walks its blocks in place, one [Bs, D] K slab and V slab at a time (each a contiguous
// 16 KiB at Qwen3.5-0.8B's shapes, in L1 while it is used), with an online softmax (running max and sum per
// query head, the accumulator rescaled when the max grows), so the cache is read once: the op's floor.
// The G = Hq / Hkv query heads of a KV head share each slab. Pairs are split over ATen's intra-op threads.
//
// INT8 caches: with x = q * scale per channel, q_row . (k * k_scale) = (q_row * k_scale) . k and
// sum_s p_s (v_s * v_scale) = v_scale * sum_s p_s v_s, so the scales go on the query and the output rows and
// each slab is only widened to float32 (in L1) before the same float loops.
//
// The three inner loops are compiled twice (GCC target_clones on x86-64: AVX2 + FMA, and the baseline),
// chosen at load time by the CPU (an ifunc): each loop is a plain pass over contiguous D-rows that GCC
// vectorises at either width. Sums run in a different order from the reference's: agreement to rounding.
#include "bindings/cpu/kv_cache_checks.h"
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define QWEN_OPS_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define QWEN_OPS_SIMD_CLONES
#endif

namespace qwen_ops::cpu {
namespace {

constexpr int kLanes = 16;  // independent partial sums per dot product: two AVX2 registers, vectorised without reassociation

constexpr int64_t kLineFloats = 16;  // floats per 64-byte cache line

// scores[g * rows + r] = q[g] . k[r] for the G query rows q [G, D] and the block's rows k [rows, D]. While row r
// is used, row r of the next block's K and V slabs (next_k, next_v, or null) is prefetched: blocks lie anywhere
// in the cache, so the hardware prefetcher cannot see the next one coming; this block's work hides the misses.
QWEN_OPS_SIMD_CLONES void block_scores(const float* __restrict q, int64_t groups, const float* __restrict k,
                                       int64_t rows, int64_t d, float* __restrict scores, const float* next_k,
                                       const float* next_v) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* kr = k + r * d;
    if (next_k != nullptr) {
      for (int64_t i = 0; i < d; i += kLineFloats) {
        __builtin_prefetch(next_k + r * d + i);
        __builtin_prefetch(next_v + r * d + i);
      }
    }
    for (int64_t g = 0; g < groups; ++g) {
      const float* qg = q + g * d;
      float lanes[kLanes] = {};
      int64_t i = 0;
      for (; i + kLanes <= d; i += kLanes) {
        for (int l = 0; l < kLanes; ++l) lanes[l] += qg[i + l] * kr[i + l];
      }
      float sum = 0.0f;
      for (int l = 0; l < kLanes; ++l) sum += lanes[l];
      for (; i < d; ++i) sum += qg[i] * kr[i];
      scores[g * rows + r] = sum;
    }
  }
}

// acc[g] = acc[g] * rescale[g] + sum_r p[g * rows + r] * v[r] over the block's rows v [rows, D]. Each 16-wide
// column strip of acc stays in registers over all the rows (one load and one store per strip, not per row).
QWEN_OPS_SIMD_CLONES void block_accumulate(const float* __restrict p, const float* __restrict rescale, int64_t groups,
                                           const float* __restrict v, int64_t rows, int64_t d,
                                           float* __restrict acc) {
  for (int64_t g = 0; g < groups; ++g) {
    float* ag = acc + g * d;
    const float* pg = p + g * rows;
    const float c = rescale[g];
    int64_t i = 0;
    for (; i + kLanes <= d; i += kLanes) {
      float strip[kLanes];
      for (int l = 0; l < kLanes; ++l) strip[l] = ag[i + l] * c;
      for (int64_t r = 0; r < rows; ++r) {
        const float pr = pg[r];
        const float* vr = v + r * d + i;
        for (int l = 0; l < kLanes; ++l) strip[l] += pr * vr[l];
      }
      for (int l = 0; l < kLanes; ++l) ag[i + l] = strip[l];
    }
    for (; i < d; ++i) {
      float x = ag[i] * c;
      for (int64_t r = 0; r < rows; ++r) x += pg[r] * v[r * d + i];
      ag[i] = x;
    }
  }
}

QWEN_OPS_SIMD_CLONES void widen_int8(const int8_t* __restrict x, int64_t n, float* __restrict out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i]);
}

void check_cache(const char* op, const char* name, const at::Tensor& cache) {
  TORCH_CHECK(cache.device().is_cpu() && cache.is_contiguous() && cache.dim() == 4 &&
                  (cache.scalar_type() == at::kFloat || cache.scalar_type() == at::kChar),
              op, ": ", name, " must be a contiguous float32 or int8 [NB, Hkv, Bs, D] CPU tensor, got ",
              cache.scalar_type(), " ", cache.sizes());
}

void paged_decode_attention(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
                            const at::Tensor& block_tables, const at::Tensor& seq_lens, double scale,
                            const c10::optional<at::Tensor>& k_scale, const c10::optional<at::Tensor>& v_scale,
                            at::Tensor& out) {
  const char* op = "paged_decode_attention_cpu";
  check_cache(op, "key_cache", key_cache);
  check_cache(op, "value_cache", value_cache);
  check_value_cache_matches(op, key_cache, value_cache);
  const int64_t num_blocks = key_cache.size(0), hkv = key_cache.size(1), block_size = key_cache.size(2),
                d = key_cache.size(3);
  TORCH_CHECK(query.device().is_cpu() && query.scalar_type() == at::kFloat && query.is_contiguous() &&
                  query.dim() == 3 && query.size(2) == d && query.size(1) > 0 && query.size(1) % hkv == 0,
              op, ": query must be a contiguous float32 [N, Hq, D] CPU tensor with D = ", d,
              " and Hq a multiple of Hkv = ", hkv, ", got ", query.sizes());
  const int64_t n = query.size(0), hq = query.size(1), groups = hq / hkv;
  TORCH_CHECK(out.device().is_cpu() && out.scalar_type() == at::kFloat && out.is_contiguous() &&
                  out.sizes() == query.sizes(),
              op, ": out must be a contiguous float32 CPU tensor shaped like query");
  TORCH_CHECK(block_tables.device().is_cpu() && block_tables.scalar_type() == at::kInt && block_tables.dim() == 2 &&
                  block_tables.size(0) == n && block_tables.is_contiguous(),
              op, ": block_tables must be a contiguous int32 [N, M] CPU tensor with N = ", n);
  TORCH_CHECK(seq_lens.device().is_cpu() && seq_lens.scalar_type() == at::kInt && seq_lens.dim() == 1 &&
                  seq_lens.size(0) == n && seq_lens.is_contiguous(),
              op, ": seq_lens must be a contiguous int32 [N] CPU tensor with N = ", n);
  const bool int8 = key_cache.scalar_type() == at::kChar;
  if (int8) {
    check_int8_scale(op, "k_scale", k_scale, hkv, d);
    check_int8_scale(op, "v_scale", v_scale, hkv, d);
  } else {
    TORCH_CHECK(!k_scale.has_value() && !v_scale.has_value(), op, ": k_scale and v_scale are for int8 caches only");
  }
  const int64_t width = block_tables.size(1);
  const int32_t* table = block_tables.data_ptr<int32_t>();
  const int32_t* lengths = seq_lens.data_ptr<int32_t>();
  for (int64_t r = 0; r < n; ++r) {  // every block read is checked before any is read
    TORCH_CHECK(lengths[r] >= 0 && lengths[r] <= width * block_size, op, ": seq_lens[", r, "] = ", lengths[r],
                " is outside [0, M * Bs] = [0, ", width * block_size, "]");
    const int64_t used = (lengths[r] + block_size - 1) / block_size;
    for (int64_t j = 0; j < used; ++j) {
      const int32_t id = table[r * width + j];
      TORCH_CHECK(id >= 0 && id < num_blocks, op, ": block_tables[", r, ", ", j, "] = ", id,
                  " is outside the cache's ", num_blocks, " blocks");
    }
  }
  const float* qp = query.data_ptr<float>();
  float* op_out = out.data_ptr<float>();
  const float* ks = int8 ? k_scale->data_ptr<float>() : nullptr;
  const float* vs = int8 ? v_scale->data_ptr<float>() : nullptr;
  const float softmax_scale = static_cast<float>(scale);
  const int64_t slab = block_size * d;  // elements of one (block, KV head) [Bs, D] slab

  // Grain: one pair reads 2 * context * D elements (1 MiB at 512 float32 tokens), far above a task's cost.
  at::parallel_for(0, n * hkv, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> q(groups * d), acc(groups * d), scores(groups * block_size), running_max(groups),
        running_sum(groups), rescale(groups), widened(int8 ? 2 * slab : 0);
    for (int64_t pair = begin; pair < end; ++pair) {
      const int64_t r = pair / hkv, h = pair % hkv;
      float* o = op_out + (r * hq + h * groups) * d;
      const int64_t length = lengths[r];
      if (length == 0) {  // nothing cached: the row stays zero, as in the reference
        std::fill(o, o + groups * d, 0.0f);
        continue;
      }
      const float* qr = qp + (r * hq + h * groups) * d;
      for (int64_t g = 0; g < groups; ++g) {
        for (int64_t i = 0; i < d; ++i) q[g * d + i] = qr[g * d + i] * softmax_scale * (int8 ? ks[h * d + i] : 1.0f);
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      std::fill(running_max.begin(), running_max.end(), -std::numeric_limits<float>::infinity());
      std::fill(running_sum.begin(), running_sum.end(), 0.0f);
      for (int64_t j = 0, first = 0; first < length; ++j, first += block_size) {
        const int64_t rows = std::min(block_size, length - first);
        const int64_t offset = (static_cast<int64_t>(table[r * width + j]) * hkv + h) * slab;
        // The next block's slab, prefetched while this one is used (null after the last block).
        const int64_t next = first + block_size < length
                                 ? (static_cast<int64_t>(table[r * width + j + 1]) * hkv + h) * slab : -1;
        const float *k, *v, *next_k = nullptr, *next_v = nullptr;
        if (int8) {
          const int8_t* kq = key_cache.data_ptr<int8_t>();
          const int8_t* vq = value_cache.data_ptr<int8_t>();
          if (next >= 0) {  // a whole int8 slab is a quarter of a float one: prefetch it here at once
            for (int64_t i = 0; i < slab; i += 64) {
              __builtin_prefetch(kq + next + i);
              __builtin_prefetch(vq + next + i);
            }
          }
          widen_int8(kq + offset, rows * d, widened.data());
          widen_int8(vq + offset, rows * d, widened.data() + slab);
          k = widened.data();
          v = widened.data() + slab;
        } else {
          k = key_cache.data_ptr<float>() + offset;
          v = value_cache.data_ptr<float>() + offset;
          if (next >= 0) {
            next_k = key_cache.data_ptr<float>() + next;
            next_v = value_cache.data_ptr<float>() + next;
          }
        }
        block_scores(q.data(), groups, k, rows, d, scores.data(), next_k, next_v);
        for (int64_t g = 0; g < groups; ++g) {  // online softmax: exponentials against the running max
          float* s = scores.data() + g * rows;
          const float block_max = *std::max_element(s, s + rows);
          const float new_max = std::max(running_max[g], block_max);
          rescale[g] = std::exp(running_max[g] - new_max);  // exp(-inf) = 0 on the first block
          float sum = 0.0f;
          for (int64_t i = 0; i < rows; ++i) {
            s[i] = std::exp(s[i] - new_max);
            sum += s[i];
          }
          running_sum[g] = running_sum[g] * rescale[g] + sum;
          running_max[g] = new_max;
        }
        block_accumulate(scores.data(), rescale.data(), groups, v, rows, d, acc.data());
      }
      for (int64_t g = 0; g < groups; ++g) {
        const float inverse = 1.0f / running_sum[g];
        for (int64_t i = 0; i < d; ++i) o[g * d + i] = acc[g * d + i] * inverse * (int8 ? vs[h * d + i] : 1.0f);
      }
    }
  });
}

}  // namespace

void register_paged_decode_attention(pybind11::module_& m) {
  m.def("paged_decode_attention_cpu", &paged_decode_attention, pybind11::arg("query"), pybind11::arg("key_cache"),
        pybind11::arg("value_cache"), pybind11::arg("block_tables"), pybind11::arg("seq_lens"), pybind11::arg("scale"),
        pybind11::arg("k_scale"), pybind11::arg("v_scale"), pybind11::arg("out"),
        "Paged decode attention reading the KV blocks in place, online softmax (CPU). query float32 [N, Hq, D]; "
        "caches float32 or int8 [NB, Hkv, Bs, D] (int8: float32 [Hkv, D] k_scale/v_scale); block_tables int32 "
        "[N, M]; seq_lens int32 [N] (0 = zero output row); writes out float32 [N, Hq, D].");
}

}  // namespace qwen_ops::cpu

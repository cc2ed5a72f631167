// Paged decode attention reading each KV block where it lies: the CPU kernel behind
// ops/attention/vectorized_decode.py (qwen_ops._C.paged_decode_attention_cpu).
//
// The torch form gathers every block of a tile of requests into a buffer (index_select), then runs two small
// bmms over it: each KV byte crosses memory once from the cache and twice more through the buffer. Here each
// (request, KV head) pair walks its blocks in place with an online softmax, so the cache is read once: the op's
// floor. This file checks every tensor and every block id a request uses before anything is read, then splits the
// pairs over ATen's intra-op threads and runs the widest variant of the pair loop the CPU supports
// (paged_decode_attention_simd.h, compiled per instruction set: portable, AVX2 + FMA, AVX-512F; cpu_features.h),
// or the one the caller names (the tests run each).
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <string>
#include <vector>

#include "bindings/cpu/cpu_features.h"
#include "bindings/cpu/kv_cache_checks.h"
#include "bindings/cpu/kv_cache_cpu.h"
#include "bindings/cpu/paged_decode_attention_kernels.h"

namespace qwen_ops::cpu {
namespace {

void check_cache(const char* op, const char* name, const at::Tensor& cache) {
  TORCH_CHECK(cache.device().is_cpu() && cache.is_contiguous() && cache.dim() == 4 &&
                  (cache.scalar_type() == at::kFloat || cache.scalar_type() == at::kChar ||
                   cache.scalar_type() == at::kBFloat16),
              op, ": ", name, " must be a contiguous float32, int8 or bfloat16 [NB, Hkv, Bs, D] CPU tensor, got ",
              cache.scalar_type(), " ", cache.sizes());
}

}  // namespace

void paged_decode_attention(const char* op, const at::Tensor& query, const at::Tensor& key_cache,
                            const at::Tensor& value_cache, const at::Tensor& block_tables, const at::Tensor& seq_lens,
                            double scale, const c10::optional<at::Tensor>& k_scale,
                            const c10::optional<at::Tensor>& v_scale, at::Tensor& out, const std::string& isa) {
  const DecodeAttentionPairs kernel = QWEN_OPS_KERNEL_FOR_ISA(isa.empty() ? best_isa() : isa_from_name(op, isa),
                                                                 paged_decode_attention_pairs);
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
  check_request_blocks(op, table, width, lengths, n, block_size, num_blocks);  // before any block is read
  const DecodeAttentionProblem problem{query.data_ptr<float>(),
                                       key_cache.data_ptr(),
                                       value_cache.data_ptr(),
                                       int8 ? CacheElement::kInt8
                                       : key_cache.scalar_type() == at::kBFloat16 ? CacheElement::kBFloat16
                                                                                  : CacheElement::kFloat32,
                                       int8 ? k_scale->data_ptr<float>() : nullptr,
                                       int8 ? v_scale->data_ptr<float>() : nullptr,
                                       table,
                                       width,
                                       lengths,
                                       static_cast<float>(scale),
                                       hq,
                                       hkv,
                                       block_size,
                                       d,
                                       out.data_ptr<float>()};
  const int64_t workspace_floats = decode_workspace_floats(groups, d, block_size);
  // Grain: one pair reads 2 * context * D elements (1 MiB at 512 float32 tokens), far above a task's cost.
  at::parallel_for(0, n * hkv, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> workspace(workspace_floats);
    kernel(problem, begin, end, workspace.data());
  });
}


void register_paged_decode_attention(pybind11::module_& m) {
  m.def("paged_decode_attention_cpu",
        [](const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
           const at::Tensor& block_tables, const at::Tensor& seq_lens, double scale,
           const c10::optional<at::Tensor>& k_scale, const c10::optional<at::Tensor>& v_scale, at::Tensor& out,
           const std::string& isa) {
          paged_decode_attention("paged_decode_attention_cpu", query, key_cache, value_cache, block_tables, seq_lens,
                                 scale, k_scale, v_scale, out, isa);
        },
        pybind11::arg("query"), pybind11::arg("key_cache"),
        pybind11::arg("value_cache"), pybind11::arg("block_tables"), pybind11::arg("seq_lens"), pybind11::arg("scale"),
        pybind11::arg("k_scale"), pybind11::arg("v_scale"), pybind11::arg("out"), pybind11::arg("isa") = "",
        "Paged decode attention reading the KV blocks in place, online softmax (CPU). query float32 [N, Hq, D]; "
        "caches float32, int8 or bfloat16 [NB, Hkv, Bs, D] (int8: float32 [Hkv, D] k_scale/v_scale); block_tables int32 "
        "[N, M]; seq_lens int32 [N] (0 = zero output row); writes out float32 [N, Hq, D]. isa: '' (the widest "
        "this CPU runs), 'portable', 'avx2' or 'avx512' (cpu_isas()).");
}

}  // namespace qwen_ops::cpu

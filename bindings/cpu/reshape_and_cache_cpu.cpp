// The KV cache write in one pass: the CPU kernel behind ops/cache/vectorized_write.py
// (qwen_ops._C.reshape_and_cache_cpu).
//
// The torch form builds an index tensor of cache rows, then per cache one index_copy_ (float caches) or, for
// INT8 caches, five elementwise passes per tile (divide, NaN/inf mapping, round, clamp, cast) before the copy.
// Here each token's [Hkv, D] rows are read once and written once where they land, quantized on the way: the
// op's floor of one read and one write. Tokens are split over ATen's intra-op threads (at::parallel_for).
//
// INT8 (reference.quantize_int8, bit for bit): each D-row goes through the widest quantization variant the CPU
// supports (int8_quantize_kernels.h: portable, AVX2, AVX-512F, chosen at run time by cpu_features.h), or the one
// the caller names (the tests run each).
#include "bindings/cpu/cpu_features.h"
#include "bindings/cpu/int8_quantize_kernels.h"
#include "bindings/cpu/kv_cache_checks.h"
#include "bindings/cpu/kv_cache_cpu.h"
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace qwen_ops::cpu {
namespace {

void check_cache(const char* op, const char* name, const at::Tensor& cache) {
  TORCH_CHECK(cache.device().is_cpu() && cache.is_contiguous() && cache.dim() == 4, op, ": ", name,
              " must be a contiguous [NB, Hkv, Bs, D] CPU tensor, got ", cache.sizes());
}

}  // namespace

void reshape_and_cache(const char* op, const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                       at::Tensor& value_cache, const at::Tensor& slots, const c10::optional<at::Tensor>& k_scale,
                       const c10::optional<at::Tensor>& v_scale, const std::string& isa) {
  const QuantizeInt8Row quantize_row = QWEN_OPS_KERNEL_FOR_ISA(isa.empty() ? best_isa() : isa_from_name(op, isa),
                                                               quantize_int8_row);
  check_cache(op, "key_cache", key_cache);
  check_cache(op, "value_cache", value_cache);
  check_value_cache_matches(op, key_cache, value_cache);
  const int64_t num_blocks = key_cache.size(0), hkv = key_cache.size(1), block_size = key_cache.size(2),
                d = key_cache.size(3);
  TORCH_CHECK(key.device().is_cpu() && key.is_contiguous() && key.dim() == 3 && key.size(1) == hkv &&
                  key.size(2) == d,
              op, ": key must be a contiguous [T, Hkv, D] = [T, ", hkv, ", ", d, "] CPU tensor, got ", key.sizes());
  TORCH_CHECK(value.device().is_cpu() && value.is_contiguous() && value.sizes() == key.sizes() &&
                  value.scalar_type() == key.scalar_type(),
              op, ": value must be a contiguous CPU tensor like key (", key.sizes(), ", ", key.scalar_type(), ")");
  const int64_t tokens = key.size(0);
  const bool int8 = key_cache.scalar_type() == at::kChar;
  if (int8) {
    TORCH_CHECK(key.scalar_type() == at::kFloat, op, ": key and value must be float32 for an int8 cache, got ",
                key.scalar_type());
    check_int8_scale(op, "k_scale", k_scale, hkv, d);
    check_int8_scale(op, "v_scale", v_scale, hkv, d);
  } else {
    TORCH_CHECK(key.scalar_type() == key_cache.scalar_type(), op, ": key (", key.scalar_type(),
                ") must have the float cache's dtype (", key_cache.scalar_type(), ")");
    TORCH_CHECK(!k_scale.has_value() && !v_scale.has_value(), op, ": k_scale and v_scale are for int8 caches only");
  }
  TORCH_CHECK(slots.device().is_cpu() && slots.scalar_type() == at::kLong && slots.dim() == 1 &&
                  slots.size(0) == tokens && slots.is_contiguous(),
              op, ": slot_mapping must be a contiguous int64 [T] CPU tensor with T = ", tokens);
  const int64_t* slot = slots.data_ptr<int64_t>();
  const int64_t capacity = num_blocks * block_size;
  for (int64_t t = 0; t < tokens; ++t) {  // every slot checked before anything is written
    TORCH_CHECK(slot[t] >= -1 && slot[t] < capacity, op, ": slot ", slot[t], " of token ", t,
                " is outside the cache's ", capacity, " slots (-1 = padding)");
  }
  check_caches_disjoint(op, key_cache, value_cache);

  const int64_t row_elements = d, token_elements = hkv * d;
  const int64_t element = key.element_size();
  // Cache row of (slot, head h): ((block * Hkv + h) * Bs + row) * D elements from the start.
  auto cache_offset = [=](int64_t s, int64_t h) { return ((s / block_size * hkv + h) * block_size + s % block_size) * d; };
  struct Pair {
    const at::Tensor* src;
    at::Tensor* cache;
    const c10::optional<at::Tensor>* scale;
  };
  const Pair pairs[] = {{&key, &key_cache, &k_scale}, {&value, &value_cache, &v_scale}};
  // Grain: a token is 2 * Hkv * D elements (4 KiB at Qwen3.5-0.8B's float32 shapes); decode batches of a few
  // tokens stay on the calling thread.
  at::parallel_for(0, tokens, 64, [&](int64_t begin, int64_t end) {
    for (const Pair& pair : pairs) {
      if (int8) {
        const float* src = pair.src->data_ptr<float>();
        const float* scale = (*pair.scale)->data_ptr<float>();
        int8_t* cache = pair.cache->data_ptr<int8_t>();
        for (int64_t t = begin; t < end; ++t) {
          if (slot[t] < 0) continue;  // padding: nothing written
          for (int64_t h = 0; h < hkv; ++h) {
            quantize_row(src + t * token_elements + h * row_elements, scale + h * row_elements,
                         cache + cache_offset(slot[t], h), row_elements);
          }
        }
      } else {  // a float cache stores the token as it is: a byte copy of each D-row
        const char* src = static_cast<const char*>(pair.src->data_ptr());
        char* cache = static_cast<char*>(pair.cache->data_ptr());
        for (int64_t t = begin; t < end; ++t) {
          if (slot[t] < 0) continue;
          for (int64_t h = 0; h < hkv; ++h) {
            std::memcpy(cache + cache_offset(slot[t], h) * element,
                        src + (t * token_elements + h * row_elements) * element, row_elements * element);
          }
        }
      }
    }
  });
}


void register_reshape_and_cache(pybind11::module_& m) {
  m.def("reshape_and_cache_cpu",
        [](const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache, at::Tensor& value_cache,
           const at::Tensor& slots, const c10::optional<at::Tensor>& k_scale, const c10::optional<at::Tensor>& v_scale,
           const std::string& isa) {
          reshape_and_cache("reshape_and_cache_cpu", key, value, key_cache, value_cache, slots, k_scale, v_scale, isa);
        },
        pybind11::arg("key"), pybind11::arg("value"),
        pybind11::arg("key_cache"), pybind11::arg("value_cache"), pybind11::arg("slot_mapping"),
        pybind11::arg("k_scale"), pybind11::arg("v_scale"), pybind11::arg("isa") = "",
        "Write key/value [T, Hkv, D] into the paged caches [NB, Hkv, Bs, D] at slot_mapping (int64 [T], -1 = "
        "padding), in place, in one pass (CPU). Float caches: key's dtype, a copy; int8 caches: float32 key/value "
        "and float32 [Hkv, D] scales, stored as clamp(round_half_even(x / scale), -128, 127), NaN -> 0. isa: '' (the "
        "widest this CPU runs), 'portable', 'avx2' or 'avx512' (cpu_isas()).");
}

}  // namespace qwen_ops::cpu

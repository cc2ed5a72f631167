// Checks the CPU KV-cache kernels (reshape_and_cache_cpu.cpp, paged_decode_attention_cpu.cpp) share, so the
// two read the same cache layout and int8 scales the same way.
#pragma once

#include <torch/extension.h>

namespace qwen_ops::cpu {

// value_cache must have key_cache's shape and dtype (each kernel checks key_cache's own layout first).
inline void check_value_cache_matches(const char* op, const at::Tensor& key_cache, const at::Tensor& value_cache) {
  TORCH_CHECK(value_cache.sizes() == key_cache.sizes() && value_cache.scalar_type() == key_cache.scalar_type(), op,
              ": value_cache must match key_cache (", key_cache.sizes(), ", ", key_cache.scalar_type(), ")");
}

// An int8 cache's per-(head, channel) scale: a contiguous float32 [Hkv, D] CPU tensor, required.
inline void check_int8_scale(const char* op, const char* name, const c10::optional<at::Tensor>& scale, int64_t hkv,
                             int64_t d) {
  TORCH_CHECK(scale.has_value(), op, ": ", name, " must be a contiguous float32 [Hkv, D] = [", hkv, ", ", d,
              "] CPU tensor: ", name, " is required for an int8 cache");
  TORCH_CHECK(scale->device().is_cpu() && scale->scalar_type() == at::kFloat && scale->is_contiguous() &&
                  scale->sizes() == at::IntArrayRef({hkv, d}),
              op, ": ", name, " must be a contiguous float32 [Hkv, D] = [", hkv, ", ", d, "] CPU tensor, got ",
              scale->scalar_type(), " ", scale->sizes());
}

// Each request's seq_lens[r] in [0, width * block_size], and every block id its tokens use (the first
// ceil(seq_lens[r] / block_size) of its row of the [n, width] table) in [0, num_blocks): what a kernel that reads
// each request's blocks in place checks before it reads any.
inline void check_request_blocks(const char* op, const int32_t* table, int64_t width, const int32_t* lengths,
                                 int64_t n, int64_t block_size, int64_t num_blocks) {
  for (int64_t r = 0; r < n; ++r) {
    TORCH_CHECK(lengths[r] >= 0 && lengths[r] <= width * block_size, op, ": seq_lens[", r, "] = ", lengths[r],
                " is outside [0, M * Bs] = [0, ", width * block_size, "]");
    const int64_t used = (lengths[r] + block_size - 1) / block_size;
    for (int64_t j = 0; j < used; ++j) {
      const int32_t id = table[r * width + j];
      TORCH_CHECK(id >= 0 && id < num_blocks, op, ": block_tables[", r, ", ", j, "] = ", id, " is outside the cache's ",
                  num_blocks, " blocks");
    }
  }
}

// key_cache and value_cache (same size) must not share a byte: a write to one would change the other.
inline void check_caches_disjoint(const char* op, const at::Tensor& key_cache, const at::Tensor& value_cache) {
  const auto* k_begin = static_cast<const char*>(key_cache.data_ptr());
  const auto* v_begin = static_cast<const char*>(value_cache.data_ptr());
  const int64_t bytes = key_cache.numel() * key_cache.element_size();
  TORCH_CHECK(bytes == 0 || k_begin + bytes <= v_begin || v_begin + bytes <= k_begin, op,
              ": key_cache and value_cache must not overlap in memory");
}
}  // namespace qwen_ops::cpu

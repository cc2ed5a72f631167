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

}  // namespace qwen_ops::cpu

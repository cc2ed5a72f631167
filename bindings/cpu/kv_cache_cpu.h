// The two CPU KV-cache kernels as C++ functions (reshape_and_cache_cpu.cpp, paged_decode_attention_cpu.cpp): each
// checks its tensors, naming `op` in its errors, before it reads or writes anything. Called by their pybind11
// entries (qwen_ops._C.reshape_and_cache_cpu, paged_decode_attention_cpu) and by the decode step that runs both
// (attention_decode_step_cpu.cpp).
#pragma once

#include <torch/extension.h>

#include <string>

namespace qwen_ops::cpu {

// Writes key/value [T, Hkv, D] into the paged caches [NB, Hkv, Bs, D] at slots (int64 [T], -1 = not written).
// Float caches take key's dtype (a copy); int8 caches take float32 key/value and float32 [Hkv, D] scales.
// isa: "" (the widest the CPU runs) or a cpu_isas() name.
void reshape_and_cache(const char* op, const at::Tensor& key, const at::Tensor& value, at::Tensor& key_cache,
                       at::Tensor& value_cache, const at::Tensor& slots, const c10::optional<at::Tensor>& k_scale,
                       const c10::optional<at::Tensor>& v_scale, const std::string& isa);

// out [N, Hq, D] float32 = attention of query [N, Hq, D] float32 over each request's first seq_lens[r] cached
// tokens (block_tables int32 [N, M], seq_lens int32 [N]; 0 = a zero row), reading the blocks in place.
void paged_decode_attention(const char* op, const at::Tensor& query, const at::Tensor& key_cache,
                            const at::Tensor& value_cache, const at::Tensor& block_tables, const at::Tensor& seq_lens,
                            double scale, const c10::optional<at::Tensor>& k_scale,
                            const c10::optional<at::Tensor>& v_scale, at::Tensor& out, const std::string& isa);

}  // namespace qwen_ops::cpu

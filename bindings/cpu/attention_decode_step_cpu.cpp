// qwen_ops::attention_decode_step: a full-attention layer's cache work for a step of decodes only, in one call
// (CPU): the step's new keys and values written into the paged cache (reshape_and_cache_cpu), then each
// request's query attending to its cached tokens, the new one included (paged_decode_attention_cpu). Registered
// as a torch operator (CPU kernel here; contract, fake and the other backends' path in
// ops/attention/decode_step_op.py); model/network/attention.py calls it for decode-only steps on the CPU.
//
// Why one call: the two ops through their Python custom ops cost about 0.14 ms a layer at batch 1 in checks
// and dispatch (on an engine's trusted path), this operator about 0.03 ms (bench/RESULTS.md). Every check runs
// in C++, all before anything is written, and the two kernels run as they do behind the ops, so the result is the
// composition's bit for bit. The attention kernel's block checks (kv_cache_checks.h) run here before the write;
// beyond the two kernels' own checks: slots unique, and each slot the position of its request's newest token
// (seq_lens[r] - 1 in its block table: what attention then reads).
#include <torch/extension.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "bindings/cpu/dtype_names.h"
#include "bindings/cpu/kv_cache_checks.h"
#include "bindings/cpu/kv_cache_cpu.h"

namespace qwen_ops::cpu {
namespace {

constexpr const char* kOp = "attention_decode_step";

// slot_mapping as a contiguous int64 [N] tensor (what reshape_and_cache_cpu takes).
at::Tensor int64_slots(const at::Tensor& slot_mapping, int64_t n) {
  TORCH_CHECK(slot_mapping.device().is_cpu() &&
                  (slot_mapping.scalar_type() == at::kInt || slot_mapping.scalar_type() == at::kLong) &&
                  slot_mapping.dim() == 1 && slot_mapping.size(0) == n,
              kOp, ": argument 'slot_mapping' must be an int32 or int64 [N] CPU tensor with N = ", n, ", got ",
              slot_mapping.scalar_type(), " ", slot_mapping.sizes());
  return slot_mapping.to(at::kLong).contiguous();
}

at::Tensor attention_decode_step(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                                 at::Tensor& key_cache, at::Tensor& value_cache, const at::Tensor& slot_mapping,
                                 const at::Tensor& block_tables, const at::Tensor& seq_lens, double scale,
                                 const c10::optional<at::Tensor>& k_scale, const c10::optional<at::Tensor>& v_scale) {
  // Every check before anything is written: here, then the write kernel's own (caches disjoint among them)
  // before its first write; the attention kernel checks its operands again after it.
  TORCH_CHECK(key_cache.device().is_cpu() && key_cache.dim() == 4 && key_cache.is_contiguous(), kOp,
              ": argument 'key_cache' must be a contiguous [NB, Hkv, Bs, D] CPU tensor, got ", key_cache.sizes());
  TORCH_CHECK(value_cache.device().is_cpu() && value_cache.sizes() == key_cache.sizes() &&
                  value_cache.scalar_type() == key_cache.scalar_type() && value_cache.is_contiguous(),
              kOp, ": argument 'value_cache' must be a contiguous CPU tensor like key_cache (", key_cache.sizes(), ", ",
              dtype_name(key_cache.scalar_type()), ")");
  const int64_t num_blocks = key_cache.size(0), hkv = key_cache.size(1), block_size = key_cache.size(2),
                d = key_cache.size(3);
  TORCH_CHECK(query.device().is_cpu() && (query.scalar_type() == at::kFloat || query.scalar_type() == at::kBFloat16) &&
                  query.dim() == 3 && query.size(2) == d && query.size(1) > 0 && query.size(1) % hkv == 0,
              kOp, ": argument 'query' must be a float32 or bfloat16 [N, Hq, D] CPU tensor with D = ", d,
              " and Hq a multiple of Hkv = ", hkv, ", got ", dtype_name(query.scalar_type()), " ", query.sizes());
  const int64_t n = query.size(0);
  const at::ScalarType dtype = query.scalar_type();
  TORCH_CHECK(key_cache.scalar_type() == dtype || key_cache.scalar_type() == at::kChar, kOp,
              ": the caches must be int8 or query's dtype (", dtype_name(dtype), "), got ",
              dtype_name(key_cache.scalar_type()));
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"key", &key}, {"value", &value}}) {
    TORCH_CHECK(t->device().is_cpu() && t->scalar_type() == dtype && t->dim() == 3 && t->size(0) == n &&
                    t->size(1) == hkv && t->size(2) == d,
                kOp, ": argument '", name, "' must be a ", dtype_name(dtype), " [N, Hkv, D] = [", n, ", ", hkv, ", ",
                d, "] CPU tensor (query's dtype), got ", dtype_name(t->scalar_type()), " ", t->sizes());
  }
  TORCH_CHECK(block_tables.device().is_cpu() && block_tables.scalar_type() == at::kInt && block_tables.dim() == 2 &&
                  block_tables.size(0) == n,
              kOp, ": argument 'block_tables' must be an int32 [N, M] CPU tensor with N = ", n, ", got ",
              block_tables.scalar_type(), " ", block_tables.sizes());
  TORCH_CHECK(seq_lens.device().is_cpu() && seq_lens.scalar_type() == at::kInt && seq_lens.dim() == 1 &&
                  seq_lens.size(0) == n,
              kOp, ": argument 'seq_lens' must be an int32 [N] CPU tensor with N = ", n, ", got ",
              seq_lens.scalar_type(), " ", seq_lens.sizes());
  TORCH_CHECK(std::isfinite(scale) && scale > 0, kOp, ": argument 'scale' must be finite and > 0, got ", scale);
  const at::Tensor table = block_tables.contiguous(), lengths = seq_lens.contiguous();
  const int32_t* ids = table.data_ptr<int32_t>();
  const int32_t* length = lengths.data_ptr<int32_t>();
  const int64_t width = table.size(1);
  check_request_blocks(kOp, ids, width, length, n, block_size, num_blocks);
  const at::Tensor slot_tensor = int64_slots(slot_mapping, n);
  const int64_t* slots = slot_tensor.data_ptr<int64_t>();
  std::vector<int64_t> written;
  for (int64_t r = 0; r < n; ++r) {
    if (slots[r] == -1) continue;  // padding: nothing written (attention still reads the cached tokens)
    const int64_t last = length[r] - 1;
    TORCH_CHECK(last >= 0 && slots[r] == ids[r * width + last / block_size] * block_size + last % block_size, kOp,
                ": slot_mapping[", r, "] = ", slots[r], " must be -1 or the slot of request ", r,
                "'s newest token (position seq_lens - 1 = ", last, " in its block table)");
    written.push_back(slots[r]);
  }
  std::sort(written.begin(), written.end());
  TORCH_CHECK(std::adjacent_find(written.begin(), written.end()) == written.end(), kOp,
              ": argument 'slot_mapping' must not give two tokens one slot");

  const bool int8 = key_cache.scalar_type() == at::kChar;
  // An int8 cache quantizes float32 (the reference divides in float32; bfloat16 widens exactly).
  const at::Tensor k_in = int8 ? key.to(at::kFloat).contiguous() : key.contiguous();
  const at::Tensor v_in = int8 ? value.to(at::kFloat).contiguous() : value.contiguous();
  reshape_and_cache(kOp, k_in, v_in, key_cache, value_cache, slot_tensor, k_scale, v_scale, "");
  const at::Tensor q32 = query.to(at::kFloat).contiguous();
  at::Tensor out = at::empty(q32.sizes(), q32.options());
  paged_decode_attention(kOp, q32, key_cache, value_cache, table, lengths, scale, k_scale, v_scale, out, "");
  return dtype == at::kFloat ? out : out.to(dtype);
}

}  // namespace
}  // namespace qwen_ops::cpu

TORCH_LIBRARY_FRAGMENT(qwen_ops, m) {
  m.def("attention_decode_step(Tensor query, Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, "
        "Tensor slot_mapping, Tensor block_tables, Tensor seq_lens, float scale, Tensor? k_scale, Tensor? v_scale) "
        "-> Tensor");
}

TORCH_LIBRARY_IMPL(qwen_ops, CPU, m) {
  m.impl("attention_decode_step", &qwen_ops::cpu::attention_decode_step);
}

// The pool-row indices the CPU state-pool kernels (bindings/cpu/gdn_recurrent_decode.cpp,
// causal_conv1d_update_cpu.cpp) are given: one check, so neither can write outside its pool.
#pragma once

#include <torch/extension.h>

namespace qwen_ops::cpu {

// slots: contiguous int64 [batch] CPU tensor, each -1 (padding) or a row in [0, rows). Returns its data.
inline const int64_t* checked_pool_slots(const char* op, const at::Tensor& slots, int64_t batch, int64_t rows) {
  TORCH_CHECK(slots.device().is_cpu() && slots.scalar_type() == at::kLong && slots.dim() == 1 &&
                  slots.size(0) == batch && slots.is_contiguous(),
              op, ": slots must be a contiguous int64 [B] CPU tensor with B = ", batch);
  const int64_t* slot = slots.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(slot[b] >= -1 && slot[b] < rows, op, ": slot ", slot[b], " of sequence ", b,
                " is outside the pool's ", rows, " rows (-1 = padding)");
  }
  return slot;
}

}  // namespace qwen_ops::cpu

// The one-token causal conv update on a float32 state pool, in place: the CPU kernel behind
// ops/conv/vectorized_update.py (qwen_ops._C.causal_conv1d_update_cpu).
//
// The torch form gathers the used state rows, makes K multiply-add passes over [B, C] and scatters the
// shifted rows back; here each sequence's [K-1, C] row is read, shifted and written where it lies, and
// x and the output cross memory once, in one pass over channels. Sequences are split over ATen's
// intra-op threads (at::parallel_for).
//
// Per channel c (the torch form's order of operations): y = x * w[c, K-1] + bias + sum_{k<K-1} state[k] * w[c, k],
// the pre-activation (the caller applies SiLU with torch's vectorised exp: a scalar std::exp per channel cost
// more than the whole pass); the state becomes its K-2 newest inputs followed by x.
//
// The weight is read in the module's own [C, K] layout (no transposed copy per call): each channel's K taps are
// contiguous, and the tap loop is compiled for K = 4 (Qwen3.5's width, so GCC vectorises the 4-way strided tap
// reads over channels) and for any other K.
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include "bindings/cpu/pool_slots.h"

namespace qwen_ops::cpu {
namespace {

// y[c] for the channels of one sequence: the newest input's tap and the bias first, then the saved inputs
// oldest first (the torch form's order, so both round alike). WIDTH = K, or 0 for a K known only at run time.
template <int WIDTH>
void conv_channels(const float* __restrict xb, const float* __restrict s, const float* __restrict w,
                   const float* __restrict bias, float* __restrict yb, int64_t channels, int64_t runtime_width) {
  const int64_t width = WIDTH > 0 ? WIDTH : runtime_width, context = width - 1;
  for (int64_t c = 0; c < channels; ++c) {
    const float* taps = w + c * width;
    float y = xb[c] * taps[context];
    if (bias != nullptr) y += bias[c];
    for (int64_t k = 0; k < context; ++k) y += s[k * channels + c] * taps[k];
    yb[c] = y;
  }
}

void causal_conv1d_update(const at::Tensor& x, at::Tensor& states, const at::Tensor& weight,
                          const c10::optional<at::Tensor>& bias, const at::Tensor& slots, at::Tensor& out) {
  const char* op = "causal_conv1d_update_cpu";
  const at::Tensor* dense[] = {&x, &states, &weight, &out};
  for (const at::Tensor* t : dense) {
    TORCH_CHECK(t->device().is_cpu() && t->scalar_type() == at::kFloat && t->is_contiguous(), op,
                ": x, conv_states, weight and out must be contiguous float32 CPU tensors");
  }
  TORCH_CHECK(x.dim() == 2, op, ": x must be [B, C], got ", x.sizes());
  const int64_t batch = x.size(0), channels = x.size(1);
  TORCH_CHECK(weight.dim() == 2 && weight.size(0) == channels && weight.size(1) >= 2, op,
              ": weight must be [C, K] with C = ", channels, " and K >= 2, got ", weight.sizes());
  const int64_t width = weight.size(1), context = width - 1;
  TORCH_CHECK(states.dim() == 3 && states.size(1) == context && states.size(2) == channels, op,
              ": conv_states must be [S, K-1, C] = [S, ", context, ", ", channels, "], got ", states.sizes());
  TORCH_CHECK(out.sizes() == x.sizes(), op, ": out must be [B, C] like x");
  const float* bias_data = nullptr;
  if (bias.has_value()) {
    TORCH_CHECK(bias->device().is_cpu() && bias->scalar_type() == at::kFloat && bias->is_contiguous() &&
                    bias->dim() == 1 && bias->size(0) == channels,
                op, ": bias must be a contiguous float32 [C] CPU tensor");
    bias_data = bias->data_ptr<float>();
  }
  const int64_t rows = states.size(0);
  const int64_t* slot = checked_pool_slots(op, slots, batch, rows);
  const float* xp = x.data_ptr<float>();
  const float* w = weight.data_ptr<float>();
  float* pool = states.data_ptr<float>();
  float* y = out.data_ptr<float>();

  at::parallel_for(0, batch, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      float* yb = y + b * channels;
      if (slot[b] < 0) {  // padding: zero output, nothing written
        std::fill(yb, yb + channels, 0.0f);
        continue;
      }
      const float* xb = xp + b * channels;
      float* s = pool + slot[b] * context * channels;
      if (width == 4) {
        conv_channels<4>(xb, s, w, bias_data, yb, channels, width);
      } else {
        conv_channels<0>(xb, s, w, bias_data, yb, channels, width);
      }
      for (int64_t k = 0; k + 1 < context; ++k) {  // shift: oldest first, so nothing is read after it is overwritten
        std::copy(s + (k + 1) * channels, s + (k + 2) * channels, s + k * channels);
      }
      std::copy(xb, xb + channels, s + (context - 1) * channels);
    }
  });
}

}  // namespace

void register_causal_conv1d_update(pybind11::module_& m) {
  m.def("causal_conv1d_update_cpu", &causal_conv1d_update, pybind11::arg("x"), pybind11::arg("conv_states"),
        pybind11::arg("weight"), pybind11::arg("bias"), pybind11::arg("slots"), pybind11::arg("out"),
        "One-token causal conv update on a float32 state pool, in place (CPU). x float32 [B, C]; conv_states "
        "[S, K-1, C]; weight float32 [C, K] (the module's layout); bias [C] or None; slots int64 [B] (-1 = "
        "padding: zero output); writes the pre-activation out [B, C].");
}

}  // namespace qwen_ops::cpu

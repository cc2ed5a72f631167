// What the two causal-conv bindings (causal_conv1d_fn.cpp, causal_conv1d_update.cpp)
// share: the checks of the weight, bias and state pool against x, and the filling of
// the dtype and flag fields their tiling structs have in common.
#ifndef QWEN_OPS_BINDINGS_ASCENDC_CONV_H
#define QWEN_OPS_BINDINGS_ASCENDC_CONV_H

#include "binding.h"

namespace qwen_bind {

// x [rows, C], weight [C, K] (K >= 2), conv_states [S, K-1, C], bias [C]; returns K.
inline int64_t ExpectConvOperands(const char* op, const at::Tensor& x, const at::Tensor& weight,
                                  const c10::optional<at::Tensor>& bias, const at::Tensor& convStates) {
  Expect(op, "x", x, 2);
  const int64_t c = x.size(1);
  Expect(op, "weight", weight, 2);
  const int64_t kw = weight.size(1);
  ExpectShape(op, "weight", weight, {c, kw});
  TORCH_CHECK(kw >= 2, op, ": kernel width K must be >= 2");
  Expect(op, "conv_states", convStates, 3);
  ExpectShape(op, "conv_states", convStates, {convStates.size(0), kw - 1, c});
  if (bias.has_value()) ExpectShape(op, "bias", *bias, {c});
  return kw;
}

inline void ExpectConvFloats(const char* op, const at::Tensor& x, const at::Tensor& weight,
                             const c10::optional<at::Tensor>& bias, const at::Tensor& convStates) {
  TORCH_CHECK(IsFloat(x) && IsFloat(weight) && IsFloat(convStates) && (!bias.has_value() || IsFloat(*bias)), op,
              ": x, weight, bias and conv_states must be float tensors");
}

// The fields both conv tiling structs carry: width, pool size, dtypes, bias and activation.
template <typename Tiling>
void FillConvShape(const char* op, Tiling& shape, const at::Tensor& x, const at::Tensor& weight,
                   const c10::optional<at::Tensor>& bias, const at::Tensor& convStates,
                   const at::Tensor& cacheIndices, bool silu) {
  shape.channels = U32(op, x.size(1), "C");
  shape.width = U32(op, weight.size(1), "K");
  shape.numStates = U32(op, convStates.size(0), "S");
  shape.xDtype = Code(x.scalar_type());
  shape.stateDtype = Code(convStates.scalar_type());
  shape.weightDtype = Code(weight.scalar_type());
  shape.biasDtype = bias.has_value() ? Code(bias->scalar_type()) : 0;
  shape.idxDtype = Code(cacheIndices.scalar_type());
  shape.hasBias = bias.has_value();
  shape.silu = silu;
}

}  // namespace qwen_bind

#endif  // QWEN_OPS_BINDINGS_ASCENDC_CONV_H

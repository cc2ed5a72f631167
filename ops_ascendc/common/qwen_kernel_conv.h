// Device helpers shared by the depthwise causal-conv kernels
// (causal_conv1d_update, causal_conv1d_fn).
#ifndef QWEN_ASCENDC_KERNEL_CONV_H
#define QWEN_ASCENDC_KERNEL_CONV_H

#include "qwen_kernel_common.h"

namespace qwen_ascendc {

// Channels [c0, c0 + nc) of the weight [C, K] (weightDtype) into `wT` as K
// rows of `pitch` floats, tap-major (wT[k * pitch + c] = weight[c0 + c, k]),
// so that each tap is one vector multiply over the channels; and, when
// `hasBias`, bias[c0, c0 + nc) into `bias` as floats. `raw` stages the bytes
// (at least nc * K weight elements, which also holds nc bias elements), `lin`
// the weights in float before the transpose: a scalar loop, since K is small
// and a core loads each channel tile once.
__aicore__ inline void LoadConvTile(const LocalTensor<float>& wT, const LocalTensor<float>& bias,
                                    const LocalTensor<uint8_t>& raw, const LocalTensor<float>& lin,
                                    const GlobalTensor<uint8_t>& weight, const GlobalTensor<uint8_t>& biasGm,
                                    uint32_t weightDtype, uint32_t biasDtype, bool hasBias, uint32_t c0, uint32_t nc,
                                    uint32_t K, uint32_t pitch) {
  const uint32_t esW = DtypeSize(weightDtype), esB = DtypeSize(biasDtype);
  RowsIn(raw, weight[static_cast<uint64_t>(c0) * K * esW], 1, nc * K * esW, 0, RoundUp(nc * K * esW, 32));
  Mte2ToV();
  ToFloat(lin, raw, weightDtype, LocalTensor<half>(), nc * K);
  VToS();
  for (uint32_t c = 0; c < nc; ++c)
    for (uint32_t k = 0; k < K; ++k) wT.SetValue(k * pitch + c, lin.GetValue(c * K + k));
  if (hasBias) {
    RowsIn(raw, biasGm[static_cast<uint64_t>(c0) * esB], 1, nc * esB, 0, RoundUp(nc * esB, 32));  // weights are in wT
    Mte2ToV();
    ToFloat(bias, raw, biasDtype, LocalTensor<half>(), nc);
  }
  SToV();
}

// acc = sum_{k < K-1} window[k] * wT[k] + x * wT[K-1] over `n` channels, in tap order: the window (the K-1
// previous inputs) and the taps wT as rows of `pitch` floats, tap-major. `tmp` holds n floats.
__aicore__ inline void ConvWindow(const LocalTensor<float>& acc, const LocalTensor<float>& window,
                                  const LocalTensor<float>& x, const LocalTensor<float>& wT,
                                  const LocalTensor<float>& tmp, uint32_t K, uint32_t pitch, int32_t n) {
  Mul(acc, window, wT, n);
  for (uint32_t k = 1; k + 1 < K; ++k) {
    Mul(tmp, window[k * pitch], wT[k * pitch], n);
    Add(acc, acc, tmp, n);
  }
  Mul(tmp, x, wT[(K - 1) * pitch], n);
  Add(acc, acc, tmp, n);
}

// x * sigmoid(x) = x / (1 + exp(-x)) over `n` floats of `x`, in place; `tmp` holds n floats.
__aicore__ inline void SiluInPlace(const LocalTensor<float>& x, const LocalTensor<float>& tmp, int32_t n) {
  Muls(tmp, x, -1.0f, n);
  Exp(tmp, tmp, n);
  Adds(tmp, tmp, 1.0f, n);
  Div(x, x, tmp, n);
}

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_KERNEL_CONV_H

// causal_conv1d_update: one decode step of the depthwise causal convolution.
// For row b with state row s = cache_indices[b] (-1: padding, zeros out, no write):
//   window = [conv_states[s] (K-1 previous inputs, oldest first), x[b]]
//   out[b] = act(sum_k window[k] * weight[:, k] + bias)
//   conv_states[s] = [conv_states[s][1:], x[b]]
// Channels are tiled (tileChannels, a multiple of 32); a unit is (channel
// tile, batch row), tile-major, so a core reloads the weight tile only when
// its tile changes. The weight tile [nc, K] is transposed in the unified
// buffer to K rows of channels so that each tap is one vector multiply.
#include "qwen_kernel_conv.h"
#include "../op_host/causal_conv1d_update_tiling.h"

using namespace AscendC;
using namespace qwen_ascendc;

namespace {

class CausalConv1dUpdateKernel {
 public:
  __aicore__ inline void Run(GM_ADDR x, GM_ADDR convStates, GM_ADDR weight, GM_ADDR bias, GM_ADDR cacheIndices,
                             GM_ADDR out, const CausalConv1dUpdateTiling& t) {
    t_ = t;
    const CoreShare units = ShareOfThisCore(t.numTiles * t.batch, t.unitsPerCore, t.usedCores);
    if (units.idle) return;
    const uint32_t P = t.tileChannels, K = t.width;
    esX_ = DtypeSize(t.xDtype);
    esS_ = DtypeSize(t.stateDtype);
    esW_ = DtypeSize(t.weightDtype);

    pipe_.InitBuffer(xIn_, 1, P * esX_);
    pipe_.InitBuffer(stateIn_, 1, (K - 1) * P * esS_);
    pipe_.InitBuffer(outQ_, 1, P * esX_);
    pipe_.InitBuffer(stateOut_, 1, (K - 1) * P * esS_);
    pipe_.InitBuffer(wRawBuf_, RoundUp(P * K * esW_, 32));
    pipe_.InitBuffer(wLinBuf_, RoundUp(P * K, 8) * 4);
    pipe_.InitBuffer(wTBuf_, K * P * 4);
    pipe_.InitBuffer(biasBuf_, P * 4);
    pipe_.InitBuffer(sfBuf_, (K - 1) * P * 4);
    pipe_.InitBuffer(xfBuf_, P * 4);
    pipe_.InitBuffer(accBuf_, P * 4);
    pipe_.InitBuffer(tmpBuf_, P * 4);

    gX_ = Bytes(x);
    gS_ = Bytes(convStates);
    gW_ = Bytes(weight);
    gB_ = Bytes(bias);
    gO_ = Bytes(out);
    idx_ = cacheIndices;

    uint32_t loadedTile = 0xffffffffu;
    for (uint32_t u = units.begin; u < units.end; ++u) {
      const uint32_t tile = u / t.batch;
      const uint32_t b = u % t.batch;
      if (tile != loadedTile) {
        LoadWeights(tile);
        loadedTile = tile;
      }
      Row(tile, b);
    }
  }

 private:
  __aicore__ inline void LoadWeights(uint32_t tile) {
    const uint32_t c0 = tile * t_.tileChannels;
    LoadConvTile(wTBuf_.Get<float>(), biasBuf_.Get<float>(), wRawBuf_.Get<uint8_t>(), wLinBuf_.Get<float>(), gW_, gB_,
                 t_.weightDtype, t_.biasDtype, t_.hasBias, c0, MinU(t_.tileChannels, t_.channels - c0), t_.width,
                 t_.tileChannels);
  }

  __aicore__ inline void Row(uint32_t tile, uint32_t b) {
    const uint32_t P = t_.tileChannels, K = t_.width, C = t_.channels;
    const uint32_t c0 = tile * P;
    const uint32_t nc = MinU(P, C - c0);
    const int32_t n = static_cast<int32_t>(nc);
    const int64_t s = ReadIndex(idx_, t_.idxDtype, b);
    LocalTensor<float> acc = accBuf_.Get<float>();
    const uint64_t outOff = (static_cast<uint64_t>(b) * C + c0) * esX_;
    if (s < 0) {
      Duplicate(acc, 0.0f, n);
      WriteOut(outOff, acc, nc);
      return;
    }
    const uint64_t stateOff = (static_cast<uint64_t>(s) * (K - 1) * C + c0) * esS_;
    LocalTensor<uint8_t> xRaw = xIn_.AllocTensor<uint8_t>();
    RowsIn(xRaw, gX_[outOff], 1, nc * esX_, 0, P * esX_);
    xIn_.EnQue(xRaw);
    LocalTensor<uint8_t> sRaw = stateIn_.AllocTensor<uint8_t>();
    RowsIn(sRaw, gS_[stateOff], K - 1, nc * esS_, (C - nc) * esS_, P * esS_);
    stateIn_.EnQue(sRaw);
    xRaw = xIn_.DeQue<uint8_t>();
    sRaw = stateIn_.DeQue<uint8_t>();

    LocalTensor<float> xf = xfBuf_.Get<float>();
    LocalTensor<float> sf = sfBuf_.Get<float>();
    LocalTensor<float> wT = wTBuf_.Get<float>();
    LocalTensor<float> tmp = tmpBuf_.Get<float>();
    ToFloat(xf, xRaw, t_.xDtype, LocalTensor<half>(), nc);
    ToFloat(sf, sRaw, t_.stateDtype, LocalTensor<half>(), (K - 1) * P);

    // acc = sum_k window[k] * w[:, k] (+ bias), in tap order.
    ConvWindow(acc, sf, xf, wT, tmp, K, P, n);
    if (t_.hasBias) Add(acc, acc, biasBuf_.Get<float>(), n);
    if (t_.silu) SiluInPlace(acc, tmp, n);
    WriteOut(outOff, acc, nc);

    // New state: rows 1..K-2 of the old one, then x in the state's dtype.
    LocalTensor<uint8_t> sNew = stateOut_.AllocTensor<uint8_t>();
    const uint32_t rowBytes = P * esS_;
    if (K > 2) DataCopy(sNew, sRaw[rowBytes], (K - 2) * rowBytes);
    if (t_.stateDtype == t_.xDtype) {
      DataCopy(sNew[(K - 2) * rowBytes], xRaw, rowBytes);
    } else {
      FromFloat(sNew[(K - 2) * rowBytes], xf, t_.stateDtype, nc);
    }
    xIn_.FreeTensor(xRaw);
    stateIn_.FreeTensor(sRaw);
    stateOut_.EnQue(sNew);
    sNew = stateOut_.DeQue<uint8_t>();
    RowsOut(gS_[stateOff], sNew, K - 1, nc * esS_, (C - nc) * esS_, rowBytes);
    stateOut_.FreeTensor(sNew);
  }

  __aicore__ inline void WriteOut(uint64_t off, const LocalTensor<float>& acc, uint32_t nc) {
    StoreFromFloat(outQ_, gO_[off], acc, t_.xDtype, nc);
  }

  CausalConv1dUpdateTiling t_;
  uint32_t esX_ = 0, esS_ = 0, esW_ = 0;
  TPipe pipe_;
  TQue<TPosition::VECIN, 1> xIn_, stateIn_;
  TQue<TPosition::VECOUT, 1> outQ_, stateOut_;
  TBuf<TPosition::VECCALC> wRawBuf_, wLinBuf_, wTBuf_, biasBuf_, sfBuf_, xfBuf_, accBuf_, tmpBuf_;
  GlobalTensor<uint8_t> gX_, gS_, gW_, gB_, gO_;
  GM_ADDR idx_ = nullptr;
};

}  // namespace

extern "C" __global__ __aicore__ void qwen_causal_conv1d_update(GM_ADDR x, GM_ADDR convStates, GM_ADDR weight,
                                                                GM_ADDR bias, GM_ADDR cacheIndices, GM_ADDR out,
                                                                GM_ADDR tiling) {
  CausalConv1dUpdateTiling t;
  CopyTiling(&t, tiling);
  CausalConv1dUpdateKernel op;
  op.Run(x, convStates, weight, bias, cacheIndices, out, t);
}

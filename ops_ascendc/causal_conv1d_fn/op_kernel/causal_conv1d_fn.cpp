// causal_conv1d_fn: the depthwise causal convolution over N packed sequences
// (prefill), each sequence's conv state read and written in place.
// For sequence r (tokens [query_start_loc[r], query_start_loc[r+1]) of x) with
// pool row s = cache_indices[r] (-1: padding):
//   left    = conv_states[s] (K-1 previous inputs, oldest first) if s >= 0 and
//             has_initial_state[r], else zeros
//   history = [left, x[tokens]]
//   out[t]  = act(sum_k history[t + k] * weight[:, k] + bias)
//   conv_states[s] = the last K-1 rows of history (when s >= 0)
// so a sequence shorter than K-1 keeps some of its saved inputs, and an empty
// one with no initial state gets zeros, as the torch reference defines.
//
// A unit is (channel tile, sequence), tile-major, and one core runs a whole
// sequence: the state row it reads first is the one it writes last, so no
// other core may touch it in between (the pool rows of a call are distinct).
// The tokens of a sequence stream through in chunks of tileTokens: the
// history window [K-1 + tileTokens rows, tileChannels floats] keeps the last
// K-1 inputs of the previous chunk (or the saved state) in its first rows.
#include "qwen_kernel_conv.h"
#include "../op_host/causal_conv1d_fn_tiling.h"

using namespace AscendC;
using namespace qwen_ascendc;

namespace {

class CausalConv1dFnKernel {
 public:
  __aicore__ inline void Run(GM_ADDR x, GM_ADDR weight, GM_ADDR bias, GM_ADDR convStates, GM_ADDR queryStartLoc,
                             GM_ADDR cacheIndices, GM_ADDR hasInitialState, GM_ADDR out,
                             const CausalConv1dFnTiling& t) {
    t_ = t;
    const CoreShare units = ShareOfThisCore(t.numTiles * t.numSeqs, t.unitsPerCore, t.usedCores);
    if (units.idle) return;
    const uint32_t P = t.tileChannels, K = t.width, Tt = t.tileTokens;
    esX_ = DtypeSize(t.xDtype);
    esS_ = DtypeSize(t.stateDtype);
    const uint32_t esW = DtypeSize(t.weightDtype);

    pipe_.InitBuffer(xIn_, 1, Tt * P * esX_);
    pipe_.InitBuffer(outQ_, 1, Tt * P * esX_);
    pipe_.InitBuffer(stateIn_, 1, (K - 1) * P * esS_);
    pipe_.InitBuffer(stateOut_, 1, (K - 1) * P * esS_);
    pipe_.InitBuffer(wRawBuf_, RoundUp(P * K * esW, 32));
    pipe_.InitBuffer(wLinBuf_, RoundUp(P * K, 8) * 4);
    pipe_.InitBuffer(wTBuf_, K * P * 4);
    pipe_.InitBuffer(biasBuf_, P * 4);
    pipe_.InitBuffer(histBuf_, (K - 1 + Tt) * P * 4);
    pipe_.InitBuffer(accBuf_, Tt * P * 4);
    pipe_.InitBuffer(tmpBuf_, P * 4);

    gX_ = Bytes(x);
    gW_ = Bytes(weight);
    gB_ = Bytes(bias);
    gS_ = Bytes(convStates);
    gO_ = Bytes(out);
    gHasInit_ = Bytes(hasInitialState);
    qsl_ = queryStartLoc;
    idx_ = cacheIndices;

    uint32_t loadedTile = 0xffffffffu;
    for (uint32_t u = units.begin; u < units.end; ++u) {
      const uint32_t tile = u / t.numSeqs;
      if (tile != loadedTile) {
        const uint32_t c0 = tile * P;
        LoadConvTile(wTBuf_.Get<float>(), biasBuf_.Get<float>(), wRawBuf_.Get<uint8_t>(), wLinBuf_.Get<float>(),
                     gW_, gB_, t.weightDtype, t.biasDtype, t.hasBias, c0, MinU(P, t.channels - c0), K, P);
        loadedTile = tile;
      }
      Sequence(tile, u % t.numSeqs);
    }
  }

 private:
  __aicore__ inline void Sequence(uint32_t tile, uint32_t r) {
    const uint32_t P = t_.tileChannels, K = t_.width, C = t_.channels;
    const uint32_t c0 = tile * P;
    const uint32_t nc = MinU(P, C - c0);
    // The op checked these values; clamping keeps a bad call inside x and the pool.
    int64_t start = ReadIndex(qsl_, t_.qslDtype, r), end = ReadIndex(qsl_, t_.qslDtype, r + 1);
    if (start < 0) start = 0;
    if (start > t_.numTokens) start = t_.numTokens;
    if (end < start) end = start;
    if (end > t_.numTokens) end = t_.numTokens;
    int64_t slot = ReadIndex(idx_, t_.idxDtype, r);
    if (slot >= static_cast<int64_t>(t_.numStates)) slot = -1;
    const bool fromState = slot >= 0 && gHasInit_.GetValue(r) != 0;
    const uint64_t stateOff = (static_cast<uint64_t>(slot < 0 ? 0 : slot) * (K - 1) * C + c0) * esS_;
    const uint32_t contextRows = K - 1;

    LocalTensor<float> hist = histBuf_.Get<float>();
    if (fromState) {
      LocalTensor<uint8_t> sRaw = stateIn_.AllocTensor<uint8_t>();
      RowsIn(sRaw, gS_[stateOff], contextRows, nc * esS_, (C - nc) * esS_, P * esS_);
      stateIn_.EnQue(sRaw);
      sRaw = stateIn_.DeQue<uint8_t>();
      ToFloat(hist, sRaw, t_.stateDtype, LocalTensor<half>(), contextRows * P);
      stateIn_.FreeTensor(sRaw);
    } else {
      Duplicate(hist, 0.0f, static_cast<int32_t>(contextRows * P));
    }
    for (uint32_t pos = static_cast<uint32_t>(start); pos < static_cast<uint32_t>(end); pos += t_.tileTokens)
      Chunk(pos, MinU(t_.tileTokens, static_cast<uint32_t>(end) - pos), c0, nc);
    if (slot < 0) return;
    // The state: the window's first K-1 rows, the last K-1 inputs seen.
    LocalTensor<uint8_t> sNew = stateOut_.AllocTensor<uint8_t>();
    FromFloat(sNew, hist, t_.stateDtype, contextRows * P);
    stateOut_.EnQue(sNew);
    sNew = stateOut_.DeQue<uint8_t>();
    RowsOut(gS_[stateOff], sNew, contextRows, nc * esS_, (C - nc) * esS_, P * esS_);
    stateOut_.FreeTensor(sNew);
  }

  // Tokens [pos, pos + len) of channels [c0, c0 + nc): window rows K-1.. take
  // the inputs, every token's output is K multiply-adds over the channels.
  __aicore__ inline void Chunk(uint32_t pos, uint32_t len, uint32_t c0, uint32_t nc) {
    const uint32_t P = t_.tileChannels, K = t_.width, C = t_.channels;
    const int32_t p = static_cast<int32_t>(P);
    const uint64_t gmOff = (static_cast<uint64_t>(pos) * C + c0) * esX_;
    LocalTensor<float> hist = histBuf_.Get<float>();
    LocalTensor<float> acc = accBuf_.Get<float>();
    LocalTensor<float> wT = wTBuf_.Get<float>();
    LocalTensor<float> tmp = tmpBuf_.Get<float>();

    LocalTensor<uint8_t> xRaw = xIn_.AllocTensor<uint8_t>();
    RowsIn(xRaw, gX_[gmOff], len, nc * esX_, (C - nc) * esX_, P * esX_);
    xIn_.EnQue(xRaw);
    xRaw = xIn_.DeQue<uint8_t>();
    ToFloat(hist[(K - 1) * P], xRaw, t_.xDtype, LocalTensor<half>(), len * P);
    xIn_.FreeTensor(xRaw);

    for (uint32_t j = 0; j < len; ++j) {  // acc[j] = sum_k window[j + k] * w[:, k] (+ bias), in tap order
      LocalTensor<float> row = acc[j * P];
      Mul(row, hist[j * P], wT, p);
      for (uint32_t k = 1; k < K; ++k) {
        Mul(tmp, hist[(j + k) * P], wT[k * P], p);
        Add(row, row, tmp, p);
      }
      if (t_.hasBias) Add(row, row, biasBuf_.Get<float>(), p);
      if (t_.silu) SiluInPlace(row, tmp, p);
    }

    LocalTensor<uint8_t> oRaw = outQ_.AllocTensor<uint8_t>();
    FromFloat(oRaw, acc, t_.xDtype, len * P);
    outQ_.EnQue(oRaw);
    oRaw = outQ_.DeQue<uint8_t>();
    RowsOut(gO_[gmOff], oRaw, len, nc * esX_, (C - nc) * esX_, P * esX_);
    outQ_.FreeTensor(oRaw);

    // Keep the last K-1 rows for the next chunk (row by row, upwards: a row
    // is read before anything lands on it).
    for (uint32_t j = 0; j + 1 < K; ++j) DataCopy(hist[j * P], hist[(j + len) * P], P);
  }

  CausalConv1dFnTiling t_;
  uint32_t esX_ = 0, esS_ = 0;
  TPipe pipe_;
  TQue<TPosition::VECIN, 1> xIn_, stateIn_;
  TQue<TPosition::VECOUT, 1> outQ_, stateOut_;
  TBuf<TPosition::VECCALC> wRawBuf_, wLinBuf_, wTBuf_, biasBuf_, histBuf_, accBuf_, tmpBuf_;
  GlobalTensor<uint8_t> gX_, gW_, gB_, gS_, gO_, gHasInit_;
  GM_ADDR qsl_ = nullptr;
  GM_ADDR idx_ = nullptr;
};

}  // namespace

extern "C" __global__ __aicore__ void qwen_causal_conv1d_fn(GM_ADDR x, GM_ADDR weight, GM_ADDR bias,
                                                            GM_ADDR convStates, GM_ADDR queryStartLoc,
                                                            GM_ADDR cacheIndices, GM_ADDR hasInitialState,
                                                            GM_ADDR out, GM_ADDR tiling) {
  CausalConv1dFnTiling t;
  CopyTiling(&t, tiling);
  CausalConv1dFnKernel op;
  op.Run(x, weight, bias, convStates, queryStartLoc, cacheIndices, hasInitialState, out, t);
}

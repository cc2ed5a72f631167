// reshape_and_cache: write each token's keys and values into the paged BNSD
// cache [NB, Hkv, Bs, D] at its slot, quantizing to int8 per channel
// (clamp(rint(x / scale), -128, 127), a NaN quotient stored as 0) for int8
// caches. Slot -1 is padding.
//
// Work split: each core takes a contiguous range of tokens; heads move in
// tiles of `headsPerTile` rows of `pitch` (D rounded up to 32) elements, so
// every row starts on a 32-byte boundary for any dtype.
#include "qwen_kernel_common.h"
#include "../op_host/reshape_and_cache_tiling.h"

using namespace AscendC;
using namespace qwen_ascendc;

namespace {

class ReshapeAndCacheKernel {
 public:
  __aicore__ inline void Run(GM_ADDR key, GM_ADDR value, GM_ADDR keyCache, GM_ADDR valueCache, GM_ADDR slotMapping,
                             GM_ADDR kScale, GM_ADDR vScale, const ReshapeAndCacheTiling& t) {
    const CoreShare tokens = ShareOfThisCore(t.numTokens, t.tokensPerCore, t.usedCores);
    if (tokens.idle) return;
    const bool quant = t.cacheDtype == QWEN_DT_INT8;
    const uint32_t esIn = DtypeSize(t.kvDtype);
    const uint32_t esC = DtypeSize(t.cacheDtype);
    const uint32_t D = t.headDim, H = t.numKvHeads, Bs = t.blockSize, P = t.pitch;
    const uint32_t tileElems = t.headsPerTile * P;

    pipe_.InitBuffer(inQ_, 2, tileElems * esIn);
    pipe_.InitBuffer(outQ_, 2, tileElems * esC);
    if (quant) {
      pipe_.InitBuffer(fBuf_, tileElems * 4);
      pipe_.InitBuffer(hBuf_, tileElems * 2);
      pipe_.InitBuffer(scaleBuf_, 2 * tileElems * 4);
    }
    GlobalTensor<uint8_t> src[2] = {Bytes(key), Bytes(value)};
    GlobalTensor<uint8_t> dst[2] = {Bytes(keyCache), Bytes(valueCache)};
    GlobalTensor<uint8_t> scales[2] = {Bytes(kScale), Bytes(vScale)};

    for (uint32_t h0 = 0; h0 < H; h0 += t.headsPerTile) {
      const uint32_t nh = MinU(t.headsPerTile, H - h0);
      LocalTensor<float> scale[2];
      if (quant) {
        LocalTensor<uint8_t> all = scaleBuf_.Get<uint8_t>();
        for (int s = 0; s < 2; ++s) {
          LocalTensor<uint8_t> part = all[s * tileElems * 4];
          RowsIn(part, scales[s][static_cast<uint64_t>(h0) * D * 4], nh, D * 4, 0, P * 4);
          scale[s] = part.ReinterpretCast<float>();
        }
        Mte2ToV();  // the scales are read by vector instructions below
      }
      for (uint32_t tok = tokens.begin; tok < tokens.end; ++tok) {
        const int64_t slot = ReadIndex(slotMapping, t.slotDtype, tok);
        if (slot < 0) continue;
        const uint64_t blk = static_cast<uint64_t>(slot) / Bs;
        const uint64_t row = static_cast<uint64_t>(slot) % Bs;
        for (int s = 0; s < 2; ++s) {
          LocalTensor<uint8_t> in = inQ_.AllocTensor<uint8_t>();
          RowsIn(in, src[s][(static_cast<uint64_t>(tok) * H + h0) * D * esIn], nh, D * esIn, 0, P * esIn);
          inQ_.EnQue(in);
          in = inQ_.DeQue<uint8_t>();
          LocalTensor<uint8_t> out = outQ_.AllocTensor<uint8_t>();
          if (quant) {
            Quantize(out, in, scale[s], t.kvDtype, nh * P);
          } else {
            DataCopy(out, in, nh * P * esIn);  // VECIN -> VECOUT
          }
          inQ_.FreeTensor(in);
          outQ_.EnQue(out);
          out = outQ_.DeQue<uint8_t>();
          const uint64_t dstOff = ((blk * H + h0) * Bs + row) * D * esC;
          RowsOut(dst[s][dstOff], out, nh, D * esC, (Bs - 1) * D * esC, P * esC);
          outQ_.FreeTensor(out);
        }
      }
    }
  }

 private:
  __aicore__ inline void Quantize(const LocalTensor<uint8_t>& out, const LocalTensor<uint8_t>& in,
                                  const LocalTensor<float>& scale, uint32_t dtype, uint32_t n) {
    LocalTensor<float> xf = fBuf_.Get<float>();
    LocalTensor<half> hf = hBuf_.Get<half>();
    const int32_t cnt = static_cast<int32_t>(n);
    ToFloat(xf, in, dtype, hf, n);
    Div(xf, xf, scale, cnt);
    ZeroNaNs(xf, hf.ReinterpretCast<float>(), n);  // hf is free until the Cast below
    Maxs(xf, xf, -128.0f, cnt);
    Mins(xf, xf, 127.0f, cnt);
    Cast(xf, xf, RoundMode::CAST_RINT, n);           // round half to even, in float
    Cast(hf, xf, RoundMode::CAST_NONE, n);           // integers in [-128, 127]: exact in half
    Cast(out.ReinterpretCast<int8_t>(), hf, RoundMode::CAST_NONE, n);  // exact
  }

  // The contract stores a NaN quotient as 0 (+-inf saturate like any large
  // value). What the 910B does with NaN is not documented for the steps that
  // follow: vector Maxs/Mins, and the half -> int8 Cast (CANN documents
  // "NaN -> 0" only for the saturation overflow mode, not for the Inf/NaN mode
  // the 910B runs in by default; the CPU stand-in converts NaN to 0). So NaNs
  // are replaced before the clamp, relying only on IEEE addition propagating
  // NaN and on a scalar compare. The stand-in has no Compare/Select, so a tile
  // is probed with one ReduceSum (NaN iff some element is NaN or +inf meets
  // -inf; the latter only costs the scalar pass) and the rare tiles that hold
  // a NaN are fixed element by element on the scalar unit. Padding columns
  // (D < pitch) hold garbage and may trigger that pass too; they are never
  // written out. `scratch` needs 8 + the ReduceSum work size floats: at most
  // n / 2 for n >= 32, which the half buffer provides.
  __aicore__ inline void ZeroNaNs(const LocalTensor<float>& y, const LocalTensor<float>& scratch, uint32_t n) {
    LocalTensor<float> sum = scratch;       // one value, in its own 32-byte block
    LocalTensor<float> work = scratch[8];
    ReduceSum(sum, y, work, static_cast<int32_t>(n));
    VToS();
    const float probe = sum.GetValue(0);
    if (probe == probe) return;
    for (uint32_t i = 0; i < n; ++i) {
      const float v = y.GetValue(i);
      if (v != v) y.SetValue(i, 0.0f);
    }
    SToV();  // the vector clamp below reads what the scalar unit wrote
  }

  TPipe pipe_;
  TQue<TPosition::VECIN, 1> inQ_;
  TQue<TPosition::VECOUT, 1> outQ_;
  TBuf<TPosition::VECCALC> fBuf_, hBuf_, scaleBuf_;
};

}  // namespace

extern "C" __global__ __aicore__ void qwen_reshape_and_cache(GM_ADDR key, GM_ADDR value, GM_ADDR keyCache,
                                                             GM_ADDR valueCache, GM_ADDR slotMapping, GM_ADDR kScale,
                                                             GM_ADDR vScale, GM_ADDR tiling) {
  ReshapeAndCacheTiling t;
  CopyTiling(&t, tiling);
  ReshapeAndCacheKernel op;
  op.Run(key, value, keyCache, valueCache, slotMapping, kScale, vScale, t);
}

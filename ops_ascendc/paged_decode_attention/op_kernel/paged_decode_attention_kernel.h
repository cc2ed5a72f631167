#ifndef QWEN_ASCENDC_PAGED_DECODE_ATTENTION_KERNEL_H
#define QWEN_ASCENDC_PAGED_DECODE_ATTENTION_KERNEL_H
// The vector-core kernel class of paged_decode_attention, shared by its own
// entry (paged_decode_attention.cpp) and the AIVs of mixed_attention.
//
// paged_decode_attention: one query token per request over its paged BNSD
// cache [NB, Hkv, Bs, D] (float16/bfloat16/float32 or int8 with per-channel
// float32 scales).
//
// Work split: a unit is (request, KV head); each core takes a contiguous range
// of units and handles the GQA group's G query heads together, so every K/V
// tile is loaded once per group. K/V tiles of `tileTokens` rows (never
// crossing a block) stream through double-buffered queues: the next tile's
// copy is issued before the current tile is computed. Online softmax in
// float32 per query head (running max m, running sum l, accumulator acc).
// INT8: k_scale is folded into the query (q * scale * k_scale) and v_scale is
// applied to the accumulator at the end.
#include "qwen_kernel_common.h"
#include "../op_host/paged_decode_attention_tiling.h"

using namespace AscendC;
using namespace qwen_ascendc;

namespace qwen_decode_kernel {

class PagedDecodeAttentionKernel {
 public:
  __aicore__ inline void Run(GM_ADDR query, GM_ADDR keyCache, GM_ADDR valueCache, GM_ADDR blockTables,
                             GM_ADDR seqLens, GM_ADDR kScale, GM_ADDR vScale, GM_ADDR out,
                             const PagedAttentionTiling& t) {
    t_ = t;
    const CoreShare units = ShareOfThisCore(t.numReqs * t.numKvHeads, t.unitsPerCore, t.usedCores);
    if (units.idle) return;
    D_ = t.headDim;
    G_ = t.groupSize;
    esQ_ = DtypeSize(t.qDtype);
    esC_ = DtypeSize(t.cacheDtype);
    quant_ = t.cacheDtype == QWEN_DT_INT8;
    const uint32_t tile = t.tileTokens;
    const uint32_t GD = G_ * D_;

    pipe_.InitBuffer(kQ_, 2, tile * D_ * esC_);
    pipe_.InitBuffer(vQ_, 2, tile * D_ * esC_);
    pipe_.InitBuffer(qIn_, 1, GD * esQ_);
    pipe_.InitBuffer(oOut_, 1, GD * esQ_);
    pipe_.InitBuffer(qfBuf_, GD * 4);
    pipe_.InitBuffer(accBuf_, GD * 4);
    if (t.cacheDtype != QWEN_DT_FLOAT) {
      pipe_.InitBuffer(kfBuf_, tile * D_ * 4);
      pipe_.InitBuffer(vfBuf_, tile * D_ * 4);
    }
    if (quant_) {
      pipe_.InitBuffer(hBuf_, tile * D_ * 2);
      pipe_.InitBuffer(scaleBuf_, 2 * D_ * 4);
    }
    pipe_.InitBuffer(scBuf_, RoundUp(tile, 8) * 4);
    pipe_.InitBuffer(tmpBuf_, D_ * 4);
    pipe_.InitBuffer(mlBuf_, 2 * RoundUp(G_, 8) * 4);
    pipe_.InitBuffer(redBuf_, 32);
    pipe_.InitBuffer(oneBuf_, 32);
    const uint32_t longest = D_ > tile ? D_ : tile;
    pipe_.InitBuffer(workBuf_, RoundUp(2 * ((longest + 63) / 64), 8) * 4);

    gQ_ = Bytes(query);
    gK_ = Bytes(keyCache);
    gV_ = Bytes(valueCache);
    gO_ = Bytes(out);
    gKS_ = Bytes(kScale);
    gVS_ = Bytes(vScale);
    blockTables_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(blockTables),
                                 static_cast<uint64_t>(t.numReqs) * t.maxBlocksPerReq);
    seqLens_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(seqLens), t.numReqs);

    for (uint32_t u = units.begin; u < units.end; ++u) Unit(u / t.numKvHeads, u % t.numKvHeads);
  }

 private:
  __aicore__ inline void Unit(uint32_t r, uint32_t h) {
    const int32_t len = seqLens_.GetValue(r);
    const uint32_t GD = G_ * D_;
    const uint64_t qOff = (static_cast<uint64_t>(r) * t_.numQHeads + static_cast<uint64_t>(h) * G_) * D_;
    LocalTensor<float> qf = qfBuf_.Get<float>();
    LocalTensor<float> acc = accBuf_.Get<float>();
    Duplicate(acc, 0.0f, static_cast<int32_t>(GD));
    if (len > 0) {
      LoadAsFloat(qIn_, qf, gQ_[qOff * esQ_], t_.qDtype, GD);
      Muls(qf, qf, t_.scale, static_cast<int32_t>(GD));
      if (quant_) {
        LocalTensor<uint8_t> sc = scaleBuf_.Get<uint8_t>();
        RowsIn(sc, gKS_[static_cast<uint64_t>(h) * D_ * 4], 1, D_ * 4, 0, D_ * 4);
        RowsIn(sc[D_ * 4], gVS_[static_cast<uint64_t>(h) * D_ * 4], 1, D_ * 4, 0, D_ * 4);
        Mte2ToV();
        LocalTensor<float> ks = sc.ReinterpretCast<float>();
        for (uint32_t g = 0; g < G_; ++g) Mul(qf[g * D_], qf[g * D_], ks, static_cast<int32_t>(D_));
      }
      LocalTensor<float> ml = mlBuf_.Get<float>();
      const uint32_t mOff = RoundUp(G_, 8);
      for (uint32_t g = 0; g < G_; ++g) {
        ml.SetValue(g, -__builtin_inff());
        ml.SetValue(mOff + g, 0.0f);
      }
      // Stream the tiles: issue tile i+1's copy before computing tile i.
      const uint32_t total = static_cast<uint32_t>(len);
      uint32_t pos = 0;
      uint32_t n = TileLen(pos, total);
      CopyIn(r, h, pos, n);
      while (pos < total) {
        const uint32_t next = pos + n;
        uint32_t nextN = 0;
        if (next < total) {
          nextN = TileLen(next, total);
          CopyIn(r, h, next, nextN);
        }
        Compute(n);
        pos = next;
        n = nextN;
      }
      // acc / l, then v_scale for int8.
      VToS();
      for (uint32_t g = 0; g < G_; ++g) {
        const float l = ml.GetValue(mOff + g);
        Muls(acc[g * D_], acc[g * D_], 1.0f / l, static_cast<int32_t>(D_));
      }
      if (quant_) {
        LocalTensor<float> vs = scaleBuf_.Get<float>()[D_];
        for (uint32_t g = 0; g < G_; ++g) Mul(acc[g * D_], acc[g * D_], vs, static_cast<int32_t>(D_));
      }
    }
    StoreFromFloat(oOut_, gO_[qOff * esQ_], acc, t_.qDtype, GD);
  }

  // Tokens in the tile starting at `pos`: up to tileTokens, never past the block or the sequence.
  __aicore__ inline uint32_t TileLen(uint32_t pos, uint32_t total) const {
    const uint32_t inBlock = t_.blockSize - pos % t_.blockSize;
    return MinU(MinU(t_.tileTokens, inBlock), total - pos);
  }

  __aicore__ inline void CopyIn(uint32_t r, uint32_t h, uint32_t pos, uint32_t n) {
    const int32_t blk = blockTables_.GetValue(static_cast<uint64_t>(r) * t_.maxBlocksPerReq + pos / t_.blockSize);
    const uint64_t row = pos % t_.blockSize;
    const uint64_t off = ((static_cast<uint64_t>(blk) * t_.numKvHeads + h) * t_.blockSize + row) * D_ * esC_;
    const uint32_t bytes = n * D_ * esC_;
    LocalTensor<uint8_t> k = kQ_.AllocTensor<uint8_t>();
    RowsIn(k, gK_[off], 1, bytes, 0, RoundUp(bytes, 32));
    kQ_.EnQue(k);
    LocalTensor<uint8_t> v = vQ_.AllocTensor<uint8_t>();
    RowsIn(v, gV_[off], 1, bytes, 0, RoundUp(bytes, 32));
    vQ_.EnQue(v);
  }

  __aicore__ inline void Compute(uint32_t n) {
    LocalTensor<uint8_t> kRaw = kQ_.DeQue<uint8_t>();
    LocalTensor<uint8_t> vRaw = vQ_.DeQue<uint8_t>();
    LocalTensor<float> kf, vf;
    if (t_.cacheDtype == QWEN_DT_FLOAT) {
      kf = kRaw.ReinterpretCast<float>();
      vf = vRaw.ReinterpretCast<float>();
    } else {
      LocalTensor<half> hTmp;
      if (quant_) hTmp = hBuf_.Get<half>();
      kf = kfBuf_.Get<float>();
      vf = vfBuf_.Get<float>();
      ToFloat(kf, kRaw, t_.cacheDtype, hTmp, n * D_);
      ToFloat(vf, vRaw, t_.cacheDtype, hTmp, n * D_);
    }
    LocalTensor<float> qf = qfBuf_.Get<float>();
    LocalTensor<float> acc = accBuf_.Get<float>();
    LocalTensor<float> sc = scBuf_.Get<float>();
    LocalTensor<float> tmp = tmpBuf_.Get<float>();
    LocalTensor<float> red = redBuf_.Get<float>();
    LocalTensor<float> one = oneBuf_.Get<float>();
    LocalTensor<float> work = workBuf_.Get<float>();
    LocalTensor<float> ml = mlBuf_.Get<float>();
    const uint32_t mOff = RoundUp(G_, 8);
    const int32_t d = static_cast<int32_t>(D_);
    const int32_t cnt = static_cast<int32_t>(n);
    for (uint32_t g = 0; g < G_; ++g) {
      LocalTensor<float> qg = qf[g * D_];
      LocalTensor<float> ag = acc[g * D_];
      for (uint32_t j = 0; j < n; ++j) {
        Mul(tmp, kf[j * D_], qg, d);
        ReduceSum(red, tmp, work, d);
        VToS();
        sc.SetValue(j, red.GetValue(0));
      }
      SToV();
      ReduceMax(red, sc, work, cnt);
      VToS();
      const float mOld = ml.GetValue(g);
      const float mNew = MaxF(mOld, red.GetValue(0));
      Adds(sc, sc, -mNew, cnt);
      Exp(sc, sc, cnt);
      ReduceSum(red, sc, work, cnt);
      one.SetValue(0, mOld - mNew);
      SToV();
      Exp(one, one, 1);
      VToS();
      const float alpha = one.GetValue(0);
      const float psum = red.GetValue(0);
      ml.SetValue(g, mNew);
      ml.SetValue(mOff + g, ml.GetValue(mOff + g) * alpha + psum);
      Muls(ag, ag, alpha, d);
      for (uint32_t j = 0; j < n; ++j) {
        const float p = sc.GetValue(j);
        Muls(tmp, vf[j * D_], p, d);
        Add(ag, ag, tmp, d);
      }
    }
    kQ_.FreeTensor(kRaw);
    vQ_.FreeTensor(vRaw);
  }

  PagedAttentionTiling t_;
  uint32_t D_ = 0, G_ = 0, esQ_ = 0, esC_ = 0;
  bool quant_ = false;
  TPipe pipe_;
  TQue<TPosition::VECIN, 2> kQ_, vQ_;
  TQue<TPosition::VECIN, 1> qIn_;
  TQue<TPosition::VECOUT, 1> oOut_;
  TBuf<TPosition::VECCALC> qfBuf_, accBuf_, kfBuf_, vfBuf_, hBuf_, scaleBuf_, scBuf_, tmpBuf_, mlBuf_, redBuf_,
      oneBuf_, workBuf_;
  GlobalTensor<uint8_t> gQ_, gK_, gV_, gO_, gKS_, gVS_;
  GlobalTensor<int32_t> blockTables_, seqLens_;
};

}  // namespace qwen_decode_kernel


#endif  // QWEN_ASCENDC_PAGED_DECODE_ATTENTION_KERNEL_H

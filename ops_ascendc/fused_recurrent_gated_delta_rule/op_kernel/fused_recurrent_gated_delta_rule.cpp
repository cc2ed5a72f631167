// fused_recurrent_gated_delta_rule: the gated delta rule token by token, per
// sequence and value head, with a float32 state S [Dk, Dv]:
//   S = S * exp(g_t);  u = beta_t * (v_t - S^T k_t);  S = S + outer(k_t, u);
//   o_t = S^T (scale * q_t)
// (q, k optionally L2-normalised first). Every column of S evolves on its own,
// so the state is tiled by columns: a unit is (sequence, value head, Dv tile)
// and holds S[:, j0:j0+dvTile] in the unified buffer for the whole sequence.
// With ssm_state_indices the initial state comes from a pool row and the final
// state is written back to it in place; index -1 is padding (zeros out).
#include "qwen_kernel_common.h"
#include "../op_host/fused_recurrent_gated_delta_rule_tiling.h"

using namespace AscendC;
using namespace qwen_ascendc;

namespace {

class GdnRecurrentKernel {
 public:
  __aicore__ inline void Run(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR g, GM_ADDR beta, GM_ADDR initialState,
                             GM_ADDR cuSeqlens, GM_ADDR stateIndices, GM_ADDR hasInitial, GM_ADDR out,
                             GM_ADDR finalState, const GdnRecurrentTiling& t) {
    t_ = t;
    const CoreShare units = ShareOfThisCore(t.numSeqs * t.numVHeads * t.numDvTiles, t.unitsPerCore, t.usedCores);
    if (units.idle) return;
    es_ = DtypeSize(t.qkvDtype);
    const uint32_t Dk = t.dk, P = t.pitchDv;
    const uint32_t vecLen = Dk > P ? Dk : P;

    pipe_.InitBuffer(qkIn_, 2, Dk * es_);
    pipe_.InitBuffer(vIn_, 1, t.dvTile * es_);
    pipe_.InitBuffer(oOut_, 1, t.dvTile * es_);
    pipe_.InitBuffer(stateBuf_, Dk * P * 4);
    pipe_.InitBuffer(qfBuf_, Dk * 4);
    pipe_.InitBuffer(kfBuf_, Dk * 4);
    pipe_.InitBuffer(vfBuf_, P * 4);
    pipe_.InitBuffer(uBuf_, P * 4);
    pipe_.InitBuffer(oBuf_, P * 4);
    pipe_.InitBuffer(tmpBuf_, vecLen * 4);
    pipe_.InitBuffer(redBuf_, 32);
    pipe_.InitBuffer(oneBuf_, 32);
    pipe_.InitBuffer(workBuf_, RoundUp((Dk + 63) / 64, 8) * 4);

    gQ_ = Bytes(q);
    gK_ = Bytes(k);
    gV_ = Bytes(v);
    gO_ = Bytes(out);
    gState_ = Bytes(initialState);
    gFinal_ = Bytes(finalState);
    gBeta_ = beta;
    gG_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(g), static_cast<uint64_t>(t.totalTokens) * t.numVHeads);
    cu_ = cuSeqlens;
    idx_ = stateIndices;
    hasInit_ = hasInitial;

    for (uint32_t u = units.begin; u < units.end; ++u) {
      const uint32_t tileIdx = u % t.numDvTiles;
      const uint32_t h = (u / t.numDvTiles) % t.numVHeads;
      const uint32_t r = u / (t.numDvTiles * t.numVHeads);
      Unit(r, h, tileIdx);
    }
  }

 private:
  __aicore__ inline void Unit(uint32_t r, uint32_t h, uint32_t tileIdx) {
    const uint32_t Dk = t_.dk, Dv = t_.dv, P = t_.pitchDv, Hv = t_.numVHeads;
    const uint32_t j0 = tileIdx * t_.dvTile;
    const uint32_t nc = MinU(t_.dvTile, Dv - j0);
    uint64_t bos, eos;
    if (t_.hasCuSeqlens) {
      bos = static_cast<uint64_t>(ReadIndex(cu_, t_.cuDtype, r));
      eos = static_cast<uint64_t>(ReadIndex(cu_, t_.cuDtype, r + 1));
    } else {
      bos = static_cast<uint64_t>(r) * t_.seqLen;
      eos = bos + t_.seqLen;
    }
    int64_t poolRow = r;
    if (t_.hasIndices) poolRow = ReadIndex(idx_, t_.idxDtype, r);
    bool fromState = t_.hasInitialState != 0;
    if (fromState && t_.hasHasInitial) {
      GlobalTensor<uint8_t> flags = Bytes(hasInit_);
      fromState = flags.GetValue(r) != 0;
    }
    LocalTensor<float> S = stateBuf_.Get<float>();
    const uint64_t rowBytes = static_cast<uint64_t>(nc) * 4;
    const uint32_t gap = (Dv - nc) * 4;
    const uint64_t headOff = (static_cast<uint64_t>(h) * Dk * Dv + j0) * 4;

    if (poolRow < 0) {  // padding: outputs are zeros, nothing is read or written back
      LocalTensor<float> o = oBuf_.Get<float>();
      Duplicate(o, 0.0f, static_cast<int32_t>(P));
      for (uint64_t tt = bos; tt < eos; ++tt) WriteOut(tt, h, j0, nc, o);
      if (t_.writeFinal) {
        Duplicate(S, 0.0f, static_cast<int32_t>(Dk * P));
        StoreState(gFinal_[static_cast<uint64_t>(r) * Hv * Dk * Dv * 4 + headOff], S, nc, gap);
      }
      return;
    }
    if (fromState) {
      RowsIn(S.ReinterpretCast<uint8_t>(),
             gState_[static_cast<uint64_t>(poolRow) * Hv * Dk * Dv * 4 + headOff], Dk,
             static_cast<uint32_t>(rowBytes), gap, P * 4);
      Mte2ToV();
    } else {
      Duplicate(S, 0.0f, static_cast<int32_t>(Dk * P));
    }

    for (uint64_t tt = bos; tt < eos; ++tt) Step(tt, h, j0, nc, S);

    // MTE3 reads what V wrote.
    SetFlag<HardEvent::V_MTE3>(EVENT_ID0);
    WaitFlag<HardEvent::V_MTE3>(EVENT_ID0);
    if (t_.hasIndices) StoreState(gState_[static_cast<uint64_t>(poolRow) * Hv * Dk * Dv * 4 + headOff], S, nc, gap);
    if (t_.writeFinal) StoreState(gFinal_[static_cast<uint64_t>(r) * Hv * Dk * Dv * 4 + headOff], S, nc, gap);
    // The next unit overwrites S: wait for the copy out.
    SetFlag<HardEvent::MTE3_V>(EVENT_ID0);
    WaitFlag<HardEvent::MTE3_V>(EVENT_ID0);
  }

  __aicore__ inline void StoreState(const GlobalTensor<uint8_t>& dst, const LocalTensor<float>& S, uint32_t nc,
                                    uint32_t gap) {
    RowsOut(dst, S.ReinterpretCast<uint8_t>(), t_.dk, nc * 4, gap, t_.pitchDv * 4);
  }

  __aicore__ inline void L2Normalize(const LocalTensor<float>& x) {
    const int32_t dk = static_cast<int32_t>(t_.dk);
    LocalTensor<float> tmp = tmpBuf_.Get<float>();
    LocalTensor<float> red = redBuf_.Get<float>();
    LocalTensor<float> one = oneBuf_.Get<float>();
    Mul(tmp, x, x, dk);
    ReduceSum(red, tmp, workBuf_.Get<float>(), dk);
    Adds(one, red, 1e-6f, 1);
    Sqrt(one, one, 1);
    VToS();
    const float norm = one.GetValue(0);
    Duplicate(tmp, norm, dk);
    Div(x, x, tmp, dk);
  }

  __aicore__ inline void Step(uint64_t tt, uint32_t h, uint32_t j0, uint32_t nc, const LocalTensor<float>& S) {
    const uint32_t Dk = t_.dk, Hv = t_.numVHeads, Hk = t_.numKHeads, P = t_.pitchDv;
    const uint32_t hk = h / (Hv / Hk);
    const int32_t n = static_cast<int32_t>(nc);
    LocalTensor<float> qf = qfBuf_.Get<float>();
    LocalTensor<float> kf = kfBuf_.Get<float>();
    LocalTensor<float> vf = vfBuf_.Get<float>();
    LocalTensor<float> u = uBuf_.Get<float>();
    LocalTensor<float> o = oBuf_.Get<float>();
    LocalTensor<float> tmp = tmpBuf_.Get<float>();
    LocalTensor<float> one = oneBuf_.Get<float>();

    const uint64_t qkOff = (tt * Hk + hk) * Dk * es_;
    LoadAsFloat(qkIn_, qf, gQ_[qkOff], t_.qkvDtype, Dk);
    LoadAsFloat(qkIn_, kf, gK_[qkOff], t_.qkvDtype, Dk);
    LoadAsFloat(vIn_, vf, gV_[((tt * Hv + h) * t_.dv + j0) * es_], t_.qkvDtype, nc);
    if (t_.useL2Norm) {
      L2Normalize(qf);
      L2Normalize(kf);
    }
    Muls(qf, qf, t_.scale, static_cast<int32_t>(Dk));
    const float gt = gG_.GetValue(tt * Hv + h);
    const float bt = ReadScalar(gBeta_, t_.betaDtype, tt * Hv + h);

    // S = S * exp(g)
    one.SetValue(0, gt);
    SToV();
    Exp(one, one, 1);
    VToS();
    const float decay = one.GetValue(0);
    Muls(S, S, decay, static_cast<int32_t>(Dk * P));
    // u = beta * (v - S^T k)
    Duplicate(u, 0.0f, n);
    VToS();
    for (uint32_t i = 0; i < Dk; ++i) {
      const float ki = kf.GetValue(i);
      Muls(tmp, S[i * P], ki, n);
      Add(u, u, tmp, n);
    }
    Sub(u, vf, u, n);
    Muls(u, u, bt, n);
    // S += outer(k, u); o = S^T (scale q)
    Duplicate(o, 0.0f, n);
    for (uint32_t i = 0; i < Dk; ++i) {
      const float ki = kf.GetValue(i);
      const float qi = qf.GetValue(i);
      LocalTensor<float> Si = S[i * P];
      Muls(tmp, u, ki, n);
      Add(Si, Si, tmp, n);
      Muls(tmp, Si, qi, n);
      Add(o, o, tmp, n);
    }
    WriteOut(tt, h, j0, nc, o);
  }

  __aicore__ inline void WriteOut(uint64_t tt, uint32_t h, uint32_t j0, uint32_t nc, const LocalTensor<float>& o) {
    StoreFromFloat(oOut_, gO_[((tt * t_.numVHeads + h) * t_.dv + j0) * es_], o, t_.qkvDtype, nc);
  }

  GdnRecurrentTiling t_;
  uint32_t es_ = 0;
  TPipe pipe_;
  TQue<TPosition::VECIN, 2> qkIn_;
  TQue<TPosition::VECIN, 1> vIn_;
  TQue<TPosition::VECOUT, 1> oOut_;
  TBuf<TPosition::VECCALC> stateBuf_, qfBuf_, kfBuf_, vfBuf_, uBuf_, oBuf_, tmpBuf_, redBuf_, oneBuf_, workBuf_;
  GlobalTensor<uint8_t> gQ_, gK_, gV_, gO_, gState_, gFinal_;
  GlobalTensor<float> gG_;
  GM_ADDR gBeta_ = nullptr;
  GM_ADDR cu_ = nullptr;
  GM_ADDR idx_ = nullptr;
  GM_ADDR hasInit_ = nullptr;
};

}  // namespace

extern "C" __global__ __aicore__ void qwen_gdn_recurrent(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR g, GM_ADDR beta,
                                                         GM_ADDR initialState, GM_ADDR cuSeqlens,
                                                         GM_ADDR stateIndices, GM_ADDR hasInitial, GM_ADDR out,
                                                         GM_ADDR finalState, GM_ADDR tiling) {
  GdnRecurrentTiling t;
  CopyTiling(&t, tiling);
  GdnRecurrentKernel op;
  op.Run(q, k, v, g, beta, initialState, cuSeqlens, stateIndices, hasInitial, out, finalState, t);
}

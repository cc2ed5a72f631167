// gdn_decode_step: a Qwen3.5 GDN layer's decode step in one launch, between its projections and out_proj:
//   x = silu(causal conv update of mixed_qkv) on the conv pool;   [q | k | v] = x
//   g = -exp(A_log) * softplus(a + dt_bias);  beta = sigmoid(b)
//   per value head, with q, k L2-normalised and q scaled by Dk ** -0.5, the delta rule on the state pool:
//     S = S * exp(g);  u = beta (v - S^T k);  S = S + outer(k, u);  o = S^T q
//   out = norm_weight * rmsnorm(o) * silu(z), per value head
// (ops/gdn/decode_step/reference.py is the definition). A unit is (sequence, key head): the key head's q
// and k channels and the channels and states of its Hv / Hk value heads, so units never share a pool
// element and the in-place updates need no order between cores.
//
// Per unit everything stays in the unified buffer: the conv outputs of its tokens (W rows of tokenPitch
// floats: q, k, then each value head, every segment starting on 32 bytes) and one value head's outputs
// (W rows) until they are normalised. Conv channels are tiled by chanTile inside a segment, the state
// by dvTile columns (as fused_recurrent_gated_delta_rule).
//
// Speculative decoding (spec): sequence r's tokens start from pool row state_indices[r, accepted - 1];
// the conv window and the state after its t-th token go to row state_indices[r, t]. Every window and state
// tile is read once before the unit's first write, so a written row that is also the one read is safe.
// A sequence whose start row is -1 is padding: nothing is read or written (out is zero from the host).
#include "qwen_kernel_conv.h"
#include "../op_host/gdn_decode_step_tiling.h"

using namespace AscendC;
using namespace qwen_ascendc;

namespace {

constexpr float kL2NormEps = 1e-6f;  // use_qk_l2norm_in_kernel's epsilon (ops/gdn/triton_common.py)

class GdnDecodeStepKernel {
 public:
  __aicore__ inline void Run(GM_ADDR mixed, GM_ADDR z, GM_ADDR b, GM_ADDR a, GM_ADDR convStates, GM_ADDR convTaps,
                             GM_ADDR ssmStates, GM_ADDR aLog, GM_ADDR dtBias, GM_ADDR normWeight,
                             GM_ADDR stateIndices, GM_ADDR queryStartLoc, GM_ADDR numAccepted, GM_ADDR out,
                             const GdnDecodeStepTiling& t) {
    t_ = t;
    const CoreShare units = ShareOfThisCore(t.numSeqs * t.numKHeads, t.unitsPerCore, t.usedCores);
    if (units.idle) return;
    const uint32_t P = t.chanTile, K = t.width, W = t.rowsWidth, pk = t.pitchK, pv = t.pitchV, pd = t.pitchDv;
    const uint32_t vec = pk > pv ? pk : pv;
    pipe_.InitBuffer(winBuf_, (K - 1) * P * 4);
    pipe_.InitBuffer(tapsBuf_, K * P * 4);
    pipe_.InitBuffer(xBuf_, P * 4);
    pipe_.InitBuffer(accBuf_, P * 4);
    pipe_.InitBuffer(convOutBuf_, W * t.tokenPitch * 4);
    pipe_.InitBuffer(headOutBuf_, W * pv * 4);
    pipe_.InitBuffer(stateBuf_, t.dk * pd * 4);
    pipe_.InitBuffer(qBuf_, pk * 4);
    pipe_.InitBuffer(kBuf_, pk * 4);
    pipe_.InitBuffer(uBuf_, pd * 4);
    pipe_.InitBuffer(oBuf_, pd * 4);
    pipe_.InitBuffer(normWeightBuf_, pv * 4);
    pipe_.InitBuffer(zBuf_, pv * 4);
    pipe_.InitBuffer(tmpBuf_, (vec > P ? vec : P) * 4);
    pipe_.InitBuffer(redBuf_, 32);
    pipe_.InitBuffer(oneBuf_, 32);
    pipe_.InitBuffer(workBuf_, RoundUp((vec + 63) / 64, 8) * 4);

    gMixed_ = Bytes(mixed);
    gZ_ = Bytes(z);
    gConv_ = Bytes(convStates);
    gTaps_ = Bytes(convTaps);
    gSsm_ = Bytes(ssmStates);
    gOut_ = Bytes(out);
    b_ = b;
    a_ = a;
    aLog_ = aLog;
    dtBias_ = dtBias;
    idx_ = stateIndices;
    qsl_ = queryStartLoc;
    accepted_ = numAccepted;
    LoadF32(normWeightBuf_.Get<float>(), Bytes(normWeight), 1, t.dv * 4, 0, pv * 4);

    for (uint32_t u = units.begin; u < units.end; ++u) Unit(u / t.numKHeads, u % t.numKHeads);
  }

 private:
  // GM -> UB of float rows straight into a VECCALC buffer, ready for the vector unit.
  __aicore__ inline void LoadF32(const LocalTensor<float>& dst, const GlobalTensor<uint8_t>& src, uint32_t rows,
                                 uint32_t rowBytes, uint32_t gmGap, uint32_t ubPitch) {
    RowsIn(dst.ReinterpretCast<uint8_t>(), src, rows, rowBytes, gmGap, ubPitch);
    Mte2ToV();
  }
  // UB -> GM after the vector unit wrote `src`; the buffer is free again when this returns.
  __aicore__ inline void StoreF32(const GlobalTensor<uint8_t>& dst, const LocalTensor<float>& src, uint32_t rows,
                                  uint32_t rowBytes, uint32_t gmGap, uint32_t ubPitch) {
    SetFlag<HardEvent::V_MTE3>(EVENT_ID0);
    WaitFlag<HardEvent::V_MTE3>(EVENT_ID0);
    RowsOut(dst, src.ReinterpretCast<uint8_t>(), rows, rowBytes, gmGap, ubPitch);
    SetFlag<HardEvent::MTE3_V>(EVENT_ID0);
    WaitFlag<HardEvent::MTE3_V>(EVENT_ID0);
  }

  // Pool row of token `i` of the unit's sequence (speculative decoding), or its one row.
  __aicore__ inline int64_t TokenRow(uint32_t r, uint32_t i) const {
    return t_.spec ? ReadIndex(idx_, t_.idxDtype, static_cast<uint64_t>(r) * t_.rowsWidth + i) : start_;
  }

  __aicore__ inline void Unit(uint32_t r, uint32_t kh) {
    if (t_.spec) {
      const int64_t acc = ReadIndex(accepted_, t_.acceptedDtype, r);
      start_ = ReadIndex(idx_, t_.idxDtype, static_cast<uint64_t>(r) * t_.rowsWidth + (acc - 1));
      bos_ = static_cast<uint64_t>(ReadIndex(qsl_, t_.qslDtype, r));
      eos_ = static_cast<uint64_t>(ReadIndex(qsl_, t_.qslDtype, r + 1));
    } else {
      start_ = ReadIndex(idx_, t_.idxDtype, r);
      bos_ = r;
      eos_ = r + 1;
    }
    if (start_ < 0 || eos_ == bos_) return;  // padding (or no token): out stays zero, no pool row is touched
    // More tokens than pool rows per sequence cannot reach here (the op checks the lengths against W before
    // launching); the guard keeps the UB rows of the conv outputs in bounds whatever the metadata.
    if (eos_ - bos_ > t_.rowsWidth) return;
    const uint32_t group = t_.numVHeads / t_.numKHeads, keyDim = t_.numKHeads * t_.dk;
    // 1. The conv of the unit's segments: q, k of key head kh, then v of each value head of its group.
    ConvSegment(r, kh * t_.dk, t_.dk, 0);
    ConvSegment(r, keyDim + kh * t_.dk, t_.dk, t_.pitchK);
    for (uint32_t g = 0; g < group; ++g)
      ConvSegment(r, 2 * keyDim + (kh * group + g) * t_.dv, t_.dv, 2 * t_.pitchK + g * t_.pitchV);
    // 2. + 3. Per value head: the delta rule over its column tiles, then the gated norm of its outputs.
    for (uint32_t g = 0; g < group; ++g) {
      const uint32_t h = kh * group + g;
      for (uint32_t tile = 0; tile < t_.numDvTiles; ++tile) DeltaRule(r, h, g, tile);
      GatedNorm(h);
    }
  }

  // Channels [c0, c0 + n) of the conv for the unit's tokens, tile by tile; the outputs go to the conv-output
  // rows at `outOff` floats, the windows to the tokens' pool rows.
  __aicore__ inline void ConvSegment(uint32_t r, uint32_t c0, uint32_t n, uint32_t outOff) {
    const uint32_t P = t_.chanTile, K = t_.width, C = t_.channels;
    LocalTensor<float> win = winBuf_.Get<float>();
    LocalTensor<float> taps = tapsBuf_.Get<float>();
    LocalTensor<float> x = xBuf_.Get<float>();
    LocalTensor<float> acc = accBuf_.Get<float>();
    LocalTensor<float> tmp = tmpBuf_.Get<float>();
    LocalTensor<float> convOut = convOutBuf_.Get<float>();
    for (uint32_t off = 0; off < n; off += P) {
      const uint32_t c = c0 + off, nc = MinU(P, n - off);
      const int32_t m = static_cast<int32_t>(nc);
      const uint32_t gap = (C - nc) * 4;
      // The taps [K, C] are tap-major already: K rows of this tile's channels.
      LoadF32(taps, gTaps_[static_cast<uint64_t>(c) * 4], K, nc * 4, gap, P * 4);
      LoadF32(win, gConv_[(static_cast<uint64_t>(start_) * (K - 1) * C + c) * 4], K - 1, nc * 4, gap, P * 4);
      for (uint64_t tt = bos_; tt < eos_; ++tt) {
        const uint32_t i = static_cast<uint32_t>(tt - bos_);
        LoadF32(x, gMixed_[(tt * C + c) * 4], 1, nc * 4, 0, P * 4);
        // acc = sum_k window[k] * taps[k] + x * taps[K-1], in tap order; then SiLU.
        ConvWindow(acc, win, x, taps, tmp, K, P, m);
        SiluInPlace(acc, tmp, m);
        Muls(convOut[i * t_.tokenPitch + outOff + off], acc, 1.0f, m);
        // The window moves on by one input: rows 1..K-2, then x; it is this token's row's new state.
        for (uint32_t k = 0; k + 2 < K; ++k) Muls(win[k * P], win[(k + 1) * P], 1.0f, m);
        Muls(win[(K - 2) * P], x, 1.0f, m);
        const int64_t row = TokenRow(r, i);
        StoreF32(gConv_[(static_cast<uint64_t>(row) * (K - 1) * C + c) * 4], win, K - 1, nc * 4, gap, P * 4);
      }
    }
  }

  // x / sqrt(sum(x^2) / divisor + eps) over `n` floats, in place (divisor 1: L2 norm; n: RMS norm).
  __aicore__ inline void ScaleToUnitNorm(const LocalTensor<float>& x, int32_t n, float eps, float divisor) {
    LocalTensor<float> tmp = tmpBuf_.Get<float>();
    LocalTensor<float> red = redBuf_.Get<float>();
    LocalTensor<float> one = oneBuf_.Get<float>();
    Mul(tmp, x, x, n);
    ReduceSum(red, tmp, workBuf_.Get<float>(), n);
    Muls(one, red, 1.0f / divisor, 1);
    Adds(one, one, eps, 1);
    Sqrt(one, one, 1);
    VToS();
    const float norm = one.GetValue(0);
    Duplicate(tmp, norm, n);
    Div(x, x, tmp, n);
  }

  // exp(g) and beta of token tt, value head h: g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b).
  __aicore__ inline void Gates(uint64_t tt, uint32_t h, float* decay, float* beta) {
    LocalTensor<float> one = oneBuf_.Get<float>();
    LocalTensor<float> red = redBuf_.Get<float>();
    const uint64_t at = tt * t_.numVHeads + h;
    one.SetValue(0, ReadScalar(a_, QWEN_DT_FLOAT, at) + ReadScalar(dtBias_, QWEN_DT_FLOAT, h));
    one.SetValue(1, ReadScalar(aLog_, QWEN_DT_FLOAT, h));
    one.SetValue(2, -ReadScalar(b_, QWEN_DT_FLOAT, at));
    SToV();
    Exp(red, one, 3);  // [exp(x), exp(A_log), exp(-b)]
    VToS();
    const float decayRate = -red.GetValue(1);
    const float expMinusB = red.GetValue(2);
    // softplus(x) = max(x, 0) + ln(1 + exp(-|x|)), as fused_gdn_gating's kernel
    Abs(red, one, 1);
    Muls(red, red, -1.0f, 1);
    Exp(red, red, 1);
    Adds(red, red, 1.0f, 1);
    Ln(red, red, 1);
    Maxs(one, one, 0.0f, 1);
    Add(one, one, red, 1);
    VToS();
    one.SetValue(0, decayRate * one.GetValue(0));
    SToV();
    Exp(one, one, 1);
    VToS();
    *decay = one.GetValue(0);
    *beta = 1.0f / (1.0f + expMinusB);
  }

  __aicore__ inline void DeltaRule(uint32_t r, uint32_t h, uint32_t g, uint32_t tile) {
    const uint32_t Dk = t_.dk, Dv = t_.dv, Hv = t_.numVHeads, pd = t_.pitchDv;
    const uint32_t j0 = tile * t_.dvTile, nc = MinU(t_.dvTile, Dv - j0);
    const int32_t n = static_cast<int32_t>(nc), dk = static_cast<int32_t>(Dk);
    const uint32_t gap = (Dv - nc) * 4;
    const uint64_t headOff = (static_cast<uint64_t>(h) * Dk * Dv + j0) * 4;
    const uint64_t rowBytes = static_cast<uint64_t>(Hv) * Dk * Dv * 4;
    LocalTensor<float> S = stateBuf_.Get<float>();
    LocalTensor<float> q = qBuf_.Get<float>();
    LocalTensor<float> k = kBuf_.Get<float>();
    LocalTensor<float> u = uBuf_.Get<float>();
    LocalTensor<float> o = oBuf_.Get<float>();
    LocalTensor<float> tmp = tmpBuf_.Get<float>();
    LocalTensor<float> convOut = convOutBuf_.Get<float>();
    LocalTensor<float> headOut = headOutBuf_.Get<float>();
    LoadF32(S, gSsm_[static_cast<uint64_t>(start_) * rowBytes + headOff], Dk, nc * 4, gap, pd * 4);
    for (uint64_t tt = bos_; tt < eos_; ++tt) {
      const uint32_t i = static_cast<uint32_t>(tt - bos_);
      const LocalTensor<float> conv = convOut[i * t_.tokenPitch];
      Muls(q, conv, 1.0f, dk);
      Muls(k, conv[t_.pitchK], 1.0f, dk);
      ScaleToUnitNorm(q, dk, kL2NormEps, 1.0f);
      ScaleToUnitNorm(k, dk, kL2NormEps, 1.0f);
      Muls(q, q, t_.scale, dk);
      float decay, beta;
      Gates(tt, h, &decay, &beta);
      Muls(S, S, decay, static_cast<int32_t>(Dk * pd));
      // u = beta (v - S^T k)
      Duplicate(u, 0.0f, n);
      VToS();
      for (uint32_t d = 0; d < Dk; ++d) {
        const float kd = k.GetValue(d);
        Muls(tmp, S[d * pd], kd, n);
        Add(u, u, tmp, n);
      }
      Sub(u, conv[2 * t_.pitchK + g * t_.pitchV + j0], u, n);
      Muls(u, u, beta, n);
      // S += outer(k, u); o = S^T q
      Duplicate(o, 0.0f, n);
      for (uint32_t d = 0; d < Dk; ++d) {
        const float kd = k.GetValue(d), qd = q.GetValue(d);
        LocalTensor<float> Sd = S[d * pd];
        Muls(tmp, u, kd, n);
        Add(Sd, Sd, tmp, n);
        Muls(tmp, Sd, qd, n);
        Add(o, o, tmp, n);
      }
      Muls(headOut[i * t_.pitchV + j0], o, 1.0f, n);
      if (t_.spec) StoreF32(gSsm_[static_cast<uint64_t>(TokenRow(r, i)) * rowBytes + headOff], S, Dk, nc * 4, gap,
                            pd * 4);
    }
    if (!t_.spec) StoreF32(gSsm_[static_cast<uint64_t>(start_) * rowBytes + headOff], S, Dk, nc * 4, gap, pd * 4);
  }

  // out[tt, h] = norm_weight * rmsnorm(o) * silu(z) for the unit's tokens.
  __aicore__ inline void GatedNorm(uint32_t h) {
    const uint32_t Dv = t_.dv, pv = t_.pitchV;
    const int32_t n = static_cast<int32_t>(Dv);
    LocalTensor<float> headOut = headOutBuf_.Get<float>();
    LocalTensor<float> zf = zBuf_.Get<float>();
    LocalTensor<float> tmp = tmpBuf_.Get<float>();
    for (uint64_t tt = bos_; tt < eos_; ++tt) {
      LocalTensor<float> o = headOut[static_cast<uint32_t>(tt - bos_) * pv];
      ScaleToUnitNorm(o, n, t_.eps, static_cast<float>(Dv));
      Mul(o, o, normWeightBuf_.Get<float>(), n);
      const uint64_t off = (tt * t_.numVHeads + h) * Dv * 4;
      LoadF32(zf, gZ_[off], 1, Dv * 4, 0, pv * 4);
      SiluInPlace(zf, tmp, n);
      Mul(o, o, zf, n);
      StoreF32(gOut_[off], o, 1, Dv * 4, 0, pv * 4);
    }
  }

  GdnDecodeStepTiling t_;
  TPipe pipe_;
  TBuf<TPosition::VECCALC> winBuf_, tapsBuf_, xBuf_, accBuf_, convOutBuf_, headOutBuf_, stateBuf_, qBuf_, kBuf_,
      uBuf_, oBuf_, normWeightBuf_, zBuf_, tmpBuf_, redBuf_, oneBuf_, workBuf_;
  GlobalTensor<uint8_t> gMixed_, gZ_, gConv_, gTaps_, gSsm_, gOut_;
  GM_ADDR b_ = nullptr;
  GM_ADDR a_ = nullptr;
  GM_ADDR aLog_ = nullptr;
  GM_ADDR dtBias_ = nullptr;
  GM_ADDR idx_ = nullptr;
  GM_ADDR qsl_ = nullptr;
  GM_ADDR accepted_ = nullptr;
  int64_t start_ = -1;  // the unit's sequence's start row (-1: padding)
  uint64_t bos_ = 0, eos_ = 0;
};

}  // namespace

extern "C" __global__ __aicore__ void qwen_gdn_decode_step(GM_ADDR mixed, GM_ADDR z, GM_ADDR b, GM_ADDR a,
                                                           GM_ADDR convStates, GM_ADDR convTaps, GM_ADDR ssmStates,
                                                           GM_ADDR aLog, GM_ADDR dtBias, GM_ADDR normWeight,
                                                           GM_ADDR stateIndices, GM_ADDR queryStartLoc,
                                                           GM_ADDR numAccepted, GM_ADDR out, GM_ADDR tiling) {
  GdnDecodeStepTiling t;
  CopyTiling(&t, tiling);
  GdnDecodeStepKernel op;
  op.Run(mixed, z, b, a, convStates, convTaps, ssmStates, aLog, dtBias, normWeight, stateIndices, queryStartLoc,
         numAccepted, out, t);
}

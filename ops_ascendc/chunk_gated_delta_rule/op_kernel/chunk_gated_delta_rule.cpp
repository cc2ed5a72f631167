// chunk_gated_delta_rule: the gated delta rule in chunked (WY) form, chunk
// size 64, as a KERNEL_TYPE_MIX_AIC_1_2 kernel. A unit is (sequence, value
// head); units go round-robin over the groups (one AIC and its two AIVs).
// Per chunk, with the float32 state S [Dk, Dv] (ops/gdn/reference_chunk.py
// has the algebra):
//
//   AIV  prep : k, q (l2norm, scale) as float; gc = cumsum(g); Qd = Qs e^gc,
//               Kb = beta e^gc K, Vb = beta V, KendT = (K e^(gc_last - gc))^T
//   AIC       : G = K K^T, P = Qs K^T                           (cube)
//   AIV       : A = beta_i e^(gc_i - gc_j) G (j < i); T = (I + A)^-1 by forward
//               substitution; Att = P e^(gc_i - gc_j) (j <= i)
//   AIC       : W = T Kb, U = T Vb, WS = W S                     (cube)
//   AIV       : Vnew = U - WS
//   AIC       : O = Qd S + Att Vnew (written to o in its dtype), Spart = KendT Vnew
//   AIV       : S = e^gc_last S + Spart
//
// Every matrix product is on the cube (float x float -> float: the state and
// its products stay float32); every element-wise step on AIV 0 of the group.
// The hand-offs go through the group's GM workspace (GdnChunkSlot), strictly
// alternating: the AIC sets flag 0 when its results are in GM, the AIVs set
// flag 1 when theirs are (AIV 1 takes part in the flags only). Nothing is
// double-buffered: the two core types take turns.
//
// The inverse is forward substitution on the AIV rather than block doubling on
// the cube: A is formed element-wise on the AIV anyway, and the 63 row steps
// (2016 length-64 Axpys) stay in the unified buffer, where block doubling
// would need three more cube <-> AIV round trips through GM per chunk for
// 16/32-row blocks that fill the cube poorly.
#include "qwen_kernel_common.h"
#include "../op_host/chunk_gated_delta_rule_tiling.h"

using namespace AscendC;
using namespace qwen_ascendc;

namespace {

constexpr uint32_t C = kGdnChunk;
constexpr uint16_t kAicDone = 0;  // AIC -> AIVs: results in GM
constexpr uint16_t kAivDone = 1;  // AIVs -> AIC: results in GM, inputs consumed

// Where a unit's tokens are and which state it starts from (both core types compute it alike).
struct UnitInfo {
  uint64_t bos;
  uint64_t len;
  int64_t poolRow;  // < 0: padding, skipped
  bool fromState;
};

__aicore__ inline UnitInfo Describe(const GdnChunkTiling& t, GM_ADDR cu, GM_ADDR idx, GM_ADDR hasInit, uint32_t r) {
  UnitInfo u;
  if (t.hasCuSeqlens) {
    u.bos = static_cast<uint64_t>(ReadIndex(cu, t.cuDtype, r));
    u.len = static_cast<uint64_t>(ReadIndex(cu, t.cuDtype, r + 1)) - u.bos;
  } else {
    u.bos = static_cast<uint64_t>(r) * t.seqLen;
    u.len = t.seqLen;
  }
  u.poolRow = t.hasIndices ? ReadIndex(idx, t.idxDtype, r) : static_cast<int64_t>(r);
  u.fromState = t.hasInitialState != 0;
  if (u.fromState && t.hasHasInitial) u.fromState = Bytes(hasInit).GetValue(r) != 0;
  return u;
}

__aicore__ inline uint32_t Chunks(uint64_t len) { return static_cast<uint32_t>((len + C - 1) / C); }

// ------------------------------------------------------------------ AIC
class GdnChunkCube {
 public:
  __aicore__ inline void Run(GM_ADDR out, GM_ADDR ws, GM_ADDR cu, GM_ADDR idx, GM_ADDR hasInit,
                             const GdnChunkTiling& t) {
    t_ = t;
    const uint32_t grp = static_cast<uint32_t>(GetBlockIdx());
    if (grp >= t.usedCores) return;
    pipe_.InitBuffer(a1_, GdnChunkL0ABytes());
    pipe_.InitBuffer(b1_, GdnChunkL0BBytes());
    pipe_.InitBuffer(a2_, GdnChunkL0ABytes());
    pipe_.InitBuffer(b2_, GdnChunkL0BBytes());
    pipe_.InitBuffer(c_, GdnChunkL0CBytes());
    ws_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws) + static_cast<uint64_t>(grp) * t.wsFloatsPerGroup,
                        t.wsFloatsPerGroup);
    out_ = out;
    for (uint32_t u = grp; u < t.numSeqs * t.numVHeads; u += t.usedCores) {
      const uint32_t r = u / t.numVHeads, h = u % t.numVHeads;
      const UnitInfo info = Describe(t, cu, idx, hasInit, r);
      if (info.poolRow < 0) continue;
      for (uint32_t c = 0; c < Chunks(info.len); ++c) {
        const uint64_t rem = info.len - static_cast<uint64_t>(c) * C;
        Chunk(info.bos + static_cast<uint64_t>(c) * C, rem < C ? static_cast<uint32_t>(rem) : C, h);
      }
    }
  }

 private:
  __aicore__ inline GlobalTensor<float> Slot(uint32_t s) { return ws_[GdnChunkSlotOffset(s, t_.dk, t_.dv)]; }

  // C (m x n, in L0C) = A (m x k, row pitch lda) . B, or += with `accumulate`.
  // B is Bt (n x k, pitch ldb) with `bt`, else B (k x n, pitch ldb). m, n, k
  // are multiples of 16, so there is no padding to zero.
  __aicore__ inline void Mul(const GlobalTensor<float>& a, uint32_t lda, const GlobalTensor<float>& b, uint32_t ldb,
                             bool bt, uint32_t m, uint32_t n, uint32_t k, bool accumulate) {
    constexpr uint32_t c0 = 8, fe = 128;  // floats per 32-byte block and per 512-byte fractal
    LocalTensor<float> la1 = a1_.Get<float>(), lb1 = b1_.Get<float>(), la2 = a2_.Get<float>(), lb2 = b2_.Get<float>();
    DataCopy(la1, a, Nd2NzParams(1, m, k, 0, lda, m, 1, 0));
    for (uint32_t mi = 0; mi < m / 16; ++mi)
      LoadData(la2[mi * (k / c0) * fe], la1, LoadData2DParams(mi, k / c0, m / 16, 0, 0, false, 0));
    if (bt) {
      DataCopy(lb1, b, Nd2NzParams(1, n, k, 0, ldb, n, 1, 0));
      LoadData(lb2, lb1, LoadData2DParams(0, (k / c0) * (n / 16), 1, 0, 0, false, 0));
    } else {  // float B: 16-row pieces, each 16x16 square transposed into two Zn fractals
      DataCopy(lb1, b, Nd2NzParams(k / 16, 16, n, 16 * ldb, ldb, 16, 1, 16 * n));
      for (uint32_t p = 0; p < k / 16; ++p)
        LoadDataWithTranspose(lb2[2 * p * (n / 16) * fe], lb1,
                              LoadData2dTransposeParams(p * (n / 16), n / 16, 1, 0, n / 16 - 1, 0));
    }
    Mmad(c_.Get<float>(), la2, lb2, MmadParams(m, n, k, 0, false, !accumulate));
  }
  __aicore__ inline void Out(const GlobalTensor<float>& dst, uint32_t rows, uint32_t n, uint32_t m, uint32_t ld) {
    Fixpipe(dst, c_.Get<float>(), FixpipeParamsV220(n, rows, m, ld, false, QuantMode_t::NoQuant, 0, 1, 0, 0, 0));
  }
  template <typename T>
  __aicore__ inline void OutTo(GM_ADDR base, uint64_t offset, uint32_t rows, QuantMode_t quant) {
    GlobalTensor<T> g;
    g.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(base) + offset);
    Fixpipe(g, c_.Get<float>(), FixpipeParamsV220(t_.dv, rows, C, t_.numVHeads * t_.dv, false, quant, 0, 1, 0, 0, 0));
  }

  __aicore__ inline void Chunk(uint64_t tok0, uint32_t rows, uint32_t h) {
    const uint32_t dk = t_.dk, dv = t_.dv;
    CrossCoreWaitFlag(kAivDone);  // Kc, Qs, Qd, Kb, Vb, KendT and the state are in GM
    Mul(Slot(WS_KC), dk, Slot(WS_KC), dk, true, C, C, dk, false);
    Out(Slot(WS_G), C, C, C, C);
    Mul(Slot(WS_QS), dk, Slot(WS_KC), dk, true, C, C, dk, false);
    Out(Slot(WS_P), C, C, C, C);
    CrossCoreSetFlag<2, PIPE_FIX>(kAicDone);

    CrossCoreWaitFlag(kAivDone);  // T and Att are in GM
    Mul(Slot(WS_T), C, Slot(WS_KB), dk, false, C, dk, C, false);
    Out(Slot(WS_W), C, dk, C, dk);
    Mul(Slot(WS_T), C, Slot(WS_VB), dv, false, C, dv, C, false);
    Out(Slot(WS_U), C, dv, C, dv);
    Mul(Slot(WS_W), dk, Slot(WS_STATE), dv, false, C, dv, dk, false);
    Out(Slot(WS_WS), C, dv, C, dv);
    CrossCoreSetFlag<2, PIPE_FIX>(kAicDone);

    CrossCoreWaitFlag(kAivDone);  // Vnew is in GM
    Mul(Slot(WS_QD), dk, Slot(WS_STATE), dv, false, C, dv, dk, false);
    Mul(Slot(WS_ATT), C, Slot(WS_VNEW), dv, false, C, dv, C, true);
    const uint64_t o = (tok0 * t_.numVHeads + h) * t_.dv;
    if (t_.qkvDtype == QWEN_DT_HALF) OutTo<half>(out_, o, rows, QuantMode_t::F322F16);
    else if (t_.qkvDtype == QWEN_DT_BF16) OutTo<bfloat16_t>(out_, o, rows, QuantMode_t::F322BF16);
    else OutTo<float>(out_, o, rows, QuantMode_t::NoQuant);
    Mul(Slot(WS_KENDT), C, Slot(WS_VNEW), dv, false, dk, dv, C, false);
    Out(Slot(WS_SPART), dk, dv, dk, dv);
    CrossCoreSetFlag<2, PIPE_FIX>(kAicDone);
  }

  GdnChunkTiling t_;
  TPipe pipe_;
  TBuf<TPosition::A1> a1_;
  TBuf<TPosition::B1> b1_;
  TBuf<TPosition::A2> a2_;
  TBuf<TPosition::B2> b2_;
  TBuf<TPosition::CO1> c_;
  GlobalTensor<float> ws_;
  GM_ADDR out_ = nullptr;
};

// ------------------------------------------------------------------ AIV
__aicore__ inline void VToMte3() {
  SetFlag<HardEvent::V_MTE3>(EVENT_ID0);
  WaitFlag<HardEvent::V_MTE3>(EVENT_ID0);
}
__aicore__ inline void Mte3ToV() {
  SetFlag<HardEvent::MTE3_V>(EVENT_ID0);
  WaitFlag<HardEvent::MTE3_V>(EVENT_ID0);
}

class GdnChunkVector {
 public:
  __aicore__ inline void Run(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR g, GM_ADDR beta, GM_ADDR initialState,
                             GM_ADDR cu, GM_ADDR idx, GM_ADDR hasInit, GM_ADDR finalState, GM_ADDR ws,
                             const GdnChunkTiling& t) {
    t_ = t;
    const uint32_t grp = static_cast<uint32_t>(GetBlockIdx()) / 2;
    if (grp >= t.usedCores) return;
    const bool worker = GetSubBlockIdx() == 0;
    if (worker) Init(q, k, v, g, beta, initialState, finalState, ws, grp);
    for (uint32_t u = grp; u < t.numSeqs * t.numVHeads; u += t.usedCores) {
      const uint32_t r = u / t.numVHeads, h = u % t.numVHeads;
      const UnitInfo info = Describe(t, cu, idx, hasInit, r);
      if (info.poolRow < 0) continue;
      if (worker) {
        Unit(info, r, h);
        continue;
      }
      for (uint32_t c = 0; c < Chunks(info.len); ++c)  // AIV 1: the flag protocol only
        for (uint32_t round = 0; round < 3; ++round) {
          CrossCoreSetFlag<2, PIPE_MTE3>(kAivDone);
          CrossCoreWaitFlag(kAicDone);
        }
    }
  }

 private:
  __aicore__ inline void Init(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR g, GM_ADDR beta, GM_ADDR initialState,
                              GM_ADDR finalState, GM_ADDR ws, uint32_t grp) {
    const uint32_t dk = t_.dk, dv = t_.dv, es = DtypeSize(t_.qkvDtype);
    const uint32_t rowFloats = GdnChunkRowFloats(dk, dv);
    pipe_.InitBuffer(mask_, C * C * 4);
    pipe_.InitBuffer(matA_, C * C * 4);
    pipe_.InitBuffer(matB_, C * C * 4);
    pipe_.InitBuffer(matT_, C * C * 4);
    pipe_.InitBuffer(rowsA_, rowFloats * 4);
    pipe_.InitBuffer(rowsB_, rowFloats * 4);
    pipe_.InitBuffer(raw_, (rowFloats * es + 31) / 32 * 32);
    pipe_.InitBuffer(gc_, C * 4);
    pipe_.InitBuffer(negGc_, C * 4);
    pipe_.InitBuffer(beta_, C * 4);
    pipe_.InitBuffer(egc_, C * 4);
    pipe_.InitBuffer(eEnd_, C * 4);
    pipe_.InitBuffer(tmp_, C * 4);
    pipe_.InitBuffer(red_, 32);
    pipe_.InitBuffer(work_, ((dk + 63) / 64 + 7) / 8 * 8 * 4);
    gQ_ = Bytes(q);
    gK_ = Bytes(k);
    gV_ = Bytes(v);
    gG_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(g), static_cast<uint64_t>(t_.totalTokens) * t_.numVHeads);
    betaGm_ = beta;
    gState_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(initialState));
    gFinal_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(finalState));
    ws_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws) + static_cast<uint64_t>(grp) * t_.wsFloatsPerGroup,
                        t_.wsFloatsPerGroup);
    // Causal mask: 1 for j <= i, 0 above the diagonal.
    LocalTensor<float> m = mask_.Get<float>();
    for (uint32_t i = 0; i < C; ++i)
      for (uint32_t j = 0; j < C; ++j) m.SetValue(i * C + j, j <= i ? 1.0f : 0.0f);
    SToV();
  }

  __aicore__ inline GlobalTensor<float> Slot(uint32_t s) { return ws_[GdnChunkSlotOffset(s, t_.dk, t_.dv)]; }

  // Copies `rows` x `cols` floats between GM (row pitch `ld`) and UB (packed) in pieces of 64 rows.
  __aicore__ inline void StateIn(const GlobalTensor<float>& src, const LocalTensor<float>& dst, uint32_t rows) {
    DataCopy(dst, src, static_cast<uint32_t>(rows * t_.dv));
    Mte2ToV();
  }

  __aicore__ inline void Unit(const UnitInfo& info, uint32_t r, uint32_t h) {
    const uint32_t dk = t_.dk, dv = t_.dv, hv = t_.numVHeads;
    const uint64_t head = static_cast<uint64_t>(h) * dk * dv;
    const uint64_t stateRowFloats = static_cast<uint64_t>(hv) * dk * dv;
    LocalTensor<float> a = rowsA_.Get<float>();
    // The state entering the first chunk, into the workspace.
    for (uint32_t r0 = 0; r0 < dk; r0 += C) {
      const uint32_t n = dk - r0 < C ? dk - r0 : C;
      if (info.fromState) StateIn(gState_[static_cast<uint64_t>(info.poolRow) * stateRowFloats + head + r0 * dv], a, n);
      else Duplicate(a, 0.0f, static_cast<int32_t>(n * dv));
      VToMte3();
      DataCopy(Slot(WS_STATE)[r0 * dv], a, n * dv);
      Mte3ToV();
    }
    for (uint32_t c = 0; c < Chunks(info.len); ++c) {
      const uint64_t rem = info.len - static_cast<uint64_t>(c) * C;
      Chunk(info.bos + static_cast<uint64_t>(c) * C, rem < C ? static_cast<uint32_t>(rem) : C, h);
    }
    // The final state: back to the pool row (in place) and/or to final_state.
    for (uint32_t r0 = 0; r0 < dk; r0 += C) {
      const uint32_t n = dk - r0 < C ? dk - r0 : C;
      StateIn(Slot(WS_STATE)[r0 * dv], a, n);
      VToMte3();
      if (t_.hasIndices) DataCopy(gState_[static_cast<uint64_t>(info.poolRow) * stateRowFloats + head + r0 * dv], a, n * dv);
      if (t_.writeFinal) DataCopy(gFinal_[static_cast<uint64_t>(r) * stateRowFloats + head + r0 * dv], a, n * dv);
      Mte3ToV();
    }
  }

  // 64 rows of q or k (key head hk) as float, l2-normalised if asked; rows past `rows` are zeros.
  __aicore__ inline void LoadQK(const GlobalTensor<uint8_t>& src, uint64_t tok0, uint32_t rows, uint32_t hk,
                                const LocalTensor<float>& dst) {
    const uint32_t dk = t_.dk, es = DtypeSize(t_.qkvDtype);
    LocalTensor<uint8_t> raw = raw_.Get<uint8_t>();
    for (uint32_t i = 0; i < rows; ++i)
      DataCopy(raw[i * dk * es], src[((tok0 + i) * t_.numKHeads + hk) * dk * es], dk * es);
    Mte2ToV();
    ToFloat(dst, raw, t_.qkvDtype, raw.ReinterpretCast<half>(), rows * dk);
    if (rows < C) Duplicate(dst[rows * dk], 0.0f, static_cast<int32_t>((C - rows) * dk));
    if (!t_.useL2Norm) return;
    LocalTensor<float> red = red_.Get<float>();
    LocalTensor<float> sq = rowsB_.Get<float>();
    for (uint32_t i = 0; i < rows; ++i) {  // x / sqrt(sum(x^2) + 1e-6)
      Mul(sq, dst[i * dk], dst[i * dk], static_cast<int32_t>(dk));
      ReduceSum(red, sq, work_.Get<float>(), static_cast<int32_t>(dk));
      Adds(red, red, 1e-6f, 1);
      Sqrt(red, red, 1);
      VToS();
      const float inv = 1.0f / red.GetValue(0);
      Muls(dst[i * dk], dst[i * dk], inv, static_cast<int32_t>(dk));
    }
  }

  // Each row i of x (64 x cols) times s[i].
  __aicore__ inline void ScaleRows(const LocalTensor<float>& dst, const LocalTensor<float>& x,
                                   const LocalTensor<float>& s, uint32_t cols) {
    VToS();
    for (uint32_t i = 0; i < C; ++i) Muls(dst[i * cols], x[i * cols], s.GetValue(i), static_cast<int32_t>(cols));
  }
  __aicore__ inline void ToWs(uint32_t slot, const LocalTensor<float>& x, uint32_t count) {
    VToMte3();
    DataCopy(Slot(slot), x, count);
    Mte3ToV();
  }

  __aicore__ inline void Chunk(uint64_t tok0, uint32_t rows, uint32_t h) {
    const uint32_t dk = t_.dk, dv = t_.dv, hv = t_.numVHeads;
    const uint32_t hk = h / (hv / t_.numKHeads);
    LocalTensor<float> a = rowsA_.Get<float>(), b = rowsB_.Get<float>();
    LocalTensor<float> gc = gc_.Get<float>(), negGc = negGc_.Get<float>(), bt = beta_.Get<float>();
    LocalTensor<float> egc = egc_.Get<float>(), eEnd = eEnd_.Get<float>(), tmp = tmp_.Get<float>();

    // ---- gates: gc = cumsum(g), padded rows g = beta = 0 (they add nothing)
    float run = 0.0f;
    for (uint32_t i = 0; i < C; ++i) {
      const uint64_t at = (tok0 + i) * hv + h;
      if (i < rows) run += gG_.GetValue(at);
      gc.SetValue(i, run);
      bt.SetValue(i, i < rows ? ReadScalar(betaGm_, t_.betaDtype, at) : 0.0f);
    }
    SToV();
    Muls(negGc, gc, -1.0f, C);
    Exp(egc, gc, C);
    VToS();
    const float gcLast = gc.GetValue(C - 1);
    Adds(eEnd, negGc, gcLast, C);
    Exp(eEnd, eEnd, C);

    // ---- k: Kc, Kb = beta e^gc K, KendT = (K e^(gc_last - gc))^T
    LoadQK(gK_, tok0, rows, hk, a);
    ToWs(WS_KC, a, C * dk);
    Mul(tmp, bt, egc, C);
    ScaleRows(b, a, tmp, dk);
    ToWs(WS_KB, b, C * dk);
    ScaleRows(b, a, eEnd, dk);
    VToS();
    for (uint32_t i = 0; i < C; ++i)
      for (uint32_t d = 0; d < dk; ++d) a.SetValue(d * C + i, b.GetValue(i * dk + d));
    SToV();
    ToWs(WS_KENDT, a, dk * C);
    // ---- q: Qs = scale q, Qd = Qs e^gc
    LoadQK(gQ_, tok0, rows, hk, a);
    Muls(a, a, t_.scale, static_cast<int32_t>(C * dk));
    ToWs(WS_QS, a, C * dk);
    ScaleRows(b, a, egc, dk);
    ToWs(WS_QD, b, C * dk);
    // ---- v: Vb = beta V
    {
      const uint32_t es = DtypeSize(t_.qkvDtype);
      LocalTensor<uint8_t> raw = raw_.Get<uint8_t>();
      for (uint32_t i = 0; i < rows; ++i)
        DataCopy(raw[i * dv * es], gV_[((tok0 + i) * hv + h) * dv * es], dv * es);
      Mte2ToV();
      ToFloat(a, raw, t_.qkvDtype, raw.ReinterpretCast<half>(), rows * dv);
      if (rows < C) Duplicate(a[rows * dv], 0.0f, static_cast<int32_t>((C - rows) * dv));
      ScaleRows(b, a, bt, dv);
      ToWs(WS_VB, b, C * dv);
    }
    CrossCoreSetFlag<2, PIPE_MTE3>(kAivDone);

    // ---- decay D_ij = e^(gc_i - gc_j) for j <= i, else 0 (masked before exp: never overflows)
    CrossCoreWaitFlag(kAicDone);  // G and P are in GM
    LocalTensor<float> m = mask_.Get<float>(), ma = matA_.Get<float>(), mb = matB_.Get<float>(), mt = matT_.Get<float>();
    VToS();
    for (uint32_t i = 0; i < C; ++i) Adds(mb[i * C], negGc, gc.GetValue(i), C);
    Mul(mb, mb, m, C * C);
    Exp(mb, mb, C * C);
    Mul(mb, mb, m, C * C);
    // A = beta_i D_ij G_ij (the diagonal is never read below)
    DataCopy(ma, Slot(WS_G), C * C);
    Mte2ToV();
    Mul(ma, ma, mb, C * C);
    ScaleRows(ma, ma, bt, C);
    // T = (I + A)^-1: row i = e_i - sum_{j<i} A_ij T_j (rows j < i are zero past column j)
    Duplicate(mt, 0.0f, C * C);
    VToS();
    for (uint32_t i = 0; i < C; ++i) {
      mt.SetValue(i * C + i, 1.0f);
      SToV();
      for (uint32_t j = 0; j < i; ++j) Axpy(mt[i * C], mt[j * C], -ma.GetValue(i * C + j), C);
      VToS();
    }
    ToWs(WS_T, mt, C * C);
    // Att = P D
    DataCopy(ma, Slot(WS_P), C * C);
    Mte2ToV();
    Mul(ma, ma, mb, C * C);
    ToWs(WS_ATT, ma, C * C);
    CrossCoreSetFlag<2, PIPE_MTE3>(kAivDone);

    // ---- Vnew = U - W S
    CrossCoreWaitFlag(kAicDone);
    DataCopy(a, Slot(WS_U), C * dv);
    DataCopy(b, Slot(WS_WS), C * dv);
    Mte2ToV();
    Sub(a, a, b, static_cast<int32_t>(C * dv));
    ToWs(WS_VNEW, a, C * dv);
    CrossCoreSetFlag<2, PIPE_MTE3>(kAivDone);

    // ---- S = e^gc_last S + Spart
    CrossCoreWaitFlag(kAicDone);
    VToS();
    const float decay = egc.GetValue(C - 1);
    for (uint32_t r0 = 0; r0 < dk; r0 += C) {
      const uint32_t n = dk - r0 < C ? dk - r0 : C;
      DataCopy(a, Slot(WS_STATE)[r0 * dv], n * dv);
      DataCopy(b, Slot(WS_SPART)[r0 * dv], n * dv);
      Mte2ToV();
      Muls(a, a, decay, static_cast<int32_t>(n * dv));
      Add(a, a, b, static_cast<int32_t>(n * dv));
      VToMte3();
      DataCopy(Slot(WS_STATE)[r0 * dv], a, n * dv);
      Mte3ToV();
    }
  }

  GdnChunkTiling t_;
  TPipe pipe_;
  TBuf<TPosition::VECCALC> mask_, matA_, matB_, matT_, rowsA_, rowsB_, raw_, gc_, negGc_, beta_, egc_, eEnd_, tmp_,
      red_, work_;
  GlobalTensor<uint8_t> gQ_, gK_, gV_;
  GlobalTensor<float> gG_, gState_, gFinal_, ws_;
  GM_ADDR betaGm_ = nullptr;
};

}  // namespace

extern "C" __global__ __aicore__ void qwen_gdn_chunk(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR g, GM_ADDR beta,
                                                     GM_ADDR initialState, GM_ADDR cuSeqlens, GM_ADDR stateIndices,
                                                     GM_ADDR hasInitial, GM_ADDR out, GM_ADDR finalState,
                                                     GM_ADDR workspace, GM_ADDR tiling) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  GdnChunkTiling t;
  CopyTiling(&t, tiling);
  if ASCEND_IS_AIC {
    GdnChunkCube op;
    op.Run(out, workspace, cuSeqlens, stateIndices, hasInitial, t);
  } else {
    GdnChunkVector op;
    op.Run(q, k, v, g, beta, initialState, cuSeqlens, stateIndices, hasInitial, finalState, workspace, t);
  }
}

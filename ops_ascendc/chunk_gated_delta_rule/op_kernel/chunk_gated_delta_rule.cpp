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
//   AIV       : S = e^gc_last S + Spart (and, where the host's checkpoint
//               plan asks for the state after this chunk, its real Dk x Dv
//               part to that row of `checkpoints`)
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
//
// Head dims: every matrix the cores hand over is Dkp = Dk and Dvp = Dv rounded
// up to the cube tile of 16, the padding filled with zeros (the AIV zeroes it
// when it loads q, k, v and the state). That is exact, not an approximation:
// the padded columns of K and Q are zero, so G = K K^T and P = Qs K^T gain
// only 0 * 0 terms, Kb, W = T Kb and KendT are zero in the padded key dims, so
// Spart = KendT Vnew is zero in the padded state rows and the state, which
// starts zero there, stays zero (e^gc_last * 0 + 0); the padded columns of V
// are zero, so U, W S (S is zero in its padded columns) and Vnew are zero
// there, and those columns of O are never written out. Adding an exact zero
// changes no floating-point sum, so the real entries come out bit for bit as
// an unpadded product would give them. The AIV holds rowTile (host-planned)
// chunk rows at a time and the AIC computes colTile columns per Mmad, so the
// unified buffer, L0B and L0C fit at Dk = Dv = 256.
//
// Checkpoints (a prefix cache's states every 64 tokens): the state after a
// whole chunk is in the AIV's unified buffer anyway, piece by piece, when it
// is written back to the workspace; the requested ones go from there straight
// to GM as well, unpadded like the final state. Only whole chunks are
// checkpoints (a boundary 64 * j <= the sequence's length), so a ragged last
// chunk never is, and the AIC never knows about them.
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
    pipe_.InitBuffer(a1_, kGdnL0ABytes);
    pipe_.InitBuffer(b1_, kGdnL0BBytes);
    pipe_.InitBuffer(a2_, kGdnL0ABytes);
    pipe_.InitBuffer(b2_, kGdnL0BBytes);
    pipe_.InitBuffer(c_, kGdnL0CBytes);
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
  __aicore__ inline GlobalTensor<float> Slot(uint32_t s) { return ws_[GdnChunkSlotOffset(s, t_.dkPad, t_.dvPad)]; }

  // A (m x k, row pitch lda) into L0A, whole. m, k are multiples of 16 (padded), m * k <= 64 x 256.
  __aicore__ inline void LoadA(const GlobalTensor<float>& a, uint32_t lda, uint32_t m, uint32_t k) {
    LocalTensor<float> la1 = a1_.Get<float>(), la2 = a2_.Get<float>();
    DataCopy(la1, a, Nd2NzParams(1, m, k, 0, lda, m, 1, 0));
    for (uint32_t mi = 0; mi < m / 16; ++mi)
      LoadData(la2[mi * (k / c0) * fe], la1, LoadData2DParams(mi, k / c0, m / 16, 0, 0, false, 0));
  }
  // Columns [n0, n0 + nt) of B (k x n) into L0B: B given as Bt (n x k, pitch ldb) with `bt`, else as B (pitch ldb).
  __aicore__ inline void LoadB(const GlobalTensor<float>& b, uint32_t ldb, bool bt, uint32_t n0, uint32_t nt,
                               uint32_t k) {
    LocalTensor<float> lb1 = b1_.Get<float>(), lb2 = b2_.Get<float>();
    if (bt) {
      DataCopy(lb1, b[n0 * ldb], Nd2NzParams(1, nt, k, 0, ldb, nt, 1, 0));
      LoadData(lb2, lb1, LoadData2DParams(0, (k / c0) * (nt / 16), 1, 0, 0, false, 0));
    } else {  // float B: 16-row pieces, each 16x16 square transposed into two Zn fractals
      DataCopy(lb1, b[n0], Nd2NzParams(k / 16, 16, nt, 16 * ldb, ldb, 16, 1, 16 * nt));
      for (uint32_t p = 0; p < k / 16; ++p)
        LoadDataWithTranspose(lb2[2 * p * (nt / 16) * fe], lb1,
                              LoadData2dTransposeParams(p * (nt / 16), nt / 16, 1, 0, nt / 16 - 1, 0));
    }
  }
  __aicore__ inline void MmadTile(uint32_t m, uint32_t nt, uint32_t k, bool accumulate) {
    Mmad(c_.Get<float>(), a2_.Get<float>(), b2_.Get<float>(), MmadParams(m, nt, k, 0, false, !accumulate));
  }
  __aicore__ inline uint32_t ColTile(uint32_t n, uint32_t n0) { return MinU(t_.colTile, n - n0); }

  // dst (m x n, pitch ldd) = A (m x k, pitch lda) . B, colTile columns at a time; B as in LoadB.
  __aicore__ inline void Product(const GlobalTensor<float>& dst, uint32_t ldd, const GlobalTensor<float>& a,
                                 uint32_t lda, const GlobalTensor<float>& b, uint32_t ldb, bool bt, uint32_t m,
                                 uint32_t n, uint32_t k) {
    LoadA(a, lda, m, k);
    for (uint32_t n0 = 0; n0 < n; n0 += t_.colTile) {
      const uint32_t nt = ColTile(n, n0);
      LoadB(b, ldb, bt, n0, nt, k);
      MmadTile(m, nt, k, false);
      Fixpipe(dst[n0], c_.Get<float>(), FixpipeParamsV220(nt, m, m, ldd, false, QuantMode_t::NoQuant, 0, 1, 0, 0, 0));
    }
  }
  // Columns [n0, n0 + nt) of o's rows, in o's dtype; only the real Dv columns are written.
  template <typename T>
  __aicore__ inline void OutTo(uint64_t offset, uint32_t rows, uint32_t n0, uint32_t nt, QuantMode_t quant) {
    GlobalTensor<T> g;
    g.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(out_) + offset + n0);
    const uint32_t cols = MinU(nt, t_.dv - n0);
    Fixpipe(g, c_.Get<float>(), FixpipeParamsV220(cols, rows, C, t_.numVHeads * t_.dv, false, quant, 0, 1, 0, 0, 0));
  }

  __aicore__ inline void Chunk(uint64_t tok0, uint32_t rows, uint32_t h) {
    const uint32_t dk = t_.dkPad, dv = t_.dvPad;
    CrossCoreWaitFlag(kAivDone);  // Kc, Qs, Qd, Kb, Vb, KendT and the state are in GM
    Product(Slot(WS_G), C, Slot(WS_KC), dk, Slot(WS_KC), dk, true, C, C, dk);
    Product(Slot(WS_P), C, Slot(WS_QS), dk, Slot(WS_KC), dk, true, C, C, dk);
    CrossCoreSetFlag<2, PIPE_FIX>(kAicDone);

    CrossCoreWaitFlag(kAivDone);  // T and Att are in GM
    Product(Slot(WS_W), dk, Slot(WS_T), C, Slot(WS_KB), dk, false, C, dk, C);
    Product(Slot(WS_U), dv, Slot(WS_T), C, Slot(WS_VB), dv, false, C, dv, C);
    Product(Slot(WS_WS), dv, Slot(WS_W), dk, Slot(WS_STATE), dv, false, C, dv, dk);
    CrossCoreSetFlag<2, PIPE_FIX>(kAicDone);

    CrossCoreWaitFlag(kAivDone);  // Vnew is in GM
    // O = Qd S + Att Vnew, column tile by column tile (L0A holds one of the two A operands at Dk = 256).
    const uint64_t o = (tok0 * t_.numVHeads + h) * t_.dv;
    for (uint32_t n0 = 0; n0 < dv; n0 += t_.colTile) {
      const uint32_t nt = ColTile(dv, n0);
      LoadA(Slot(WS_QD), dk, C, dk);
      LoadB(Slot(WS_STATE), dv, false, n0, nt, dk);
      MmadTile(C, nt, dk, false);
      LoadA(Slot(WS_ATT), C, C, C);
      LoadB(Slot(WS_VNEW), dv, false, n0, nt, C);
      MmadTile(C, nt, C, true);
      if (t_.qkvDtype == QWEN_DT_HALF) OutTo<half>(o, rows, n0, nt, QuantMode_t::F322F16);
      else if (t_.qkvDtype == QWEN_DT_BF16) OutTo<bfloat16_t>(o, rows, n0, nt, QuantMode_t::F322BF16);
      else OutTo<float>(o, rows, n0, nt, QuantMode_t::NoQuant);
    }
    Product(Slot(WS_SPART), dv, Slot(WS_KENDT), C, Slot(WS_VNEW), dv, false, dk, dv, C);
    CrossCoreSetFlag<2, PIPE_FIX>(kAicDone);
  }

  static constexpr uint32_t c0 = 8, fe = 128;  // floats per 32-byte block and per 512-byte fractal
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
__aicore__ inline void VToMte2() {
  SetFlag<HardEvent::V_MTE2>(EVENT_ID0);
  WaitFlag<HardEvent::V_MTE2>(EVENT_ID0);
}

class GdnChunkVector {
 public:
  __aicore__ inline void Run(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR g, GM_ADDR beta, GM_ADDR initialState,
                             GM_ADDR cu, GM_ADDR idx, GM_ADDR hasInit, GM_ADDR checkpointPlan, GM_ADDR finalState,
                             GM_ADDR checkpoints, GM_ADDR ws, const GdnChunkTiling& t) {
    t_ = t;
    const uint32_t grp = static_cast<uint32_t>(GetBlockIdx()) / 2;
    if (grp >= t.usedCores) return;
    const bool worker = GetSubBlockIdx() == 0;
    if (worker) Init(q, k, v, g, beta, initialState, checkpointPlan, finalState, checkpoints, ws, grp);
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
                              GM_ADDR checkpointPlan, GM_ADDR finalState, GM_ADDR checkpoints, GM_ADDR ws,
                              uint32_t grp) {
    const uint32_t es = DtypeSize(t_.qkvDtype);
    const uint32_t rowFloats = GdnChunkRowFloats(t_.rowTile, t_.dkPad, t_.dvPad);
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
    pipe_.InitBuffer(work_, GdnChunkWorkBytes(t_.dkPad));
    gQ_ = Bytes(q);
    gK_ = Bytes(k);
    gV_ = Bytes(v);
    gG_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(g), static_cast<uint64_t>(t_.totalTokens) * t_.numVHeads);
    betaGm_ = beta;
    gState_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(initialState));
    gFinal_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(finalState));
    if (t_.numCheckpoints != 0) {  // without checkpoints both pointers are null and never read
      gPlan_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(checkpointPlan),
                             GdnCheckpointPlanInts(t_.numSeqs, t_.numCheckpoints));
      gCheckpoints_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(checkpoints),
                                    static_cast<uint64_t>(t_.numCheckpoints) * t_.numVHeads * t_.dk * t_.dv);
    }
    ws_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws) + static_cast<uint64_t>(grp) * t_.wsFloatsPerGroup,
                        t_.wsFloatsPerGroup);
    // Causal mask: 1 for j <= i, 0 above the diagonal.
    LocalTensor<float> m = mask_.Get<float>();
    for (uint32_t i = 0; i < C; ++i)
      for (uint32_t j = 0; j < C; ++j) m.SetValue(i * C + j, j <= i ? 1.0f : 0.0f);
    SToV();
  }

  __aicore__ inline GlobalTensor<float> Slot(uint32_t s) { return ws_[GdnChunkSlotOffset(s, t_.dkPad, t_.dvPad)]; }

  // Padded rows of a piece of `r0`-based rows out of `total` (padded) of which `real` exist in GM.
  __aicore__ inline uint32_t Piece(uint32_t total, uint32_t r0) { return MinU(t_.rowTile, total - r0); }
  __aicore__ inline uint32_t RealRows(uint32_t real, uint32_t r0, uint32_t n) { return r0 < real ? MinU(n, real - r0) : 0; }

  // `rows` GM rows of `cols` floats (row pitch `cols`) into UB rows of `pitch` floats (a multiple of 16), the
  // padding of each row zero; the UB rows past `rows` up to `total` are zeroed too.
  __aicore__ inline void PadRowsIn(const LocalTensor<float>& dst, const GlobalTensor<float>& src, uint32_t rows,
                                   uint32_t total, uint32_t cols, uint32_t pitch) {
    VToMte2();  // whatever read dst before is done
    if (rows < total || cols != pitch) {
      Duplicate(dst, 0.0f, static_cast<int32_t>(total * pitch));
      VToMte2();
    }
    if (rows > 0) {
      const uint32_t bytes = cols * 4, aligned = (bytes + 31) / 32 * 32;
      DataCopyPad(dst, src, DataCopyExtParams(static_cast<uint16_t>(rows), bytes, 0, (pitch * 4 - aligned) / 32, 0),
                  DataCopyPadExtParams<float>(true, 0, static_cast<uint8_t>((aligned - bytes) / 4), 0.0f));
    }
    Mte2ToV();
  }
  // The reverse: the first `cols` floats of `rows` UB rows (pitch `pitch`) to GM rows of `cols` floats.
  __aicore__ inline void PadRowsOut(const GlobalTensor<float>& dst, const LocalTensor<float>& src, uint32_t rows,
                                    uint32_t cols, uint32_t pitch) {
    const uint32_t bytes = cols * 4, aligned = (bytes + 31) / 32 * 32;
    DataCopyPad(dst, src, DataCopyExtParams(static_cast<uint16_t>(rows), bytes, (pitch * 4 - aligned) / 32, 0, 0));
  }

  __aicore__ inline void Unit(const UnitInfo& info, uint32_t r, uint32_t h) {
    const uint32_t dk = t_.dk, dv = t_.dv, dkp = t_.dkPad, dvp = t_.dvPad, hv = t_.numVHeads;
    const uint64_t head = static_cast<uint64_t>(h) * dk * dv;
    const uint64_t stateRowFloats = static_cast<uint64_t>(hv) * dk * dv;
    const uint64_t pool = static_cast<uint64_t>(info.poolRow) * stateRowFloats + head;
    LocalTensor<float> a = rowsA_.Get<float>();
    // The state entering the first chunk, padded with zeros, into the workspace.
    for (uint32_t r0 = 0; r0 < dkp; r0 += t_.rowTile) {
      const uint32_t n = Piece(dkp, r0);
      PadRowsIn(a, gState_[pool + r0 * dv], info.fromState ? RealRows(dk, r0, n) : 0, n, dv, dvp);
      VToMte3();
      DataCopy(Slot(WS_STATE)[r0 * dvp], a, n * dvp);
      Mte3ToV();
    }
    // This sequence's checkpoint entries, in ascending j: a cursor that moves with the chunks.
    uint32_t entry = 0, entriesEnd = 0;
    if (t_.numCheckpoints != 0) {
      entry = static_cast<uint32_t>(gPlan_.GetValue(r));
      entriesEnd = static_cast<uint32_t>(gPlan_.GetValue(r + 1));
    }
    for (uint32_t c = 0; c < Chunks(info.len); ++c) {
      const uint64_t rem = info.len - static_cast<uint64_t>(c) * C;
      const uint32_t rows = rem < C ? static_cast<uint32_t>(rem) : C;
      // The checkpoint row that takes the state after c + 1 whole chunks, if one was asked for.
      int64_t checkpointRow = -1;
      for (; entry < entriesEnd; ++entry) {
        const int32_t j = gPlan_.GetValue(GdnCheckpointEntry(t_.numSeqs, entry));
        if (j > static_cast<int32_t>(c + 1)) break;
        if (j == static_cast<int32_t>(c + 1) && rows == C)
          checkpointRow = gPlan_.GetValue(GdnCheckpointEntry(t_.numSeqs, entry) + 1);
      }
      Chunk(info.bos + static_cast<uint64_t>(c) * C, rows, h, checkpointRow);
    }
    // The final state, its real rows and columns: back to the pool row (in place) and/or to final_state.
    for (uint32_t r0 = 0; r0 < dk; r0 += t_.rowTile) {
      const uint32_t n = RealRows(dk, r0, Piece(dkp, r0));
      DataCopy(a, Slot(WS_STATE)[r0 * dvp], n * dvp);
      Mte2ToV();
      VToMte3();
      if (t_.hasIndices) PadRowsOut(gState_[pool + r0 * dv], a, n, dv, dvp);
      if (t_.writeFinal) PadRowsOut(gFinal_[static_cast<uint64_t>(r) * stateRowFloats + head + r0 * dv], a, n, dv, dvp);
      Mte3ToV();
    }
  }

  // Chunk rows [i0, i0 + rowTile) of head `head` of q, k or v ([T, heads, d] in GM) as float, rows of
  // `pitch` floats; rows past the chunk's `rows` and the columns past d are zeros.
  __aicore__ inline void LoadRows(const GlobalTensor<uint8_t>& src, uint64_t tok0, uint32_t i0, uint32_t rows,
                                  uint32_t heads, uint32_t head, uint32_t d, uint32_t pitch,
                                  const LocalTensor<float>& dst) {
    const uint32_t es = DtypeSize(t_.qkvDtype), n = t_.rowTile, real = RealRows(rows, i0, n);
    LocalTensor<uint8_t> raw = raw_.Get<uint8_t>();
    VToMte2();  // the last conversion has read raw
    if (real < n || d != pitch) {
      Duplicate(raw.ReinterpretCast<float>(), 0.0f, static_cast<int32_t>(n * pitch * es / 4));
      VToMte2();
    }
    if (real > 0) {
      const uint32_t bytes = d * es, aligned = (bytes + 31) / 32 * 32;
      DataCopyPad(raw, src[((tok0 + i0) * heads + head) * d * es],
                  DataCopyExtParams(static_cast<uint16_t>(real), bytes, (heads - 1) * d * es,
                                    (pitch * es - aligned) / 32, 0),
                  DataCopyPadExtParams<uint8_t>(true, 0, static_cast<uint8_t>(aligned - bytes), 0));
    }
    Mte2ToV();
    ToFloat(dst, raw, t_.qkvDtype, raw.ReinterpretCast<half>(), n * pitch);
  }
  // q or k rows as LoadRows gives them, l2-normalised if asked.
  __aicore__ inline void LoadQK(const GlobalTensor<uint8_t>& src, uint64_t tok0, uint32_t i0, uint32_t rows,
                                uint32_t hk, const LocalTensor<float>& dst) {
    const uint32_t dkp = t_.dkPad;
    LoadRows(src, tok0, i0, rows, t_.numKHeads, hk, t_.dk, dkp, dst);
    if (!t_.useL2Norm) return;
    LocalTensor<float> red = red_.Get<float>();
    LocalTensor<float> sq = rowsB_.Get<float>();
    for (uint32_t i = 0; i < RealRows(rows, i0, t_.rowTile); ++i) {  // x / sqrt(sum(x^2) + 1e-6)
      Mul(sq, dst[i * dkp], dst[i * dkp], static_cast<int32_t>(dkp));
      ReduceSum(red, sq, work_.Get<float>(), static_cast<int32_t>(dkp));
      Adds(red, red, 1e-6f, 1);
      Sqrt(red, red, 1);
      VToS();
      const float inv = 1.0f / red.GetValue(0);
      Muls(dst[i * dkp], dst[i * dkp], inv, static_cast<int32_t>(dkp));
    }
  }

  // Each row i of x (rowTile x cols) times s[i0 + i].
  __aicore__ inline void ScaleRows(const LocalTensor<float>& dst, const LocalTensor<float>& x,
                                   const LocalTensor<float>& s, uint32_t i0, uint32_t n, uint32_t cols) {
    VToS();
    for (uint32_t i = 0; i < n; ++i) Muls(dst[i * cols], x[i * cols], s.GetValue(i0 + i), static_cast<int32_t>(cols));
  }
  __aicore__ inline void ToWs(uint32_t slot, uint32_t offset, const LocalTensor<float>& x, uint32_t count) {
    VToMte3();
    DataCopy(Slot(slot)[offset], x, count);
    Mte3ToV();
  }

  // One chunk of `rows` tokens from token tok0 for value head h; checkpointRow >= 0: also write the state
  // after it, its real Dk x Dv, to that row of `checkpoints`.
  __aicore__ inline void Chunk(uint64_t tok0, uint32_t rows, uint32_t h, int64_t checkpointRow) {
    const uint32_t dkp = t_.dkPad, dvp = t_.dvPad, hv = t_.numVHeads, n = t_.rowTile;
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
    Mul(tmp, bt, egc, C);

    // ---- rowTile chunk rows at a time
    for (uint32_t i0 = 0; i0 < C; i0 += n) {
      // k: Kc, Kb = beta e^gc K, KendT = (K e^(gc_last - gc))^T (its columns i0..i0+n)
      LoadQK(gK_, tok0, i0, rows, hk, a);
      ToWs(WS_KC, i0 * dkp, a, n * dkp);
      ScaleRows(b, a, tmp, i0, n, dkp);
      ToWs(WS_KB, i0 * dkp, b, n * dkp);
      ScaleRows(b, a, eEnd, i0, n, dkp);
      VToS();
      for (uint32_t i = 0; i < n; ++i)
        for (uint32_t d = 0; d < dkp; ++d) a.SetValue(d * n + i, b.GetValue(i * dkp + d));
      SToV();
      VToMte3();
      DataCopy(Slot(WS_KENDT)[i0], a, DataCopyParams(static_cast<uint16_t>(dkp), static_cast<uint16_t>(n / 8), 0,
                                                     static_cast<uint16_t>((C - n) / 8)));
      Mte3ToV();
      // q: Qs = scale q, Qd = Qs e^gc
      LoadQK(gQ_, tok0, i0, rows, hk, a);
      Muls(a, a, t_.scale, static_cast<int32_t>(n * dkp));
      ToWs(WS_QS, i0 * dkp, a, n * dkp);
      ScaleRows(b, a, egc, i0, n, dkp);
      ToWs(WS_QD, i0 * dkp, b, n * dkp);
      // v: Vb = beta V
      LoadRows(gV_, tok0, i0, rows, hv, h, t_.dv, dvp, a);
      ScaleRows(b, a, bt, i0, n, dvp);
      ToWs(WS_VB, i0 * dvp, b, n * dvp);
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
    ScaleRows(ma, ma, bt, 0, C, C);
    // T = (I + A)^-1: row i = e_i - sum_{j<i} A_ij T_j (rows j < i are zero past column j)
    Duplicate(mt, 0.0f, C * C);
    VToS();
    for (uint32_t i = 0; i < C; ++i) {
      mt.SetValue(i * C + i, 1.0f);
      SToV();
      for (uint32_t j = 0; j < i; ++j) Axpy(mt[i * C], mt[j * C], -ma.GetValue(i * C + j), C);
      VToS();
    }
    ToWs(WS_T, 0, mt, C * C);
    // Att = P D
    DataCopy(ma, Slot(WS_P), C * C);
    Mte2ToV();
    Mul(ma, ma, mb, C * C);
    ToWs(WS_ATT, 0, ma, C * C);
    CrossCoreSetFlag<2, PIPE_MTE3>(kAivDone);

    // ---- Vnew = U - W S
    CrossCoreWaitFlag(kAicDone);
    for (uint32_t i0 = 0; i0 < C; i0 += n) {
      DataCopy(a, Slot(WS_U)[i0 * dvp], n * dvp);
      DataCopy(b, Slot(WS_WS)[i0 * dvp], n * dvp);
      Mte2ToV();
      Sub(a, a, b, static_cast<int32_t>(n * dvp));
      ToWs(WS_VNEW, i0 * dvp, a, n * dvp);
    }
    CrossCoreSetFlag<2, PIPE_MTE3>(kAivDone);

    // ---- S = e^gc_last S + Spart (and the requested checkpoint: the same pieces, unpadded)
    CrossCoreWaitFlag(kAicDone);
    VToS();
    const float decay = egc.GetValue(C - 1);
    const uint64_t headFloats = static_cast<uint64_t>(t_.dk) * t_.dv;
    const uint64_t checkpoint = checkpointRow < 0 ? 0 : (static_cast<uint64_t>(checkpointRow) * hv + h) * headFloats;
    for (uint32_t r0 = 0; r0 < dkp; r0 += n) {
      const uint32_t pieceRows = Piece(dkp, r0), count = pieceRows * dvp;
      DataCopy(a, Slot(WS_STATE)[r0 * dvp], count);
      DataCopy(b, Slot(WS_SPART)[r0 * dvp], count);
      Mte2ToV();
      Muls(a, a, decay, static_cast<int32_t>(count));
      Add(a, a, b, static_cast<int32_t>(count));
      VToMte3();
      DataCopy(Slot(WS_STATE)[r0 * dvp], a, count);
      const uint32_t realRows = RealRows(t_.dk, r0, pieceRows);  // 0 for a piece of padding rows only
      if (checkpointRow >= 0 && realRows > 0)
        PadRowsOut(gCheckpoints_[checkpoint + static_cast<uint64_t>(r0) * t_.dv], a, realRows, t_.dv, dvp);
      Mte3ToV();
    }
  }

  GdnChunkTiling t_;
  TPipe pipe_;
  TBuf<TPosition::VECCALC> mask_, matA_, matB_, matT_, rowsA_, rowsB_, raw_, gc_, negGc_, beta_, egc_, eEnd_, tmp_,
      red_, work_;
  GlobalTensor<uint8_t> gQ_, gK_, gV_;
  GlobalTensor<float> gG_, gState_, gFinal_, gCheckpoints_, ws_;
  GlobalTensor<int32_t> gPlan_;
  GM_ADDR betaGm_ = nullptr;
};

}  // namespace

extern "C" __global__ __aicore__ void qwen_gdn_chunk(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR g, GM_ADDR beta,
                                                     GM_ADDR initialState, GM_ADDR cuSeqlens, GM_ADDR stateIndices,
                                                     GM_ADDR hasInitial, GM_ADDR checkpointPlan, GM_ADDR out,
                                                     GM_ADDR finalState, GM_ADDR checkpoints, GM_ADDR workspace,
                                                     GM_ADDR tiling) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  GdnChunkTiling t;
  CopyTiling(&t, tiling);
  if ASCEND_IS_AIC {
    GdnChunkCube op;
    op.Run(out, workspace, cuSeqlens, stateIndices, hasInitial, t);
  } else {
    GdnChunkVector op;
    op.Run(q, k, v, g, beta, initialState, cuSeqlens, stateIndices, hasInitial, checkpointPlan, finalState,
           checkpoints, workspace, t);
  }
}

// fused_experts: the routed SwiGLU experts of a MoE layer as a grouped GEMM
// over the experts' pair ranges, a KERNEL_TYPE_MIX_AIC_1_2 kernel.
//
// The host grouped the P = T*K (token, slot) pairs by expert (stable, so
// within an expert in token order): `offsets` [E+1] bounds each expert's range
// of sorted pairs, `sortedTokens` [P] gives each sorted pair's token. A unit
// is (expert e, up to mTile consecutive pairs of its range); units go
// round-robin over the groups (one AIC, two AIVs) in expert order. Per unit,
// with m rows:
//
//   AIC : GateUp = X_rows . w13[e]^T  [m, 2I]  (the token rows gathered into
//         L1 once, one Nd2Nz row each; Mmad over k tiles into float32 L0C,
//         Fixpipe'd to the group workspace)           --kFlagGateUp--> AIVs
//   AIVs: Act = silu(gate) * up in float32, rounded to the operand dtype,
//         each AIV half the rows                      --kFlagAct-->    AIC
//   AIC : Y[rows] = Act . w2[e]^T  [m, H] float32, Fixpipe'd straight into the
//         unit's rows of y [P, H] (sorted-pair order)
//
// then every core meets (SyncAll<false>) and the AIVs split the tokens:
// out[t] = sum_j w_j * Y[pos_j] over the token's pairs in ascending sorted
// position (`order` [T, K]), i.e. in ascending expert order as the reference
// adds them, in float32, rounded once to the output dtype. No atomics: the
// result does not depend on which core ran which unit.
//
// Operands are the inputs' dtype (half, bfloat16, float) with float32
// accumulation in L0C. k padding is exact: Nd2Nz zero-fills each row past its
// last column up to the 32-byte block, which is the Mmad's k rounding. Rows
// past m (of A) and past a tile's columns (of B) hold whatever L1 had; they
// only reach L0C rows and columns that Fixpipe never writes.
#include "qwen_kernel_common.h"
#include "qwen_kernel_conv.h"
#include "../op_host/fused_experts_tiling.h"

using namespace AscendC;
using namespace qwen_ascendc;

namespace {

struct Args {  // GM_ADDR is a macro of a pointer type: one declaration per field
  GM_ADDR x;
  GM_ADDR w13;
  GM_ADDR w2;
  GM_ADDR sortedTokens;
  GM_ADDR offsets;
  GM_ADDR order;
  GM_ADDR sortedWeights;
  GM_ADDR out;
  GM_ADDR y;
  GM_ADDR ws;
};

__aicore__ inline uint32_t R16(uint32_t x) { return (x + 15) / 16 * 16; }

// The units of one group in the order its AIC and AIVs both walk them:
// experts in order, each expert's range in mTile-row pieces, every usedCores-th unit.
struct UnitWalk {
  const FusedExpertsTiling* t;
  GM_ADDR offsets;
  uint32_t group;
  uint32_t e = 0, counter = 0;
  int64_t next = -1, hi = 0;
  // The current unit: expert, first sorted pair, rows.
  uint32_t expert = 0, p0 = 0, rows = 0;

  __aicore__ inline bool Next() {
    while (true) {
      if (!Advance()) return false;
      if ((counter++) % t->usedCores == group) return true;
    }
  }

 private:
  __aicore__ inline bool Advance() {
    while (next < 0 || next >= hi) {  // the next expert with pairs
      if (e >= t->numExperts) return false;
      next = ReadIndex(offsets, QWEN_DT_INT32, e);
      hi = ReadIndex(offsets, QWEN_DT_INT32, e + 1);
      expert = e++;
    }
    p0 = static_cast<uint32_t>(next);
    rows = MinU(t->mTile, static_cast<uint32_t>(hi - next));
    next += rows;
    return true;
  }
};

template <HardEvent event>
__aicore__ inline void PipeSync() {
  SetFlag<event>(EVENT_ID0);
  WaitFlag<event>(EVENT_ID0);
}

template <typename T>
__aicore__ inline GlobalTensor<T> Typed(GM_ADDR base, uint64_t byteOffset) {
  GlobalTensor<T> g;
  g.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(base + byteOffset));
  return g;
}

// ------------------------------------------------------------------ cube core
template <typename T>
class ExpertsCube {
 public:
  __aicore__ inline void Run(const Args& a, const FusedExpertsTiling& t) {
    t_ = t;
    a_ = a;
    const uint32_t group = static_cast<uint32_t>(GetBlockIdx());
    pipe_.InitBuffer(aL1_, t.l1A);
    pipe_.InitBuffer(bL1_, t.l1B);
    pipe_.InitBuffer(l0a_, t.l0a);
    pipe_.InitBuffer(l0b_, t.l0b);
    pipe_.InitBuffer(l0c_, t.l0c);
    sortedTokens_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(a.sortedTokens), t.numPairs);
    const uint64_t ws = static_cast<uint64_t>(group) * t.wsGroupBytes;
    UnitWalk u{&t_, a.offsets, group};
    while (u.Next()) Unit(u, ws);
    SyncAll<false>();  // every y row is written before the AIVs sum them
  }

 private:
  static constexpr uint32_t kC0 = 32 / sizeof(T);   // elements per 32-byte column block
  static constexpr uint32_t kFe = 512 / sizeof(T);  // elements per fractal

  __aicore__ inline void Unit(const UnitWalk& u, uint64_t ws) {
    const uint32_t m = u.rows, cubeM = m < 2 ? 2 : m, mRows = R16(cubeM);  // m = 1 is GEMV mode: pad to 2
    const uint32_t H = t_.hidden, I = t_.inter;
    LocalTensor<T> aL1 = aL1_.Get<T>();
    // The unit's token rows, whole H, NZ with mRows rows (zero-padded to the column block).
    GlobalTensor<T> x = Typed<T>(a_.x, 0);
    for (uint32_t i = 0; i < m; ++i) {
      const uint64_t tok = static_cast<uint64_t>(sortedTokens_.GetValue(u.p0 + i));
      DataCopy(aL1[i * kC0], x[tok * H], Nd2NzParams(1, 1, static_cast<uint16_t>(H), 0, static_cast<uint16_t>(H),
                                                      static_cast<uint16_t>(mRows), 1, 0));
    }
    PipeSync<HardEvent::MTE2_MTE1>();
    Gemm(m, cubeM, mRows, H, Typed<T>(a_.w13, 0)[static_cast<uint64_t>(u.expert) * 2 * I * H], 2 * I,
         Typed<float>(a_.ws, ws + t_.wsGateUp), 2 * I);
    CrossCoreSetFlag<2, PIPE_FIX>(kFlagGateUp);

    CrossCoreWaitFlag(kFlagAct);  // the SwiGLU rows are in the workspace
    PipeSync<HardEvent::MTE1_MTE2>();
    DataCopy(aL1, Typed<T>(a_.ws, ws + t_.wsAct),
             Nd2NzParams(1, static_cast<uint16_t>(m), static_cast<uint16_t>(I), 0, static_cast<uint16_t>(t_.actPitch),
                         static_cast<uint16_t>(mRows), 1, 0));
    PipeSync<HardEvent::MTE2_MTE1>();
    Gemm(m, cubeM, mRows, I, Typed<T>(a_.w2, 0)[static_cast<uint64_t>(u.expert) * H * I], H,
         Typed<float>(a_.y, static_cast<uint64_t>(u.p0) * H * 4), H);
    PipeSync<HardEvent::MTE1_MTE2>();  // aL1 is refilled by the next unit
  }

  // dst[m, nTotal] (float, row pitch ldd) = A (aL1: m rows of k columns, NZ with mRows rows)
  // . B^T, where B is the nTotal x k weight matrix at `b` (row pitch k). Column tiles of
  // nTile, each accumulated over k tiles of kTile in L0C, then Fixpipe'd.
  __aicore__ inline void Gemm(uint32_t m, uint32_t cubeM, uint32_t mRows, uint32_t k, const GlobalTensor<T>& b,
                              uint32_t nTotal, const GlobalTensor<float>& dst, uint32_t ldd) {
    LocalTensor<T> aL1 = aL1_.Get<T>(), bL1 = bL1_.Get<T>(), a2 = l0a_.Get<T>(), b2 = l0b_.Get<T>();
    LocalTensor<float> c = l0c_.Get<float>();
    const uint32_t mf = mRows / 16;
    for (uint32_t n0 = 0; n0 < nTotal; n0 += t_.nTile) {
      const uint32_t nt = MinU(t_.nTile, nTotal - n0), nf = R16(nt) / 16;
      for (uint32_t k0 = 0; k0 < k; k0 += t_.kTile) {
        const uint32_t kt = MinU(t_.kTile, k - k0), kb = (kt + kC0 - 1) / kC0;
        // Rows n0.. of B, columns k0..: NZ, whose fractals are already B^T's Zn fractals.
        DataCopy(bL1, b[static_cast<uint64_t>(n0) * k + k0],
                 Nd2NzParams(1, static_cast<uint16_t>(nt), static_cast<uint16_t>(kt), 0, static_cast<uint16_t>(k),
                             static_cast<uint16_t>(nf * 16), 1, 0));
        PipeSync<HardEvent::MTE2_MTE1>();
        if (k0 > 0) PipeSync<HardEvent::M_MTE1>();  // the previous Mmad has read L0A/L0B
        for (uint32_t mi = 0; mi < mf; ++mi)  // A's k blocks k0 / kC0.. of fractal row mi, in order
          LoadData(a2[mi * kb * kFe], aL1,
                   LoadData2DParams(static_cast<uint16_t>((k0 / kC0) * mf + mi), kb, static_cast<uint16_t>(mf), 0, 0,
                                    false, 0));
        LoadData(b2, bL1, LoadData2DParams(0, kb * nf, 1, 0, 0, false, 0));
        PipeSync<HardEvent::MTE1_M>();
        PipeSync<HardEvent::MTE1_MTE2>();  // bL1 is refilled next
        Mmad(c, a2, b2, MmadParams(static_cast<uint16_t>(cubeM), static_cast<uint16_t>(nt), static_cast<uint16_t>(kt),
                                   0, false, k0 == 0));
      }
      PipeSync<HardEvent::M_FIX>();
      Fixpipe(dst[n0], c, FixpipeParamsV220(static_cast<uint16_t>(nt), static_cast<uint16_t>(m),
                                            static_cast<uint16_t>(mRows), ldd, false, QuantMode_t::NoQuant, 0, 1, 0,
                                            0, 0));
      PipeSync<HardEvent::FIX_M>();  // L0C is overwritten by the next tile
    }
  }

  FusedExpertsTiling t_;
  Args a_;
  TPipe pipe_;
  TBuf<TPosition::A1> aL1_;
  TBuf<TPosition::B1> bL1_;
  TBuf<TPosition::A2> l0a_;
  TBuf<TPosition::B2> l0b_;
  TBuf<TPosition::CO1> l0c_;
  GlobalTensor<int32_t> sortedTokens_;
};

// ------------------------------------------------------------------ vector cores
class ExpertsVector {
 public:
  __aicore__ inline void Run(const Args& a, const FusedExpertsTiling& t) {
    t_ = t;
    a_ = a;
    es_ = DtypeSize(t.dtype);
    const uint32_t aiv = static_cast<uint32_t>(GetBlockIdx()), group = aiv / 2;
    pipe_.InitBuffer(f0_, t.ubFloat);
    pipe_.InitBuffer(f1_, t.ubFloat);
    pipe_.InitBuffer(f2_, t.ubFloat);
    pipe_.InitBuffer(raw_, t.ubRaw);
    const uint64_t ws = static_cast<uint64_t>(group) * t.wsGroupBytes;
    UnitWalk u{&t_, a.offsets, group};
    while (u.Next()) {
      CrossCoreWaitFlag(kFlagGateUp);
      const uint32_t half = (u.rows + 1) / 2;  // AIV 0 the first half of the rows, AIV 1 the rest
      const uint32_t r0 = GetSubBlockIdx() == 0 ? 0 : half, r1 = GetSubBlockIdx() == 0 ? half : u.rows;
      for (uint32_t r = r0; r < r1; ++r) SwiGlu(ws, r);
      CrossCoreSetFlag<2, PIPE_MTE3>(kFlagAct);
    }
    SyncAll<false>();  // every y row is written
    // The weighted sums: tokens split evenly over the 2 * usedCores AIVs, an even number each, so that
    // no two AIVs write one 4-byte word of a 2-byte output with an odd H.
    const uint32_t aivs = 2 * t.usedCores, per = RoundUp((t.numTokens + aivs - 1) / aivs, 2);
    const uint32_t t0 = aiv * per, t1 = MinU(t.numTokens, t0 + per);
    for (uint32_t tok = t0; tok < t1; ++tok) Combine(tok);
  }

 private:
  // Act row r = silu(gate) * up in float32, rounded to the operand dtype.
  __aicore__ inline void SwiGlu(uint64_t ws, uint32_t r) {
    const uint32_t I = t_.inter;
    LocalTensor<float> gate = f0_.Get<float>(), up = f1_.Get<float>(), tmp = f2_.Get<float>();
    LocalTensor<uint8_t> raw = raw_.Get<uint8_t>();
    GlobalTensor<uint8_t> gateUp = Bytes(a_.ws)[ws + t_.wsGateUp + static_cast<uint64_t>(r) * 2 * I * 4];
    GlobalTensor<uint8_t> act = Bytes(a_.ws)[ws + t_.wsAct + static_cast<uint64_t>(r) * t_.actPitch * es_];
    for (uint32_t c0 = 0; c0 < I; c0 += t_.colTile) {
      const uint32_t n = MinU(t_.colTile, I - c0);
      RowsIn(gate.ReinterpretCast<uint8_t>(), gateUp[static_cast<uint64_t>(c0) * 4], 1, n * 4, 0, RoundUp(n * 4, 32));
      RowsIn(up.ReinterpretCast<uint8_t>(), gateUp[(static_cast<uint64_t>(I) + c0) * 4], 1, n * 4, 0,
             RoundUp(n * 4, 32));
      Mte2ToV();
      SiluInPlace(gate, tmp, static_cast<int32_t>(n));
      Mul(gate, gate, up, static_cast<int32_t>(n));
      FromFloat(raw, gate, t_.dtype, n);
      PipeSync<HardEvent::V_MTE3>();
      RowsOut(act[static_cast<uint64_t>(c0) * es_], raw, 1, n * es_, 0, RoundUp(n * es_, 32));
      PipeSync<HardEvent::MTE3_V>();  // raw is rewritten by the next step
    }
  }

  // out[tok] = sum over the token's pairs, in ascending sorted position, of weight * y row.
  __aicore__ inline void Combine(uint32_t tok) {
    const uint32_t H = t_.hidden, K = t_.topK;
    LocalTensor<float> acc = f0_.Get<float>(), row = f1_.Get<float>();
    LocalTensor<uint8_t> raw = raw_.Get<uint8_t>();
    GlobalTensor<uint8_t> y = Bytes(a_.y), out = Bytes(a_.out);
    for (uint32_t c0 = 0; c0 < H; c0 += t_.colTile) {
      const uint32_t n = MinU(t_.colTile, H - c0);
      Duplicate(acc, 0.0f, static_cast<int32_t>(n));
      for (uint32_t j = 0; j < K; ++j) {
        const uint64_t pos = static_cast<uint64_t>(ReadIndex(a_.order, QWEN_DT_INT32, static_cast<uint64_t>(tok) * K + j));
        const float w = ReadScalar(a_.sortedWeights, QWEN_DT_FLOAT, pos);
        PipeSync<HardEvent::V_MTE2>();  // row is refilled
        RowsIn(row.ReinterpretCast<uint8_t>(), y[(pos * H + c0) * 4], 1, n * 4, 0, RoundUp(n * 4, 32));
        Mte2ToV();
        Muls(row, row, w, static_cast<int32_t>(n));  // y * w, then the sum: the reference's two roundings
        Add(acc, acc, row, static_cast<int32_t>(n));
      }
      FromFloat(raw, acc, t_.dtype, n);
      PipeSync<HardEvent::V_MTE3>();
      RowsOut(out[(static_cast<uint64_t>(tok) * H + c0) * es_], raw, 1, n * es_, 0, RoundUp(n * es_, 32));
      PipeSync<HardEvent::MTE3_V>();
    }
  }

  FusedExpertsTiling t_;
  Args a_;
  uint32_t es_ = 4;
  TPipe pipe_;
  TBuf<TPosition::VECCALC> f0_, f1_, f2_, raw_;
};

}  // namespace

extern "C" __global__ __aicore__ void qwen_fused_experts(GM_ADDR x, GM_ADDR w13, GM_ADDR w2, GM_ADDR sortedTokens,
                                                         GM_ADDR offsets, GM_ADDR order, GM_ADDR sortedWeights,
                                                         GM_ADDR out, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  FusedExpertsTiling t;
  CopyTiling(&t, tiling);
  const Args a{x, w13, w2, sortedTokens, offsets, order, sortedWeights, out, y, workspace};
  if ASCEND_IS_AIC {
    if (t.dtype == QWEN_DT_HALF) {
      ExpertsCube<half> op;
      op.Run(a, t);
    } else if (t.dtype == QWEN_DT_BF16) {
      ExpertsCube<bfloat16_t> op;
      op.Run(a, t);
    } else {
      ExpertsCube<float> op;
      op.Run(a, t);
    }
  } else {
    ExpertsVector op;
    op.Run(a, t);
  }
}

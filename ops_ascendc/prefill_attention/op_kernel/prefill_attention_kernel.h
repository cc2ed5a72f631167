#ifndef QWEN_ASCENDC_PREFILL_ATTENTION_KERNEL_H
#define QWEN_ASCENDC_PREFILL_ATTENTION_KERNEL_H
// The cube side and vector side of prefill_attention, shared by its own entry
// (prefill_attention.cpp) and mixed_attention's prefill rows.
//
// prefill_attention: TND variable-length attention, causal or not, GQA, over
// the new tokens' K/V and the context cached in the paged BNSD cache
// [NB, Hkv, Bs, D] (the query's dtype, or int8 with per-channel float32 scales).
//
// A mixed kernel (KERNEL_TYPE_MIX_AIC_1_2): the cube core (AIC) of each group
// computes S = Q.K^T and O = P.V, its two vector cores (AIVs) run the online
// softmax in float32 and, for int8 caches, dequantise the context tiles. Data
// crosses between them only through a GM workspace ring of two slots per
// stage (A2/A3 have no L0C -> UB path):
//
//   AIV: [K/V int8 -> operand dtype] --kFlagDequant--> AIC
//   AIC: S = Q.K^T (L0C, float)      --kFlagScores-->  AIV: m, l, P = exp(scale*S - m)
//   AIV: P (operand dtype)           --kFlagProbs-->   AIC: O_j = P.V (float)
//   AIC: O_j                         --kFlagOutput-->  AIV: acc = acc * alpha + O_j
//
// The AIC computes S of tile j+1 before it waits for P of tile j, so the cube
// works while the vector cores run the softmax. A slot is refilled only after
// the other side's flag says it has read it (the ring argument is in
// ops_ascendc/README.md).
//
// A unit is (request, KV head, L query tokens): the cube's rows are the L * G
// (token, query head) pairs of the GQA group, so K/V tiles are read once per
// group. Key tiles of Nk keys: the context first (a tile may span several
// cache blocks; int8 tiles come from the dequantisation slot), then the new
// tokens up to the unit's last row (causal) or all of them. Operands are in
// the query's dtype with float32 accumulation; P is rounded to that dtype for
// the P.V product (as FlashAttention kernels do).
#include "qwen_kernel_common.h"
#include "../op_host/prefill_attention_tiling.h"

using namespace AscendC;
using namespace qwen_ascendc;

namespace qwen_prefill_kernel {

__aicore__ inline uint32_t R16(uint32_t x) { return (x + 15) / 16 * 16; }

// The units of one group, in the order its AIC and AIVs both walk them.
struct UnitWalk {
  const PrefillAttentionTiling* t;
  GM_ADDR cuSeqlens;
  GM_ADDR contextLens;
  uint32_t group;
  uint32_t r = 0, i0 = 0, h = 0, counter = 0;
  bool started = false;
  // The current unit.
  uint32_t qStart = 0, qLen = 0, rows = 0, ctx = 0;

  __aicore__ inline bool Next() {
    while (true) {
      if (!Advance()) return false;
      if ((counter++) % t->usedCores == group) return true;
    }
  }

 private:
  __aicore__ inline bool Load(uint32_t req) {
    for (; req < t->numReqs; ++req) {
      const int64_t a = ReadIndex(cuSeqlens, QWEN_DT_INT32, req), b = ReadIndex(cuSeqlens, QWEN_DT_INT32, req + 1);
      if (b > a) {
        r = req;
        qStart = static_cast<uint32_t>(a);
        qLen = static_cast<uint32_t>(b - a);
        ctx = t->hasContext ? static_cast<uint32_t>(ReadIndex(contextLens, QWEN_DT_INT32, req)) : 0;
        i0 = 0;
        h = 0;
        rows = MinU(t->qTileTokens, qLen);
        return true;
      }
    }
    return false;
  }
  __aicore__ inline bool Advance() {
    if (!started) {
      started = true;
      return Load(0);
    }
    if (++h < t->numKvHeads) return true;
    h = 0;
    i0 += t->qTileTokens;
    if (i0 < qLen) {
      rows = MinU(t->qTileTokens, qLen - i0);
      return true;
    }
    return Load(r + 1);
  }
};

// Key tile j of the current unit.
struct KvTile {
  bool context;
  uint32_t c0;  // first key (context position, or new-token index)
  uint32_t n;   // keys
};
struct TilePlan {
  uint32_t ctxTiles, total, newEnd, nk;
  __aicore__ inline TilePlan(const PrefillAttentionTiling& t, const UnitWalk& u) {
    nk = t.kvTileTokens;
    ctxTiles = (u.ctx + nk - 1) / nk;
    newEnd = t.causal ? u.i0 + u.rows : u.qLen;
    total = ctxTiles + (newEnd + nk - 1) / nk;
  }
  __aicore__ inline KvTile Get(uint32_t j, uint32_t ctx) const {
    if (j < ctxTiles) return KvTile{true, j * nk, MinU(nk, ctx - j * nk)};
    const uint32_t c0 = (j - ctxTiles) * nk;
    return KvTile{false, c0, MinU(nk, newEnd - c0)};
  }
};

template <typename T>
__aicore__ inline GlobalTensor<T> Typed(GM_ADDR base, uint64_t byteOffset) {
  GlobalTensor<T> g;
  g.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(base + byteOffset));
  return g;
}

struct Args {  // GM_ADDR is a macro of a pointer type: one declaration per field
  GM_ADDR query;
  GM_ADDR key;
  GM_ADDR value;
  GM_ADDR cuSeqlens;
  GM_ADDR keyCache;
  GM_ADDR valueCache;
  GM_ADDR blockTables;
  GM_ADDR contextLens;
  GM_ADDR kScale;
  GM_ADDR vScale;
  GM_ADDR out;
  GM_ADDR ws;
};

// ------------------------------------------------------------------ cube core
template <typename T>
class CubeSide {
 public:
  __aicore__ inline void Run(const Args& a, const PrefillAttentionTiling& t) {
    t_ = t;
    a_ = a;
    D_ = t.headDim;
    quant_ = t.cacheDtype == QWEN_DT_INT8;
    group_ = static_cast<uint32_t>(GetBlockIdx());
    pipe_.InitBuffer(qL1_, t.l1Q);
    pipe_.InitBuffer(kL1_, t.l1K);
    pipe_.InitBuffer(vL1_, t.l1V);
    pipe_.InitBuffer(pL1_, t.l1P);
    pipe_.InitBuffer(l0a_, t.l0a);
    pipe_.InitBuffer(l0b_, t.l0b);
    pipe_.InitBuffer(l0c_, t.l0c);
    wsGroup_ = static_cast<uint64_t>(group_) * t.wsGroupBytes;
    blockTables_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(a.blockTables));
    UnitWalk u{&t_, a.cuSeqlens, a.contextLens, group_};
    uint32_t seq = 0;
    while (u.Next()) {
      const TilePlan plan(t_, u);
      LoadQ(u);
      Scores(u, plan, 0, seq);
      for (uint32_t j = 0; j < plan.total; ++j) {
        if (j + 1 < plan.total) Scores(u, plan, j + 1, seq + j + 1);
        CrossCoreWaitFlag(kFlagProbs);
        Output(u, plan.Get(j, u.ctx), (seq + j) % 2);
        CrossCoreSetFlag<2, PIPE_FIX>(kFlagOutput);
      }
      seq += plan.total;
    }
  }

 private:
  static constexpr uint32_t kC0 = 32 / sizeof(T);      // elements per 32-byte column block
  static constexpr uint32_t kFe = 512 / sizeof(T);     // elements per fractal

  // Q rows of the unit: L tokens x G heads, (token, head) pairs in order, NZ with m rounded to 16.
  __aicore__ inline void LoadQ(const UnitWalk& u) {
    const uint32_t G = t_.groupSize, m16 = R16(Rows(u));
    const uint64_t off = ((static_cast<uint64_t>(u.qStart) + u.i0) * t_.numQHeads + static_cast<uint64_t>(u.h) * G) * D_;
    DataCopy(qL1_.Get<T>(), Typed<T>(a_.query, 0)[off],
             Nd2NzParams(static_cast<uint16_t>(u.rows), static_cast<uint16_t>(G), static_cast<uint16_t>(D_),
                         static_cast<uint16_t>(t_.numQHeads * D_), static_cast<uint16_t>(D_),
                         static_cast<uint16_t>(m16), 1, static_cast<uint16_t>(G * kC0)));
  }
  __aicore__ inline uint32_t Rows(const UnitWalk& u) const { return u.rows * t_.groupSize; }
  // Cube m: at least 2 rows (m = 1 is the device's GEMV mode); the extra row is padding, never written out.
  __aicore__ inline uint32_t CubeM(const UnitWalk& u) const { return Rows(u) < 2 ? 2 : Rows(u); }

  // `cnt` rows of D from `src` (rows `pitch` elements apart) into L1 rows row0.. of a
  // matrix with n16 rows: NZ (column blocks of kC0), or for float V `chunked` into
  // 16-row NZ matrices, which LoadDataWithTranspose turns into Zn fractals.
  __aicore__ inline void Rows(const LocalTensor<T>& l1, GlobalTensor<T> src, uint32_t row0, uint32_t cnt,
                              uint32_t pitch, uint32_t n16, bool chunked) {
    if (!chunked) {
      DataCopy(l1[row0 * kC0], src, Nd2NzParams(1, static_cast<uint16_t>(cnt), static_cast<uint16_t>(D_), 0,
                                                static_cast<uint16_t>(pitch), static_cast<uint16_t>(n16), 1, 0));
      return;
    }
    while (cnt > 0) {
      const uint32_t chunk = row0 / 16, r = row0 % 16, c = MinU(cnt, 16 - r);
      DataCopy(l1[chunk * 16 * D_ + r * kC0], src, Nd2NzParams(1, static_cast<uint16_t>(c), static_cast<uint16_t>(D_), 0,
                                                             static_cast<uint16_t>(pitch), 16, 1, 0));
      src = src[static_cast<uint64_t>(c) * pitch];
      row0 += c;
      cnt -= c;
    }
  }

  // The K (value = false) or V rows of tile `k` into `l1`, n16 rows.
  __aicore__ inline void LoadKv(const UnitWalk& u, const KvTile& k, uint32_t slot, bool value,
                                const LocalTensor<T>& l1, bool chunked) {
    const uint32_t n16 = R16(k.n);
    if (!k.context) {
      const uint64_t off = ((static_cast<uint64_t>(u.qStart) + k.c0) * t_.numKvHeads + u.h) * D_;
      Rows(l1, Typed<T>(value ? a_.value : a_.key, 0)[off], 0, k.n, t_.numKvHeads * D_, n16, chunked);
    } else if (quant_) {
      const uint64_t off = wsGroup_ + t_.wsKv +
                           (static_cast<uint64_t>(slot) * 2 + (value ? 1 : 0)) * t_.kvTileTokens * D_ * sizeof(T);
      Rows(l1, Typed<T>(a_.ws, off), 0, k.n, D_, n16, chunked);
    } else {
      GlobalTensor<T> cache = Typed<T>(value ? a_.valueCache : a_.keyCache, 0);
      uint32_t done = 0;
      while (done < k.n) {
        const uint32_t p = k.c0 + done, rib = p % t_.blockSize, cnt = MinU(t_.blockSize - rib, k.n - done);
        const int32_t blk = blockTables_.GetValue(static_cast<uint64_t>(u.r) * t_.maxBlocksPerReq + p / t_.blockSize);
        const uint64_t off = ((static_cast<uint64_t>(blk) * t_.numKvHeads + u.h) * t_.blockSize + rib) * D_;
        Rows(l1, cache[off], done, cnt, D_, n16, chunked);
        done += cnt;
      }
    }
  }

  // S (rows x n, float) of tile j into its ring slot; flags the AIVs.
  __aicore__ inline void Scores(const UnitWalk& u, const TilePlan& plan, uint32_t j, uint32_t seqJ) {
    const KvTile k = plan.Get(j, u.ctx);
    const uint32_t slot = seqJ % 2, m16 = R16(CubeM(u)), n16 = R16(k.n), kb = D_ / kC0;
    if (quant_ && k.context) CrossCoreWaitFlag(kFlagDequant);
    LocalTensor<T> kL1 = kL1_.Get<T>(), qL1 = qL1_.Get<T>(), a2 = l0a_.Get<T>(), b2 = l0b_.Get<T>();
    LoadKv(u, k, slot, false, kL1, false);
    for (uint32_t mi = 0; mi < m16 / 16; ++mi)
      LoadData(a2[mi * kb * kFe], qL1, LoadData2DParams(static_cast<uint16_t>(mi), kb, static_cast<uint16_t>(m16 / 16), 0, 0, false, 0));
    // K^T as B: the NZ fractals of K (n x D) are already the Zn fractals of K^T.
    for (uint32_t b = 0; b < kb; ++b)
      LoadData(b2[b * (n16 / 16) * kFe], kL1, LoadData2DParams(static_cast<uint16_t>(b * (n16 / 16)), n16 / 16, 1, 0, 0, false, 0));
    LocalTensor<float> c = l0c_.Get<float>();
    Mmad(c, a2, b2, MmadParams(static_cast<uint16_t>(CubeM(u)), static_cast<uint16_t>(k.n), static_cast<uint16_t>(D_), 0, false, true));
    const uint64_t sOff = wsGroup_ + t_.wsScores + static_cast<uint64_t>(slot) * Rows(u) * t_.kvPitch * 4;
    Fixpipe(Typed<float>(a_.ws, sOff), c,
            FixpipeParamsV220(static_cast<uint16_t>(k.n), static_cast<uint16_t>(Rows(u)), static_cast<uint16_t>(m16),
                              t_.kvPitch, false, QuantMode_t::NoQuant, 0, 1, 0, 0, 0));
    CrossCoreSetFlag<2, PIPE_FIX>(kFlagScores);
  }

  // O_j = P.V (rows x D, float) into its ring slot.
  __aicore__ inline void Output(const UnitWalk& u, const KvTile& k, uint32_t slot) {
    const uint32_t m16 = R16(CubeM(u)), n16 = R16(k.n), kp = (k.n + kC0 - 1) / kC0, nf = D_ / 16;
    const bool chunked = sizeof(T) == 4;
    LocalTensor<T> pL1 = pL1_.Get<T>(), vL1 = vL1_.Get<T>(), a2 = l0a_.Get<T>(), b2 = l0b_.Get<T>();
    const uint64_t pOff = wsGroup_ + t_.wsProbs + static_cast<uint64_t>(slot) * Rows(u) * t_.kvPitch * sizeof(T);
    // P columns past n are zero-filled by Nd2Nz, so the k padding adds nothing.
    DataCopy(pL1, Typed<T>(a_.ws, pOff),
             Nd2NzParams(1, static_cast<uint16_t>(Rows(u)), static_cast<uint16_t>(k.n), 0,
                         static_cast<uint16_t>(t_.kvPitch), static_cast<uint16_t>(m16), 1, 0));
    for (uint32_t mi = 0; mi < m16 / 16; ++mi)
      LoadData(a2[mi * kp * kFe], pL1, LoadData2DParams(static_cast<uint16_t>(mi), kp, static_cast<uint16_t>(m16 / 16), 0, 0, false, 0));
    LoadKv(u, k, slot, true, vL1, chunked);
    // V rows n..n16 must be zeros (P's zero columns times garbage could be NaN).
    if (n16 > k.n) Rows(vL1, Typed<T>(a_.ws, t_.wsZeros), k.n, n16 - k.n, D_, n16, chunked);
    if (chunked) {
      for (uint32_t c = 0; c < n16 / 16; ++c)
        LoadDataWithTranspose(b2[2 * c * nf * kFe], vL1,
                              LoadData2dTransposeParams(static_cast<uint16_t>(c * nf), nf, 1, 0, static_cast<uint16_t>(nf - 1), 0));
    } else {
      for (uint32_t kf = 0; kf < n16 / 16; ++kf)
        LoadData(b2[kf * nf * kFe], vL1, LoadData2DParams(static_cast<uint16_t>(kf), nf, static_cast<uint16_t>(n16 / 16), 0, 0, true, 0));
    }
    LocalTensor<float> c = l0c_.Get<float>();
    Mmad(c, a2, b2, MmadParams(static_cast<uint16_t>(CubeM(u)), static_cast<uint16_t>(D_), static_cast<uint16_t>(k.n), 0, false, true));
    const uint64_t oOff = wsGroup_ + t_.wsOutput + static_cast<uint64_t>(slot) * Rows(u) * D_ * 4;
    Fixpipe(Typed<float>(a_.ws, oOff), c,
            FixpipeParamsV220(static_cast<uint16_t>(D_), static_cast<uint16_t>(Rows(u)), static_cast<uint16_t>(m16),
                              D_, false, QuantMode_t::NoQuant, 0, 1, 0, 0, 0));
  }

  PrefillAttentionTiling t_;
  Args a_;
  uint32_t D_ = 0, group_ = 0;
  uint64_t wsGroup_ = 0;
  bool quant_ = false;
  TPipe pipe_;
  TBuf<TPosition::A1> qL1_, kL1_, vL1_, pL1_;
  TBuf<TPosition::A2> l0a_;
  TBuf<TPosition::B2> l0b_;
  TBuf<TPosition::CO1> l0c_;
  GlobalTensor<int32_t> blockTables_;
};

// ------------------------------------------------------------------ vector cores
class VectorSide {
 public:
  __aicore__ inline void Run(const Args& a, const PrefillAttentionTiling& t) {
    t_ = t;
    a_ = a;
    D_ = t.headDim;
    es_ = DtypeSize(t.qDtype);
    quant_ = t.cacheDtype == QWEN_DT_INT8;
    group_ = static_cast<uint32_t>(GetBlockIdx()) / 2;
    sub_ = static_cast<uint32_t>(GetSubBlockIdx());
    pipe_.InitBuffer(sBuf_, t.ubS);
    pipe_.InitBuffer(pBuf_, t.ubP);
    pipe_.InitBuffer(oBuf_, t.ubO);
    pipe_.InitBuffer(accBuf_, t.ubAcc);
    pipe_.InitBuffer(outBuf_, t.ubOut);
    pipe_.InitBuffer(rowBuf_, t.ubRow);
    pipe_.InitBuffer(workBuf_, t.ubWork);
    pipe_.InitBuffer(redBuf_, 32);
    if (quant_) {
      pipe_.InitBuffer(dqRaw_, t.ubDqRaw);
      pipe_.InitBuffer(dqHalf_, t.ubDqHalf);
      pipe_.InitBuffer(dqFloat_, t.ubDqFloat);
      pipe_.InitBuffer(dqOut_, t.ubDqOut);
      pipe_.InitBuffer(scale_, t.ubScale);
    }
    rowStride_ = t.ubRow / 16;  // four arrays of R8(rows) floats
    ws_ = Bytes(a.ws)[static_cast<uint64_t>(group_) * t.wsGroupBytes];
    blockTables_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(a.blockTables));
    UnitWalk u{&t_, a.cuSeqlens, a.contextLens, group_};
    uint32_t seq = 0;
    while (u.Next()) {
      const TilePlan plan(t_, u);
      BeginUnit(u);
      if (quant_ && plan.Get(0, u.ctx).context) Dequant(u, plan.Get(0, u.ctx), seq % 2);
      for (uint32_t j = 0; j < plan.total; ++j) {
        if (j + 1 < plan.total && quant_ && plan.Get(j + 1, u.ctx).context)
          Dequant(u, plan.Get(j + 1, u.ctx), (seq + j + 1) % 2);
        Softmax(u, plan.Get(j, u.ctx), (seq + j) % 2);
        Accumulate(u, (seq + j) % 2);
      }
      EndUnit(u);
      seq += plan.total;
    }
  }

 private:
  // This AIV's rows of the unit: [a0_, a0_ + cnt_) of the L * G.
  __aicore__ inline void BeginUnit(const UnitWalk& u) {
    const uint32_t m = u.rows * t_.groupSize, share = (m + 1) / 2;
    a0_ = sub_ * share;
    cnt_ = a0_ < m ? MinU(share, m - a0_) : 0;
    if (cnt_ == 0) return;
    LocalTensor<float> row = rowBuf_.Get<float>();
    for (uint32_t i = 0; i < cnt_; ++i) {
      row.SetValue(i, -__builtin_inff());   // m
      row.SetValue(rowStride_ + i, 0.0f);   // l
    }
    SToV();
    Duplicate(accBuf_.Get<float>(), 0.0f, static_cast<int32_t>(cnt_ * D_));
    if (quant_) {
      LocalTensor<uint8_t> sc = scale_.Get<uint8_t>();
      RowsIn(sc, Bytes(a_.kScale)[static_cast<uint64_t>(u.h) * D_ * 4], 1, D_ * 4, 0, D_ * 4);
      RowsIn(sc[D_ * 4], Bytes(a_.vScale)[static_cast<uint64_t>(u.h) * D_ * 4], 1, D_ * 4, 0, D_ * 4);
      Mte2ToV();
    }
  }

  // The int8 context rows of tile k that this AIV owns, dequantised (x = q * scale
  // in float32, rounded to the operand dtype) into the K/V ring slot.
  __aicore__ inline void Dequant(const UnitWalk& u, const KvTile& k, uint32_t slot) {
    const uint32_t share = (k.n + 1) / 2, first = sub_ * share;
    const uint32_t mine = first < k.n ? MinU(share, k.n - first) : 0;
    LocalTensor<uint8_t> raw = dqRaw_.Get<uint8_t>(), out = dqOut_.Get<uint8_t>();
    LocalTensor<half> h16 = dqHalf_.Get<half>();
    LocalTensor<float> fl = dqFloat_.Get<float>();
    LocalTensor<float> scales = scale_.Get<float>();
    for (uint32_t which = 0; which < 2; ++which) {
      GlobalTensor<uint8_t> cache = Bytes(which ? a_.valueCache : a_.keyCache);
      const uint64_t slotOff = t_.wsKv + (static_cast<uint64_t>(slot) * 2 + which) * t_.kvTileTokens * D_ * es_;
      uint32_t done = 0;
      while (done < mine) {
        const uint32_t p = k.c0 + first + done, rib = p % t_.blockSize, cnt = MinU(t_.blockSize - rib, mine - done);
        const int32_t blk = blockTables_.GetValue(static_cast<uint64_t>(u.r) * t_.maxBlocksPerReq + p / t_.blockSize);
        const uint64_t off = ((static_cast<uint64_t>(blk) * t_.numKvHeads + u.h) * t_.blockSize + rib) * D_;
        RowsIn(raw, cache[off], 1, cnt * D_, 0, RoundUp(cnt * D_, 32));
        Mte2ToV();
        ToFloat(fl, raw, QWEN_DT_INT8, h16, cnt * D_);
        for (uint32_t x = 0; x < cnt; ++x) Mul(fl[x * D_], fl[x * D_], scales[which * D_], static_cast<int32_t>(D_));
        FromFloat(out, fl, t_.qDtype, cnt * D_);
        RowsOut(ws_[slotOff + static_cast<uint64_t>(first + done) * D_ * es_], out, 1, cnt * D_ * es_, 0,
                RoundUp(cnt * D_ * es_, 32));
        done += cnt;
      }
    }
    CrossCoreSetFlag<2, PIPE_MTE3>(kFlagDequant);
  }

  // Scores of tile k -> running max/sum, alpha, and P (operand dtype) into the P slot.
  __aicore__ inline void Softmax(const UnitWalk& u, const KvTile& k, uint32_t slot) {
    CrossCoreWaitFlag(kFlagScores);
    const uint32_t pitch = t_.kvPitch, m = u.rows * t_.groupSize;
    if (cnt_ > 0) {
      LocalTensor<float> s = sBuf_.Get<float>();
      LocalTensor<float> row = rowBuf_.Get<float>();
      LocalTensor<float> mOld = row, mNew = row[2 * rowStride_], sum = row[3 * rowStride_];
      LocalTensor<float> red = redBuf_.Get<float>(), work = workBuf_.Get<float>();
      const uint64_t sOff = t_.wsScores + (static_cast<uint64_t>(slot) * m + a0_) * pitch * 4;
      RowsIn(sBuf_.Get<uint8_t>(), ws_[sOff], cnt_, k.n * 4, (pitch - k.n) * 4, pitch * 4);
      Mte2ToV();
      const int32_t n = static_cast<int32_t>(k.n);
      for (uint32_t a = 0; a < cnt_; ++a) {
        LocalTensor<float> sr = s[a * pitch];
        uint32_t visible = k.n;
        if (t_.causal && !k.context) {  // token i0 + i sees new keys 0..i0 + i
          const int64_t lim = static_cast<int64_t>(u.i0) + (a0_ + a) / t_.groupSize - k.c0 + 1;
          visible = lim <= 0 ? 0 : (lim >= n ? k.n : static_cast<uint32_t>(lim));
        }
        VToS();
        const float mo = mOld.GetValue(a);
        if (visible == 0) {
          mNew.SetValue(a, mo);
          sum.SetValue(a, 0.0f);
          SToV();
          Duplicate(sr, 0.0f, n);
          continue;
        }
        Muls(sr, sr, t_.scale, n);
        if (visible < k.n) {
          VToS();
          for (uint32_t x = visible; x < k.n; ++x) sr.SetValue(x, -__builtin_inff());
          SToV();
        }
        ReduceMax(red, sr, work, n);
        VToS();
        const float mn = MaxF(mo, red.GetValue(0));
        mNew.SetValue(a, mn);
        SToV();
        Adds(sr, sr, -mn, n);
        Exp(sr, sr, n);
        ReduceSum(red, sr, work, n);
        VToS();
        sum.SetValue(a, red.GetValue(0));
      }
      // alpha = exp(m_old - m_new) overwrites m_old; l = l * alpha + rowsum.
      SToV();
      const int32_t c = static_cast<int32_t>(cnt_);
      Sub(mOld, mOld, mNew, c);
      Exp(mOld, mOld, c);
      VToS();
      LocalTensor<float> l = row[rowStride_];
      for (uint32_t a = 0; a < cnt_; ++a) {
        if (mNew.GetValue(a) == -__builtin_inff()) mOld.SetValue(a, 0.0f);  // nothing seen yet: no NaN from -inf - -inf
        l.SetValue(a, l.GetValue(a) * mOld.GetValue(a) + sum.GetValue(a));
      }
      SToV();
      FromFloat(pBuf_.Get<uint8_t>(), s, t_.qDtype, cnt_ * pitch);
      const uint64_t pOff = t_.wsProbs + (static_cast<uint64_t>(slot) * m + a0_) * pitch * es_;
      RowsOut(ws_[pOff], pBuf_.Get<uint8_t>(), cnt_, k.n * es_, (pitch - k.n) * es_, pitch * es_);
    }
    CrossCoreSetFlag<2, PIPE_MTE3>(kFlagProbs);
  }

  // acc = acc * alpha + O_j for this AIV's rows; then m = m_new.
  __aicore__ inline void Accumulate(const UnitWalk& u, uint32_t slot) {
    CrossCoreWaitFlag(kFlagOutput);
    if (cnt_ == 0) return;
    const uint32_t m = u.rows * t_.groupSize;
    const uint64_t oOff = t_.wsOutput + (static_cast<uint64_t>(slot) * m + a0_) * D_ * 4;
    RowsIn(oBuf_.Get<uint8_t>(), ws_[oOff], 1, cnt_ * D_ * 4, 0, cnt_ * D_ * 4);
    Mte2ToV();
    LocalTensor<float> o = oBuf_.Get<float>(), acc = accBuf_.Get<float>(), row = rowBuf_.Get<float>();
    const int32_t d = static_cast<int32_t>(D_);
    for (uint32_t a = 0; a < cnt_; ++a) {
      const float alpha = row.GetValue(a);
      Muls(acc[a * D_], acc[a * D_], alpha, d);
      Add(acc[a * D_], acc[a * D_], o[a * D_], d);
    }
    Muls(row, row[2 * rowStride_], 1.0f, static_cast<int32_t>(cnt_));
  }

  // out rows = acc / l in the query's dtype.
  __aicore__ inline void EndUnit(const UnitWalk& u) {
    if (cnt_ == 0) return;
    LocalTensor<float> acc = accBuf_.Get<float>(), l = rowBuf_.Get<float>()[rowStride_];
    VToS();
    for (uint32_t a = 0; a < cnt_; ++a)
      Muls(acc[a * D_], acc[a * D_], 1.0f / l.GetValue(a), static_cast<int32_t>(D_));
    LocalTensor<uint8_t> o = outBuf_.Get<uint8_t>();
    FromFloat(o, acc, t_.qDtype, cnt_ * D_);
    GlobalTensor<uint8_t> out = Bytes(a_.out);
    const uint32_t G = t_.groupSize, rowBytes = D_ * es_;
    for (uint32_t a = 0; a < cnt_; ++a) {
      const uint32_t mrow = a0_ + a;
      const uint64_t token = static_cast<uint64_t>(u.qStart) + u.i0 + mrow / G;
      const uint64_t off = (token * t_.numQHeads + static_cast<uint64_t>(u.h) * G + mrow % G) * rowBytes;
      RowsOut(out[off], o[a * rowBytes], 1, rowBytes, 0, RoundUp(rowBytes, 32));
    }
  }

  PrefillAttentionTiling t_;
  Args a_;
  uint32_t D_ = 0, es_ = 0, group_ = 0, sub_ = 0, a0_ = 0, cnt_ = 0, rowStride_ = 0;
  bool quant_ = false;
  TPipe pipe_;
  TBuf<TPosition::VECCALC> sBuf_, pBuf_, oBuf_, accBuf_, outBuf_, rowBuf_, workBuf_, redBuf_, dqRaw_, dqHalf_,
      dqFloat_, dqOut_, scale_;
  GlobalTensor<uint8_t> ws_;
  GlobalTensor<int32_t> blockTables_;
};

}  // namespace qwen_prefill_kernel


#endif  // QWEN_ASCENDC_PREFILL_ATTENTION_KERNEL_H

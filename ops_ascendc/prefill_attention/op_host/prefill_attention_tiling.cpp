// Host tiling of prefill_attention. The kernel's buffers are fields of the
// tiling (every InitBuffer size is one of them), so what this planner adds up
// is what the kernel asks for, byte for byte: L1 and L0A/L0B/L0C on the AIC,
// the unified buffer on each AIV, and the GM workspace ring between them.
//
// A unit of work is (request, KV head, L query tokens); the cube multiplies
// the L * G rows of (token, query head of the GQA group) at once, so K and V
// are read once per group. Tiles: the largest L * G (<= 128 rows) and key
// tile Nk (<= 128 keys, or the caller's cap) whose buffers fit every memory.
#include "prefill_attention_tiling_host.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace qwen_ascendc {
namespace {

uint64_t R16(uint64_t x) { return (x + 15) / 16 * 16; }
uint64_t R512(uint64_t x) { return (x + 511) / 512 * 512; }
uint64_t R64(uint64_t x) { return (x + 63) / 64 * 64; }
constexpr uint32_t kMaxRows = 128;  // cube m per unit: L0A/L0C and the AIV row statistics stay small

// Fills the buffer fields of `t` from its tile sizes.
void SizeBuffers(PrefillAttentionTiling* t, uint32_t groups) {
  const uint64_t d = t->headDim, es = DtypeBytes(t->qDtype), m = static_cast<uint64_t>(t->qTileTokens) * t->groupSize;
  const uint64_t m16 = R16(m), k16 = R16(t->kvTileTokens), mh = (m + 1) / 2, kh = (t->kvTileTokens + 1) / 2;
  const bool quant = t->cacheDtype == QWEN_DT_INT8;
  t->kvPitch = static_cast<uint32_t>(k16);
  t->l1Q = static_cast<uint32_t>(R32(m16 * d * es));
  t->l1K = static_cast<uint32_t>(R32(k16 * d * es));
  t->l1V = t->l1K;
  t->l1P = static_cast<uint32_t>(R32(m16 * k16 * es));
  t->l0a = static_cast<uint32_t>(R512(std::max(m16 * d, m16 * k16) * es));
  t->l0b = static_cast<uint32_t>(R512(k16 * d * es));
  t->l0c = static_cast<uint32_t>(R64(std::max(m16 * k16, m16 * d) * 4));
  t->ubS = static_cast<uint32_t>(R32(mh * k16 * 4));
  t->ubP = static_cast<uint32_t>(R32(mh * k16 * es));
  t->ubO = static_cast<uint32_t>(R32(mh * d * 4));
  t->ubAcc = t->ubO;
  t->ubOut = static_cast<uint32_t>(R32(mh * d * es));
  t->ubRow = static_cast<uint32_t>(4 * R8(mh) * 4);
  t->ubWork = static_cast<uint32_t>(R8(2 * ((k16 + 63) / 64)) * 4);
  t->ubDqRaw = quant ? static_cast<uint32_t>(R32(kh * d)) : 0;
  t->ubDqHalf = quant ? static_cast<uint32_t>(R32(kh * d * 2)) : 0;
  t->ubDqFloat = quant ? static_cast<uint32_t>(R32(kh * d * 4)) : 0;
  t->ubDqOut = quant ? static_cast<uint32_t>(R32(kh * d * es)) : 0;
  t->ubScale = quant ? static_cast<uint32_t>(R32(2 * d * 4)) : 0;
  uint64_t off = 0;
  t->wsScores = static_cast<uint32_t>(off);
  off += R32(2 * m * k16 * 4);
  t->wsProbs = static_cast<uint32_t>(off);
  off += R32(2 * m * k16 * es);
  t->wsOutput = static_cast<uint32_t>(off);
  off += R32(2 * m * d * 4);
  t->wsKv = static_cast<uint32_t>(off);
  if (quant) off += R32(2 * 2 * static_cast<uint64_t>(t->kvTileTokens) * d * es);
  t->wsGroupBytes = static_cast<uint32_t>(off);
  t->wsZeros = static_cast<uint32_t>(off * groups);
}

bool Fits(const PrefillAttentionTiling& t, uint32_t budget) {
  return PrefillAttentionL1(t) <= kL1Bytes && t.l0a <= kL0ABytes && t.l0b <= kL0BBytes && t.l0c <= kL0CBytes &&
         PrefillAttentionUb(t) <= budget;
}

}  // namespace

uint64_t PrefillAttentionL1(const PrefillAttentionTiling& t) {
  return static_cast<uint64_t>(t.l1Q) + t.l1K + t.l1V + t.l1P;
}

uint64_t PrefillAttentionUb(const PrefillAttentionTiling& t) {
  // The 32 bytes: the one-element reduction result buffer.
  return static_cast<uint64_t>(t.ubS) + t.ubP + t.ubO + t.ubAcc + t.ubOut + t.ubRow + t.ubWork + 32 + t.ubDqRaw +
         t.ubDqHalf + t.ubDqFloat + t.ubDqOut + t.ubScale;
}

PrefillAttentionTiling PlanPrefillAttention(uint32_t numReqs, uint32_t numQHeads, uint32_t numKvHeads,
                                            uint32_t headDim, uint32_t blockSize, uint32_t maxBlocksPerReq,
                                            bool hasContext, bool causal, uint32_t qDtype, uint32_t cacheDtype,
                                            float scale, const LaunchConfig& cfg) {
  const char* op = "prefill_attention";
  if (headDim == 0 || headDim % 16 != 0 || headDim > kPrefillMaxHeadDim)
    throw std::invalid_argument(std::string(op) + ": the Ascend C kernel needs a head dim D that is a multiple of 16 "
                                "and at most " + std::to_string(kPrefillMaxHeadDim) + ", got " +
                                std::to_string(headDim));
  PrefillAttentionTiling t{};
  t.numReqs = numReqs;
  t.numQHeads = numQHeads;
  t.numKvHeads = numKvHeads;
  t.headDim = headDim;
  t.groupSize = numQHeads / numKvHeads;
  t.blockSize = blockSize;
  t.maxBlocksPerReq = maxBlocksPerReq;
  t.hasContext = hasContext ? 1 : 0;
  t.causal = causal ? 1 : 0;
  t.qDtype = qDtype;
  t.cacheDtype = cacheDtype;
  t.scale = scale;
  if (t.groupSize > kMaxRows)
    throw std::invalid_argument(std::string(op) + ": the Ascend C kernel serves GQA groups of at most " +
                                std::to_string(kMaxRows) + " query heads per KV head, got " +
                                std::to_string(t.groupSize));
  const uint32_t groups = std::max<uint32_t>(1, Cores(cfg) / 2);  // 1:2 mix: one AIC per two vector cores
  t.usedCores = groups;
  const uint32_t budget = Budget(cfg);
  uint32_t nkMax = 128;
  if (cfg.maxTileTokens != 0) nkMax = std::min(nkMax, cfg.maxTileTokens);
  uint64_t best = 0;
  PrefillAttentionTiling chosen{};
  for (uint32_t nk = nkMax; nk >= 1; nk = nk > 16 ? nk / 2 : nk - 1) {
    for (uint32_t l = kMaxRows / t.groupSize; l >= 1; --l) {
      PrefillAttentionTiling c = t;
      c.qTileTokens = l;
      c.kvTileTokens = nk;
      SizeBuffers(&c, groups);
      if (!Fits(c, budget)) continue;
      const uint64_t score = static_cast<uint64_t>(l) * t.groupSize * nk;
      if (score > best) {
        best = score;
        chosen = c;
      }
      break;  // the largest L for this Nk
    }
  }
  if (best == 0)
    NoFit(op, "a GQA group of " + std::to_string(t.groupSize) + " heads of D = " + std::to_string(headDim), budget);
  return chosen;
}

}  // namespace qwen_ascendc

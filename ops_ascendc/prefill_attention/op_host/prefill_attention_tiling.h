// Tiling of prefill_attention: filled by the host planner (prefill_attention_tiling.cpp),
// read by the mixed AIC + AIV kernel (../op_kernel). The single source of the
// layout for the stand-in and the CANN build. Device-safe: no standard library.
//
// Every on-chip buffer size the kernel passes to TPipe::InitBuffer is a field
// here, computed once by the planner; so the planner's totals are the kernel's
// buffers byte for byte.
#ifndef QWEN_ASCENDC_PREFILL_ATTENTION_TILING_H
#define QWEN_ASCENDC_PREFILL_ATTENTION_TILING_H

#include "qwen_tiling_common.h"

namespace qwen_ascendc {

// On-chip memories of one 910B (A2/A3) cube core, bytes.
constexpr uint32_t kL1Bytes = 512u * 1024u;
constexpr uint32_t kL0ABytes = 64u * 1024u;
constexpr uint32_t kL0BBytes = 64u * 1024u;
constexpr uint32_t kL0CBytes = 128u * 1024u;

// Cross-core flag ids of the hand-off ring.
constexpr uint16_t kFlagScores = 0;   // AIC -> AIVs: S tile in its ring slot
constexpr uint16_t kFlagProbs = 1;    // AIVs -> AIC: P tile in its ring slot
constexpr uint16_t kFlagOutput = 2;   // AIC -> AIVs: P.V tile in its ring slot
constexpr uint16_t kFlagDequant = 3;  // AIVs -> AIC: dequantised K/V context tile in its ring slot

struct PrefillAttentionTiling {
  uint32_t numReqs;
  uint32_t numQHeads;
  uint32_t numKvHeads;
  uint32_t headDim;          // D, a multiple of 16, at most 256
  uint32_t groupSize;        // G = Hq / Hkv
  uint32_t blockSize;
  uint32_t maxBlocksPerReq;  // columns of block_tables
  uint32_t hasContext;       // context_lens given
  uint32_t causal;
  uint32_t qDtype;           // query/key/value dtype, also the cube's operand dtype
  uint32_t cacheDtype;       // the query's dtype or int8 (dequantised by the AIVs)
  uint32_t qTileTokens;      // L: query tokens per unit; the cube's m is L * G rows of (token, head)
  uint32_t kvTileTokens;     // Nk: keys per tile (may span several cache blocks)
  uint32_t kvPitch;          // Nk rounded up to 16: row pitch (elements) of the S and P ring slots
  uint32_t usedCores;        // AIC groups (each with two AIVs)
  // GM workspace, per group (bytes from the group's base; the group base is group * wsGroupBytes).
  uint32_t wsGroupBytes;
  uint32_t wsScores;         // 2 slots of M x kvPitch float
  uint32_t wsProbs;          // 2 slots of M x kvPitch operand dtype
  uint32_t wsOutput;         // 2 slots of M x D float
  uint32_t wsKv;             // int8 caches: 2 slots of (K, V) Nk x D operand dtype
  uint32_t wsZeros;          // offset (from the workspace base) of 16 x D zeros of the operand dtype
  // Cube buffers (bytes): L1 Q, K, V, P; L0A; L0B; L0C.
  uint32_t l1Q, l1K, l1V, l1P, l0a, l0b, l0c;
  // Vector buffers (bytes) of one AIV: S rows, P rows, O rows, accumulator, output rows,
  // row statistics, reduction scratch; dequantisation (int8) raw, half, float, out, scales.
  uint32_t ubS, ubP, ubO, ubAcc, ubOut, ubRow, ubWork, ubDqRaw, ubDqHalf, ubDqFloat, ubDqOut, ubScale;
  float scale;
};

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_PREFILL_ATTENTION_TILING_H

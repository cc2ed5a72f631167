// Tiling of paged_decode_attention: filled by the host planner (paged_decode_attention_tiling.cpp), read by the
// kernel (../op_kernel). The single source of the layout for the stand-in and
// the CANN build. Device-safe: no standard library.
#ifndef QWEN_ASCENDC_PAGED_DECODE_ATTENTION_TILING_H
#define QWEN_ASCENDC_PAGED_DECODE_ATTENTION_TILING_H

#include "qwen_tiling_common.h"

namespace qwen_ascendc {

struct PagedAttentionTiling {
  uint32_t numReqs;
  uint32_t numQHeads;
  uint32_t numKvHeads;
  uint32_t headDim;
  uint32_t blockSize;
  uint32_t numBlocks;
  uint32_t maxBlocksPerReq;  // columns of block_tables
  uint32_t qDtype;
  uint32_t cacheDtype;
  uint32_t groupSize;        // query heads per KV head
  uint32_t tileTokens;       // tokens streamed per tile (<= blockSize)
  uint32_t unitsPerCore;     // units are (request, KV head) pairs
  uint32_t usedCores;
  float scale;
};

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_PAGED_DECODE_ATTENTION_TILING_H

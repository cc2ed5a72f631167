// Tiling of gdn_decode_step: filled by the host planner (gdn_decode_step_tiling.cpp), read by the kernel
// (../op_kernel). The single source of the layout for the stand-in and the CANN build. Device-safe: no
// standard library.
#ifndef QWEN_ASCENDC_GDN_DECODE_STEP_TILING_H
#define QWEN_ASCENDC_GDN_DECODE_STEP_TILING_H

#include "qwen_tiling_common.h"

namespace qwen_ascendc {

struct GdnDecodeStepTiling {
  uint32_t numSeqs;          // B
  uint32_t numTokens;        // T (B without speculative decoding)
  uint32_t numKHeads;        // Hk
  uint32_t numVHeads;        // Hv
  uint32_t dk;
  uint32_t dv;
  uint32_t channels;         // C = 2 Hk Dk + Hv Dv
  uint32_t width;            // K, the conv taps
  uint32_t idxDtype;         // state_indices: QWEN_DT_INT32 / QWEN_DT_INT64
  uint32_t qslDtype;         // query_start_loc (speculative decoding)
  uint32_t acceptedDtype;    // num_accepted_tokens (speculative decoding)
  uint32_t spec;             // state_indices is [B, W]: one pool row per token
  uint32_t rowsWidth;        // W (1 without speculative decoding): the most tokens a sequence has
  uint32_t chanTile;         // conv channels per tile (a multiple of 8, or a whole head)
  uint32_t pitchK;           // Dk rounded up to 8 floats
  uint32_t pitchV;           // Dv rounded up to 8 floats
  uint32_t tokenPitch;       // floats per token of the conv outputs kept in UB: 2 pitchK + (Hv / Hk) pitchV
  uint32_t dvTile;           // state columns per tile
  uint32_t pitchDv;          // dvTile rounded up to 8 floats
  uint32_t numDvTiles;
  uint32_t unitsPerCore;     // units are (sequence, key head)
  uint32_t usedCores;
  float scale;               // Dk ** -0.5
  float eps;                 // the output RMSNorm's epsilon
};

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_GDN_DECODE_STEP_TILING_H

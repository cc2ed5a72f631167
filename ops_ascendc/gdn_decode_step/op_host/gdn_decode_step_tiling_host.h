// Host planner of gdn_decode_step (gdn_decode_step_tiling.cpp).
#ifndef QWEN_ASCENDC_GDN_DECODE_STEP_TILING_HOST_H
#define QWEN_ASCENDC_GDN_DECODE_STEP_TILING_HOST_H

#include "tiling_host.h"
#include "gdn_decode_step_tiling.h"

namespace qwen_ascendc {

// `shape` carries every field but the tiling ones (chanTile, pitchK, pitchV, tokenPitch, dvTile, pitchDv,
// numDvTiles, unitsPerCore, usedCores).
GdnDecodeStepTiling PlanGdnDecodeStep(const GdnDecodeStepTiling& shape, const LaunchConfig& cfg);
// Unified-buffer bytes the kernel asks TPipe for under tiling `t` (its InitBuffer calls, byte for byte).
uint64_t GdnDecodeStepUb(const GdnDecodeStepTiling& t);

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_GDN_DECODE_STEP_TILING_HOST_H

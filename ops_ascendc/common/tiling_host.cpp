// Helpers shared by the host tiling planners of the qwen_ops Ascend C kernels
// (ops_ascendc/<op>/op_host). They depend only on shapes, the core count and
// the unified-buffer budget, so they serve the CPU stand-in and the CANN build
// alike.
#include "tiling_host.h"

#include <stdexcept>
#include <string>

namespace qwen_ascendc {

uint32_t Budget(const LaunchConfig& cfg) {
  const uint32_t limit = kUbUsableBytes - kUbReserveBytes;
  // An explicit budget is taken as given, even past the device's 184 KB: the
  // tests use that to watch the stand-in's TPipe refuse an oversized plan.
  return cfg.ubBytes == 0 ? limit : cfg.ubBytes;
}

uint32_t Cores(const LaunchConfig& cfg) { return cfg.numCores == 0 ? kDefaultCores : cfg.numCores; }

void Split(uint64_t units, uint32_t cores, uint32_t* perCore, uint32_t* used) {
  if (units == 0) {
    *perCore = 1;
    *used = 1;
    return;
  }
  *perCore = CeilDiv(units, cores);
  *used = CeilDiv(units, *perCore);
}

void NoFit(const char* op, const std::string& what, uint32_t budget) {
  throw std::invalid_argument(std::string(op) + ": " + what + " does not fit the unified-buffer budget of " +
                              std::to_string(budget) + " bytes per core");
}

uint32_t DtypeBytes(uint32_t dt) {
  switch (dt) {
    case QWEN_DT_FLOAT: case QWEN_DT_INT32: return 4;
    case QWEN_DT_HALF: case QWEN_DT_BF16: return 2;
    case QWEN_DT_INT64: return 8;
    default: return 1;
  }
}

}  // namespace qwen_ascendc

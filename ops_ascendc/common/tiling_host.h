// Host side of the tiling, shared by every op's planner
// (ops_ascendc/<op>/op_host/<op>_tiling.cpp): the launch configuration and
// the helpers the planners size buffers and split work with.
#ifndef QWEN_ASCENDC_TILING_HOST_H
#define QWEN_ASCENDC_TILING_HOST_H

#include <cstdint>
#include <string>

#include "qwen_tiling_common.h"

namespace qwen_ascendc {

// Vector cores a launch uses when the caller does not say: the CPU stand-in
// simulates 8 (threads); the CANN build asks the device (see bindings).
constexpr uint32_t kDefaultCores = 8;

struct LaunchConfig {
  uint32_t numCores = 0;       // 0: kDefaultCores
  uint32_t ubBytes = 0;        // 0: all the usable unified buffer (less a small reserve)
  uint32_t maxTileTokens = 0;  // 0: no cap; tests use it to force many tiles
};

uint32_t DtypeBytes(uint32_t dt);

// Buffer sizes as TPipe::InitBuffer counts them (32-byte units), and counts of 8 floats (32 bytes).
inline uint64_t R32(uint64_t x) { return (x + 31) / 32 * 32; }
inline uint64_t R8(uint64_t x) { return (x + 7) / 8 * 8; }
inline uint32_t CeilDiv(uint64_t a, uint64_t b) { return static_cast<uint32_t>((a + b - 1) / b); }

// Unified-buffer bytes a plan may take per core under `cfg`.
uint32_t Budget(const LaunchConfig& cfg);
// Cores a launch may use under `cfg`.
uint32_t Cores(const LaunchConfig& cfg);
// Contiguous split of `units` over at most `cores`: (per core, cores used).
void Split(uint64_t units, uint32_t cores, uint32_t* perCore, uint32_t* used);
// The planner of `op` found no tile of `what` that fits `budget`: std::invalid_argument.
[[noreturn]] void NoFit(const char* op, const std::string& what, uint32_t budget);

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_TILING_HOST_H

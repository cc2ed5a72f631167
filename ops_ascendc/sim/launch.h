// Host side of the CPU stand-in: launching a kernel on simulated AI cores.
//
// Launch() runs `body` once per block on its own thread; each thread has its
// own block index, its own 192 KB unified buffer and its own per-core state.
// A strict-check violation inside a block (qwen_sim::Fail) records the first
// message, stops that block by unwinding it out of the kernel, and makes the
// other blocks stop at their next API call. Launch() joins every block and
// returns the message ("" when the kernel ran clean); it never aborts the
// process.
#ifndef QWEN_SIM_LAUNCH_H
#define QWEN_SIM_LAUNCH_H

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace qwen_sim {

// A GM allocation the kernel may touch; anything else is an out-of-bounds access.
struct GmRegion {
  const void* base;
  uint64_t bytes;
  bool writable;
  std::string name;
};

struct LaunchStats {
  uint32_t ubHighWater = 0;  // most unified-buffer bytes any block had in use
  uint32_t blocks = 0;
};

std::string Launch(const char* kernelName, uint32_t blockDim, const std::function<void()>& body,
                   const std::vector<GmRegion>& regions, LaunchStats* stats = nullptr);

// The core mix of a launch, as the kernel declares it with KERNEL_TASK_TYPE_DEFAULT
// (the plain Launch above is Vector: blockDim vector cores).
//   Vector  (KERNEL_TYPE_AIV_ONLY):    blockDim AIVs, unified buffer only.
//   Cube    (KERNEL_TYPE_AIC_ONLY):    blockDim AICs, L1/L0A/L0B/L0C only.
//   Mix1To2 (KERNEL_TYPE_MIX_AIC_1_2): blockDim AICs and 2 * blockDim AIVs, all
//            running at once; GM written by one core and read by another must be
//            ordered by CrossCoreSetFlag/CrossCoreWaitFlag or SyncAll (checked),
//            and a wait nobody can satisfy is reported as a deadlock.
enum class LaunchKind { Vector, Cube, Mix1To2 };

std::string Launch(const char* kernelName, uint32_t blockDim, LaunchKind kind, const std::function<void()>& body,
                   const std::vector<GmRegion>& regions, LaunchStats* stats = nullptr);

// Statistics of the most recent launch on any thread (for tests).
LaunchStats LastLaunchStats();

}  // namespace qwen_sim

#endif  // QWEN_SIM_LAUNCH_H

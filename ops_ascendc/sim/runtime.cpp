// CPU stand-in runtime: simulated AI cores as threads, error reporting.
//
// Compiled as ordinary host C++ (standard library, exceptions). Kernel
// translation units are compiled without exceptions but with unwind tables,
// so the KernelStop thrown by Fail() unwinds a block's kernel frames back to
// the block thread's entry, where it is caught. Nothing in the stand-in
// allocates or locks inside those frames, so skipping their destructors
// leaks nothing that outlives the block.
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "launch.h"
#include "sim_types.h"

namespace qwen_sim {

struct LaunchShared {
  const char* kernelName = "";
  std::vector<GmRegion> regions;
  std::atomic<int> failed{0};
  std::atomic<uint32_t> ubHigh{0};
  std::mutex mu;
  std::string message;
};

namespace {

thread_local CoreState* tlsCore = nullptr;

struct KernelStop {};  // unwinds one block out of its kernel

std::mutex gStatsMu;
LaunchStats gLastStats;

}  // namespace

CoreState* Core() {
  if (tlsCore == nullptr) {
    std::fprintf(stderr, "qwen_sim: an AscendC call outside a kernel launch\n");
    std::abort();
  }
  return tlsCore;
}

void Fail(const char* call, const char* fmt, ...) {
  CoreState* c = Core();
  char detail[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  LaunchShared* l = c->launch;
  {
    std::lock_guard<std::mutex> lock(l->mu);
    if (l->message.empty()) {
      char head[256];
      std::snprintf(head, sizeof head, "Ascend C stand-in: kernel %s, block %u of %u: AscendC::%s: ", l->kernelName,
                    c->blockIdx, c->blockNum, call);
      l->message = std::string(head) + detail;
    }
  }
  l->failed.store(1);
  throw KernelStop{};
}

void PollAbort() {
  CoreState* c = Core();
  if (c->launch->failed.load(std::memory_order_relaxed)) throw KernelStop{};
}

void NoteUbUse(uint32_t bytes) {
  std::atomic<uint32_t>& high = Core()->launch->ubHigh;
  uint32_t cur = high.load();
  while (bytes > cur && !high.compare_exchange_weak(cur, bytes)) {
  }
}

void CheckGm(const char* call, const void* addr, uint64_t bytes, bool write) {
  const uint8_t* p = static_cast<const uint8_t*>(addr);
  for (const GmRegion& r : Core()->launch->regions) {
    const uint8_t* b = static_cast<const uint8_t*>(r.base);
    if (p >= b && p + bytes <= b + r.bytes) {
      if (write && !r.writable) Fail(call, "writes to the read-only input '%s'", r.name.c_str());
      return;
    }
  }
  Fail(call, "touches %llu bytes of GM at %p, outside every buffer passed to the kernel",
       static_cast<unsigned long long>(bytes), addr);
}

std::string Launch(const char* kernelName, uint32_t blockDim, const std::function<void()>& body,
                   const std::vector<GmRegion>& regions, LaunchStats* stats) {
  if (blockDim == 0 || blockDim > 65535) return std::string("Ascend C stand-in: invalid blockDim ") + std::to_string(blockDim);
  LaunchShared shared;
  shared.kernelName = kernelName;
  shared.regions = regions;
  auto runBlock = [&](uint32_t idx) {
    // Per-core state: the unified buffer and the pipe bookkeeping.
    std::unique_ptr<uint8_t[]> raw(new uint8_t[kUbTotalBytes + 64]);
    uint8_t* ub = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw.get()) + 63) & ~uintptr_t(63));
    std::memset(ub, 0xff, kUbTotalBytes);
    std::unique_ptr<CoreState> core(new CoreState());
    std::memset(core.get(), 0, sizeof(CoreState));
    core->blockIdx = idx;
    core->blockNum = blockDim;
    core->ub = ub;
    core->launch = &shared;
    tlsCore = core.get();
    try {
      body();
    } catch (const KernelStop&) {
    } catch (...) {
      std::lock_guard<std::mutex> lock(shared.mu);
      if (shared.message.empty()) shared.message = std::string("Ascend C stand-in: kernel ") + kernelName + ": unexpected C++ exception";
      shared.failed.store(1);
    }
    tlsCore = nullptr;
  };
  std::vector<std::thread> threads;
  threads.reserve(blockDim);
  for (uint32_t i = 0; i < blockDim; ++i) threads.emplace_back(runBlock, i);
  for (std::thread& t : threads) t.join();
  LaunchStats s;
  s.ubHighWater = shared.ubHigh.load();
  s.blocks = blockDim;
  if (stats) *stats = s;
  {
    std::lock_guard<std::mutex> lock(gStatsMu);
    gLastStats = s;
  }
  return shared.message;
}

LaunchStats LastLaunchStats() {
  std::lock_guard<std::mutex> lock(gStatsMu);
  return gLastStats;
}

}  // namespace qwen_sim

// CPU stand-in runtime: simulated AI cores as threads, error reporting, and
// the cross-core machinery of mixed (AIC + AIV) kernels.
//
// Compiled as ordinary host C++ (standard library, exceptions). Kernel
// translation units are compiled without exceptions but with unwind tables,
// so the KernelStop thrown by Fail() unwinds a block's kernel frames back to
// the block thread's entry, where it is caught. Nothing in the stand-in
// allocates or locks inside those frames, so skipping their destructors
// leaks nothing that outlives the block.
//
// Cross-core ordering (mixed and cube launches): every core carries a vector
// clock. CrossCoreSetFlag hands a copy of the setter's clock to the cores that
// will wait on the flag, CrossCoreWaitFlag merges it into the waiter's, and
// SyncAll merges the clocks of all its participants. Each 4-byte granule of a
// writable GM buffer remembers its last writer and last reader with their
// clock values; an access is a race when the core touching the granule has not
// (through some chain of flags and barriers) seen the other core's access.
// That catches a read of data another core wrote without waiting on its flag
// (and the write that overtakes a read of the previous contents) however the
// threads happen to interleave. A wait that no running core can satisfy is a
// deadlock, reported instead of hanging.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "launch.h"
#include "sim_types.h"

namespace qwen_sim {

namespace {
constexpr uint32_t kFlagIds = 16;      // CrossCoreSetFlag ids 0..15
constexpr uint32_t kFlagCounterMax = 15;  // the per-id counter is 4 bits wide and saturates
constexpr uint32_t kGranule = 4;       // bytes of GM per race-shadow entry
// Race-shadow entries per shadow page. The shadow is allocated page by page as GM is touched: a kernel
// given a large buffer (an engine's whole state pool, of which a step touches a few rows) costs only the
// pages it touches, not four times the buffer's bytes.
constexpr uint64_t kShadowPage = 4096;

using Clock = std::vector<uint32_t>;

enum WaitKind { WAIT_NONE = 0, WAIT_FLAG, WAIT_BARRIER };

struct CoreSync {
  Clock vc;                                   // own vector clock; only its own thread changes it
  std::deque<Clock> fromAic[kFlagIds];        // on an AIV: sets by its AIC (mode 2)
  std::deque<Clock> fromAiv[2][kFlagIds];     // on an AIC: sets by each of its two AIVs (mode 2)
  int waiting = WAIT_NONE;
  uint32_t waitFlag = 0;
  uint64_t waitGen = 0;
  int waitBarrier = 0;
  bool done = false;
};

struct Barrier {
  uint32_t arrived = 0;
  uint64_t gen = 0;
  Clock acc, released;
};

struct Shadow {
  int32_t wcore = -1, rcore = -1;
  uint32_t wepoch = 0, repoch = 0;
};

void Join(Clock& into, const Clock& from) {
  for (size_t i = 0; i < into.size(); ++i) into[i] = std::max(into[i], from[i]);
}
}  // namespace

struct LaunchShared {
  const char* kernelName = "";
  std::vector<GmRegion> regions;
  std::atomic<int> failed{0};
  std::atomic<uint32_t> ubHigh{0};
  std::mutex mu;
  std::string message;
  // ---- core mix
  LaunchKind kind = LaunchKind::Vector;
  uint32_t aicCount = 0, aivCount = 0;
  bool track = false;  // race tracking on GM (cube and mixed launches)
  // ---- cross-core state, all under syncMu
  std::mutex syncMu;
  std::condition_variable cv;
  uint32_t running = 0;  // cores neither finished nor blocked in a wait
  std::vector<CoreSync> cores;
  Barrier barriers[2];   // [0]: SyncAll of the AIVs only, [1]: of every core
  // ---- race shadow of the writable GM regions, under shadowMu
  std::mutex shadowMu;
  std::vector<std::unordered_map<uint64_t, std::vector<Shadow>>> shadow;  // per region: page -> entries
};

namespace {

thread_local CoreState* tlsCore = nullptr;

struct KernelStop {};  // unwinds one block out of its kernel

std::mutex gStatsMu;
LaunchStats gLastStats;

std::string CoreName(const LaunchShared& l, uint32_t globalIdx) {
  char b[64];
  if (l.kind == LaunchKind::Vector) std::snprintf(b, sizeof b, "block %u", globalIdx);
  else if (globalIdx < l.aicCount) std::snprintf(b, sizeof b, "AIC block %u", globalIdx);
  else std::snprintf(b, sizeof b, "AIV block %u", globalIdx - l.aicCount);
  return b;
}

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
  char detail[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  LaunchShared* l = c->launch;
  {
    std::lock_guard<std::mutex> lock(l->mu);
    if (l->message.empty()) {
      char head[256];
      if (l->kind == LaunchKind::Vector) {
        std::snprintf(head, sizeof head, "Ascend C stand-in: kernel %s, block %u of %u: AscendC::%s: ", l->kernelName,
                      c->blockIdx, c->blockNum, call);
      } else {
        const bool aic = c->kind == CORE_AIC;
        std::snprintf(head, sizeof head, "Ascend C stand-in: kernel %s, %s block %u of %u: AscendC::%s: ",
                      l->kernelName, aic ? "AIC" : "AIV", c->blockIdx, aic ? l->aicCount : l->aivCount, call);
      }
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

const char* KernelTypeName(uint32_t type) {
  switch (type) {
    case KERNEL_TYPE_AIV_ONLY: return "KERNEL_TYPE_AIV_ONLY";
    case KERNEL_TYPE_AIC_ONLY: return "KERNEL_TYPE_AIC_ONLY";
    case KERNEL_TYPE_MIX_AIC_1_2: return "KERNEL_TYPE_MIX_AIC_1_2";
    default: return "an unknown kernel type";
  }
}

namespace {

// Race check of one GM access against the shadow of region `r`.
void TrackGm(const char* call, size_t r, const uint8_t* p, uint64_t bytes, bool write) {
  CoreState* c = Core();
  LaunchShared& l = *c->launch;
  const GmRegion& reg = l.regions[r];
  const uint32_t me = c->globalIdx;
  const Clock& vc = l.cores[me].vc;  // our own clock: only this thread changes it
  const uint64_t off = static_cast<uint64_t>(p - static_cast<const uint8_t*>(reg.base));
  std::string problem;
  {
    std::lock_guard<std::mutex> lock(l.shadowMu);
    std::unordered_map<uint64_t, std::vector<Shadow>>& pages = l.shadow[r];
    const uint64_t g0 = off / kGranule, g1 = (off + bytes + kGranule - 1) / kGranule;
    std::vector<Shadow>* page = nullptr;
    for (uint64_t g = g0; g < g1 && problem.empty(); ++g) {
      if (page == nullptr || g % kShadowPage == 0) {
        page = &pages[g / kShadowPage];
        if (page->empty()) page->resize(kShadowPage);
      }
      Shadow& s = (*page)[g % kShadowPage];
      const bool unseenWrite = s.wcore >= 0 && static_cast<uint32_t>(s.wcore) != me && vc[s.wcore] < s.wepoch;
      const bool unseenRead = s.rcore >= 0 && static_cast<uint32_t>(s.rcore) != me && vc[s.rcore] < s.repoch;
      char b[512];
      if (!write && unseenWrite) {
        std::snprintf(b, sizeof b,
                      "reads GM bytes %llu.. of '%s' that %s wrote, without a CrossCoreWaitFlag or SyncAll ordering "
                      "that write before this read (a race between cores: wait on the writer's flag first)",
                      static_cast<unsigned long long>(g * kGranule), reg.name.c_str(), CoreName(l, s.wcore).c_str());
        problem = b;
      } else if (write && (unseenWrite || unseenRead)) {
        const int32_t other = unseenRead ? s.rcore : s.wcore;
        std::snprintf(b, sizeof b,
                      "writes GM bytes %llu.. of '%s' that %s %s, without a CrossCoreWaitFlag or SyncAll ordering "
                      "that access before this write (a race between cores: the buffer is still in use)",
                      static_cast<unsigned long long>(g * kGranule), reg.name.c_str(), CoreName(l, other).c_str(),
                      unseenRead ? "read" : "wrote");
        problem = b;
      } else if (write) {
        s.wcore = static_cast<int32_t>(me);
        s.wepoch = vc[me];
      } else {
        s.rcore = static_cast<int32_t>(me);
        s.repoch = vc[me];
      }
    }
  }
  if (!problem.empty()) Fail(call, "%s", problem.c_str());
}

}  // namespace

void CheckGm(const char* call, const void* addr, uint64_t bytes, bool write) {
  const uint8_t* p = static_cast<const uint8_t*>(addr);
  LaunchShared& l = *Core()->launch;
  for (size_t i = 0; i < l.regions.size(); ++i) {
    const GmRegion& r = l.regions[i];
    const uint8_t* b = static_cast<const uint8_t*>(r.base);
    if (p >= b && p + bytes <= b + r.bytes) {
      if (write && !r.writable) Fail(call, "writes to the read-only input '%s'", r.name.c_str());
      if (l.track && r.writable && bytes > 0) TrackGm(call, i, p, bytes, write);
      return;
    }
  }
  Fail(call, "touches %llu bytes of GM at %p, outside every buffer passed to the kernel",
       static_cast<unsigned long long>(bytes), addr);
}

// ---------------------------------------------------------------- cross-core sync
namespace {

bool CanProceed(const LaunchShared& l, uint32_t g) {
  const CoreSync& s = l.cores[g];
  if (s.waiting == WAIT_FLAG) {
    if (g < l.aicCount) return !s.fromAiv[0][s.waitFlag].empty() && !s.fromAiv[1][s.waitFlag].empty();
    return !s.fromAic[s.waitFlag].empty();
  }
  if (s.waiting == WAIT_BARRIER) return l.barriers[s.waitBarrier].gen != s.waitGen;
  return true;
}

std::string WhoIsWhere(const LaunchShared& l) {
  std::string out;
  int shown = 0;
  for (uint32_t g = 0; g < l.cores.size() && shown < 6; ++g, ++shown) {
    const CoreSync& s = l.cores[g];
    if (!out.empty()) out += "; ";
    out += CoreName(l, g) + ": ";
    if (s.done) out += "finished";
    else if (s.waiting == WAIT_FLAG) out += "in CrossCoreWaitFlag(" + std::to_string(s.waitFlag) + ")";
    else if (s.waiting == WAIT_BARRIER) out += "in SyncAll";
    else out += "running";
  }
  if (l.cores.size() > 6) out += "; ...";
  return out;
}

// Blocks the calling core until CanProceed; reports a deadlock when no core can move.
void Block(std::unique_lock<std::mutex>& lk, const char* call, const char* what) {
  CoreState* c = Core();
  LaunchShared& l = *c->launch;
  CoreSync& me = l.cores[c->globalIdx];
  --l.running;
  l.cv.notify_all();
  for (;;) {
    if (l.failed.load()) {
      me.waiting = WAIT_NONE;
      ++l.running;
      lk.unlock();
      throw KernelStop{};
    }
    if (CanProceed(l, c->globalIdx)) {
      ++l.running;
      return;  // the caller consumes and clears `waiting`
    }
    bool anyCan = false;
    for (uint32_t g = 0; g < l.cores.size() && !anyCan; ++g)
      anyCan = !l.cores[g].done && l.cores[g].waiting != WAIT_NONE && CanProceed(l, g);
    if (l.running == 0 && !anyCan) {
      const std::string where = WhoIsWhere(l);
      me.waiting = WAIT_NONE;
      ++l.running;
      lk.unlock();
      Fail(call, "%s, but no core can ever get it there: deadlock (%s)", what, where.c_str());
    }
    l.cv.wait_for(lk, std::chrono::milliseconds(20));
  }
}

}  // namespace

void CrossCoreSet(const char* call, uint32_t mode, uint32_t flagId) {
  PollAbort();
  CoreState* c = Core();
  LaunchShared& l = *c->launch;
  if (l.kind != LaunchKind::Mix1To2)
    Fail(call, "only exists between the AIC and AIV cores of a mixed kernel (KERNEL_TYPE_MIX_AIC_1_2); this launch is "
         "%s", KernelTypeName(c->kernelType));
  if (mode != 2)
    Fail(call, "mode %u is not modelled by the stand-in (mode 2, the hand-off between an AIC and its two AIVs, is)",
         mode);
  if (flagId >= kFlagIds) Fail(call, "flag id %u outside 0..15", flagId);
  std::unique_lock<std::mutex> lk(l.syncMu);
  CoreSync& me = l.cores[c->globalIdx];
  std::vector<std::deque<Clock>*> targets;
  std::vector<uint32_t> targetIdx;
  if (c->kind == CORE_AIC) {
    for (uint32_t s = 0; s < 2; ++s) {
      const uint32_t g = l.aicCount + 2 * c->blockIdx + s;
      targets.push_back(&l.cores[g].fromAic[flagId]);
      targetIdx.push_back(g);
    }
  } else {
    targets.push_back(&l.cores[c->blockIdx / 2].fromAiv[c->subBlockIdx][flagId]);
    targetIdx.push_back(c->blockIdx / 2);
  }
  for (size_t i = 0; i < targets.size(); ++i)
    if (targets[i]->size() >= kFlagCounterMax) {
      const std::string who = CoreName(l, targetIdx[i]);
      lk.unlock();
      Fail(call, "flag %u towards %s already holds %u sets it has not waited on: the device's 4-bit counter "
           "saturates at 15 and this set would be lost", flagId, who.c_str(), kFlagCounterMax);
    }
  for (std::deque<Clock>* t : targets) t->push_back(me.vc);
  ++me.vc[c->globalIdx];
  l.cv.notify_all();
}

void CrossCoreWait(const char* call, uint32_t flagId) {
  PollAbort();
  CoreState* c = Core();
  LaunchShared& l = *c->launch;
  if (l.kind != LaunchKind::Mix1To2)
    Fail(call, "only exists between the AIC and AIV cores of a mixed kernel (KERNEL_TYPE_MIX_AIC_1_2); this launch is "
         "%s", KernelTypeName(c->kernelType));
  if (flagId >= kFlagIds) Fail(call, "flag id %u outside 0..15", flagId);
  std::unique_lock<std::mutex> lk(l.syncMu);
  CoreSync& me = l.cores[c->globalIdx];
  me.waiting = WAIT_FLAG;
  me.waitFlag = flagId;
  char what[160];
  std::snprintf(what, sizeof what, "waits on flag %u%s", flagId,
                c->kind == CORE_AIC ? " (a set from each of its two AIVs)" : " (a set from its AIC)");
  Block(lk, call, what);
  if (c->kind == CORE_AIC) {
    for (uint32_t s = 0; s < 2; ++s) {
      Join(me.vc, me.fromAiv[s][flagId].front());
      me.fromAiv[s][flagId].pop_front();
    }
  } else {
    Join(me.vc, me.fromAic[flagId].front());
    me.fromAic[flagId].pop_front();
  }
  me.waiting = WAIT_NONE;
}

void SyncAllCores(const char* call, bool aivOnly) {
  PollAbort();
  CoreState* c = Core();
  LaunchShared& l = *c->launch;
  if (aivOnly && c->kind == CORE_AIC)
    Fail(call, "SyncAll<true> (the default) synchronises the vector cores only; an AIC takes part through "
         "SyncAll<false>()");
  if (!aivOnly && l.kind == LaunchKind::Vector)
    Fail(call, "SyncAll<false> is for kernels with cube cores; a vector-only kernel calls SyncAll()");
  const uint32_t participants = aivOnly ? l.aivCount : l.aicCount + l.aivCount;
  std::unique_lock<std::mutex> lk(l.syncMu);
  CoreSync& me = l.cores[c->globalIdx];
  Barrier& b = l.barriers[aivOnly ? 0 : 1];
  if (b.acc.empty()) b.acc.assign(l.cores.size(), 0);
  Join(b.acc, me.vc);
  const uint64_t gen = b.gen;
  if (++b.arrived == participants) {
    b.released = b.acc;
    b.acc.assign(l.cores.size(), 0);
    b.arrived = 0;
    ++b.gen;
    l.cv.notify_all();
  } else {
    me.waiting = WAIT_BARRIER;
    me.waitBarrier = aivOnly ? 0 : 1;
    me.waitGen = gen;
    Block(lk, call, aivOnly ? "waits for every AIV to reach SyncAll" : "waits for every core to reach SyncAll");
    me.waiting = WAIT_NONE;
  }
  Join(me.vc, b.released);
  ++me.vc[c->globalIdx];
}

// ---------------------------------------------------------------- launching
std::string Launch(const char* kernelName, uint32_t blockDim, LaunchKind kind, const std::function<void()>& body,
                   const std::vector<GmRegion>& regions, LaunchStats* stats) {
  if (blockDim == 0 || blockDim > 65535) return std::string("Ascend C stand-in: invalid blockDim ") + std::to_string(blockDim);
  LaunchShared shared;
  shared.kernelName = kernelName;
  shared.regions = regions;
  shared.kind = kind;
  shared.aicCount = kind == LaunchKind::Vector ? 0 : blockDim;
  shared.aivCount = kind == LaunchKind::Cube ? 0 : (kind == LaunchKind::Mix1To2 ? 2 * blockDim : blockDim);
  shared.track = kind != LaunchKind::Vector;
  shared.shadow.resize(regions.size());
  const uint32_t total = shared.aicCount + shared.aivCount;
  shared.cores.resize(total);
  for (uint32_t g = 0; g < total; ++g) {
    shared.cores[g].vc.assign(total, 0);
    shared.cores[g].vc[g] = 1;
  }
  shared.running = total;
  const uint8_t kernelType = kind == LaunchKind::Vector ? KERNEL_TYPE_AIV_ONLY
                             : kind == LaunchKind::Cube ? KERNEL_TYPE_AIC_ONLY
                                                        : KERNEL_TYPE_MIX_AIC_1_2;
  auto runCore = [&](uint32_t g) {
    const bool aic = g < shared.aicCount;
    // Per-core state: its memories and the pipe bookkeeping.
    static const uint32_t kSizes[MEM_COUNT] = {kUbTotalBytes, kL1Bytes, kL0ABytes, kL0BBytes, kL0CBytes};
    std::unique_ptr<uint8_t[]> raw[MEM_COUNT];
    std::unique_ptr<CoreState> core(new CoreState());
    std::memset(core.get(), 0, sizeof(CoreState));
    for (uint32_t m = 0; m < MEM_COUNT; ++m) {
      if ((m == MEM_UB) == aic) continue;  // an AIC has no unified buffer, an AIV no L1/L0
      raw[m].reset(new uint8_t[kSizes[m] + 1024]);
      uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw[m].get()) + 1023) & ~uintptr_t(1023));
      std::memset(base, 0xff, kSizes[m]);
      core->mem[m] = base;
    }
    core->ub = core->mem[MEM_UB];
    core->kind = aic ? CORE_AIC : CORE_AIV;
    core->mixed = kind == LaunchKind::Mix1To2;
    core->kernelType = kernelType;
    core->globalIdx = g;
    core->blockIdx = aic ? g : g - shared.aicCount;
    core->blockNum = blockDim;
    core->subBlockNum = core->mixed && !aic ? 2 : 1;
    core->subBlockIdx = core->mixed && !aic ? core->blockIdx % 2 : 0;
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
    {
      std::lock_guard<std::mutex> lock(shared.syncMu);
      shared.cores[g].done = true;
      --shared.running;
    }
    shared.cv.notify_all();
  };
  std::vector<std::thread> threads;
  threads.reserve(total);
  for (uint32_t g = 0; g < total; ++g) threads.emplace_back(runCore, g);
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

std::string Launch(const char* kernelName, uint32_t blockDim, const std::function<void()>& body,
                   const std::vector<GmRegion>& regions, LaunchStats* stats) {
  return Launch(kernelName, blockDim, LaunchKind::Vector, body, regions, stats);
}

LaunchStats LastLaunchStats() {
  std::lock_guard<std::mutex> lock(gStatsMu);
  return gLastStats;
}

}  // namespace qwen_sim

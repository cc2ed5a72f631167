// CPU stand-in for the Ascend C API: mixed kernels (cube + vector cores).
//
// Included by kernel_operator.h. A KERNEL_TYPE_MIX_AIC_1_2 launch of blockDim N
// runs N cube cores (AIC) and 2N vector cores (AIV) at once, each on its own
// thread: on an AIV GetBlockIdx() is in [0, 2N) and GetSubBlockIdx() 0/1; the
// AIC of group g works with the AIVs 2g and 2g+1; GetBlockNum() is N on both.
// On the device the kernel is compiled once per core type and ASCEND_IS_AIC /
// ASCEND_IS_AIV are constants; here they ask the core the thread runs.
//
// Cores hand data to each other through GM; CrossCoreSetFlag (mode 2) and
// CrossCoreWaitFlag order the hand-off, SyncAll orders everybody. The runtime
// (runtime.cpp) checks that every GM read of data another core wrote is
// ordered after that write by such a chain, and reports a wait that can never
// return as a deadlock.
#ifndef QWEN_SIM_KERNEL_OPERATOR_MIX_H
#define QWEN_SIM_KERNEL_OPERATOR_MIX_H

#define ASCEND_IS_AIC (qwen_sim::Core()->kind == qwen_sim::CORE_AIC)
#define ASCEND_IS_AIV (qwen_sim::Core()->kind == qwen_sim::CORE_AIV)
#define KERNEL_TASK_TYPE_DEFAULT(type) qwen_sim::DeclareKernelType(type)

namespace qwen_sim {
// The kernel's declared type must be the one it was launched as.
inline void DeclareKernelType(KernelMetaType type) {
  PollAbort();
  if (Core()->kernelType != type)
    Fail("KERNEL_TASK_TYPE_DEFAULT", "the kernel declares %s but was launched as %s", KernelTypeName(type),
         KernelTypeName(Core()->kernelType));
}
}  // namespace qwen_sim

namespace AscendC {

// Sets flag `flagId` (0..15) once `pipe` has finished its queued work. Mode 2:
// an AIC's set reaches both of its AIVs; an AIV's set reaches its AIC, whose
// wait returns once both AIVs have set.
template <uint8_t modeId, pipe_t pipe>
inline void CrossCoreSetFlag(uint16_t flagId) {
  if (pipe == PIPE_S || pipe == PIPE_ALL)
    qwen_sim::Fail("CrossCoreSetFlag", "pipe PIPE_%s: a cross-core set is issued on a data pipe (PIPE_FIX, PIPE_MTE3, "
                   "PIPE_V, ...), not on PIPE_S or PIPE_ALL", pipe == PIPE_S ? "S" : "ALL");
  qwen_sim::CrossCoreSet("CrossCoreSetFlag", modeId, flagId);
}

template <uint8_t modeId = 0, pipe_t pipe = PIPE_S>
inline void CrossCoreWaitFlag(uint16_t flagId) {
  qwen_sim::CrossCoreWait("CrossCoreWaitFlag", flagId);
}

// Every AIV (isAIVOnly, the default) or every core of the launch meets here.
template <bool isAIVOnly = true>
inline void SyncAll() {
  qwen_sim::SyncAllCores("SyncAll", isAIVOnly);
}

}  // namespace AscendC

#endif  // QWEN_SIM_KERNEL_OPERATOR_MIX_H

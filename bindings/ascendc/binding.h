// Plumbing shared by the per-op bindings of the Ascend C kernels
// (bindings/ascendc/<op>.cpp): input checks (TORCH_CHECK), dtype codes, the
// launch configuration, and the launch itself.
//
// Every entry point re-checks its inputs (dtype, device, contiguity, shape)
// with TORCH_CHECK even though qwen_ops.ops validated them, plans the tiling
// on the host (ops_ascendc/<op>/op_host), and launches the kernel:
//   * CPU build (no CANN): on CPU tensors through the stand-in (ops_ascendc/sim),
//     one thread per block; a strict-check violation raises RuntimeError.
//   * CANN build (QWEN_OPS_WITH_CANN): on NPU tensors, on the current torch_npu
//     stream. This path has NOT been built or run on Ascend hardware.
#ifndef QWEN_OPS_BINDINGS_ASCENDC_BINDING_H
#define QWEN_OPS_BINDINGS_ASCENDC_BINDING_H

#include <ATen/ATen.h>
#include <torch/python.h>

#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "tiling_host.h"

#ifdef QWEN_OPS_WITH_CANN
#include "acl/acl.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"
#else
#include "launch.h"
#endif

namespace qwen_bind {

namespace py = pybind11;
using qwen_ascendc::LaunchConfig;

// ------------------------------------------------------------------ checks

#ifdef QWEN_OPS_WITH_CANN
constexpr const char* kDeviceType = "npu";
inline bool OnTargetDevice(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }
#else
constexpr const char* kDeviceType = "cpu";
inline bool OnTargetDevice(const at::Tensor& t) { return t.device().is_cpu(); }
#endif

// The tiling's dtype code of a torch dtype (0xffffffff: none).
uint32_t Code(at::ScalarType s);

inline bool IsFloat(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat || t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}
inline bool IsIndex(const at::Tensor& t) { return t.scalar_type() == at::kInt || t.scalar_type() == at::kLong; }

// Defined, on the build's device, contiguous, `ndim`-D.
void Expect(const char* op, const char* name, const at::Tensor& t, int64_t ndim);
// Expect(), and exactly `shape`.
void ExpectShape(const char* op, const char* name, const at::Tensor& t, std::vector<int64_t> shape);
// The int8-cache scales: given exactly when the cache is int8, float32 [Hkv, D].
void ExpectScales(const char* op, bool quant, const c10::optional<at::Tensor>& kScale,
                  const c10::optional<at::Tensor>& vScale, int64_t hkv, int64_t d);
// `v` as a kernel's 32-bit field, or an error naming `what`.
uint32_t U32(const char* op, int64_t v, const char* what);

// The launch configuration from the Python-side arguments (CANN: 0 cores asks the device).
LaunchConfig Config(int64_t numCores, int64_t ubBytes, int64_t maxTile);

// ------------------------------------------------------------------ launch bookkeeping

// Last launch's tiling and stand-in statistics (touched with the GIL held only).
py::dict& Info();
void NoteTiling(std::vector<std::pair<const char*, int64_t>> fields);

template <typename Tiling>
at::Tensor TilingBytes(const Tiling& t, const at::Device& device) {
  at::Tensor cpu = at::empty({static_cast<int64_t>(sizeof(Tiling))}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(cpu.data_ptr(), &t, sizeof(Tiling));
  return device.is_cpu() ? cpu : cpu.to(device);
}

// ------------------------------------------------------------------ launching

// One pointer argument of a kernel. Besides the pointer, the CPU stand-in
// gets the tensor's name, size and whether the kernel may write it: any other
// GM access is a strict-check violation.
enum Access { kRead, kWrite };
struct GmArg {
  const char* name;
  uint8_t* ptr;  // null for an absent or empty tensor
  uint64_t bytes;
  Access access;
};
inline uint8_t* Ptr(const at::Tensor& t) {
  return (t.defined() && t.numel() > 0) ? static_cast<uint8_t*>(t.data_ptr()) : nullptr;
}
inline GmArg Arg(const char* name, const at::Tensor& t, Access access) {
  uint8_t* p = Ptr(t);
  return {name, p, p != nullptr ? static_cast<uint64_t>(t.nbytes()) : 0, access};
}
inline GmArg Arg(const char* name, const c10::optional<at::Tensor>& t, Access access) {
  return t.has_value() ? Arg(name, *t, access) : GmArg{name, nullptr, 0, access};
}

// The symbol that launches kernel `name` in this build.
#ifdef QWEN_OPS_WITH_CANN
#define QWEN_KERNEL(name) ACLRT_LAUNCH_KERNEL(name)
#else
#define QWEN_KERNEL(name) name
#endif

// The cores a kernel runs on: vector cores only (KERNEL_TYPE_AIV_ONLY), or
// groups of one cube core and two vector cores (KERNEL_TYPE_MIX_AIC_1_2;
// tiling.usedCores counts the groups).
enum class Cores { kVector, kMix1To2 };

#ifndef QWEN_OPS_WITH_CANN
// Runs `body` as kernel `kernel` on `blockDim` stand-in cores (or groups) that may touch only `regions`.
void RunSim(const char* kernel, uint32_t blockDim, const std::vector<qwen_sim::GmRegion>& regions,
            const std::function<void()>& body, Cores cores = Cores::kVector);
#endif

// Launches `kernel` (QWEN_KERNEL(name)) on tiling.usedCores cores (or, for
// Cores::kMix1To2, groups of one AIC and two AIVs) with the pointer arguments
// `args` in the kernel's parameter order, followed by the tiling, copied to
// `device`:
//   * CANN build: on the current NPU stream.
//   * CPU build: through the stand-in, as kernel `op`, with `args` and the
//     tiling as the only GM regions it may touch; for a mixed kernel all
//     3 * usedCores cores run at once and their GM hand-offs are race-checked.
template <typename Kernel, typename Tiling, typename... GmArgs>
void LaunchOn(Cores cores, Kernel kernel, const char* op, const Tiling& tiling, const at::Device& device,
              const GmArgs&... args) {
  const at::Tensor tilingDev = TilingBytes(tiling, device);
  const GmArg tilingArg = Arg("tiling", tilingDev, kRead);
#ifdef QWEN_OPS_WITH_CANN
  (void)op;
  (void)cores;  // blockDim counts vector cores, or AIC groups for a mixed kernel
  kernel(tiling.usedCores, c10_npu::getCurrentNPUStream().stream(), args.ptr..., tilingArg.ptr);
#else
  std::vector<qwen_sim::GmRegion> regions;
  for (const GmArg& a : {args..., tilingArg})
    if (a.ptr != nullptr) regions.push_back({a.ptr, a.bytes, a.access == kWrite, a.name});
  RunSim(op, tiling.usedCores, regions, [&] { kernel(args.ptr..., tilingArg.ptr); }, cores);
#endif
}
template <typename Kernel, typename Tiling, typename... GmArgs>
void Launch(Kernel kernel, const char* op, const Tiling& tiling, const at::Device& device, const GmArgs&... args) {
  LaunchOn(Cores::kVector, kernel, op, tiling, device, args...);
}

// ------------------------------------------------------------------ registration

// One per op, defined in bindings/ascendc/<op>.cpp; called by qwen_register_ascendc (binding.cpp).
void RegisterReshapeAndCache(py::module_& m);
void RegisterPagedDecodeAttention(py::module_& m);
void RegisterFusedRecurrentGatedDeltaRule(py::module_& m);
void RegisterCausalConv1dUpdate(py::module_& m);
void RegisterCausalConv1dFn(py::module_& m);
void RegisterFusedGdnGating(py::module_& m);
void RegisterPrefillAttention(py::module_& m);
void RegisterChunkGatedDeltaRule(py::module_& m);
void RegisterMixedAttention(py::module_& m);
void RegisterFusedExperts(py::module_& m);
void RegisterGdnDecodeStep(py::module_& m);

}  // namespace qwen_bind

#endif  // QWEN_OPS_BINDINGS_ASCENDC_BINDING_H

// qwen_ops._C: the Ascend C kernels as the `ascendc` backend. The shared
// plumbing of binding.h (checks, launch configuration, the stand-in launch)
// and the registration of every op's binding (bindings/ascendc/<op>.cpp).
#include "binding.h"

#include <stdexcept>

namespace qwen_bind {

uint32_t Code(at::ScalarType s) {
  switch (s) {
    case at::kFloat: return qwen_ascendc::QWEN_DT_FLOAT;
    case at::kHalf: return qwen_ascendc::QWEN_DT_HALF;
    case at::kBFloat16: return qwen_ascendc::QWEN_DT_BF16;
    case at::kChar: return qwen_ascendc::QWEN_DT_INT8;
    case at::kInt: return qwen_ascendc::QWEN_DT_INT32;
    case at::kLong: return qwen_ascendc::QWEN_DT_INT64;
    case at::kBool: return qwen_ascendc::QWEN_DT_BOOL;
    default: return 0xffffffffu;
  }
}

void Expect(const char* op, const char* name, const at::Tensor& t, int64_t ndim) {
  TORCH_CHECK(t.defined(), op, ": '", name, "' is undefined");
  TORCH_CHECK(OnTargetDevice(t), op, ": '", name, "' must be a ", kDeviceType, " tensor for this build of the Ascend C "
              "kernels, got ", t.device());
  TORCH_CHECK(t.is_contiguous(), op, ": '", name, "' must be contiguous");
  TORCH_CHECK(t.dim() == ndim, op, ": '", name, "' must be ", ndim, "-D, got shape ", t.sizes());
}

void ExpectShape(const char* op, const char* name, const at::Tensor& t, std::vector<int64_t> shape) {
  Expect(op, name, t, static_cast<int64_t>(shape.size()));
  TORCH_CHECK(t.sizes().vec() == shape, op, ": '", name, "' must have shape ", c10::IntArrayRef(shape), ", got ",
              t.sizes());
}

void ExpectScales(const char* op, bool quant, const c10::optional<at::Tensor>& kScale,
                  const c10::optional<at::Tensor>& vScale, int64_t hkv, int64_t d) {
  TORCH_CHECK(kScale.has_value() == quant && vScale.has_value() == quant, op,
              ": k_scale/v_scale are required for int8 caches and only for them");
  if (quant) {
    ExpectShape(op, "k_scale", *kScale, {hkv, d});
    ExpectShape(op, "v_scale", *vScale, {hkv, d});
    TORCH_CHECK(kScale->scalar_type() == at::kFloat && vScale->scalar_type() == at::kFloat, op,
                ": scales must be float32");
  }
}

uint32_t U32(const char* op, int64_t v, const char* what) {
  TORCH_CHECK(v >= 0 && v <= 0x7fffffffLL, op, ": ", what, " = ", v, " is out of the kernels' 31-bit range");
  return static_cast<uint32_t>(v);
}

LaunchConfig Config(int64_t numCores, int64_t ubBytes, int64_t maxTile) {
  TORCH_CHECK(numCores >= 0 && numCores <= 4096, "num_cores must be in [0, 4096]");
  TORCH_CHECK(ubBytes >= 0 && ubBytes <= (1 << 20), "ub_bytes must be in [0, 1 MiB]");
  TORCH_CHECK(maxTile >= 0 && maxTile <= (1 << 20), "max_tile must be >= 0");
  LaunchConfig c;
  c.numCores = static_cast<uint32_t>(numCores);
  c.ubBytes = static_cast<uint32_t>(ubBytes);
  c.maxTileTokens = static_cast<uint32_t>(maxTile);
#ifdef QWEN_OPS_WITH_CANN
  if (c.numCores == 0) {
    int32_t dev = 0;
    int64_t cores = 0;
    aclrtGetDevice(&dev);
    if (aclrtGetDeviceInfo(static_cast<uint32_t>(dev), ACL_DEV_ATTR_VECTOR_CORE_NUM, &cores) == ACL_SUCCESS && cores > 0)
      c.numCores = static_cast<uint32_t>(cores);
  }
#endif
  return c;
}

// Never destroyed, so that interpreter shutdown does not race it.
py::dict& Info() {
  static py::dict* info = new py::dict();
  return *info;
}

void NoteTiling(std::vector<std::pair<const char*, int64_t>> fields) {
  py::dict t;
  for (auto& f : fields) t[f.first] = f.second;
  Info()["tiling"] = t;
}

#ifndef QWEN_OPS_WITH_CANN
void RunSim(const char* kernel, uint32_t blockDim, const std::vector<qwen_sim::GmRegion>& regions,
            const std::function<void()>& body, Cores cores) {
  qwen_sim::LaunchStats stats;
  std::string err;
  {
    py::gil_scoped_release release;
    const qwen_sim::LaunchKind kind =
        cores == Cores::kMix1To2 ? qwen_sim::LaunchKind::Mix1To2 : qwen_sim::LaunchKind::Vector;
    err = qwen_sim::Launch(kernel, blockDim, kind, body, regions, &stats);
  }
  Info() = py::dict();
  Info()["kernel"] = kernel;
  Info()["block_dim"] = stats.blocks;
  Info()["ub_high_water"] = stats.ubHighWater;
  if (!err.empty()) throw std::runtime_error(err);
}
#endif

namespace {
py::dict LastLaunch() { return Info().attr("copy")(); }
}  // namespace

}  // namespace qwen_bind

void qwen_register_ascendc(pybind11::module_& m) {
  namespace py = pybind11;
  m.attr("ascendc_kernels") = py::make_tuple("reshape_and_cache", "paged_decode_attention",
                                             "fused_recurrent_gated_delta_rule", "causal_conv1d_update",
                                             "causal_conv1d_fn", "fused_gdn_gating",
                                             "prefill_attention", "chunk_gated_delta_rule",
                                             "mixed_attention", "fused_experts", "gdn_decode_step");
  qwen_bind::RegisterReshapeAndCache(m);
  qwen_bind::RegisterPagedDecodeAttention(m);
  qwen_bind::RegisterFusedRecurrentGatedDeltaRule(m);
  qwen_bind::RegisterCausalConv1dUpdate(m);
  qwen_bind::RegisterCausalConv1dFn(m);
  qwen_bind::RegisterFusedGdnGating(m);
  qwen_bind::RegisterPrefillAttention(m);
  qwen_bind::RegisterChunkGatedDeltaRule(m);
  qwen_bind::RegisterMixedAttention(m);
  qwen_bind::RegisterFusedExperts(m);
  qwen_bind::RegisterGdnDecodeStep(m);
  m.def("ascendc_last_launch", &qwen_bind::LastLaunch,
        "Tiling and unified-buffer high-water mark of the last Ascend C launch (stand-in: measured).");
}

// qwen_ops._C.ascendc_causal_conv1d_update: checks, tiling and launch of the Ascend C kernel
// ops_ascendc/causal_conv1d_update/.
#include "binding.h"
#include "conv.h"

#include "causal_conv1d_update/op_host/causal_conv1d_update_tiling_host.h"

#ifdef QWEN_OPS_WITH_CANN
#include "aclrtlaunch_qwen_causal_conv1d_update.h"
#else
extern "C" void qwen_causal_conv1d_update(uint8_t* x, uint8_t* convStates, uint8_t* weight, uint8_t* bias, uint8_t* cacheIndices,
                                          uint8_t* out, uint8_t* tiling);
#endif

namespace qwen_bind {
namespace {

at::Tensor CausalConv1dUpdate(const at::Tensor& x, const at::Tensor& convStates, const at::Tensor& weight,
                              const c10::optional<at::Tensor>& bias, const at::Tensor& cacheIndices, bool silu,
                              int64_t numCores, int64_t ubBytes, int64_t maxTile) {
  const char* op = "causal_conv1d_update";
  ExpectConvOperands(op, x, weight, bias, convStates);
  const int64_t b = x.size(0), c = x.size(1);
  ExpectShape(op, "cache_indices", cacheIndices, {b});
  ExpectConvFloats(op, x, weight, bias, convStates);
  TORCH_CHECK(IsIndex(cacheIndices), op, ": 'cache_indices' must be int32/int64");
  at::Tensor out = at::empty_like(x);
  if (b == 0 || c == 0) return out;
  qwen_ascendc::CausalConv1dUpdateTiling shape{};
  shape.batch = U32(op, b, "B");
  FillConvShape(op, shape, x, weight, bias, convStates, cacheIndices, silu);
  const auto tiling = qwen_ascendc::PlanCausalConv1dUpdate(shape, Config(numCores, ubBytes, maxTile));
  Launch(QWEN_KERNEL(qwen_causal_conv1d_update), op, tiling, x.device(), Arg("x", x, kRead),
         Arg("conv_states", convStates, kWrite), Arg("weight", weight, kRead), Arg("bias", bias, kRead),
         Arg("cache_indices", cacheIndices, kRead), Arg("out", out, kWrite));
  NoteTiling({{"tile_channels", tiling.tileChannels}, {"num_tiles", tiling.numTiles},
              {"units_per_core", tiling.unitsPerCore}, {"used_cores", tiling.usedCores},
              {"ub_planned", (int64_t)qwen_ascendc::CausalConv1dUpdateUb(tiling)}});
  return out;
}

}  // namespace

void RegisterCausalConv1dUpdate(py::module_& m) {
  m.def("ascendc_causal_conv1d_update", &CausalConv1dUpdate, py::arg("x"), py::arg("conv_states"),
        py::arg("weight"), py::arg("bias"), py::arg("cache_indices"), py::arg("silu"), py::arg("num_cores") = 0,
        py::arg("ub_bytes") = 0, py::arg("max_tile") = 0, "Ascend C causal_conv1d_update (states in place).");
}

}  // namespace qwen_bind

// qwen_ops._C.ascendc_causal_conv1d_fn: checks, tiling and launch of the Ascend C kernel
// ops_ascendc/causal_conv1d_fn/.
#include "binding.h"
#include "conv.h"

#include "causal_conv1d_fn/op_host/causal_conv1d_fn_tiling_host.h"

#ifdef QWEN_OPS_WITH_CANN
#include "aclrtlaunch_qwen_causal_conv1d_fn.h"
#else
extern "C" void qwen_causal_conv1d_fn(uint8_t* x, uint8_t* weight, uint8_t* bias, uint8_t* convStates,
                                      uint8_t* queryStartLoc, uint8_t* cacheIndices, uint8_t* hasInitialState,
                                      uint8_t* out, uint8_t* tiling);
#endif

namespace qwen_bind {
namespace {

at::Tensor CausalConv1dFn(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                          const at::Tensor& convStates, const at::Tensor& queryStartLoc,
                          const at::Tensor& cacheIndices, const at::Tensor& hasInitialState, bool silu,
                          int64_t numCores, int64_t ubBytes, int64_t maxTile) {
  const char* op = "causal_conv1d_fn";
  ExpectConvOperands(op, x, weight, bias, convStates);
  const int64_t t = x.size(0), c = x.size(1);
  Expect(op, "query_start_loc", queryStartLoc, 1);
  TORCH_CHECK(queryStartLoc.numel() >= 1, op, ": 'query_start_loc' must be [N+1], N >= 0");
  const int64_t n = queryStartLoc.numel() - 1;
  ExpectShape(op, "cache_indices", cacheIndices, {n});
  ExpectShape(op, "has_initial_state", hasInitialState, {n});
  ExpectConvFloats(op, x, weight, bias, convStates);
  TORCH_CHECK(IsIndex(queryStartLoc) && IsIndex(cacheIndices), op,
              ": 'query_start_loc' and 'cache_indices' must be int32/int64");
  TORCH_CHECK(hasInitialState.scalar_type() == at::kBool, op, ": 'has_initial_state' must be bool");
  at::Tensor out = at::empty_like(x);
  if (n == 0 || c == 0) return out;
  qwen_ascendc::CausalConv1dFnTiling shape{};
  shape.numTokens = U32(op, t, "T");
  FillConvShape(op, shape, x, weight, bias, convStates, cacheIndices, silu);
  shape.numSeqs = U32(op, n, "N");
  U32(op, t * c, "T * C");
  U32(op, convStates.numel(), "S * (K-1) * C");
  shape.qslDtype = Code(queryStartLoc.scalar_type());
  const auto tiling = qwen_ascendc::PlanCausalConv1dFn(shape, Config(numCores, ubBytes, maxTile));
  Launch(QWEN_KERNEL(qwen_causal_conv1d_fn), op, tiling, x.device(), Arg("x", x, kRead),
         Arg("weight", weight, kRead), Arg("bias", bias, kRead), Arg("conv_states", convStates, kWrite),
         Arg("query_start_loc", queryStartLoc, kRead), Arg("cache_indices", cacheIndices, kRead),
         Arg("has_initial_state", hasInitialState, kRead), Arg("out", out, kWrite));
  NoteTiling({{"tile_channels", tiling.tileChannels}, {"tile_tokens", tiling.tileTokens},
              {"num_tiles", tiling.numTiles}, {"units_per_core", tiling.unitsPerCore},
              {"used_cores", tiling.usedCores}, {"ub_planned", (int64_t)qwen_ascendc::CausalConv1dFnUb(tiling)}});
  return out;
}

}  // namespace

void RegisterCausalConv1dFn(py::module_& m) {
  m.def("ascendc_causal_conv1d_fn", &CausalConv1dFn, py::arg("x"), py::arg("weight"), py::arg("bias"),
        py::arg("conv_states"), py::arg("query_start_loc"), py::arg("cache_indices"), py::arg("has_initial_state"),
        py::arg("silu"), py::arg("num_cores") = 0, py::arg("ub_bytes") = 0, py::arg("max_tile") = 0,
        "Ascend C causal_conv1d_fn over packed sequences (states in place).");
}

}  // namespace qwen_bind

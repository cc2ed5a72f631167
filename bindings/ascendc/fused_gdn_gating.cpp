// qwen_ops._C.ascendc_fused_gdn_gating: checks, tiling and launch of the Ascend C kernel
// ops_ascendc/fused_gdn_gating/.
#include "binding.h"

#include "fused_gdn_gating/op_host/fused_gdn_gating_tiling_host.h"

#ifdef QWEN_OPS_WITH_CANN
#include "aclrtlaunch_qwen_fused_gdn_gating.h"
#else
extern "C" void qwen_fused_gdn_gating(uint8_t* aLog, uint8_t* a, uint8_t* b, uint8_t* dtBias, uint8_t* g,
                                      uint8_t* beta, uint8_t* tiling);
#endif

namespace qwen_bind {
namespace {

std::tuple<at::Tensor, at::Tensor> FusedGdnGating(const at::Tensor& aLog, const at::Tensor& a, const at::Tensor& b,
                                                  const at::Tensor& dtBias, int64_t numCores, int64_t ubBytes,
                                                  int64_t maxTile) {
  const char* op = "fused_gdn_gating";
  Expect(op, "a", a, 2);
  const int64_t t = a.size(0), hv = a.size(1);
  ExpectShape(op, "b", b, {t, hv});
  ExpectShape(op, "A_log", aLog, {hv});
  ExpectShape(op, "dt_bias", dtBias, {hv});
  TORCH_CHECK(IsFloat(a) && IsFloat(b) && IsFloat(aLog) && IsFloat(dtBias), op,
              ": A_log, a, b and dt_bias must be float16/bfloat16/float32");
  at::Tensor g = at::empty({t, hv}, a.options().dtype(at::kFloat));
  at::Tensor beta = at::empty_like(b);
  if (t == 0 || hv == 0) return {g, beta};
  qwen_ascendc::FusedGdnGatingTiling shape{};
  shape.numTokens = U32(op, t, "T");
  shape.numHeads = U32(op, hv, "Hv");
  U32(op, t * hv, "T * Hv");
  shape.aDtype = Code(a.scalar_type());
  shape.bDtype = Code(b.scalar_type());
  shape.aLogDtype = Code(aLog.scalar_type());
  shape.dtBiasDtype = Code(dtBias.scalar_type());
  const auto tiling = qwen_ascendc::PlanFusedGdnGating(shape, Config(numCores, ubBytes, maxTile));
  Launch(QWEN_KERNEL(qwen_fused_gdn_gating), op, tiling, a.device(), Arg("A_log", aLog, kRead), Arg("a", a, kRead),
         Arg("b", b, kRead), Arg("dt_bias", dtBias, kRead), Arg("g", g, kWrite), Arg("beta", beta, kWrite));
  NoteTiling({{"tile_rows", tiling.tileRows}, {"num_tiles", tiling.numTiles}, {"units_per_core", tiling.unitsPerCore},
              {"used_cores", tiling.usedCores}, {"ub_planned", (int64_t)qwen_ascendc::FusedGdnGatingUb(tiling)}});
  return {g, beta};
}

}  // namespace

void RegisterFusedGdnGating(py::module_& m) {
  m.def("ascendc_fused_gdn_gating", &FusedGdnGating, py::arg("A_log"), py::arg("a"), py::arg("b"),
        py::arg("dt_bias"), py::arg("num_cores") = 0, py::arg("ub_bytes") = 0, py::arg("max_tile") = 0,
        "Ascend C fused_gdn_gating: (g float32, beta in b's dtype).");
}

}  // namespace qwen_bind

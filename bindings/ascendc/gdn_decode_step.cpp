// qwen_ops._C.ascendc_gdn_decode_step: checks, tiling and launch of the Ascend C kernel ops_ascendc/gdn_decode_step/
// (a GDN layer's decode step in one launch: conv update, gates, delta rule on the pools, gated RMSNorm).
#include "binding.h"

#include <algorithm>
#include <cmath>

#include "gdn_decode_step/op_host/gdn_decode_step_tiling_host.h"

#ifdef QWEN_OPS_WITH_CANN
#include "aclrtlaunch_qwen_gdn_decode_step.h"
#else
extern "C" void qwen_gdn_decode_step(uint8_t* mixed, uint8_t* z, uint8_t* b, uint8_t* a, uint8_t* convStates,
                                     uint8_t* convTaps, uint8_t* ssmStates, uint8_t* aLog, uint8_t* dtBias,
                                     uint8_t* normWeight, uint8_t* stateIndices, uint8_t* queryStartLoc,
                                     uint8_t* numAccepted, uint8_t* out, uint8_t* tiling);
#endif

namespace qwen_bind {
namespace {

void ExpectFloat32(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == at::kFloat, op, ": '", name, "' must be float32, got ", t.scalar_type());
}

// The rows of the pools a call reads or writes: each -1 or in [0, S) (the op layer checked the values; read
// here only where they are host memory, the stand-in's case).
void ExpectRowsInPool(const char* op, const at::Tensor& rows, int64_t poolRows) {
  if (!rows.device().is_cpu() || rows.numel() == 0) return;
  const at::Tensor r = rows.to(at::kLong);
  TORCH_CHECK(r.min().item<int64_t>() >= -1 && r.max().item<int64_t>() < poolRows, op,
              ": 'state_indices' must be -1 or in [0, ", poolRows, ")");
}

at::Tensor GdnDecodeStep(const at::Tensor& mixed, const at::Tensor& z, const at::Tensor& b, const at::Tensor& a,
                         const at::Tensor& convStates, const at::Tensor& convTaps, const at::Tensor& ssmStates,
                         const at::Tensor& aLog, const at::Tensor& dtBias, const at::Tensor& normWeight,
                         const at::Tensor& stateIndices, const c10::optional<at::Tensor>& queryStartLoc,
                         const c10::optional<at::Tensor>& numAccepted, double eps, int64_t numCores,
                         int64_t ubBytes, int64_t maxTile) {
  const char* op = "gdn_decode_step";
  Expect(op, "ssm_states", ssmStates, 4);
  const int64_t s = ssmStates.size(0), hv = ssmStates.size(1), dk = ssmStates.size(2), dv = ssmStates.size(3);
  Expect(op, "mixed_qkv", mixed, 2);
  const int64_t t = mixed.size(0), c = mixed.size(1);
  TORCH_CHECK(dk > 0 && dv > 0 && hv > 0 && c > hv * dv && (c - hv * dv) % (2 * dk) == 0, op,
              ": 'mixed_qkv' must be [T, 2 Hk Dk + Hv Dv] with Dk = ", dk, ", Hv Dv = ", hv * dv, ", got C = ", c);
  const int64_t hk = (c - hv * dv) / (2 * dk);
  TORCH_CHECK(hv % hk == 0, op, ": Hv = ", hv, " must be a multiple of Hk = ", hk);
  ExpectShape(op, "z", z, {t, hv * dv});
  ExpectShape(op, "b", b, {t, hv});
  ExpectShape(op, "a", a, {t, hv});
  Expect(op, "conv_taps", convTaps, 2);
  const int64_t kw = convTaps.size(0);
  TORCH_CHECK(kw >= 2, op, ": 'conv_taps' must have K >= 2 rows");
  ExpectShape(op, "conv_taps", convTaps, {kw, c});
  Expect(op, "conv_states", convStates, 3);
  ExpectShape(op, "conv_states", convStates, {convStates.size(0), kw - 1, c});
  ExpectShape(op, "A_log", aLog, {hv});
  ExpectShape(op, "dt_bias", dtBias, {hv});
  ExpectShape(op, "norm_weight", normWeight, {dv});
  const std::pair<const char*, const at::Tensor*> floats[] = {
      {"mixed_qkv", &mixed}, {"z", &z}, {"b", &b}, {"a", &a}, {"conv_states", &convStates},
      {"conv_taps", &convTaps}, {"ssm_states", &ssmStates}, {"A_log", &aLog}, {"dt_bias", &dtBias},
      {"norm_weight", &normWeight}};
  for (const auto& f : floats) ExpectFloat32(op, f.first, *f.second);
  TORCH_CHECK(std::isfinite(eps) && eps > 0, op, ": 'eps' must be finite and > 0");
  const bool spec = numAccepted.has_value();
  TORCH_CHECK(spec == queryStartLoc.has_value(), op,
              ": speculative decoding needs both 'query_start_loc' and 'num_accepted_tokens'");
  int64_t nseq = t, width = 1;
  if (spec) {
    Expect(op, "state_indices", stateIndices, 2);
    nseq = stateIndices.size(0);
    width = stateIndices.size(1);
    TORCH_CHECK(width >= 1, op, ": 'state_indices' must be [B, W] with W >= 1");
    ExpectShape(op, "query_start_loc", *queryStartLoc, {nseq + 1});
    ExpectShape(op, "num_accepted_tokens", *numAccepted, {nseq});
    TORCH_CHECK(IsIndex(*queryStartLoc) && IsIndex(*numAccepted), op,
                ": 'query_start_loc' and 'num_accepted_tokens' must be int32/int64");
  } else {
    ExpectShape(op, "state_indices", stateIndices, {t});
  }
  TORCH_CHECK(IsIndex(stateIndices), op, ": 'state_indices' must be int32/int64");
  ExpectRowsInPool(op, stateIndices, std::min(s, convStates.size(0)));
  at::Tensor out = at::zeros({t, hv * dv}, mixed.options());  // padding rows stay zero
  if (t == 0 || nseq == 0) return out;

  qwen_ascendc::GdnDecodeStepTiling shape{};
  shape.numSeqs = U32(op, nseq, "B");
  shape.numTokens = U32(op, t, "T");
  shape.numKHeads = U32(op, hk, "Hk");
  shape.numVHeads = U32(op, hv, "Hv");
  shape.dk = U32(op, dk, "Dk");
  shape.dv = U32(op, dv, "Dv");
  shape.channels = U32(op, c, "C");
  shape.width = U32(op, kw, "K");
  shape.idxDtype = Code(stateIndices.scalar_type());
  shape.qslDtype = spec ? Code(queryStartLoc->scalar_type()) : 0;
  shape.acceptedDtype = spec ? Code(numAccepted->scalar_type()) : 0;
  shape.spec = spec;
  shape.rowsWidth = U32(op, width, "W");
  shape.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk)));
  shape.eps = static_cast<float>(eps);
  const auto tiling = qwen_ascendc::PlanGdnDecodeStep(shape, Config(numCores, ubBytes, maxTile));
  Launch(QWEN_KERNEL(qwen_gdn_decode_step), op, tiling, mixed.device(), Arg("mixed_qkv", mixed, kRead),
         Arg("z", z, kRead), Arg("b", b, kRead), Arg("a", a, kRead), Arg("conv_states", convStates, kWrite),
         Arg("conv_taps", convTaps, kRead), Arg("ssm_states", ssmStates, kWrite), Arg("A_log", aLog, kRead),
         Arg("dt_bias", dtBias, kRead), Arg("norm_weight", normWeight, kRead),
         Arg("state_indices", stateIndices, kRead), Arg("query_start_loc", queryStartLoc, kRead),
         Arg("num_accepted_tokens", numAccepted, kRead), Arg("out", out, kWrite));
  NoteTiling({{"chan_tile", tiling.chanTile}, {"dv_tile", tiling.dvTile}, {"num_dv_tiles", tiling.numDvTiles},
              {"units_per_core", tiling.unitsPerCore}, {"used_cores", tiling.usedCores},
              {"ub_planned", (int64_t)qwen_ascendc::GdnDecodeStepUb(tiling)}});
  return out;
}

}  // namespace

void RegisterGdnDecodeStep(py::module_& m) {
  m.def("ascendc_gdn_decode_step", &GdnDecodeStep, py::arg("mixed_qkv"), py::arg("z"), py::arg("b"), py::arg("a"),
        py::arg("conv_states"), py::arg("conv_taps"), py::arg("ssm_states"), py::arg("A_log"), py::arg("dt_bias"),
        py::arg("norm_weight"), py::arg("state_indices"), py::arg("query_start_loc") = py::none(),
        py::arg("num_accepted_tokens") = py::none(), py::arg("eps") = 1e-6, py::arg("num_cores") = 0,
        py::arg("ub_bytes") = 0, py::arg("max_tile") = 0,
        "Ascend C gdn_decode_step: a GDN layer's decode step in one launch (both pools in place).");
}

}  // namespace qwen_bind

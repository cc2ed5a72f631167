// qwen_ops._C.ascendc_chunk_gated_delta_rule: checks, tiling and launch of the
// mixed AIC+AIV Ascend C kernel ops_ascendc/chunk_gated_delta_rule/.
#include "delta_rule.h"
#include "gdn_chunk_checkpoints.h"

#include "chunk_gated_delta_rule/op_host/chunk_gated_delta_rule_tiling_host.h"

#ifdef QWEN_OPS_WITH_CANN
#include "aclrtlaunch_qwen_gdn_chunk.h"
#else
extern "C" void qwen_gdn_chunk(uint8_t* q, uint8_t* k, uint8_t* v, uint8_t* g, uint8_t* beta, uint8_t* initialState,
                               uint8_t* cuSeqlens, uint8_t* stateIndices, uint8_t* hasInitial,
                               uint8_t* checkpointPlan, uint8_t* out, uint8_t* finalState, uint8_t* checkpoints,
                               uint8_t* workspace, uint8_t* tiling);
#endif

namespace qwen_bind {
namespace {

// (o, final_state or None, checkpoints float32 [P, Hv, Dk, Dv] or None without checkpoint_boundaries).
using GdnChunkResult = std::tuple<at::Tensor, c10::optional<at::Tensor>, c10::optional<at::Tensor>>;

GdnChunkResult GdnChunk(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g, const at::Tensor& beta,
    double scale, const c10::optional<at::Tensor>& initialState, bool outputFinalState,
    const c10::optional<at::Tensor>& cuSeqlens, const c10::optional<at::Tensor>& stateIndices,
    const c10::optional<at::Tensor>& hasInitial, bool useL2Norm, const c10::optional<at::Tensor>& boundaries,
    int64_t numCores, int64_t ubBytes, int64_t maxTile) {
  const char* op = "chunk_gated_delta_rule";
  const DeltaRuleDims d = ExpectDeltaRule(op, q, k, v, g, beta, initialState, cuSeqlens, stateIndices, hasInitial);
  const int64_t nseq = d.nseq, hv = d.hv, dk = d.dk, dv = d.dv;
  const int64_t numCheckpoints = boundaries.has_value() ? boundaries->size(0) : 0;
  if (boundaries.has_value()) {
    ExpectCheckpointBoundaries(op, *boundaries, nseq, d.t, cuSeqlens);
    U32(op, nseq + 1 + 2 * numCheckpoints, "N + 1 + 2 P (the checkpoint plan's length)");
  }
  at::Tensor o = at::zeros_like(v);
  c10::optional<at::Tensor> finalState;
  if (outputFinalState) finalState = at::zeros({nseq, hv, dk, dv}, v.options().dtype(at::kFloat));
  // Zeros: a padding sequence's rows are never written.
  c10::optional<at::Tensor> checkpoints;
  if (boundaries.has_value()) checkpoints = at::zeros({numCheckpoints, hv, dk, dv}, v.options().dtype(at::kFloat));
  using Tiling = qwen_ascendc::GdnChunkTiling;
  Tiling shape = DeltaRuleShape<Tiling>(op, d, q, beta, initialState, cuSeqlens, stateIndices, hasInitial,
                                        outputFinalState, useL2Norm, scale);
  shape.numCheckpoints = static_cast<uint32_t>(numCheckpoints);
  // Planned (and the head dims refused) before anything is written.
  const auto tiling = qwen_ascendc::PlanGdnChunk(shape, Config(numCores, ubBytes, maxTile));
  if (nseq == 0 || hv == 0) return {o, finalState, checkpoints};  // zero-length sequences still carry their states
  at::Tensor plan;  // undefined (no GM region) without checkpoints
  if (numCheckpoints > 0) plan = GdnCheckpointPlan(*boundaries, nseq);
  at::Tensor workspace = at::empty({static_cast<int64_t>(tiling.usedCores) * tiling.wsFloatsPerGroup},
                                   v.options().dtype(at::kFloat));
  // A state pool (with ssm_state_indices) is updated in place; plain initial states are only read.
  const Access poolAccess = stateIndices.has_value() ? kWrite : kRead;
  LaunchOn(Cores::kMix1To2, QWEN_KERNEL(qwen_gdn_chunk), op, tiling, q.device(), Arg("q", q, kRead),
           Arg("k", k, kRead), Arg("v", v, kRead), Arg("g", g, kRead), Arg("beta", beta, kRead),
           Arg("initial_state", initialState, poolAccess), Arg("cu_seqlens", cuSeqlens, kRead),
           Arg("ssm_state_indices", stateIndices, kRead), Arg("has_initial_state", hasInitial, kRead),
           Arg("checkpoint_plan", plan, kRead), Arg("o", o, kWrite), Arg("final_state", finalState, kWrite),
           Arg("checkpoints", checkpoints, kWrite), Arg("workspace", workspace, kWrite));
  NoteTiling({{"used_cores", tiling.usedCores}, {"ws_floats_per_group", tiling.wsFloatsPerGroup},
              {"dk_pad", tiling.dkPad}, {"dv_pad", tiling.dvPad}, {"row_tile", tiling.rowTile},
              {"col_tile", tiling.colTile}, {"num_checkpoints", tiling.numCheckpoints},
              {"ub_planned", static_cast<int64_t>(qwen_ascendc::GdnChunkUb(tiling))}});
  return {o, finalState, checkpoints};
}

}  // namespace

void RegisterChunkGatedDeltaRule(py::module_& m) {
  m.def("ascendc_chunk_gated_delta_rule", &GdnChunk, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("g"),
        py::arg("beta"), py::arg("scale"), py::arg("initial_state") = py::none(),
        py::arg("output_final_state") = false, py::arg("cu_seqlens") = py::none(),
        py::arg("ssm_state_indices") = py::none(), py::arg("has_initial_state") = py::none(),
        py::arg("use_qk_l2norm_in_kernel") = false, py::arg("checkpoint_boundaries") = py::none(),
        py::arg("num_cores") = 0, py::arg("ub_bytes") = 0, py::arg("max_tile") = 0,
        "Ascend C gated delta rule in chunks of 64 (mixed AIC+AIV kernel; Dk, Dv from 1 to "
        "ascendc_gdn_chunk_max_head_dim, padded to 16 inside). Returns (o, final_state or None, checkpoints or "
        "None): with checkpoint_boundaries [P, 2] rows (sequence r, j), checkpoints float32 [P, Hv, Dk, Dv] holds "
        "the state of sequence r after its first 64 * j tokens (zeros for a padding sequence).");
  // The head-dim limit, for the engine to refuse a model at construction rather than mid-generation.
  m.attr("ascendc_gdn_chunk_max_head_dim") = qwen_ascendc::kGdnMaxHeadDim;
}

}  // namespace qwen_bind

// qwen_ops._C.ascendc_chunk_gated_delta_rule: checks, tiling and launch of the
// mixed AIC+AIV Ascend C kernel ops_ascendc/chunk_gated_delta_rule/.
#include "binding.h"

#include "chunk_gated_delta_rule/op_host/chunk_gated_delta_rule_tiling_host.h"

#ifdef QWEN_OPS_WITH_CANN
#include "aclrtlaunch_qwen_gdn_chunk.h"
#else
extern "C" void qwen_gdn_chunk(uint8_t* q, uint8_t* k, uint8_t* v, uint8_t* g, uint8_t* beta, uint8_t* initialState,
                               uint8_t* cuSeqlens, uint8_t* stateIndices, uint8_t* hasInitial, uint8_t* out,
                               uint8_t* finalState, uint8_t* workspace, uint8_t* tiling);
#endif

namespace qwen_bind {
namespace {

std::tuple<at::Tensor, c10::optional<at::Tensor>> GdnChunk(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g, const at::Tensor& beta,
    double scale, const c10::optional<at::Tensor>& initialState, bool outputFinalState,
    const c10::optional<at::Tensor>& cuSeqlens, const c10::optional<at::Tensor>& stateIndices,
    const c10::optional<at::Tensor>& hasInitial, bool useL2Norm, int64_t numCores, int64_t ubBytes, int64_t maxTile) {
  const char* op = "chunk_gated_delta_rule";
  Expect(op, "q", q, 4);
  const int64_t b = q.size(0), t = q.size(1), hk = q.size(2), dk = q.size(3);
  ExpectShape(op, "k", k, {b, t, hk, dk});
  Expect(op, "v", v, 4);
  const int64_t hv = v.size(2), dv = v.size(3);
  ExpectShape(op, "v", v, {b, t, hv, dv});
  ExpectShape(op, "g", g, {b, t, hv});
  ExpectShape(op, "beta", beta, {b, t, hv});
  TORCH_CHECK(IsFloat(q) && k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), op,
              ": q, k, v must share one float dtype");
  TORCH_CHECK(g.scalar_type() == at::kFloat, op, ": 'g' must be float32");
  TORCH_CHECK(IsFloat(beta), op, ": 'beta' must be a float dtype");
  TORCH_CHECK(hk > 0 && hv % hk == 0, op, ": Hv = ", hv, " must be a multiple of Hk = ", hk);
  int64_t nseq = b;
  if (cuSeqlens.has_value()) {
    Expect(op, "cu_seqlens", *cuSeqlens, 1);
    TORCH_CHECK(IsIndex(*cuSeqlens) && cuSeqlens->numel() >= 1 && b == 1, op,
                ": 'cu_seqlens' must be int32/int64 [N+1] with B == 1");
    nseq = cuSeqlens->numel() - 1;
  }
  if (stateIndices.has_value()) {
    ExpectShape(op, "ssm_state_indices", *stateIndices, {nseq});
    TORCH_CHECK(IsIndex(*stateIndices), op, ": 'ssm_state_indices' must be int32/int64");
    TORCH_CHECK(initialState.has_value(), op, ": 'ssm_state_indices' needs the state pool 'initial_state'");
    Expect(op, "initial_state", *initialState, 4);
    ExpectShape(op, "initial_state", *initialState, {initialState->size(0), hv, dk, dv});
  } else if (initialState.has_value()) {
    ExpectShape(op, "initial_state", *initialState, {nseq, hv, dk, dv});
  }
  if (initialState.has_value())
    TORCH_CHECK(initialState->scalar_type() == at::kFloat, op, ": 'initial_state' must be float32");
  if (hasInitial.has_value()) {
    ExpectShape(op, "has_initial_state", *hasInitial, {nseq});
    TORCH_CHECK(hasInitial->scalar_type() == at::kBool, op, ": 'has_initial_state' must be bool");
    TORCH_CHECK(initialState.has_value(), op, ": 'has_initial_state' needs 'initial_state'");
  }
  // Zeros: padding sequences (pool index -1) get zero outputs and final states, which the kernel never writes.
  at::Tensor o = at::zeros_like(v);
  c10::optional<at::Tensor> finalState;
  if (outputFinalState) finalState = at::zeros({nseq, hv, dk, dv}, v.options().dtype(at::kFloat));
  qwen_ascendc::GdnChunkTiling shape{};
  shape.numSeqs = U32(op, nseq, "N");
  shape.seqLen = U32(op, t, "T");
  shape.totalTokens = U32(op, b * t, "B * T");
  shape.numKHeads = U32(op, hk, "Hk");
  shape.numVHeads = U32(op, hv, "Hv");
  shape.dk = U32(op, dk, "Dk");
  shape.dv = U32(op, dv, "Dv");
  shape.qkvDtype = Code(q.scalar_type());
  shape.betaDtype = Code(beta.scalar_type());
  shape.cuDtype = cuSeqlens.has_value() ? Code(cuSeqlens->scalar_type()) : 0;
  shape.idxDtype = stateIndices.has_value() ? Code(stateIndices->scalar_type()) : 0;
  shape.hasCuSeqlens = cuSeqlens.has_value();
  shape.hasInitialState = initialState.has_value();
  shape.hasIndices = stateIndices.has_value();
  shape.hasHasInitial = hasInitial.has_value();
  shape.writeFinal = outputFinalState;
  shape.useL2Norm = useL2Norm;
  shape.scale = static_cast<float>(scale);
  // Planned (and the head dims refused) before anything is written.
  const auto tiling = qwen_ascendc::PlanGdnChunk(shape, Config(numCores, ubBytes, maxTile));
  if (nseq == 0 || hv == 0) return {o, finalState};  // zero-length sequences still carry their states
  at::Tensor workspace = at::empty({static_cast<int64_t>(tiling.usedCores) * tiling.wsFloatsPerGroup},
                                   v.options().dtype(at::kFloat));
  // A state pool (with ssm_state_indices) is updated in place; plain initial states are only read.
  const Access poolAccess = stateIndices.has_value() ? kWrite : kRead;
  LaunchMix(QWEN_KERNEL(qwen_gdn_chunk), op, tiling, q.device(), Arg("q", q, kRead), Arg("k", k, kRead),
            Arg("v", v, kRead), Arg("g", g, kRead), Arg("beta", beta, kRead),
            Arg("initial_state", initialState, poolAccess), Arg("cu_seqlens", cuSeqlens, kRead),
            Arg("ssm_state_indices", stateIndices, kRead), Arg("has_initial_state", hasInitial, kRead),
            Arg("o", o, kWrite), Arg("final_state", finalState, kWrite), Arg("workspace", workspace, kWrite));
  NoteTiling({{"used_cores", tiling.usedCores}, {"ws_floats_per_group", tiling.wsFloatsPerGroup},
              {"ub_planned", static_cast<int64_t>(qwen_ascendc::GdnChunkUb(tiling))}});
  return {o, finalState};
}

}  // namespace

void RegisterChunkGatedDeltaRule(py::module_& m) {
  m.def("ascendc_chunk_gated_delta_rule", &GdnChunk, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("g"),
        py::arg("beta"), py::arg("scale"), py::arg("initial_state") = py::none(),
        py::arg("output_final_state") = false, py::arg("cu_seqlens") = py::none(),
        py::arg("ssm_state_indices") = py::none(), py::arg("has_initial_state") = py::none(),
        py::arg("use_qk_l2norm_in_kernel") = false, py::arg("num_cores") = 0, py::arg("ub_bytes") = 0,
        py::arg("max_tile") = 0,
        "Ascend C gated delta rule in chunks of 64 (mixed AIC+AIV kernel; Dk, Dv multiples of 16 up to 128).");
}

}  // namespace qwen_bind

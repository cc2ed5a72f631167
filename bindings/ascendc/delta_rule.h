// What the two gated-delta-rule bindings (fused_recurrent_gated_delta_rule.cpp,
// chunk_gated_delta_rule.cpp) share: the input checks of their one signature
// and the filling of the shape fields their tiling structs have in common.
#ifndef QWEN_OPS_BINDINGS_ASCENDC_DELTA_RULE_H
#define QWEN_OPS_BINDINGS_ASCENDC_DELTA_RULE_H

#include "binding.h"

namespace qwen_bind {

struct DeltaRuleDims {
  int64_t b, t, hk, dk, hv, dv, nseq;
};

// TORCH_CHECKs every input of a delta-rule binding; returns the dimensions.
inline DeltaRuleDims ExpectDeltaRule(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& g, const at::Tensor& beta,
                                     const c10::optional<at::Tensor>& initialState,
                                     const c10::optional<at::Tensor>& cuSeqlens,
                                     const c10::optional<at::Tensor>& stateIndices,
                                     const c10::optional<at::Tensor>& hasInitial) {
  Expect(op, "q", q, 4);
  DeltaRuleDims d{q.size(0), q.size(1), q.size(2), q.size(3), 0, 0, q.size(0)};
  ExpectShape(op, "k", k, {d.b, d.t, d.hk, d.dk});
  Expect(op, "v", v, 4);
  d.hv = v.size(2);
  d.dv = v.size(3);
  ExpectShape(op, "v", v, {d.b, d.t, d.hv, d.dv});
  ExpectShape(op, "g", g, {d.b, d.t, d.hv});
  ExpectShape(op, "beta", beta, {d.b, d.t, d.hv});
  TORCH_CHECK(IsFloat(q) && k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), op,
              ": q, k, v must share one float dtype");
  TORCH_CHECK(g.scalar_type() == at::kFloat, op, ": 'g' must be float32");
  TORCH_CHECK(IsFloat(beta), op, ": 'beta' must be a float dtype");
  TORCH_CHECK(d.hk > 0 && d.hv % d.hk == 0, op, ": Hv = ", d.hv, " must be a multiple of Hk = ", d.hk);
  if (cuSeqlens.has_value()) {
    Expect(op, "cu_seqlens", *cuSeqlens, 1);
    TORCH_CHECK(IsIndex(*cuSeqlens) && cuSeqlens->numel() >= 1 && d.b == 1, op,
                ": 'cu_seqlens' must be int32/int64 [N+1] with B == 1");
    d.nseq = cuSeqlens->numel() - 1;
  }
  if (stateIndices.has_value()) {
    ExpectShape(op, "ssm_state_indices", *stateIndices, {d.nseq});
    TORCH_CHECK(IsIndex(*stateIndices), op, ": 'ssm_state_indices' must be int32/int64");
    TORCH_CHECK(initialState.has_value(), op, ": 'ssm_state_indices' needs the state pool 'initial_state'");
    Expect(op, "initial_state", *initialState, 4);
    ExpectShape(op, "initial_state", *initialState, {initialState->size(0), d.hv, d.dk, d.dv});
  } else if (initialState.has_value()) {
    ExpectShape(op, "initial_state", *initialState, {d.nseq, d.hv, d.dk, d.dv});
  }
  if (initialState.has_value())
    TORCH_CHECK(initialState->scalar_type() == at::kFloat, op, ": 'initial_state' must be float32");
  if (hasInitial.has_value()) {
    ExpectShape(op, "has_initial_state", *hasInitial, {d.nseq});
    TORCH_CHECK(hasInitial->scalar_type() == at::kBool, op, ": 'has_initial_state' must be bool");
    TORCH_CHECK(initialState.has_value(), op, ": 'has_initial_state' needs 'initial_state'");
  }
  return d;
}

// The shape fields every delta-rule tiling struct has (the tiling fields are the planner's).
template <typename Tiling>
Tiling DeltaRuleShape(const char* op, const DeltaRuleDims& d, const at::Tensor& q, const at::Tensor& beta,
                      const c10::optional<at::Tensor>& initialState, const c10::optional<at::Tensor>& cuSeqlens,
                      const c10::optional<at::Tensor>& stateIndices, const c10::optional<at::Tensor>& hasInitial,
                      bool outputFinalState, bool useL2Norm, double scale) {
  Tiling s{};
  s.numSeqs = U32(op, d.nseq, "N");
  s.seqLen = U32(op, d.t, "T");
  s.totalTokens = U32(op, d.b * d.t, "B * T");
  s.numKHeads = U32(op, d.hk, "Hk");
  s.numVHeads = U32(op, d.hv, "Hv");
  s.dk = U32(op, d.dk, "Dk");
  s.dv = U32(op, d.dv, "Dv");
  s.qkvDtype = Code(q.scalar_type());
  s.betaDtype = Code(beta.scalar_type());
  s.cuDtype = cuSeqlens.has_value() ? Code(cuSeqlens->scalar_type()) : 0;
  s.idxDtype = stateIndices.has_value() ? Code(stateIndices->scalar_type()) : 0;
  s.hasCuSeqlens = cuSeqlens.has_value();
  s.hasInitialState = initialState.has_value();
  s.hasIndices = stateIndices.has_value();
  s.hasHasInitial = hasInitial.has_value();
  s.writeFinal = outputFinalState;
  s.useL2Norm = useL2Norm;
  s.scale = static_cast<float>(scale);
  return s;
}

}  // namespace qwen_bind

#endif  // QWEN_OPS_BINDINGS_ASCENDC_DELTA_RULE_H

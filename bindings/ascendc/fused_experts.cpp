// qwen_ops._C.ascendc_fused_experts: checks, the grouping of the routing by
// expert, the tiling (planned from the routing counts) and the launch of the
// mixed AIC+AIV Ascend C kernel ops_ascendc/fused_experts/.
#include "binding.h"

#include <stdexcept>
#include <vector>

#include "fused_experts/op_host/fused_experts_tiling_host.h"

#ifdef QWEN_OPS_WITH_CANN
#include "aclrtlaunch_qwen_fused_experts.h"
#else
extern "C" void qwen_fused_experts(uint8_t* x, uint8_t* w13, uint8_t* w2, uint8_t* sortedTokens, uint8_t* offsets,
                                   uint8_t* order, uint8_t* sortedWeights, uint8_t* out, uint8_t* y,
                                   uint8_t* workspace, uint8_t* tiling);
#endif

namespace qwen_bind {
namespace {

// What the kernel reads besides the inputs: the pairs grouped by expert (the
// semantics of ops/moe/grouping.py: a stable sort of the flat expert ids).
struct Grouping {
  at::Tensor sortedTokens;   // [P] int32: token of each pair, in expert order
  at::Tensor offsets;        // [E+1] int32: expert e's pairs are sorted positions [offsets[e], offsets[e+1])
  at::Tensor order;          // [T, K] int32: token t's sorted positions, ascending (its experts in ascending order)
  at::Tensor sortedWeights;  // [P] float32: each sorted pair's routing weight
  std::vector<int64_t> counts;  // pairs per expert, on the host: the one read of the routing
};

Grouping GroupByExpert(const at::Tensor& topkIds, const at::Tensor& topkWeights, int64_t numExperts) {
  const int64_t t = topkIds.size(0), k = topkIds.size(1);
  const at::Tensor flat = topkIds.reshape({-1}).to(at::kLong);
  const at::Tensor pairs = std::get<1>(flat.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
  const at::Tensor counts = at::bincount(flat, {}, numExperts);
  Grouping g;
  g.offsets = at::cat({at::zeros({1}, counts.options()), counts.cumsum(0)}).to(at::kInt);
  g.sortedTokens = at::floor_divide(pairs, k).to(at::kInt);
  at::Tensor position = at::empty_like(pairs);
  position.index_put_({pairs}, at::arange(pairs.numel(), pairs.options()));
  g.order = std::get<0>(position.view({t, k}).sort(1)).to(at::kInt).contiguous();
  g.sortedWeights = topkWeights.reshape({-1}).to(at::kFloat).index_select(0, pairs).contiguous();
  const at::Tensor host = counts.cpu();
  g.counts.assign(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + numExperts);
  return g;
}

at::Tensor FusedExperts(const at::Tensor& x, const at::Tensor& w13, const at::Tensor& w2,
                        const at::Tensor& topkWeights, const at::Tensor& topkIds, int64_t numCores, int64_t ubBytes,
                        int64_t maxTile) {
  const char* op = "fused_experts";
  Expect(op, "hidden_states", x, 2);
  const int64_t t = x.size(0), h = x.size(1);
  TORCH_CHECK(IsFloat(x), op, ": 'hidden_states' [T, H] must be float32, float16 or bfloat16, got ", x.scalar_type());
  Expect(op, "w13", w13, 3);
  const int64_t e = w13.size(0), twoI = w13.size(1);
  TORCH_CHECK(e >= 1, op, ": 'w13' [E, 2I, H] must hold at least one expert, got shape ", w13.sizes());
  TORCH_CHECK(twoI >= 2 && twoI % 2 == 0, op, ": 'w13' [E, 2I, H] must have an even, non-zero dim 1 (gate rows, then "
              "up rows), got shape ", w13.sizes());
  const int64_t inter = twoI / 2;
  ExpectShape(op, "w13", w13, {e, twoI, h});
  ExpectShape(op, "w2", w2, {e, h, inter});
  TORCH_CHECK(w13.scalar_type() == x.scalar_type() && w2.scalar_type() == x.scalar_type(), op,
              ": 'w13' and 'w2' must have hidden_states' dtype ", x.scalar_type(), ", got ", w13.scalar_type(), " and ",
              w2.scalar_type());
  Expect(op, "topk_ids", topkIds, 2);
  const int64_t k = topkIds.size(1);
  ExpectShape(op, "topk_ids", topkIds, {t, k});
  TORCH_CHECK(IsIndex(topkIds), op, ": 'topk_ids' [T, K] must be int32 or int64, got ", topkIds.scalar_type());
  TORCH_CHECK(k >= 1 && k <= e, op, ": 'topk_ids' must have 1 <= K <= E = ", e, " choices per token, got K = ", k);
  ExpectShape(op, "topk_weights", topkWeights, {t, k});
  TORCH_CHECK(IsFloat(topkWeights), op, ": 'topk_weights' [T, K] must be a float dtype, got ",
              topkWeights.scalar_type());
  at::Tensor out = at::empty({t, h}, x.options());
  if (t == 0) return out;
  {
    const auto range = at::aminmax(topkIds);
    const int64_t lo = std::get<0>(range).item<int64_t>(), hi = std::get<1>(range).item<int64_t>();
    TORCH_CHECK(lo >= 0 && hi < e, op, ": 'topk_ids' has expert id ", lo < 0 ? lo : hi, " outside [0, ", e,
                ") (E = w13.shape[0])");
  }
  using Tiling = qwen_ascendc::FusedExpertsTiling;
  Tiling shape{};
  shape.numTokens = U32(op, t, "T");
  shape.topK = U32(op, k, "K");
  shape.numExperts = U32(op, e, "E");
  shape.hidden = U32(op, h, "H");
  shape.inter = U32(op, inter, "I");
  shape.dtype = Code(x.scalar_type());
  shape.numPairs = U32(op, t * k, "T * K");
  TORCH_CHECK(t * k * h <= 0x7fffffffLL, op, ": T * K * H = ", t * k * h, " (the expert outputs) is out of the "
              "kernel's 31-bit range");
  const Grouping g = GroupByExpert(topkIds, topkWeights, e);
  // Planned (and sizes the kernel cannot hold refused) before anything is written.
  const Tiling tiling = qwen_ascendc::PlanFusedExperts(shape, g.counts, Config(numCores, ubBytes, maxTile));
  at::Tensor y = at::empty({t * k, h}, x.options().dtype(at::kFloat));
  at::Tensor workspace = at::empty({static_cast<int64_t>(tiling.usedCores) * tiling.wsGroupBytes},
                                   x.options().dtype(at::kByte));
  LaunchOn(Cores::kMix1To2, QWEN_KERNEL(qwen_fused_experts), op, tiling, x.device(), Arg("hidden_states", x, kRead),
           Arg("w13", w13, kRead), Arg("w2", w2, kRead), Arg("sorted_tokens", g.sortedTokens, kRead),
           Arg("expert_offsets", g.offsets, kRead), Arg("token_order", g.order, kRead),
           Arg("sorted_weights", g.sortedWeights, kRead), Arg("out", out, kWrite), Arg("expert_rows", y, kWrite),
           Arg("workspace", workspace, kWrite));
  NoteTiling({{"used_cores", tiling.usedCores}, {"units", tiling.numUnits}, {"m_tile", tiling.mTile},
              {"n_tile", tiling.nTile}, {"k_tile", tiling.kTile}, {"col_tile", tiling.colTile},
              {"ws_group_bytes", tiling.wsGroupBytes},
              {"ub_planned", static_cast<int64_t>(qwen_ascendc::FusedExpertsUb(tiling))}});
  return out;
}

// The tiling of one pair routed to expert 0 at these sizes: what an engine
// checks when it is built, so that sizes the kernel cannot hold are refused
// then (the planner's ValueError) and not in the middle of a generation.
py::dict PlanOnly(int64_t hidden, int64_t inter, const at::Tensor& dtypeOf) {
  const char* op = "fused_experts";
  TORCH_CHECK(hidden >= 1 && inter >= 1, op, ": hidden and intermediate sizes must be positive, got H = ", hidden,
              ", I = ", inter);
  TORCH_CHECK(IsFloat(dtypeOf), op, ": the weights must be float32, float16 or bfloat16, got ", dtypeOf.scalar_type());
  qwen_ascendc::FusedExpertsTiling shape{};
  shape.numTokens = 1;
  shape.topK = 1;
  shape.numExperts = 1;
  shape.hidden = U32(op, hidden, "H");
  shape.inter = U32(op, inter, "I");
  shape.dtype = Code(dtypeOf.scalar_type());
  shape.numPairs = 1;
  const auto t = qwen_ascendc::PlanFusedExperts(shape, {1}, Config(0, 0, 0));
  py::dict d;
  d["m_tile"] = t.mTile;
  d["n_tile"] = t.nTile;
  d["k_tile"] = t.kTile;
  return d;
}

}  // namespace

void RegisterFusedExperts(py::module_& m) {
  m.def("ascendc_fused_experts_plan", &PlanOnly, py::arg("hidden"), py::arg("inter"), py::arg("dtype_of"),
        "The fused_experts tiling for H, I and the dtype of `dtype_of` (ValueError where the kernel cannot hold them).");
  m.def("ascendc_fused_experts", &FusedExperts, py::arg("hidden_states"), py::arg("w13"), py::arg("w2"),
        py::arg("topk_weights"), py::arg("topk_ids"), py::arg("num_cores") = 0, py::arg("ub_bytes") = 0,
        py::arg("max_tile") = 0,
        "Ascend C routed SwiGLU experts (mixed AIC+AIV grouped GEMM; float32 accumulation). hidden_states [T, H], "
        "w13 [E, 2I, H], w2 [E, H, I] in one float dtype; topk_weights [T, K] float; topk_ids [T, K] int32/int64 "
        "in [0, E). Returns [T, H] in hidden_states' dtype.");
}

}  // namespace qwen_bind

// One decode step of the gated delta rule on a float32 state pool, in place: the CPU kernel behind
// ops/gdn/vectorized_recurrent.py's decode path (qwen_ops._C.gdn_recurrent_decode_cpu).
//
// The torch form gathers each (sequence, head) state from the pool, advances it and scatters it back,
// so every pool row crosses memory about twice each way; here each [Dk, Dv] state is read and written
// where it lies, once each way (the op's floor): one pass for both products S^T k and S^T q, one pass
// for the decay and the rank-1 write, the second pass hitting the core's cache (64 KiB per state).
// The (sequence, value head) pairs are split over ATen's intra-op threads (at::parallel_for).
//
// Math: gdn_head_update.h (the vectorised form's, see its docstring), run by the widest variant the CPU
// supports (gdn_head_update_kernels.h) or the one the caller names (the tests run each).
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <string>
#include <vector>

#include "bindings/cpu/cpu_features.h"
#include "bindings/cpu/gdn_head_update_kernels.h"
#include "bindings/cpu/pool_slots.h"

namespace qwen_ops::cpu {
namespace {

void gdn_recurrent_decode(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                          const at::Tensor& beta, at::Tensor& pool, const at::Tensor& slots, const at::Tensor& fresh,
                          at::Tensor& out, const std::string& isa) {
  const char* op = "gdn_recurrent_decode_cpu";
  const GdnHeadDecode gdn_head_decode =
      QWEN_OPS_KERNEL_FOR_ISA(isa.empty() ? best_isa() : isa_from_name(op, isa), gdn_head_decode);
  const at::Tensor* dense[] = {&q, &k, &v, &g, &beta, &pool, &out};
  for (const at::Tensor* t : dense) {
    TORCH_CHECK(t->device().is_cpu() && t->scalar_type() == at::kFloat && t->is_contiguous(), op,
                ": q, k, v, g, beta, pool and out must be contiguous float32 CPU tensors");
  }
  TORCH_CHECK(q.dim() == 3 && k.sizes() == q.sizes(), op, ": q and k must be [B, Hk, Dk] alike, got ", q.sizes(),
              " and ", k.sizes());
  const int64_t batch = q.size(0), hk = q.size(1), dk = q.size(2);
  TORCH_CHECK(v.dim() == 3 && v.size(0) == batch, op, ": v must be [B, Hv, Dv] with B = ", batch, ", got ", v.sizes());
  const int64_t hv = v.size(1), dv = v.size(2);
  TORCH_CHECK(hk > 0 && hv % hk == 0, op, ": Hv (", hv, ") must be a multiple of Hk (", hk, ")");
  TORCH_CHECK(g.sizes() == at::IntArrayRef({batch, hv}) && beta.sizes() == g.sizes(), op,
              ": g and beta must be [B, Hv] = [", batch, ", ", hv, "]");
  TORCH_CHECK(pool.dim() == 4 && pool.size(1) == hv && pool.size(2) == dk && pool.size(3) == dv, op,
              ": pool must be [S, Hv, Dk, Dv] = [S, ", hv, ", ", dk, ", ", dv, "], got ", pool.sizes());
  TORCH_CHECK(out.sizes() == v.sizes(), op, ": out must be [B, Hv, Dv] like v");
  TORCH_CHECK(fresh.device().is_cpu() && fresh.scalar_type() == at::kBool && fresh.dim() == 1 &&
                  fresh.size(0) == batch && fresh.is_contiguous(),
              op, ": fresh must be a contiguous bool [B] CPU tensor");
  const int64_t rows = pool.size(0);
  const int64_t* slot = checked_pool_slots(op, slots, batch, rows);
  const bool* starts_fresh = fresh.data_ptr<bool>();
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  const float *gp = g.data_ptr<float>(), *bp = beta.data_ptr<float>();
  float* states = pool.data_ptr<float>();
  float* op_out = out.data_ptr<float>();
  const int64_t group = hv / hk;

  // Grain: a few pairs per task so a task's work (tens of microseconds) dwarfs its scheduling.
  at::parallel_for(0, batch * hv, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(3 * dv);
    for (int64_t pair = begin; pair < end; ++pair) {
      const int64_t b = pair / hv, h = pair % hv;
      float* o = op_out + pair * dv;
      if (slot[b] < 0) {  // padding: zero output, nothing read or written
        std::fill(o, o + dv, 0.0f);
        continue;
      }
      float* s = states + (slot[b] * hv + h) * dk * dv;
      if (starts_fresh[b]) std::fill(s, s + dk * dv, 0.0f);
      gdn_head_decode(s, kp + (b * hk + h / group) * dk, qp + (b * hk + h / group) * dk, vp + pair * dv, gp[pair],
                      bp[pair], dk, dv, scratch.data(), o);
    }
  });
}

}  // namespace

void register_gdn_recurrent_decode(pybind11::module_& m) {
  m.def("gdn_recurrent_decode_cpu", &gdn_recurrent_decode, pybind11::arg("q"), pybind11::arg("k"),
        pybind11::arg("v"), pybind11::arg("g"), pybind11::arg("beta"), pybind11::arg("pool"),
        pybind11::arg("slots"), pybind11::arg("fresh"), pybind11::arg("out"), pybind11::arg("isa") = "",
        "One gated-delta-rule decode step on a float32 state pool, in place (CPU). q, k float32 [B, Hk, Dk] "
        "(normalised and scaled); v [B, Hv, Dv]; g, beta [B, Hv]; pool [S, Hv, Dk, Dv]; slots int64 [B] "
        "(-1 = padding: zero output); fresh bool [B] (start from zeros); writes out [B, Hv, Dv]. isa: '' (the "
        "widest this CPU runs), 'portable', 'avx2' or 'avx512' (cpu_isas()): every variant gives the same bits.");
}

}  // namespace qwen_ops::cpu

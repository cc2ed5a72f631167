// qwen_ops::gdn_decode_step: everything a Qwen3.5 Gated DeltaNet layer does at decode between its input
// projections and out_proj, for one token per sequence, in one call (CPU; float32, or bfloat16 activations and
// weights with float32 arithmetic and a float32 recurrent state). Registered as a torch
// operator (CPU kernel here, fake and contract in ops/gdn/decode_step_op.py); model/gdn.py calls it for the
// decode rows of a step on the torch backend.
//
// Why one call: at batch 1 the work between the projections is small (a 6144-channel conv, 16 heads of
// 128 x 128 state, a gated norm), and composing it from ops costs more in op calls, checks and small
// temporaries than in arithmetic (bench/RESULTS.md, "Issue 15, perf-step3"). Here the conv state and the
// GDN state are each read and written once where they lie in their pools, in one parallel pass over
// (sequence, key head) tasks, each:
//   1. the causal conv of its q, k and v channels over the saved inputs and x, SiLU, the state shift
//      (as ops/conv: y = x * w[K-1] + sum_{k<K-1} state[k] * w[k], state <- its K-2 newest inputs, then x);
//   2. q, k L2-normalised (q scaled by Dk^-0.5); per value head of the key head's group, the gates
//      g = -exp(A_log) * softplus(a + dt_bias) and beta = sigmoid(b) (ops/gdn/reference_gating.py), the
//      delta-rule step (gdn_head_update.h, the widest variant the CPU runs: gdn_head_update_kernels.h), and
//      the gated RMSNorm w * rmsnorm(o) * silu(z) (model/layers.py).
// The same operations in the same order as that composition; only the order of the float32 sums over a
// head (and exp's last bit against torch's vectorised exp) differ, so the two agree to float32 rounding.
// In bfloat16 the composition rounds to bfloat16 where each of its ops returns (the conv output, beta, the
// delta rule's output, the norm's normalised value, its product with the weight, the result); this kernel
// rounds at the same points (rounded<E> below), so the two agree but for a rounding the float32 sum order
// tips the other way.
// Threads: ATen's intra-op pool (at::parallel_for), as the other CPU kernels.
#include <ATen/Parallel.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "bindings/cpu/cpu_features.h"
#include "bindings/cpu/dtype_names.h"
#include "bindings/cpu/gdn_head_update_kernels.h"

namespace qwen_ops::cpu {
namespace {

constexpr const char* kOp = "gdn_decode_step";
constexpr float kL2NormEps = 1e-6f;          // ops/gdn/reference_recurrent.py L2NORM_EPS
constexpr float kSoftplusThreshold = 20.0f;  // ops/gdn/reference_gating.py SOFTPLUS_THRESHOLD

// [B, width] rows of the activation dtype, each row contiguous (a column slice of a stacked projection's
// output is fine).
void check_rows(const char* name, const at::Tensor& t, at::ScalarType dtype, int64_t batch, int64_t width) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == dtype, kOp, ": argument '", name, "' must be a ",
              dtype_name(dtype), " CPU tensor (mixed_qkv's dtype), got ", dtype_name(t.scalar_type()), " on ",
              t.device());
  TORCH_CHECK(t.dim() == 2 && t.size(0) == batch && t.size(1) == width, kOp, ": argument '", name,
              "' must be [B, ", width, "] with B = ", batch, ", got shape ", t.sizes());
  TORCH_CHECK(t.stride(1) == 1 || width <= 1, kOp, ": argument '", name,
              "' must have contiguous rows (stride 1 along dim 1), got strides ", t.strides());
}

void check_dense(const char* name, const at::Tensor& t, at::ScalarType dtype, at::IntArrayRef shape,
                 const char* layout) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == dtype && t.is_contiguous(), kOp, ": argument '", name,
              "' must be a contiguous ", dtype_name(dtype), " CPU tensor ", layout, ", got ",
              dtype_name(t.scalar_type()), " on ", t.device(), t.is_contiguous() ? "" : " (not contiguous)");
  TORCH_CHECK(t.sizes() == shape, kOp, ": argument '", name, "' must have shape ", layout, " = ", shape,
              ", got ", t.sizes());
}

// The pool row of each sequence, int32 or int64 [B] (any stride), each -1 (padding) or in [0, rows).
std::vector<int64_t> checked_slots(const at::Tensor& indices, int64_t batch, int64_t rows) {
  TORCH_CHECK(indices.device().is_cpu() && (indices.scalar_type() == at::kInt || indices.scalar_type() == at::kLong),
              kOp, ": argument 'state_indices' must be an int32 or int64 CPU tensor, got ", indices.scalar_type(),
              " on ", indices.device());
  TORCH_CHECK(indices.dim() == 1 && indices.size(0) == batch, kOp, ": argument 'state_indices' must be [B] with B = ",
              batch, ", got shape ", indices.sizes());
  std::vector<int64_t> slots(batch);
  const int64_t stride = indices.stride(0);
  for (int64_t i = 0; i < batch; ++i) {
    slots[i] = indices.scalar_type() == at::kInt ? indices.data_ptr<int32_t>()[i * stride]
                                                   : indices.data_ptr<int64_t>()[i * stride];
    TORCH_CHECK(slots[i] >= -1 && slots[i] < rows, kOp, ": argument 'state_indices' has index ", slots[i],
                " (sequence ", i, ") outside [-1, ", rows, ") (-1 marks padding)");
  }
  return slots;
}

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

// Where the composition's ops return in the activation dtype E, its value is rounded to E: nothing for float32,
// round to nearest even for bfloat16 (c10::BFloat16's conversion, as torch's .to(torch.bfloat16)).
template <class E>
inline float rounded(float v) {
  return static_cast<float>(static_cast<E>(v));
}

// The kernel on element type E (float, or c10::BFloat16) of the activations, conv pool, taps and norm weight;
// A_log, dt_bias and the recurrent state are float32. The arguments are checked.
template <class E>
void run(const at::Tensor& mixed_qkv, const at::Tensor& z, const at::Tensor& b, const at::Tensor& a,
         at::Tensor& conv_states, const at::Tensor& conv_taps, at::Tensor& ssm_states, const at::Tensor& A_log,
         const at::Tensor& dt_bias, const at::Tensor& norm_weight, const std::vector<int64_t>& slots, double eps,
         at::Tensor& out) {
  const GdnHeadDecode gdn_head_decode = QWEN_OPS_KERNEL_FOR_ISA(best_isa(), gdn_head_decode);
  const int64_t batch = mixed_qkv.size(0), channels = mixed_qkv.size(1);
  const int64_t hv = ssm_states.size(1), dk = ssm_states.size(2), dv = ssm_states.size(3), value_dim = hv * dv;
  const int64_t key_dim = (channels - value_dim) / 2, hk = key_dim / dk;
  const int64_t context = conv_taps.size(0) - 1;
  const E* x = mixed_qkv.data_ptr<E>();
  const E* zp = z.data_ptr<E>();
  const E* bp = b.data_ptr<E>();
  const E* ap = a.data_ptr<E>();
  const int64_t x_stride = mixed_qkv.stride(0), z_stride = z.stride(0), b_stride = b.stride(0), a_stride = a.stride(0);
  const E* taps = conv_taps.data_ptr<E>();
  E* conv_pool = conv_states.data_ptr<E>();
  const float* a_log = A_log.data_ptr<float>();
  const float* bias = dt_bias.data_ptr<float>();
  const E* weight = norm_weight.data_ptr<E>();
  float* states = ssm_states.data_ptr<float>();
  E* op_out = out.data_ptr<E>();
  const int64_t group = hv / hk;
  const float scale = static_cast<float>(std::pow(static_cast<double>(dk), -0.5));  // as Python's Dk ** -0.5
  const float norm_eps = static_cast<float>(eps);

  // One task per (sequence, key head): the conv channels of its q and k and of its group's v heads, then each of
  // those value heads. No two tasks share a channel or a state, and one parallel region serves the whole call.
  at::parallel_for(0, batch * hk, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> buffer(2 * dk + group * dv + 4 * dv);
    float* qk = buffer.data();           // [q | k] of the key head after the conv, then normalised
    float* vs = qk + 2 * dk;             // the group's v heads after the conv
    float* o = vs + group * dv;          // one value head's output, in float32
    float* scratch = o + dv;             // gdn_head_decode's
    for (int64_t task = begin; task < end; ++task) {
      const int64_t row = task / hk, kh = task % hk;
      E* o_group = op_out + row * value_dim + kh * group * dv;
      if (slots[row] < 0) {  // padding: zero output, nothing read or written
        std::fill(o_group, o_group + group * dv, E(0.0f));
        continue;
      }
      const E* xb = x + row * x_stride;
      E* saved = conv_pool + slots[row] * context * channels;
      // The conv over the saved inputs and x, and the state shift, on one span of channels (ops/conv's order).
      auto convolve = [&](int64_t c0, int64_t n, float* y) {
        const E* newest = taps + context * channels + c0;
        for (int64_t c = 0; c < n; ++c) y[c] = static_cast<float>(xb[c0 + c]) * static_cast<float>(newest[c]);
        for (int64_t k = 0; k < context; ++k) {
          const E* s = saved + k * channels + c0;
          const E* tap = taps + k * channels + c0;
          for (int64_t c = 0; c < n; ++c) y[c] += static_cast<float>(s[c]) * static_cast<float>(tap[c]);
        }
        for (int64_t k = 0; k + 1 < context; ++k) {  // oldest first, so nothing is read after it is overwritten
          std::copy(saved + (k + 1) * channels + c0, saved + (k + 1) * channels + c0 + n, saved + k * channels + c0);
        }
        std::copy(xb + c0, xb + c0 + n, saved + (context - 1) * channels + c0);
        for (int64_t c = 0; c < n; ++c) y[c] = rounded<E>(silu(y[c]));
      };
      convolve(kh * dk, dk, qk);
      convolve(key_dim + kh * dk, dk, qk + dk);
      convolve(2 * key_dim + kh * group * dv, group * dv, vs);
      // L2-normalised q (then scaled) and k (reference_recurrent.l2normalize: x * rsqrt(sum(x^2) + eps)).
      float q_sq = 0.0f, k_sq = 0.0f;
      for (int64_t i = 0; i < dk; ++i) {
        q_sq += qk[i] * qk[i];
        k_sq += qk[dk + i] * qk[dk + i];
      }
      const float q_inv = 1.0f / std::sqrt(q_sq + kL2NormEps), k_inv = 1.0f / std::sqrt(k_sq + kL2NormEps);
      for (int64_t i = 0; i < dk; ++i) {
        qk[i] = (qk[i] * q_inv) * scale;
        qk[dk + i] = qk[dk + i] * k_inv;
      }
      for (int64_t j = 0; j < group; ++j) {
        const int64_t h = kh * group + j;
        const float gate_in = static_cast<float>(ap[row * a_stride + h]) + bias[h];
        const float softplus = gate_in > kSoftplusThreshold ? gate_in : std::log1p(std::exp(gate_in));
        const float g = -std::exp(a_log[h]) * softplus;
        const float beta = rounded<E>(1.0f / (1.0f + std::exp(-static_cast<float>(bp[row * b_stride + h]))));
        gdn_head_decode(states + (slots[row] * hv + h) * dk * dv, qk + dk, qk, vs + j * dv, g, beta, dk, dv, scratch,
                        o);
        // The output norm: w * (o * rsqrt(mean(o^2) + eps)) * silu(z).
        for (int64_t i = 0; i < dv; ++i) o[i] = rounded<E>(o[i]);
        float o_sq = 0.0f;
        for (int64_t i = 0; i < dv; ++i) o_sq += o[i] * o[i];
        const float o_inv = 1.0f / std::sqrt(o_sq / static_cast<float>(dv) + norm_eps);
        const E* zh = zp + row * z_stride + h * dv;
        E* oh = o_group + j * dv;
        for (int64_t i = 0; i < dv; ++i) {
          const float normed = rounded<E>(o[i] * o_inv);
          const float weighted = rounded<E>(static_cast<float>(weight[i]) * normed);
          oh[i] = static_cast<E>(weighted * silu(static_cast<float>(zh[i])));
        }
      }
    }
  });
}

at::Tensor gdn_decode_step(const at::Tensor& mixed_qkv, const at::Tensor& z, const at::Tensor& b, const at::Tensor& a,
                           at::Tensor& conv_states, const at::Tensor& conv_taps, at::Tensor& ssm_states,
                           const at::Tensor& A_log, const at::Tensor& dt_bias, const at::Tensor& norm_weight,
                           const at::Tensor& state_indices, double eps) {
  // Every check runs before any memory is written.
  TORCH_CHECK(ssm_states.dim() == 4, kOp, ": argument 'ssm_states' must be 4-D [S, Hv, Dk, Dv], got shape ",
              ssm_states.sizes());
  const int64_t rows = ssm_states.size(0), hv = ssm_states.size(1), dk = ssm_states.size(2), dv = ssm_states.size(3);
  TORCH_CHECK(hv >= 1 && dk >= 1 && dv >= 1, kOp, ": argument 'ssm_states' must have Hv, Dk, Dv >= 1, got shape ",
              ssm_states.sizes());
  check_dense("ssm_states", ssm_states, at::kFloat, {rows, hv, dk, dv}, "[S, Hv, Dk, Dv]");
  TORCH_CHECK(mixed_qkv.dim() == 2, kOp, ": argument 'mixed_qkv' must be 2-D [B, 2 Hk Dk + Hv Dv], got shape ",
              mixed_qkv.sizes());
  const int64_t batch = mixed_qkv.size(0), channels = mixed_qkv.size(1), value_dim = hv * dv;
  const int64_t key_dim = (channels - value_dim) / 2;
  TORCH_CHECK(channels > value_dim && (channels - value_dim) % 2 == 0 && key_dim % dk == 0, kOp,
              ": argument 'mixed_qkv' must be [B, 2 Hk Dk + Hv Dv] with Dk = ", dk, ", Hv Dv = ", value_dim,
              " (from 'ssm_states'), got shape ", mixed_qkv.sizes());
  const int64_t hk = key_dim / dk;
  TORCH_CHECK(hv % hk == 0, kOp, ": the number of value heads Hv = ", hv, " must be a multiple of the key heads Hk = ",
              hk, " (from 'mixed_qkv')");
  const at::ScalarType dtype = mixed_qkv.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16, kOp,
              ": argument 'mixed_qkv' must be float32 or bfloat16, got ", dtype_name(dtype));
  check_rows("mixed_qkv", mixed_qkv, dtype, batch, channels);
  check_rows("z", z, dtype, batch, value_dim);
  check_rows("b", b, dtype, batch, hv);
  check_rows("a", a, dtype, batch, hv);
  TORCH_CHECK(conv_taps.dim() == 2 && conv_taps.size(0) >= 2, kOp,
              ": argument 'conv_taps' must be [K, C] with K >= 2 (the conv weight transposed), got shape ",
              conv_taps.sizes());
  const int64_t width = conv_taps.size(0), context = width - 1;
  check_dense("conv_taps", conv_taps, dtype, {width, channels}, "[K, C]");
  TORCH_CHECK(conv_states.dim() == 3, kOp, ": argument 'conv_states' must be 3-D [S, K-1, C], got shape ",
              conv_states.sizes());
  check_dense("conv_states", conv_states, dtype, {conv_states.size(0), context, channels}, "[S, K-1, C]");
  check_dense("A_log", A_log, at::kFloat, {hv}, "[Hv]");
  check_dense("dt_bias", dt_bias, at::kFloat, {hv}, "[Hv]");
  check_dense("norm_weight", norm_weight, dtype, {dv}, "[Dv]");
  TORCH_CHECK(std::isfinite(eps) && eps > 0, kOp, ": argument 'eps' must be finite and > 0, got ", eps);
  const std::vector<int64_t> slots = checked_slots(state_indices, batch, std::min(rows, conv_states.size(0)));

  at::Tensor out = at::empty({batch, value_dim}, mixed_qkv.options());
  if (dtype == at::kBFloat16) {
    run<c10::BFloat16>(mixed_qkv, z, b, a, conv_states, conv_taps, ssm_states, A_log, dt_bias, norm_weight, slots,
                       eps, out);
  } else {
    run<float>(mixed_qkv, z, b, a, conv_states, conv_taps, ssm_states, A_log, dt_bias, norm_weight, slots, eps, out);
  }
  return out;
}

}  // namespace
}  // namespace qwen_ops::cpu

TORCH_LIBRARY_FRAGMENT(qwen_ops, m) {
  m.def("gdn_decode_step(Tensor mixed_qkv, Tensor z, Tensor b, Tensor a, Tensor(a!) conv_states, Tensor conv_taps, "
        "Tensor(b!) ssm_states, Tensor A_log, Tensor dt_bias, Tensor norm_weight, Tensor state_indices, float eps) "
        "-> Tensor");
}

TORCH_LIBRARY_IMPL(qwen_ops, CPU, m) {
  m.impl("gdn_decode_step", &qwen_ops::cpu::gdn_decode_step);
}

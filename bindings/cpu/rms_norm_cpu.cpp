// qwen_ops::rms_norm: out = x * rsqrt(mean(x^2) + eps) * scale over the last dim, float32 arithmetic, the result
// in x's dtype (float32 or bfloat16), on the CPU. Registered as a torch operator (CPU kernel here, fake and
// contract in ops/norm/op.py); model/network/layers.py rms_norm_scaled calls it for CPU tensors.
//
// Why: a decode step of the 0.8B model runs 49 of these norms on one row of 1024 each; as torch ops (widen,
// square, mean, add, rsqrt, two products, narrow) each costs about 80 us of calls and temporaries for about
// 1 us of arithmetic (bench/e2e/profile_decode.py --breakdown, "decoder norms"). One call does the same
// operations in the same order: only the order of the float32 sum of squares differs from torch's mean.
#include <ATen/Parallel.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <cmath>

#include "bindings/cpu/dtype_names.h"

namespace qwen_ops::cpu {
namespace {

constexpr const char* kOp = "rms_norm";
constexpr int kLanes = 16;  // the sum of squares' partial sums: lane l takes k = l, l + 16, ...
// Rows per thread at least this many elements: below it the pool's fork/join costs more than the rows.
constexpr int64_t kMinElementsPerThread = 1 << 16;

// Rows of x at x_stride elements apart (h or more), out's rows packed.
template <class E>
void normalize_rows(const E* x, int64_t x_stride, const float* scale, E* out, int64_t rows, int64_t h, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const E* xr = x + r * x_stride;
    float lanes[kLanes] = {};
    int64_t k = 0;
    for (; k + kLanes <= h; k += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const float v = static_cast<float>(xr[k + l]);
        lanes[l] += v * v;
      }
    for (int l = 0; k + l < h; ++l) {
      const float v = static_cast<float>(xr[k + l]);
      lanes[l] += v * v;
    }
    float sum = 0.0f;
    for (int l = 0; l < kLanes; ++l) sum += lanes[l];
    const float inverse = 1.0f / std::sqrt(sum / static_cast<float>(h) + eps);
    E* o = out + r * h;
    for (int64_t i = 0; i < h; ++i) o[i] = static_cast<E>((static_cast<float>(xr[i]) * inverse) * scale[i]);
  }
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& scale, double eps) {
  TORCH_CHECK(x.device().is_cpu(), kOp, ": argument 'x' must be a CPU tensor, got one on ", x.device());
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16, kOp,
              ": argument 'x' must be float32 or bfloat16, got ", dtype_name(x.scalar_type()));
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) >= 1, kOp, ": argument 'x' must be [..., H] with H >= 1, got shape ",
              x.sizes());
  // Contiguous, or 2-D [R, H] with contiguous rows at any row stride (a per-head view of a wider projection
  // output, such as the model's query heads beside their gates, flattened to rows).
  TORCH_CHECK(x.is_contiguous() || (x.dim() == 2 && x.stride(1) == 1 && x.stride(0) >= x.size(1)), kOp,
              ": argument 'x' must be contiguous, or 2-D with contiguous rows, got shape ", x.sizes(), " and strides ",
              x.strides());
  const int64_t h = x.size(-1);
  TORCH_CHECK(scale.device().is_cpu() && scale.scalar_type() == at::kFloat && scale.dim() == 1 &&
                  scale.size(0) == h && scale.is_contiguous(),
              kOp, ": argument 'scale' must be a contiguous float32 CPU tensor [H] = [", h, "], got ",
              dtype_name(scale.scalar_type()), " ", scale.sizes());
  TORCH_CHECK(std::isfinite(eps) && eps >= 0, kOp, ": argument 'eps' must be finite and >= 0, got ", eps);
  at::Tensor out = at::empty(x.sizes(), x.options());
  const int64_t rows = x.numel() / h;
  const int64_t x_stride = x.is_contiguous() ? h : x.stride(0);
  const int64_t grain = std::max<int64_t>(1, kMinElementsPerThread / h);
  const float e = static_cast<float>(eps);
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    if (x.scalar_type() == at::kFloat) {
      normalize_rows<float>(x.data_ptr<float>() + begin * x_stride, x_stride, scale.data_ptr<float>(),
                            out.data_ptr<float>() + begin * h, end - begin, h, e);
    } else {
      normalize_rows<c10::BFloat16>(x.data_ptr<c10::BFloat16>() + begin * x_stride, x_stride, scale.data_ptr<float>(),
                                    out.data_ptr<c10::BFloat16>() + begin * h, end - begin, h, e);
    }
  });
  return out;
}

}  // namespace
}  // namespace qwen_ops::cpu

TORCH_LIBRARY_FRAGMENT(qwen_ops, m) {
  m.def("rms_norm(Tensor x, Tensor scale, float eps) -> Tensor");
}

TORCH_LIBRARY_IMPL(qwen_ops, CPU, m) {
  m.impl("rms_norm", &qwen_ops::cpu::rms_norm);
}

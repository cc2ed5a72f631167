// qwen_ops::small_m_linear: out = x @ weight^T (+ bias) on the CPU for few rows of x (the decode-path
// projections), registered as a torch operator (CPU kernel here, fake in ops/linear/op.py) and, with a
// chosen instruction set, as qwen_ops._C.small_m_linear_isa for the tests and the benchmark.
//
// Why: at decode the projections are matrix-vector products that must stream every weight once from
// memory; MKL's sgemm/sgemv at M = 1..8 on this project's CPUs read far below the machine's bandwidth.
// Threads: the columns are split with at::parallel_for, i.e. torch's own intra-op pool (OpenMP in the
// project's torch builds), so torch.set_num_threads / OMP_NUM_THREADS govern it and no second OpenMP
// runtime or pool is created.
#include <ATen/Parallel.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <algorithm>

#include "bindings/cpu/cpu_features.h"
#include "bindings/cpu/dtype_names.h"
#include "bindings/cpu/small_m_linear_kernels.h"

namespace qwen_ops::cpu {

namespace {

constexpr const char* kOp = "small_m_linear";
// Each thread's share must read at least this many weight bytes, or the fork/join of the pool costs
// more than the work (the GDN gate projections read only 64 KB).
constexpr int64_t kMinBytesPerThread = 256 * 1024;
// Threads split the columns in units of 16: a multiple of every tile's width (so only the last unit of
// the whole range has a short tile) and 64 bytes of a row of out (one cache line where the rows are
// 64-byte aligned, so two threads do not write the same line).
constexpr int64_t kColumnsPerUnit = 16;

void check_args(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias) {
  TORCH_CHECK(x.device().is_cpu(), kOp, ": argument 'x' must be a CPU tensor, got one on ", x.device());
  TORCH_CHECK(weight.device().is_cpu(), kOp, ": argument 'weight' must be a CPU tensor, got one on ",
              weight.device());
  TORCH_CHECK(x.dim() == 2, kOp, ": argument 'x' must be 2-D [M, K], got shape ", x.sizes());
  TORCH_CHECK(weight.dim() == 2, kOp, ": argument 'weight' must be 2-D [N, K], got shape ", weight.sizes());
  TORCH_CHECK(weight.size(1) == x.size(1), kOp, ": argument 'weight' must be [N, K] with K = ", x.size(1),
              " (x's last dim), got shape ", weight.sizes());
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16, kOp,
              ": argument 'x' must be float32 or bfloat16, got ", dtype_name(x.scalar_type()));
  TORCH_CHECK(weight.scalar_type() == x.scalar_type(), kOp, ": argument 'weight' must be ",
              dtype_name(x.scalar_type()), " (x's dtype), got ", dtype_name(weight.scalar_type()));
  TORCH_CHECK(x.is_contiguous(), kOp, ": argument 'x' must be contiguous (row-major [M, K])");
  TORCH_CHECK(weight.is_contiguous(), kOp, ": argument 'weight' must be contiguous (row-major [N, K])");
  if (bias.has_value()) {
    const at::Tensor& b = *bias;
    TORCH_CHECK(b.device().is_cpu(), kOp, ": argument 'bias' must be a CPU tensor, got one on ", b.device());
    TORCH_CHECK(b.dim() == 1 && b.size(0) == weight.size(0), kOp, ": argument 'bias' must be [N] = [",
                weight.size(0), "], got shape ", b.sizes());
    TORCH_CHECK(b.scalar_type() == x.scalar_type(), kOp, ": argument 'bias' must be ", dtype_name(x.scalar_type()),
                " (x's dtype), got ", dtype_name(b.scalar_type()));
    TORCH_CHECK(b.is_contiguous(), kOp, ": argument 'bias' must be contiguous");
  }
}

// The columns split over torch's threads, each share a call of `kernel` on element type E.
template <class E, class Kernel>
void split_columns(Kernel kernel, const E* xp, const E* wp, const E* bp, E* op, int64_t m, int64_t n, int64_t k) {
  const int64_t unit_bytes = kColumnsPerUnit * std::max<int64_t>(k, 1) * static_cast<int64_t>(sizeof(E));
  const int64_t grain = std::max<int64_t>(1, kMinBytesPerThread / unit_bytes);
  const int64_t units = (n + kColumnsPerUnit - 1) / kColumnsPerUnit;
  at::parallel_for(0, units, grain, [&](int64_t begin, int64_t end) {
    kernel(xp, wp, bp, op, m, n, k, begin * kColumnsPerUnit, std::min(n, end * kColumnsPerUnit));
  });
}

template <class E>
const E* data_or_null(const c10::optional<at::Tensor>& t) {
  return t.has_value() ? static_cast<const E*>(t->data_ptr()) : nullptr;
}

// `isa` picks the float32 variant; `bf16_simd` the bfloat16 one (AVX-512 BF16, else portable).
at::Tensor run(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias, Isa isa,
               bool bf16_simd) {
  check_args(x, weight, bias);
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  at::Tensor out = at::empty({m, n}, x.options());
  if (m == 0 || n == 0) return out;
  if (x.scalar_type() == at::kBFloat16) {
    SmallMLinearBf16 kernel = small_m_linear_bf16_portable;
#if defined(QWEN_OPS_X86_KERNELS)
    if (bf16_simd) kernel = small_m_linear_bf16_avx512;
#endif
    split_columns<uint16_t>(kernel, static_cast<const uint16_t*>(x.data_ptr()),
                            static_cast<const uint16_t*>(weight.data_ptr()), data_or_null<uint16_t>(bias),
                            static_cast<uint16_t*>(out.data_ptr()), m, n, k);
#if defined(QWEN_OPS_X86_KERNELS)
  } else if (isa == Isa::kAvx512 && m >= kRowLanesMinRows) {  // the row-lanes form (small_m_linear_kernels.h)
    at::Tensor lanes = at::empty({row_lane_groups(m), k, kRowLanes}, x.options());
    pack_row_lanes_avx512(x.data_ptr<float>(), m, k, lanes.data_ptr<float>());
    split_columns<float>(small_m_linear_f32_row_lanes_avx512, lanes.data_ptr<float>(), weight.data_ptr<float>(),
                         data_or_null<float>(bias), out.data_ptr<float>(), m, n, k);
#endif
  } else {
    split_columns<float>(QWEN_OPS_KERNEL_FOR_ISA(isa, small_m_linear_f32), x.data_ptr<float>(),
                         weight.data_ptr<float>(), data_or_null<float>(bias), out.data_ptr<float>(), m, n, k);
  }
  return out;
}

at::Tensor small_m_linear(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias) {
  return run(x, weight, bias, best_isa(), cpu_has_avx512_bf16());
}

constexpr const char* kBf16Simd = "avx512_bf16";

// float32: "portable", "avx2" or "avx512" (cpu_isas()); bfloat16: "portable" or "avx512_bf16".
at::Tensor small_m_linear_isa(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                              const std::string& isa) {
  constexpr const char* op = "small_m_linear_isa";
  if (x.scalar_type() != at::kBFloat16) return run(x, weight, bias, isa_from_name(op, isa), false);
  TORCH_CHECK(isa == "portable" || isa == kBf16Simd, op, ": argument 'isa' must be 'portable' or '", kBf16Simd,
              "' for bfloat16 operands, got '", isa, "'");
  TORCH_CHECK(isa == "portable" || cpu_has_avx512_bf16(), op, ": argument 'isa' names '", kBf16Simd,
              "', which this CPU (or this build) does not support");
  return run(x, weight, bias, Isa::kPortable, isa == kBf16Simd);
}

}  // namespace

void register_small_m_linear(pybind11::module_& m) {
  m.def("small_m_linear_isa", &small_m_linear_isa, pybind11::arg("x"), pybind11::arg("weight"),
        pybind11::arg("bias") = pybind11::none(), pybind11::arg("isa"),
        "small_m_linear with a chosen variant (float32: 'portable', 'avx2', 'avx512'; bfloat16: 'portable', "
        "'avx512_bf16'): tests and benchmarks.");
  m.def("small_m_linear_bf16_variants", []() {
    std::vector<std::string> names{"portable"};
    if (cpu_has_avx512_bf16()) names.emplace_back(kBf16Simd);
    return names;
  }, "The bfloat16 small_m_linear variants this CPU runs, portable first (the last is the one the op uses).");
  m.def("cpu_isas", []() {
    std::vector<std::string> names;
    for (Isa isa : supported_isas()) names.emplace_back(isa_name(isa));
    return names;
  }, "The CPU kernels' instruction sets this CPU runs, narrowest first.");
  m.def("parallel_for_threads", [](int64_t units) {
    // What every CPU kernel's at::parallel_for does in this build: the distinct threads that ran `units`
    // units of grain 1 (1 when the build lacks OpenMP and the loop runs serially).
    std::vector<int> ran(std::max<int64_t>(units, 0), -1);
    at::parallel_for(0, units, 1, [&](int64_t begin, int64_t end) {
      for (int64_t u = begin; u < end; ++u) ran[u] = at::get_thread_num();
    });
    std::sort(ran.begin(), ran.end());
    return static_cast<int64_t>(std::unique(ran.begin(), ran.end()) - ran.begin());
  }, pybind11::arg("units"), "Distinct threads at::parallel_for used for `units` units of grain 1 (build check).");
  m.def("small_m_linear_row_lanes_min_rows", []() { return kRowLanesMinRows; },
        "The fewest rows of x for which the float32 AVX-512 variant sums in its row-lanes form (one chain of "
        "FMAs over K per output) rather than its dot form: row m of a result is the same bitwise at every M "
        "on the same side of this bound.");
  m.def("cpu_best_isa", []() { return std::string(isa_name(best_isa())); },
        "The instruction set torch.ops.qwen_ops.small_m_linear uses on this CPU.");
}

}  // namespace qwen_ops::cpu

TORCH_LIBRARY_FRAGMENT(qwen_ops, m) {
  m.def("small_m_linear(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(qwen_ops, CPU, m) {
  m.impl("small_m_linear", &qwen_ops::cpu::small_m_linear);
}

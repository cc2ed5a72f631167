// The CPU kernels of ops/int8_linear (the torch backend's fast form): qwen_ops._C.w8a8_linear_cpu and
// qwen_ops._C.weight_only_int8_linear_cpu, with the variant chosen at run time (AVX-512 VNNI where the CPU has
// it, portable elsewhere) or by name for the tests. Every argument is TORCH_CHECKed here before a kernel reads
// memory; the columns are split over torch's intra-op pool (at::parallel_for) in units of 16.
#include <ATen/Parallel.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bindings/cpu/cpu_features.h"
#include "bindings/cpu/int8_linear_kernels.h"

namespace qwen_ops::cpu {

namespace {

constexpr const char* kW8A8 = "w8a8_linear_cpu";
constexpr const char* kWeightOnly = "weight_only_int8_linear_cpu";
// The int32 sums of the W8A8 kernels are exact while 128 * 128 * K < 2^31.
constexpr int64_t kMaxK = 65536;
// As small_m_linear: each thread's share reads at least this many weight bytes, in 16-column units.
constexpr int64_t kMinBytesPerThread = 256 * 1024;
constexpr int64_t kColumnsPerUnit = 16;

constexpr const char* kPortable = "portable";
constexpr const char* kVnni = "avx512_vnni";
constexpr const char* kBf16 = "avx512_bf16";  // weight-only with bfloat16 x only

std::vector<std::string> variants() {
  std::vector<std::string> names{kPortable};
  if (cpu_has_avx512_vnni()) names.emplace_back(kVnni);
  return names;
}

// The kernels weight-only with bfloat16 x can name: the float32 ones (x widened) and the AVX-512 BF16 one.
std::vector<std::string> bf16_variants() {
  std::vector<std::string> names = variants();
  if (cpu_has_avx512_bf16()) names.emplace_back(kBf16);
  return names;
}

// true: the AVX-512 VNNI kernels; "" picks the best this CPU runs.
bool use_vnni(const char* op, const std::string& variant) {
  if (variant.empty()) return cpu_has_avx512_vnni();
  TORCH_CHECK(variant == kPortable || variant == kVnni, op, ": argument 'variant' must be '', '", kPortable,
              "' or '", kVnni, "', got '", variant, "'");
  TORCH_CHECK(variant == kPortable || cpu_has_avx512_vnni(), op, ": argument 'variant' names '", variant,
              "', which this CPU (or this build) does not support");
  return variant == kVnni;
}

void check_2d(const char* op, const char* name, const at::Tensor& t, at::ScalarType dtype, const char* layout) {
  TORCH_CHECK(t.device().is_cpu(), op, ": argument '", name, "' must be a CPU tensor, got one on ", t.device());
  TORCH_CHECK(t.dim() == 2, op, ": argument '", name, "' must be 2-D ", layout, ", got shape ", t.sizes());
  TORCH_CHECK(t.scalar_type() == dtype, op, ": argument '", name, "' must be ", dtype, ", got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), op, ": argument '", name, "' must be contiguous (row-major ", layout, ")");
}

void check_vector(const char* op, const char* name, const at::Tensor& t, int64_t size, at::ScalarType dtype,
                  const char* what) {
  TORCH_CHECK(t.device().is_cpu(), op, ": argument '", name, "' must be a CPU tensor, got one on ", t.device());
  TORCH_CHECK(t.dim() == 1 && t.size(0) == size, op, ": argument '", name, "' must be [", what, "] = [", size,
              "], got shape ", t.sizes());
  TORCH_CHECK(t.scalar_type() == dtype, op, ": argument '", name, "' must be ", dtype, ", got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), op, ": argument '", name, "' must be contiguous");
}

void check_weight(const char* op, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_scale,
                  const c10::optional<at::Tensor>& bias) {
  check_2d(op, "weight", weight, at::kChar, "[N, K]");
  TORCH_CHECK(weight.size(1) == x.size(1), op, ": argument 'weight' must be [N, K] with K = ", x.size(1),
              " (x's last dim), got shape ", weight.sizes());
  check_vector(op, "weight_scale", weight_scale, weight.size(0), at::kFloat, "N");
  if (bias.has_value()) check_vector(op, "bias", *bias, weight.size(0), at::kFloat, "N");
}

template <class Kernel>
void over_columns(int64_t n, int64_t k, int64_t bytes_per_weight, Kernel kernel) {
  const int64_t unit_bytes = kColumnsPerUnit * std::max<int64_t>(k, 1) * bytes_per_weight;
  const int64_t grain = std::max<int64_t>(1, kMinBytesPerThread / unit_bytes);
  const int64_t units = (n + kColumnsPerUnit - 1) / kColumnsPerUnit;
  at::parallel_for(0, units, grain, [&](int64_t begin, int64_t end) {
    kernel(begin * kColumnsPerUnit, std::min(n, end * kColumnsPerUnit));
  });
}

at::Tensor w8a8_linear_cpu(const at::Tensor& x, const at::Tensor& x_scale, const at::Tensor& weight,
                           const at::Tensor& weight_scale, const c10::optional<at::Tensor>& quant_bias,
                           const c10::optional<at::Tensor>& bias, const std::string& variant) {
  check_2d(kW8A8, "x", x, at::kChar, "[M, K]");
  check_vector(kW8A8, "x_scale", x_scale, x.size(0), at::kFloat, "M");
  check_weight(kW8A8, x, weight, weight_scale, bias);
  if (quant_bias.has_value()) check_vector(kW8A8, "quant_bias", *quant_bias, weight.size(0), at::kInt, "N");
  TORCH_CHECK(x.size(1) <= kMaxK, kW8A8, ": argument 'x' must have K <= ", kMaxK,
              " (the int32 sums are exact only up to there), got K = ", x.size(1));
  const bool vnni = use_vnni(kW8A8, variant);
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  at::Tensor out = at::empty({m, n}, x.options().dtype(at::kFloat));
  if (m == 0 || n == 0) return out;
  W8A8Linear kernel = w8a8_linear_portable;
#if defined(QWEN_OPS_X86_KERNELS)
  if (vnni) kernel = w8a8_linear_avx512_vnni;
#endif
  const int8_t* xp = x.data_ptr<int8_t>();
  const float* xs = x_scale.data_ptr<float>();
  const int8_t* wp = weight.data_ptr<int8_t>();
  const float* ws = weight_scale.data_ptr<float>();
  const int32_t* qb = quant_bias.has_value() ? quant_bias->data_ptr<int32_t>() : nullptr;
  const float* bp = bias.has_value() ? bias->data_ptr<float>() : nullptr;
  float* op = out.data_ptr<float>();
  over_columns(n, k, 1, [&](int64_t begin, int64_t end) { kernel(xp, xs, wp, ws, qb, bp, op, m, n, k, begin, end); });
  return out;
}

// x float32 [M, K] through the float32 kernel `variant` names.
at::Tensor weight_only_float32(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_scale,
                               const c10::optional<at::Tensor>& bias, const std::string& variant) {
  const bool vnni = use_vnni(kWeightOnly, variant);
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  at::Tensor out = at::empty({m, n}, x.options());
  if (m == 0 || n == 0) return out;
  WeightOnlyInt8Linear kernel = weight_only_int8_linear_portable;
#if defined(QWEN_OPS_X86_KERNELS)
  if (vnni) kernel = weight_only_int8_linear_avx512_vnni;
#endif
  const float* xp = x.data_ptr<float>();
  const int8_t* wp = weight.data_ptr<int8_t>();
  const float* ws = weight_scale.data_ptr<float>();
  const float* bp = bias.has_value() ? bias->data_ptr<float>() : nullptr;
  float* op = out.data_ptr<float>();
  over_columns(n, k, 1, [&](int64_t begin, int64_t end) { kernel(xp, wp, ws, bp, op, m, n, k, begin, end); });
  return out;
}

// x bfloat16 [M, K]: the AVX-512 BF16 kernel ("" where the CPU has it, or named), else x widened to float32
// (exact), a float32 kernel, and the result rounded once to bfloat16.
at::Tensor weight_only_bfloat16(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_scale,
                                const c10::optional<at::Tensor>& bias, const std::string& variant) {
  const bool bf16_kernel = variant == kBf16 || (variant.empty() && cpu_has_avx512_bf16());
  TORCH_CHECK(!bf16_kernel || cpu_has_avx512_bf16(), kWeightOnly, ": argument 'variant' names '", kBf16,
              "', which this CPU (or this build) does not support");
  if (!bf16_kernel) return weight_only_float32(x.to(at::kFloat), weight, weight_scale, bias, variant).to(at::kBFloat16);
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  at::Tensor out = at::empty({m, n}, x.options());
  if (m == 0 || n == 0) return out;
#if defined(QWEN_OPS_X86_KERNELS)
  const auto* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  const int8_t* wp = weight.data_ptr<int8_t>();
  const float* ws = weight_scale.data_ptr<float>();
  const float* bp = bias.has_value() ? bias->data_ptr<float>() : nullptr;
  auto* op = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  over_columns(n, k, 1, [&](int64_t begin, int64_t end) {
    weight_only_int8_linear_bf16_avx512(xp, wp, ws, bp, op, m, n, k, begin, end);
  });
#endif
  return out;
}

at::Tensor weight_only_int8_linear_cpu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_scale,
                                       const c10::optional<at::Tensor>& bias, const std::string& variant) {
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16, kWeightOnly,
              ": argument 'x' must be float32 or bfloat16, got ", x.scalar_type());
  check_2d(kWeightOnly, "x", x, x.scalar_type(), "[M, K]");
  check_weight(kWeightOnly, x, weight, weight_scale, bias);
  if (x.scalar_type() == at::kBFloat16) return weight_only_bfloat16(x, weight, weight_scale, bias, variant);
  TORCH_CHECK(variant != kBf16, kWeightOnly, ": argument 'variant' names '", kBf16,
              "', a kernel for bfloat16 x; x is float32");
  return weight_only_float32(x, weight, weight_scale, bias, variant);
}

}  // namespace

void register_int8_linear(pybind11::module_& m) {
  namespace py = pybind11;
  m.def("w8a8_linear_cpu", &w8a8_linear_cpu, py::arg("x"), py::arg("x_scale"), py::arg("weight"),
        py::arg("weight_scale"), py::arg("quant_bias") = py::none(), py::arg("bias") = py::none(),
        py::arg("variant") = "",
        "float32 [M, N] = float(int32 x @ weight^T + quant_bias) * x_scale[:, None] * weight_scale (+ bias): "
        "x int8 [M, K], x_scale float32 [M], weight int8 [N, K], weight_scale float32 [N], quant_bias int32 [N].");
  m.def("weight_only_int8_linear_cpu", &weight_only_int8_linear_cpu, py::arg("x"), py::arg("weight"),
        py::arg("weight_scale"), py::arg("bias") = py::none(), py::arg("variant") = "",
        "[M, N] in x's dtype = (x @ float(weight)^T) * weight_scale (+ bias), float32 sums: x float32 or bfloat16 "
        "[M, K], weight int8 [N, K], weight_scale and bias float32 [N].");
  m.def("int8_linear_variants", &variants, "The INT8 linear kernel variants this CPU runs, portable first.");
  m.def("weight_only_int8_linear_bf16_variants", &bf16_variants,
        "The kernels weight_only_int8_linear_cpu runs for bfloat16 x on this CPU: the float32 ones (x widened), "
        "then avx512_bf16 where the CPU has it.");
}

}  // namespace qwen_ops::cpu

// The weight-only kernel as a torch operator too (CPU kernel here, fake in ops/int8_linear/op.py): the model's
// decode projections call it straight from model/network/layers.py, without int8_linear's Python custom op,
// whose dispatch and checks cost 60-80 us a call (bench/e2e/bench_int8_linear.py; over a hundred calls a decode
// step of the 0.8B model).
// The same checks, here in C++, and the same kernel: the same bits as int8_linear on the torch backend.
TORCH_LIBRARY_FRAGMENT(qwen_ops, m) {
  // x float32 or bfloat16 [M, K] -> [M, N] in x's dtype; weight int8 [N, K], weight_scale and bias float32 [N].
  m.def("weight_only_int8_linear(Tensor x, Tensor weight, Tensor weight_scale, Tensor? bias=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(qwen_ops, CPU, m) {
  m.impl("weight_only_int8_linear", [](const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_scale,
                                       const c10::optional<at::Tensor>& bias) {
    return qwen_ops::cpu::weight_only_int8_linear_cpu(x, weight, weight_scale, bias, "");
  });
}

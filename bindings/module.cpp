// qwen_ops._C: the pybind11 module behind the `ascendc` backend.
#include <torch/extension.h>

namespace {

pybind11::dict build_info() {
  pybind11::dict info;
#ifdef QWEN_OPS_WITH_CANN
  info["ascendc_target"] = "cann";
#else
  info["ascendc_target"] = "cpu-standin";
#endif
  info["torch_version"] = TORCH_VERSION;
  return info;
}

}  // namespace

// bindings/cpu/small_m_linear.cpp: the CPU decode-path projection kernel (qwen_ops::small_m_linear).
namespace qwen_ops::cpu {
void register_small_m_linear(pybind11::module_& m);
}

#ifdef QWEN_OPS_ASCENDC
// bindings/ascendc/binding.cpp: the Ascend C kernels (stand-in or CANN).
void qwen_register_ascendc(pybind11::module_& m);
#endif

// bindings/cpu/gdn_recurrent_decode.cpp and causal_conv1d_update_cpu.cpp: the GDN decode step and the conv
// update on their state pools (the torch backend's CPU kernels).
namespace qwen_ops::cpu {
void register_gdn_recurrent_decode(pybind11::module_& m);
void register_causal_conv1d_update(pybind11::module_& m);
// bindings/cpu/reshape_and_cache_cpu.cpp: the KV cache write (float copy or INT8 quantization) in one pass.
void register_reshape_and_cache(pybind11::module_& m);
// bindings/cpu/paged_decode_attention_cpu.cpp: decode attention reading the KV blocks in place.
void register_paged_decode_attention(pybind11::module_& m);
// bindings/cpu/int8_linear_cpu.cpp: the INT8-weight projections (W8A8 and weight-only).
void register_int8_linear(pybind11::module_& m);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "qwen_ops C++ extension: Ascend C kernels (device or CPU stand-in)";
  m.def("build_info", &build_info, "How this extension was built.");
  qwen_ops::cpu::register_small_m_linear(m);
#ifdef QWEN_OPS_ASCENDC
  qwen_register_ascendc(m);
#endif
  qwen_ops::cpu::register_gdn_recurrent_decode(m);
  qwen_ops::cpu::register_causal_conv1d_update(m);
  qwen_ops::cpu::register_reshape_and_cache(m);
  qwen_ops::cpu::register_paged_decode_attention(m);
  qwen_ops::cpu::register_int8_linear(m);
}

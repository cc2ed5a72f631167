// Which SIMD variant of the CPU kernels (bindings/cpu/) this CPU can run, decided once at run time.
#pragma once

#include <string>
#include <vector>

namespace qwen_ops::cpu {

enum class Isa { kPortable, kAvx2, kAvx512 };

// The widest variant this CPU supports and this build contains (AVX-512F > AVX2+FMA > portable).
Isa best_isa();
// Every variant this CPU can run, narrowest first (tests run each one).
std::vector<Isa> supported_isas();
const char* isa_name(Isa isa);
// AVX-512 F, BW, VL and VNNI (vpdpbusd), in an x86 build: what the INT8 linear kernels' SIMD variant needs.
bool cpu_has_avx512_vnni();
// AVX-512 F, BW, VL and BF16 (vdpbf16ps), in an x86 build: what the bfloat16 small-M linear's SIMD variant needs.
bool cpu_has_avx512_bf16();
// "portable" / "avx2" / "avx512" -> Isa; TORCH_CHECK-fails on any other name or one the CPU lacks.
Isa isa_from_name(const std::string& op, const std::string& name);

// One kernel's variant for `isa`. Each SIMD kernel is built as NAME_portable and, in x86 builds (where CMake
// defines QWEN_OPS_X86_KERNELS for the dispatching file), as NAME_avx2 and NAME_avx512 in their own files with
// their own -m flags; QWEN_OPS_KERNEL_FOR_ISA(isa, NAME) picks one. `isa` comes from best_isa() or
// isa_from_name(), so it is one this CPU can run.
template <class Kernel>
Kernel kernel_for_isa(Isa isa, Kernel portable, Kernel avx2, Kernel avx512) {
  switch (isa) {
    case Isa::kAvx512:
      return avx512;
    case Isa::kAvx2:
      return avx2;
    default:
      return portable;
  }
}

}  // namespace qwen_ops::cpu

#if defined(QWEN_OPS_X86_KERNELS)
#define QWEN_OPS_KERNEL_FOR_ISA(isa, name) \
  ::qwen_ops::cpu::kernel_for_isa((isa), name##_portable, name##_avx2, name##_avx512)
#else
#define QWEN_OPS_KERNEL_FOR_ISA(isa, name) (static_cast<void>(isa), name##_portable)
#endif

namespace qwen_ops::cpu {

}  // namespace qwen_ops::cpu

// Run-time CPU feature detection for the CPU kernels: the compiler's cpuid builtins on x86, the portable
// variant elsewhere. A build for another architecture has only the portable kernels.
#include "cpu_features.h"

#include <c10/util/Exception.h>

namespace qwen_ops::cpu {

namespace {

bool cpu_has(Isa isa) {
  switch (isa) {
    case Isa::kPortable:
      return true;
#if defined(QWEN_OPS_X86_KERNELS)
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f");
#endif
    default:
      return false;
  }
}

}  // namespace

std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512})
    if (cpu_has(isa)) isas.push_back(isa);
  return isas;
}

Isa best_isa() {
  static const Isa best = supported_isas().back();
  return best;
}

bool cpu_has_avx512_vnni() {
#if defined(QWEN_OPS_X86_KERNELS)
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return has;
#else
  return false;
#endif
}

bool cpu_has_avx512_bf16() {
#if defined(QWEN_OPS_X86_KERNELS)
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return has;
#else
  return false;
#endif
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    default:
      return "portable";
  }
}

Isa isa_from_name(const std::string& op, const std::string& name) {
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
    if (name == isa_name(isa)) {
      TORCH_CHECK(cpu_has(isa), op, ": argument 'isa' names '", name,
                  "', which this CPU (or this build) does not support");
      return isa;
    }
  }
  TORCH_CHECK(false, op, ": argument 'isa' must be one of 'portable', 'avx2', 'avx512', got '", name, "'");
}

}  // namespace qwen_ops::cpu

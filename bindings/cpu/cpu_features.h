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
// "portable" / "avx2" / "avx512" -> Isa; TORCH_CHECK-fails on any other name or one the CPU lacks.
Isa isa_from_name(const std::string& op, const std::string& name);

}  // namespace qwen_ops::cpu

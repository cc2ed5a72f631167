// The dtype names the CPU kernels' error messages use: torch's Python names for the two float dtypes the
// kernels take ("float32", "bfloat16", as a Python caller writes them), c10's name for any other.
#pragma once

#include <c10/core/ScalarType.h>

namespace qwen_ops::cpu {

inline const char* dtype_name(at::ScalarType t) {
  return t == at::kFloat ? "float32" : t == at::kBFloat16 ? "bfloat16" : c10::toString(t);
}

}  // namespace qwen_ops::cpu

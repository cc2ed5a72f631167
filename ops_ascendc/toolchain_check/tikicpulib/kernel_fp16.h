// qwen_ops placeholder for tikicpulib's kernel_fp16.h (see stub_def.h): a
// 16-bit `half` that converts to and from the arithmetic types, enough for a
// type check. It does not round like IEEE binary16 (it stores a float).
#ifndef QWEN_TIKICPULIB_KERNEL_FP16_H
#define QWEN_TIKICPULIB_KERNEL_FP16_H

#include <cstdint>

namespace qwen_tikicpulib {
// One placeholder for both 16-bit float types, told apart by a tag.
template <int Tag>
struct Float16Placeholder {
  uint16_t bits = 0;
  Float16Placeholder() = default;
  template <typename T>
  Float16Placeholder(T) {}
  operator float() const { return 0.0f; }
  float ToFloat() const { return 0.0f; }
};
}  // namespace qwen_tikicpulib

using half = qwen_tikicpulib::Float16Placeholder<0>;

#endif  // QWEN_TIKICPULIB_KERNEL_FP16_H

// qwen_ops placeholder for tikicpulib's kernel_bf16.h (see stub_def.h).
#ifndef QWEN_TIKICPULIB_KERNEL_BF16_H
#define QWEN_TIKICPULIB_KERNEL_BF16_H

#include "kernel_fp16.h"

using bfloat16_t = qwen_tikicpulib::Float16Placeholder<1>;

#endif  // QWEN_TIKICPULIB_KERNEL_BF16_H

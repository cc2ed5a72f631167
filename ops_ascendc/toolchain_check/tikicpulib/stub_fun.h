// qwen_ops placeholder for tikicpulib's stub_fun.h (see stub_def.h): the
// hardware intrinsics the devkit's CPU-debug paths call, each declared as a
// catch-all (any arguments): the register reads and scalar conversions return
// a 64-bit integer (which converts to what their callers expect), the other
// intrinsics nothing (the devkit writes `return intrinsic(...)` in void
// functions). A type check only: none is defined, so nothing built on this
// header can link or run.
#ifndef QWEN_TIKICPULIB_STUB_FUN_H
#define QWEN_TIKICPULIB_STUB_FUN_H

#include "stub_def.h"

#define QWEN_TIKICPULIB_INTRINSIC(name) \
  template <typename... Args>           \
  void name(Args...);
#define QWEN_TIKICPULIB_READ(name) \
  template <typename... Args>      \
  int64_t name(Args...);

// The intrinsics, by name (the names the devkit calls on the 2201 CPU-debug paths).
#include "stub_fun_names.inc"

#undef QWEN_TIKICPULIB_INTRINSIC
#undef QWEN_TIKICPULIB_READ

#endif  // QWEN_TIKICPULIB_STUB_FUN_H

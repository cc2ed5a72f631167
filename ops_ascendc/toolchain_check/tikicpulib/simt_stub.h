// qwen_ops placeholder for tikicpulib's simt_stub.h (see stub_def.h). The
// kernels use no SIMT API; the devkit includes this header on its SIMT paths.
#ifndef QWEN_TIKICPULIB_SIMT_STUB_H
#define QWEN_TIKICPULIB_SIMT_STUB_H

#include "stub_def.h"

#endif  // QWEN_TIKICPULIB_SIMT_STUB_H

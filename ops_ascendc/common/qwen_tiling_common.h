// What every op's tiling struct (ops_ascendc/<op>/op_host/<op>_tiling.h)
// shares: dtype codes and the unified-buffer budget. The structs are plain
// POD of 32-bit fields: the host fills one, copies it to GM, and the kernel
// copies it back word by word (CopyTiling in common/kernel_common.h). No
// standard library here: kernels include this header.
#ifndef QWEN_ASCENDC_TILING_COMMON_H
#define QWEN_ASCENDC_TILING_COMMON_H

// Includes nothing: kernels get the fixed-width integer types from
// kernel_operator.h (included first), the host from <cstdint> (tiling_host.h).

namespace qwen_ascendc {

// Dtype codes carried in tilings (the kernels switch on them). Prefixed:
// CANN's kernel_type.h defines DT_FLOAT, DT_INT8, ... as macros with other
// values (DT_INT8 is 2 there), which would silently replace unprefixed names.
enum QwenDtype : uint32_t {
  QWEN_DT_FLOAT = 0,
  QWEN_DT_HALF = 1,
  QWEN_DT_BF16 = 2,
  QWEN_DT_INT8 = 3,
  QWEN_DT_INT32 = 4,
  QWEN_DT_INT64 = 5,
  QWEN_DT_BOOL = 6
};

// Unified buffer the host tiling may plan for (184 KB usable of 192 KB on 910B).
constexpr uint32_t kUbUsableBytes = 184u * 1024u;
// Bytes the tilings keep in reserve below the usable size (small scratch, alignment).
constexpr uint32_t kUbReserveBytes = 1024u;

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_TILING_COMMON_H

// qwen_ops placeholder for one header of CANN's tikicpulib (absent from the
// open asc-devkit), written for the project's syntax/type check of the Ascend C
// kernels against the real API headers (bench/toolchains/ascendc_real_headers.py).
// It declares only what the devkit's CPU-debug paths name: qualifiers, the
// builtin enums and per-core variables, and the low-precision placeholder types.
// Nothing here computes: a check built on it proves that the kernels' calls
// type-check against the real API, never what they compute.
#ifndef QWEN_TIKICPULIB_STUB_DEF_H
#define QWEN_TIKICPULIB_STUB_DEF_H

// Standard headers: the devkit's CPU-debug paths use assert, std::vector,
// std::string, std::cout, ... without including them (tikicpulib brings them).
#include <cassert>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kernel_fp16.h"
#include "kernel_bf16.h"

// Address-space and function qualifiers: plain C++ on the CPU.
#define __aicore__
#define __global__
#define __gm__
#define __ubuf__
#define __cbuf__
#define __ca__
#define __cb__
#define __cc__
#define __fbuf__
#define __sbuf__
#define __ssbuf__
#define __host_aicore__
#define __host__
#define __simd_callee__
#define __sync_alias__
#define __check_sync_alias__
#define __disable_kernel_type_autoinfer__
#define __inout_pipe__(...)
#define __in_pipe__(...)
#define __out_pipe__(...)
// Macros the devkit's kernel_macros.h defines only for the bisheng compiler.
#define ASCENDC_HOST
#define ASCENDC_AICORE
#define ASCENDC_HOST_AICORE
// Block-local (per-core) globals: one per CPU thread, as in CPU-debug runs.
#define __BLOCK_LOCAL__ thread_local

// Placeholder 8- and 4-bit float types: storage only.
struct fp8_e4m3fn_t { uint8_t bits; };
struct fp8_e5m2_t { uint8_t bits; };
struct fp8_e8m0_t { uint8_t bits; };
struct fp4x2_e1m2_t { uint8_t bits; };
struct fp4x2_e2m1_t { uint8_t bits; };
struct hifloat8_t { uint8_t bits; };

// The builtin enums (names as the devkit spells them; values only need to be distinct).
enum pipe_t : uint8_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_V2, PIPE_FIX,
                        PIPE_NUM };
enum event_t : uint8_t { EVENT_ID0 = 0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };
enum class QuantMode_t : uint8_t {
  NoQuant = 0, F322F16, F322BF16, DEQF16, VDEQF16, DEQS16, VDEQS16, QF322B8_PRE, VQF322B8_PRE, REQ8, VREQ8, REQ4,
  VREQ4, QF162B8_PRE, VQF162B8_PRE, QF162S16_PRE, VQF162S16_PRE, QF162S4_PRE, VQF162S4_PRE, QF322BF16_PRE,
  VQF322BF16_PRE, QF322F16_PRE, VQF322F16_PRE, QF322F32_PRE, VQF322F32_PRE, QF322FP8_PRE, VQF322FP8_PRE,
  QF322HIF8_PRE, VQF322HIF8_PRE, QF322HIF8_PRE_HYBRID, VQF322HIF8_PRE_HYBRID, QS322BF16_PRE, VQS322BF16_PRE
};

// Operand enums of the synchronisation and padding intrinsics.
enum class mem_t : uint8_t { L1 = 0, L0A, L0B, L0C, UB, BT };
enum class mem_dsb_t : uint8_t { DSB_ALL = 0, DSB_DDR, DSB_UB, DSB_SEQ };
enum class dcci_dst_t : uint8_t { CACHELINE_ALL = 0, CACHELINE_UB, CACHELINE_OUT, CACHELINE_ATOMIC };
enum class cache_line_t : uint8_t { SINGLE_CACHE_LINE = 0, ENTIRE_DATA_CACHE };
enum class Order_t : uint8_t { VALUE_INDEX = 0, INDEX_VALUE, ONLY_VALUE, ONLY_INDEX };
enum atomic_type_t : uint8_t { ATOMIC_NONE_TYPE = 0 };
enum atomic_op_t : uint8_t { ATOMIC_NONE_OP = 0 };
// Address registers of the vector unit, their halves, the load-data address mode.
enum ub_addr8_t : uint8_t { VA0 = 0, VA1, VA2, VA3, VA4, VA5, VA6, VA7 };
enum vpart_t : uint8_t { L128 = 0, H128 };
enum addr_cal_mode_t : uint8_t { inc = 0, dec };
enum class pad_t : uint8_t { PAD_NONE = 0, PAD_MODE1, PAD_MODE2, PAD_MODE3, PAD_MODE4, PAD_MODE5, PAD_MODE6, PAD_MODE7,
                             PAD_MODE8 };

// Register types of the register-based (SIMD) API: opaque here.
struct vector_bool {};
struct vector_align {};
struct vector_address {};

// Per-core state (g_coreType is declared by the devkit itself) the CPU-debug runtime keeps.
extern int64_t block_idx;
extern int64_t block_num;
extern int64_t sub_block_idx;
extern int64_t g_taskRation;
extern uint64_t g_fixpipeNdNzParam;

namespace AscendC {
constexpr int64_t AIC_TYPE = 1;
constexpr int64_t AIV_TYPE = 2;
constexpr int64_t MIX_TYPE = 3;
extern bool g_isVdeq;
}  // namespace AscendC

#endif  // QWEN_TIKICPULIB_STUB_DEF_H

// CPU stand-in for the Ascend C API: scalar types and the per-core state.
//
// Device-style header: no standard library. Included by kernel_operator.h
// (kernel side) and by runtime.cpp (the stand-in's host side).
#ifndef QWEN_SIM_TYPES_H
#define QWEN_SIM_TYPES_H

// Fixed-width integers, as the device toolchain provides them without <cstdint>.
// (Same underlying types as the C library's, so redeclaring them is harmless.)
typedef __INT8_TYPE__ int8_t;
typedef __UINT8_TYPE__ uint8_t;
typedef __INT16_TYPE__ int16_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __INT32_TYPE__ int32_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT64_TYPE__ uint64_t;

// Device qualifiers are defined away: blocks are host threads.
#ifndef __global__
#define __global__
#endif
#ifndef __aicore__
#define __aicore__
#endif
#ifndef __gm__
#define __gm__
#endif
#ifndef GM_ADDR
#define GM_ADDR __gm__ uint8_t*
#endif

// Kernel types of KERNEL_TASK_TYPE_DEFAULT (the values this stand-in models).
enum KernelMetaType : uint8_t { KERNEL_TYPE_AIV_ONLY = 0, KERNEL_TYPE_AIC_ONLY = 1, KERNEL_TYPE_MIX_AIC_1_2 = 2 };

namespace qwen_sim {

// ---- IEEE binary16 and bfloat16, round to nearest even -------------------
inline uint32_t FloatBits(float f) { uint32_t u; __builtin_memcpy(&u, &f, 4); return u; }
inline float BitsFloat(uint32_t u) { float f; __builtin_memcpy(&f, &u, 4); return f; }

inline uint16_t FloatToHalfBits(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
  const int32_t e = static_cast<int32_t>(ax >> 23) - 127 + 15;
  uint32_t mant = ax & 0x7fffffu;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (r & 1u))) r++;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
  return static_cast<uint16_t>(sign | r);
}

inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t m = h & 0x3ffu;
  if (e == 0) {
    if (m == 0) return BitsFloat(sign);
    // subnormal: m * 2^-24, exact in float
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (e == 31) return BitsFloat(sign | 0x7f800000u | (m << 13));
  return BitsFloat(sign | ((e - 15 + 127) << 23) | (m << 13));
}

inline uint16_t FloatToBf16Bits(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(((x >> 16) & 0x8000u) | 0x7fc0u);
  const uint32_t r = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(r >> 16);
}
inline float Bf16BitsToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

}  // namespace qwen_sim

// `half` and `bfloat16_t` are global types on the device. Scalar arithmetic
// goes through float; every store rounds to nearest even.
struct half {
  uint16_t bits;
  half() = default;
  half(float f) : bits(qwen_sim::FloatToHalfBits(f)) {}
  half(double d) : bits(qwen_sim::FloatToHalfBits(static_cast<float>(d))) {}
  half(int i) : bits(qwen_sim::FloatToHalfBits(static_cast<float>(i))) {}
  operator float() const { return qwen_sim::HalfBitsToFloat(bits); }
  static half FromBits(uint16_t b) { half h; h.bits = b; return h; }
};

struct bfloat16_t {
  uint16_t bits;
  bfloat16_t() = default;
  bfloat16_t(float f) : bits(qwen_sim::FloatToBf16Bits(f)) {}
  bfloat16_t(double d) : bits(qwen_sim::FloatToBf16Bits(static_cast<float>(d))) {}
  bfloat16_t(int i) : bits(qwen_sim::FloatToBf16Bits(static_cast<float>(i))) {}
  operator float() const { return qwen_sim::Bf16BitsToFloat(bits); }
  static bfloat16_t FromBits(uint16_t b) { bfloat16_t h; h.bits = b; return h; }
};

namespace qwen_sim {

// ---- Device limits (Ascend 910B vector core) ------------------------------
constexpr uint32_t kUbTotalBytes = 192u * 1024u;   // unified buffer per core
constexpr uint32_t kUbUsableBytes = 184u * 1024u;  // what TPipe may hand out
constexpr uint32_t kBlockBytes = 32u;              // one "datablock"
constexpr uint32_t kRepeatBytes = 256u;            // one vector repeat (8 datablocks)
constexpr uint32_t kMaxSlots = 64u;                // buffers one TPipe may carve

// ---- The cube core's memories (Ascend 910B / A2, A3 AIC) -------------------
constexpr uint32_t kL1Bytes = 512u * 1024u;   // TPosition::A1 / B1
constexpr uint32_t kL0ABytes = 64u * 1024u;   // TPosition::A2
constexpr uint32_t kL0BBytes = 64u * 1024u;   // TPosition::B2
constexpr uint32_t kL0CBytes = 128u * 1024u;  // TPosition::CO1
constexpr uint32_t kFractalBytes = 512u;      // one L0A/L0B fractal

// Which on-chip memory a buffer lives in (Slot::mem); the order matches kMemInfo in kernel_operator.h.
enum MemKind : uint8_t { MEM_UB = 0, MEM_L1, MEM_L0A, MEM_L0B, MEM_L0C, MEM_COUNT };

// Which unit a simulated core is (mixed kernels run both kinds at once).
enum CoreKind : uint8_t { CORE_AIV = 0, CORE_AIC = 1 };

enum SlotState : uint8_t { SLOT_UNUSED = 0, SLOT_FREE, SLOT_ALLOCATED, SLOT_QUEUED, SLOT_DEQUEUED, SLOT_CALC };

struct Slot {
  uint32_t offset;  // byte offset in its memory (aligned as that memory requires)
  uint32_t bytes;   // capacity
  uint32_t gen;     // bumped on FreeTensor: stale LocalTensors are detected
  uint8_t state;
  uint8_t mem;      // MemKind
  uint8_t mmadUnitFlag;  // L0C: unitFlag of the last Mmad into this buffer (0xff: none yet)
  int32_t owner;    // queue id, -1 for TBuf
};

struct LaunchShared;  // opaque: lives in runtime.cpp

// What the device keeps per AI core. One instance per block thread.
struct CoreState {
  uint32_t blockIdx;   // GetBlockIdx(): on an AIV of a mixed kernel, in [0, 2 * blockNum)
  uint32_t blockNum;   // GetBlockNum(): the launch's blockDim (AIC count in a mixed kernel)
  uint32_t subBlockIdx;  // GetSubBlockIdx(): 0/1 on the AIVs of a 1:2 mixed kernel, else 0
  uint32_t subBlockNum;  // GetSubBlockNum()
  uint32_t globalIdx;  // index among all cores of the launch (AICs first, then AIVs)
  uint8_t kind;        // CoreKind
  uint8_t mixed;       // 1 in a KERNEL_TYPE_MIX_* launch
  uint8_t kernelType;  // the launch's KernelType (checked by KERNEL_TASK_TYPE_DEFAULT)
  uint8_t* ub;         // kUbTotalBytes, 32-byte aligned (AIV only; nullptr on an AIC)
  uint8_t* mem[MEM_COUNT];      // base of each memory this core has (nullptr: the core has none)
  uint32_t memUsed[MEM_COUNT];  // bytes handed out by TPipe::InitBuffer, per memory
  uint32_t ubUsed;     // bytes handed out by TPipe::InitBuffer
  uint32_t numSlots;
  int32_t nextQueueId;
  int32_t pipeAlive;
  Slot slots[kMaxSlots];
  LaunchShared* launch;
};

// Implemented in runtime.cpp (compiled with exceptions and the standard library).
CoreState* Core();                                                     // this thread's core
[[noreturn]] void Fail(const char* call, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void CheckGm(const char* call, const void* addr, uint64_t bytes, bool write);
void PollAbort();  // leaves this block when another block has failed
void NoteUbUse(uint32_t bytes);

// Mixed (AIC + AIV) kernels: the cross-core hand-off, with happens-before
// tracking for the GM race check. Implemented in runtime.cpp.
void CrossCoreSet(const char* call, uint32_t mode, uint32_t flagId);
void CrossCoreWait(const char* call, uint32_t flagId);
void SyncAllCores(const char* call, bool aivOnly);
const char* KernelTypeName(uint32_t type);

}  // namespace qwen_sim

#endif  // QWEN_SIM_TYPES_H

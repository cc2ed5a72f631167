// qwen_ops CPU stand-in for the Ascend C API (`kernel_operator.h`).
//
// Kernels in ops_ascendc/kernels/ include this header when built for the CPU
// and CANN's real header when built for the NPU. It declares the subset of the
// AscendC namespace our kernels use, with the real names and signatures, and
// it is strict where the device is strict: every violation stops the kernel
// through qwen_sim::Fail with a message naming the call. See README.md.
//
// Written for this project from the public Ascend C documentation; device
// style (no standard library, no exceptions, no RTTI, no dynamic allocation).
#ifndef QWEN_SIM_KERNEL_OPERATOR_H
#define QWEN_SIM_KERNEL_OPERATOR_H

#include "sim_types.h"

namespace AscendC {

// ============================================================ enums, params

enum class TPosition : uint8_t { GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM = VECCALC, MAX };
using QuePosition = TPosition;

enum class RoundMode : uint8_t { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD };

enum class HardEvent : uint8_t { MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, MTE2_V, V_MTE2, MTE3_V, V_MTE3, M_V, V_M,
                                 V_V, MTE3_MTE1, MTE1_MTE3, MTE1_V, MTE2_M, M_MTE2, V_MTE1, M_FIX, FIX_M,
                                 MTE3_MTE2, MTE2_MTE3, S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S, MTE2_FIX,
                                 FIX_MTE2, FIX_S, M_S, FIX_MTE3, MAX };

enum pipe_t : uint8_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_FIX };
typedef int8_t TEventID;
typedef int32_t event_t;
constexpr event_t EVENT_ID0 = 0, EVENT_ID1 = 1, EVENT_ID2 = 2, EVENT_ID3 = 3;

// DataCopy: every field counts 32-byte datablocks.
struct DataCopyParams {
  DataCopyParams() {}
  DataCopyParams(const uint16_t count, const uint16_t len, const uint16_t srcStrideIn, const uint16_t dstStrideIn)
      : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn) {}
  uint16_t blockCount = 1;
  uint16_t blockLen = 0;
  uint16_t srcStride = 0;
  uint16_t dstStride = 0;
};

// DataCopyPad: blockLen in bytes; the stride on the GM side in bytes, on the
// unified-buffer side in 32-byte datablocks.
struct DataCopyExtParams {
  DataCopyExtParams() {}
  DataCopyExtParams(const uint16_t count, const uint32_t len, const uint32_t srcStrideIn, const uint32_t dstStrideIn,
                    const uint32_t rsvIn)
      : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn), rsv(rsvIn) {}
  uint16_t blockCount = 1;
  uint32_t blockLen = 0;
  uint32_t srcStride = 0;
  uint32_t dstStride = 0;
  uint32_t rsv = 0;
};

template <typename T>
struct DataCopyPadExtParams {
  DataCopyPadExtParams() {}
  DataCopyPadExtParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue, T padValue)
      : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue) {}
  bool isPad = false;
  uint8_t leftPadding = 0;
  uint8_t rightPadding = 0;
  T paddingValue = 0;
};

struct DataCopyPadParams {
  DataCopyPadParams() {}
  DataCopyPadParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue,
                    const uint64_t padValue)
      : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue) {}
  bool isPad = false;
  uint8_t leftPadding = 0;
  uint8_t rightPadding = 0;
  uint64_t paddingValue = 0;
};

// Repeat-form vector parameters: block strides in datablocks, repeat strides
// in datablocks, as on the device.
struct UnaryRepeatParams {
  UnaryRepeatParams() {}
  UnaryRepeatParams(const uint16_t dstBlkStrideIn, const uint16_t srcBlkStrideIn, const uint8_t dstRepStrideIn,
                    const uint8_t srcRepStrideIn)
      : dstBlkStride(dstBlkStrideIn), srcBlkStride(srcBlkStrideIn), dstRepStride(dstRepStrideIn),
        srcRepStride(srcRepStrideIn) {}
  uint16_t dstBlkStride = 1;
  uint16_t srcBlkStride = 1;
  uint8_t dstRepStride = 8;
  uint8_t srcRepStride = 8;
};

struct BinaryRepeatParams {
  BinaryRepeatParams() {}
  BinaryRepeatParams(const uint8_t dstBlkStrideIn, const uint8_t src0BlkStrideIn, const uint8_t src1BlkStrideIn,
                     const uint8_t dstRepStrideIn, const uint8_t src0RepStrideIn, const uint8_t src1RepStrideIn)
      : dstBlkStride(dstBlkStrideIn), src0BlkStride(src0BlkStrideIn), src1BlkStride(src1BlkStrideIn),
        dstRepStride(dstRepStrideIn), src0RepStride(src0RepStrideIn), src1RepStride(src1RepStrideIn) {}
  uint8_t dstBlkStride = 1;
  uint8_t src0BlkStride = 1;
  uint8_t src1BlkStride = 1;
  uint8_t dstRepStride = 8;
  uint8_t src0RepStride = 8;
  uint8_t src1RepStride = 8;
};

}  // namespace AscendC

namespace qwen_sim {

// The device takes `repeatTime` as uint8_t and silently truncates larger
// counts. The stand-in accepts any integer through this parameter type (same
// call syntax) and stops the kernel when the count does not fit 8 bits.
struct RepeatTimes {
  int64_t value;
  template <typename I>
  RepeatTimes(I v) : value(static_cast<int64_t>(v)) {}
};

template <typename T> struct TypeName { static const char* Get() { return "?"; } };
template <> struct TypeName<float> { static const char* Get() { return "float"; } };
template <> struct TypeName<half> { static const char* Get() { return "half"; } };
template <> struct TypeName<bfloat16_t> { static const char* Get() { return "bfloat16_t"; } };
template <> struct TypeName<int8_t> { static const char* Get() { return "int8_t"; } };
template <> struct TypeName<uint8_t> { static const char* Get() { return "uint8_t"; } };
template <> struct TypeName<int16_t> { static const char* Get() { return "int16_t"; } };
template <> struct TypeName<uint16_t> { static const char* Get() { return "uint16_t"; } };
template <> struct TypeName<int32_t> { static const char* Get() { return "int32_t"; } };
template <> struct TypeName<uint32_t> { static const char* Get() { return "uint32_t"; } };
template <> struct TypeName<int64_t> { static const char* Get() { return "int64_t"; } };

template <typename A, typename B> struct SameType { static constexpr bool value = false; };
template <typename A> struct SameType<A, A> { static constexpr bool value = true; };

// Arithmetic vector instructions exist for half and float (int types only
// where listed per op).
template <typename T> struct IsVecFloat { static constexpr bool value = SameType<T, float>::value || SameType<T, half>::value; };
template <typename T> struct IsVecArith {
  static constexpr bool value = IsVecFloat<T>::value || SameType<T, int16_t>::value || SameType<T, int32_t>::value;
};

// Values computed in float (or 64-bit integers) and stored with the
// destination type's rounding: half and bfloat16 round to nearest even.
template <typename T> inline float ToF(T v) { return static_cast<float>(v); }
template <typename T> inline T FromF(float v) { return static_cast<T>(v); }
template <> inline half FromF<half>(float v) { return half(v); }
template <> inline int32_t FromF<int32_t>(float v) { return static_cast<int32_t>(v); }

// Where each TPosition lives on Ascend 910B (A2/A3), with its capacity and the
// alignment of a buffer's start.
struct MemInfo {
  uint8_t kind;
  uint32_t usable;
  uint32_t align;
  const char* name;
};
inline const MemInfo& MemInfoOf(uint8_t kind) {
  static const MemInfo table[MEM_COUNT] = {
      {MEM_UB, kUbUsableBytes, 32u, "the unified buffer (UB)"},
      {MEM_L1, kL1Bytes, 32u, "L1"},
      {MEM_L0A, kL0ABytes, 512u, "L0A"},
      {MEM_L0B, kL0BBytes, 512u, "L0B"},
      {MEM_L0C, kL0CBytes, 64u, "L0C"},
  };
  return table[kind];
}
inline const char* PositionName(AscendC::TPosition p) {
  switch (p) {
    case AscendC::TPosition::GM: return "GM";
    case AscendC::TPosition::A1: return "A1";
    case AscendC::TPosition::A2: return "A2";
    case AscendC::TPosition::B1: return "B1";
    case AscendC::TPosition::B2: return "B2";
    case AscendC::TPosition::C1: return "C1";
    case AscendC::TPosition::C2: return "C2";
    case AscendC::TPosition::CO1: return "CO1";
    case AscendC::TPosition::CO2: return "CO2";
    case AscendC::TPosition::VECIN: return "VECIN";
    case AscendC::TPosition::VECOUT: return "VECOUT";
    case AscendC::TPosition::VECCALC: return "VECCALC";
    default: return "?";
  }
}
inline const MemInfo& PositionMemory(const char* call, AscendC::TPosition p) {
  switch (p) {
    case AscendC::TPosition::VECIN:
    case AscendC::TPosition::VECOUT:
    case AscendC::TPosition::VECCALC: return MemInfoOf(MEM_UB);
    case AscendC::TPosition::A1:
    case AscendC::TPosition::B1: return MemInfoOf(MEM_L1);
    case AscendC::TPosition::A2: return MemInfoOf(MEM_L0A);
    case AscendC::TPosition::B2: return MemInfoOf(MEM_L0B);
    case AscendC::TPosition::CO1: return MemInfoOf(MEM_L0C);
    default:
      Fail(call, "TPosition::%s is not modelled by the stand-in (GM is not an on-chip buffer; C1/C2/CO2 are not "
           "used by this project's kernels)", PositionName(p));
  }
}

inline const char* SlotStateName(uint8_t s) {
  switch (s) {
    case SLOT_FREE: return "freed";
    case SLOT_QUEUED: return "enqueued (in flight)";
    case SLOT_UNUSED: return "never allocated";
    default: return "live";
  }
}

}  // namespace qwen_sim

namespace AscendC {

inline int64_t GetBlockIdx() { return qwen_sim::Core()->blockIdx; }
inline int64_t GetBlockNum() { return qwen_sim::Core()->blockNum; }
inline int64_t GetSubBlockIdx() { return qwen_sim::Core()->subBlockIdx; }
inline int64_t GetSubBlockNum() { return qwen_sim::Core()->subBlockNum; }

// ============================================================ tensors

template <typename T>
class LocalTensor {
 public:
  LocalTensor() {}
  // --- stand-in internals (public so that the templates below can reach them)
  int32_t slot_ = -1;
  uint32_t gen_ = 0;
  uint32_t off_ = 0;    // byte offset inside the slot
  uint32_t count_ = 0;  // elements visible from off_

  // Pointer to this tensor's first element after checking it is alive.
  T* Ptr(const char* call) const {
    qwen_sim::PollAbort();
    qwen_sim::CoreState* c = qwen_sim::Core();
    if (slot_ < 0 || static_cast<uint32_t>(slot_) >= c->numSlots)
      qwen_sim::Fail(call, "uses a LocalTensor that was never allocated from a queue or TBuf");
    const qwen_sim::Slot& s = c->slots[slot_];
    if (s.gen != gen_ || s.state == qwen_sim::SLOT_FREE)
      qwen_sim::Fail(call, "touches a LocalTensor after FreeTensor returned its buffer to the queue");
    if (s.state == qwen_sim::SLOT_QUEUED)
      qwen_sim::Fail(call, "touches a LocalTensor that is enqueued (EnQue'd but not DeQue'd yet)");
    return reinterpret_cast<T*>(c->mem[s.mem] + s.offset + off_);
  }
  // Byte offset from the start of the tensor's memory (the unified buffer, L1, L0A, ...).
  uint32_t UbOffset() const { return qwen_sim::Core()->slots[slot_].offset + off_; }
  uint8_t Mem() const { return qwen_sim::Core()->slots[slot_].mem; }
  TPosition GetPosition() const { return pos_; }
  TPosition pos_ = TPosition::VECCALC;  // the queue/TBuf position it came from

  // --- the API
  T GetValue(const uint32_t offset) const {
    T* p = Ptr("LocalTensor::GetValue");
    if (offset >= count_)
      qwen_sim::Fail("LocalTensor::GetValue", "index %u is past the tensor's %u elements", offset, count_);
    return p[offset];
  }
  void SetValue(const uint32_t offset, const T value) const {
    T* p = Ptr("LocalTensor::SetValue");
    if (offset >= count_)
      qwen_sim::Fail("LocalTensor::SetValue", "index %u is past the tensor's %u elements", offset, count_);
    p[offset] = value;
  }
  LocalTensor operator[](const uint32_t offset) const {
    Ptr("LocalTensor::operator[]");
    if (offset > count_)
      qwen_sim::Fail("LocalTensor::operator[]", "offset %u is past the tensor's %u elements", offset, count_);
    LocalTensor r = *this;
    r.off_ = off_ + offset * static_cast<uint32_t>(sizeof(T));
    r.count_ = count_ - offset;
    return r;
  }
  uint32_t GetSize() const { return count_; }
  void SetSize(const uint32_t size) {
    const qwen_sim::Slot& s = qwen_sim::Core()->slots[slot_];
    if (off_ + size * sizeof(T) > s.bytes)
      qwen_sim::Fail("LocalTensor::SetSize", "%u elements do not fit the %u-byte buffer", size, s.bytes);
    count_ = size;
  }
  template <typename U>
  LocalTensor<U> ReinterpretCast() const {
    LocalTensor<U> r;
    r.slot_ = slot_;
    r.gen_ = gen_;
    r.off_ = off_;
    r.pos_ = pos_;
    r.count_ = static_cast<uint32_t>((static_cast<uint64_t>(count_) * sizeof(T)) / sizeof(U));
    return r;
  }
};

template <typename T>
class GlobalTensor {
 public:
  GlobalTensor() {}
  __gm__ T* addr_ = nullptr;
  uint64_t size_ = 0;  // elements; 0 = unknown (only the launch's GM regions are checked)

  void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize) { addr_ = buffer; size_ = bufferSize; }
  void SetGlobalBuffer(__gm__ T* buffer) { addr_ = buffer; size_ = 0; }
  const __gm__ T* GetPhyAddr() const { return addr_; }
  __gm__ T* GetPhyAddr(const uint64_t offset) const { return addr_ + offset; }
  uint64_t GetSize() const { return size_; }

  // Range [offset, offset + count) must lie in the buffer and in a GM region of the launch.
  __gm__ T* Range(const char* call, uint64_t offset, uint64_t count, bool write) const {
    qwen_sim::PollAbort();
    if (addr_ == nullptr) qwen_sim::Fail(call, "uses a GlobalTensor before SetGlobalBuffer");
    if (size_ != 0 && offset + count > size_)
      qwen_sim::Fail(call, "reaches element %llu of a GlobalTensor of %llu elements",
                     static_cast<unsigned long long>(offset + count - 1), static_cast<unsigned long long>(size_));
    qwen_sim::CheckGm(call, addr_ + offset, count * sizeof(T), write);
    return addr_ + offset;
  }
  T GetValue(const uint64_t offset) const { return *Range("GlobalTensor::GetValue", offset, 1, false); }
  void SetValue(const uint64_t offset, const T value) { *Range("GlobalTensor::SetValue", offset, 1, true) = value; }
  GlobalTensor operator[](const uint64_t offset) const {
    GlobalTensor r;
    r.addr_ = addr_ + offset;
    if (size_ != 0) {
      if (offset > size_)
        qwen_sim::Fail("GlobalTensor::operator[]", "offset %llu is past the buffer's %llu elements",
                       static_cast<unsigned long long>(offset), static_cast<unsigned long long>(size_));
      r.size_ = size_ - offset;
    }
    return r;
  }
};

// ============================================================ pipe and queues

class TPipe;

template <TPosition pos, int32_t depth>
class TQue {
 public:
  TQue() {}
  int32_t id_ = -1;
  int32_t firstSlot_ = -1;
  int32_t num_ = 0;
  int32_t fifo_[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int32_t head_ = 0, count_ = 0;

  void Ready(const char* call) const {
    qwen_sim::PollAbort();
    if (id_ < 0) qwen_sim::Fail(call, "on a TQue that TPipe::InitBuffer never set up");
  }

  template <typename T>
  LocalTensor<T> AllocTensor() {
    Ready("TQue::AllocTensor");
    qwen_sim::CoreState* c = qwen_sim::Core();
    for (int32_t i = 0; i < num_; ++i) {
      qwen_sim::Slot& s = c->slots[firstSlot_ + i];
      if (s.state == qwen_sim::SLOT_FREE) {
        s.state = qwen_sim::SLOT_ALLOCATED;
        LocalTensor<T> t;
        t.slot_ = firstSlot_ + i;
        t.gen_ = s.gen;
        t.off_ = 0;
        t.count_ = s.bytes / static_cast<uint32_t>(sizeof(T));
        t.pos_ = pos;
        return t;
      }
    }
    qwen_sim::Fail("TQue::AllocTensor", "all %d buffers of this queue are allocated: AllocTensor past the buffer "
                   "count given to InitBuffer (FreeTensor one first)", num_);
  }

  template <typename T>
  bool EnQue(const LocalTensor<T>& tensor) {
    Ready("TQue::EnQue");
    qwen_sim::CoreState* c = qwen_sim::Core();
    Owned("TQue::EnQue", tensor.slot_);
    qwen_sim::Slot& s = c->slots[tensor.slot_];
    if (s.gen != tensor.gen_ || s.state != qwen_sim::SLOT_ALLOCATED)
      qwen_sim::Fail("TQue::EnQue", "enqueues a tensor that is %s, not freshly allocated",
                     s.gen != tensor.gen_ ? "freed" : qwen_sim::SlotStateName(s.state));
    if (tensor.off_ != 0) qwen_sim::Fail("TQue::EnQue", "enqueues a sub-tensor (operator[]) instead of the buffer");
    if (count_ >= depth)
      qwen_sim::Fail("TQue::EnQue", "the queue already holds depth=%d tensors (DeQue before enqueuing more)", depth);
    fifo_[(head_ + count_) % 8] = tensor.slot_;
    ++count_;
    s.state = qwen_sim::SLOT_QUEUED;
    return true;
  }

  template <typename T>
  LocalTensor<T> DeQue() {
    Ready("TQue::DeQue");
    if (count_ == 0) qwen_sim::Fail("TQue::DeQue", "dequeues from an empty queue: nothing was enqueued");
    const int32_t slot = fifo_[head_];
    head_ = (head_ + 1) % 8;
    --count_;
    qwen_sim::Slot& s = qwen_sim::Core()->slots[slot];
    s.state = qwen_sim::SLOT_DEQUEUED;
    LocalTensor<T> t;
    t.slot_ = slot;
    t.gen_ = s.gen;
    t.off_ = 0;
    t.count_ = s.bytes / static_cast<uint32_t>(sizeof(T));
    t.pos_ = pos;
    return t;
  }

  template <typename T>
  void FreeTensor(LocalTensor<T>& tensor) {
    Ready("TQue::FreeTensor");
    Owned("TQue::FreeTensor", tensor.slot_);
    qwen_sim::Slot& s = qwen_sim::Core()->slots[tensor.slot_];
    if (s.gen != tensor.gen_ || s.state == qwen_sim::SLOT_FREE)
      qwen_sim::Fail("TQue::FreeTensor", "frees a tensor twice");
    if (s.state == qwen_sim::SLOT_QUEUED)
      qwen_sim::Fail("TQue::FreeTensor", "frees a tensor that is still enqueued (DeQue it first)");
    s.state = qwen_sim::SLOT_FREE;
    ++s.gen;
  }

  void Owned(const char* call, int32_t slot) const {
    if (slot < firstSlot_ || slot >= firstSlot_ + num_)
      qwen_sim::Fail(call, "passes a tensor that does not belong to this queue");
  }
};

template <TPosition pos>
class TBuf {
 public:
  TBuf() {}
  int32_t slot_ = -1;
  template <typename T>
  LocalTensor<T> Get(const uint32_t len) {
    qwen_sim::PollAbort();
    if (slot_ < 0) qwen_sim::Fail("TBuf::Get", "on a TBuf that TPipe::InitBuffer never set up");
    const qwen_sim::Slot& s = qwen_sim::Core()->slots[slot_];
    if (static_cast<uint64_t>(len) * sizeof(T) > s.bytes)
      qwen_sim::Fail("TBuf::Get", "asks for %u elements of %u bytes from a %u-byte buffer", len,
                     static_cast<uint32_t>(sizeof(T)), s.bytes);
    LocalTensor<T> t;
    t.slot_ = slot_;
    t.gen_ = s.gen;
    t.count_ = len;
    t.pos_ = pos;
    return t;
  }
  template <typename T>
  LocalTensor<T> Get() {
    if (slot_ < 0) qwen_sim::Fail("TBuf::Get", "on a TBuf that TPipe::InitBuffer never set up");
    return Get<T>(qwen_sim::Core()->slots[slot_].bytes / static_cast<uint32_t>(sizeof(T)));
  }
};

class TPipe {
 public:
  TPipe() {
    qwen_sim::CoreState* c = qwen_sim::Core();
    if (c->pipeAlive) qwen_sim::Fail("TPipe::TPipe", "a second TPipe while one is alive on this core");
    c->pipeAlive = 1;
  }
  ~TPipe() { Destroy(); }
  void Destroy() {
    qwen_sim::CoreState* c = qwen_sim::Core();
    c->pipeAlive = 0;
    c->ubUsed = 0;
    for (uint32_t m = 0; m < qwen_sim::MEM_COUNT; ++m) c->memUsed[m] = 0;
    c->numSlots = 0;
  }

  template <TPosition pos, int32_t depth>
  bool InitBuffer(TQue<pos, depth>& que, uint8_t num, uint32_t len) {
    qwen_sim::PollAbort();
    if (que.id_ >= 0) qwen_sim::Fail("TPipe::InitBuffer", "initialises the same TQue twice");
    if (num < 1 || num > 8) qwen_sim::Fail("TPipe::InitBuffer", "num=%u buffers; the queue takes 1..8", num);
    if (depth < 1 || depth > 8) qwen_sim::Fail("TPipe::InitBuffer", "TQue depth %d outside 1..8", depth);
    qwen_sim::CoreState* c = qwen_sim::Core();
    que.firstSlot_ = static_cast<int32_t>(c->numSlots);
    que.num_ = num;
    que.id_ = c->nextQueueId++;
    for (uint32_t i = 0; i < num; ++i) Carve(pos, len, qwen_sim::SLOT_FREE, que.id_);
    return true;
  }

  template <TPosition pos>
  bool InitBuffer(TBuf<pos>& buf, uint32_t len) {
    qwen_sim::PollAbort();
    if (buf.slot_ >= 0) qwen_sim::Fail("TPipe::InitBuffer", "initialises the same TBuf twice");
    buf.slot_ = Carve(pos, len, qwen_sim::SLOT_CALC, -1);
    return true;
  }

  TEventID FetchEventID(HardEvent) { return 0; }
  template <HardEvent evt>
  TEventID FetchEventID() { return 0; }
  void Reset() { Destroy(); qwen_sim::Core()->pipeAlive = 1; }

 private:
  int32_t Carve(TPosition pos, uint32_t len, uint8_t state, int32_t owner) {
    qwen_sim::CoreState* c = qwen_sim::Core();
    if (len == 0) qwen_sim::Fail("TPipe::InitBuffer", "a buffer of 0 bytes");
    const qwen_sim::MemInfo& mi = qwen_sim::PositionMemory("TPipe::InitBuffer", pos);
    if (c->mem[mi.kind] == nullptr)
      qwen_sim::Fail("TPipe::InitBuffer", "TPosition::%s is %s, which %s does not have (%s)", qwen_sim::PositionName(pos),
                     mi.name, c->kind == qwen_sim::CORE_AIC ? "a cube core (AIC)" : "a vector core (AIV)",
                     c->kind == qwen_sim::CORE_AIC ? "the unified buffer belongs to the AIVs"
                                                   : "L1 and L0A/L0B/L0C belong to the cube cores: a kernel that "
                                                     "uses them is KERNEL_TYPE_AIC_ONLY or MIX");
    // Buffers start aligned as the memory requires and take whole alignment units.
    const uint64_t bytes = (static_cast<uint64_t>(len) + mi.align - 1) / mi.align * mi.align;
    const uint32_t used = c->memUsed[mi.kind];
    if (used + bytes > mi.usable) {
      if (mi.kind == qwen_sim::MEM_UB)
        qwen_sim::Fail("TPipe::InitBuffer",
                       "unified buffer overflow: %llu more bytes with %u already in use exceeds the %u bytes "
                       "(184 KB of 192 KB) usable per core on Ascend 910B",
                       static_cast<unsigned long long>(bytes), used, qwen_sim::kUbUsableBytes);
      qwen_sim::Fail("TPipe::InitBuffer", "%s overflow: %llu more bytes with %u already in use exceeds its %u bytes",
                     mi.name, static_cast<unsigned long long>(bytes), used, mi.usable);
    }
    if (c->numSlots >= qwen_sim::kMaxSlots) qwen_sim::Fail("TPipe::InitBuffer", "too many buffers");
    qwen_sim::Slot& s = c->slots[c->numSlots];
    s.offset = used;
    s.bytes = static_cast<uint32_t>(bytes);
    s.gen = 1;
    s.state = state;
    s.mem = mi.kind;
    s.mmadUnitFlag = 0xff;
    s.owner = owner;
    // Fresh on-chip memory holds garbage on the device: poison it (NaN for
    // half/float, -1 for integers) so that reads of unwritten data show up.
    __builtin_memset(c->mem[mi.kind] + s.offset, 0xff, bytes);
    c->memUsed[mi.kind] = used + static_cast<uint32_t>(bytes);
    if (mi.kind == qwen_sim::MEM_UB) {
      c->ubUsed = c->memUsed[mi.kind];
      qwen_sim::NoteUbUse(c->ubUsed);
    }
    return static_cast<int32_t>(c->numSlots++);
  }
};


// ============================================================ synchronisation
// Execution inside a block is sequential here, so these order nothing; they
// exist so that kernels carry the synchronisation the device needs.
template <pipe_t pipe> inline void PipeBarrier() { qwen_sim::PollAbort(); }
inline void pipe_barrier(pipe_t) { qwen_sim::PollAbort(); }
template <HardEvent event> inline void SetFlag(int32_t) { qwen_sim::PollAbort(); }
template <HardEvent event> inline void WaitFlag(int32_t) { qwen_sim::PollAbort(); }

}  // namespace AscendC

// ============================================================ operand checks
namespace qwen_sim {

// An operand of any on-chip memory: alive, `count` elements in the tensor, its
// start aligned to `align` bytes of its memory.
template <typename T>
inline T* OnChip(const char* call, const char* role, const AscendC::LocalTensor<T>& t, uint64_t count, uint32_t align) {
  T* p = t.Ptr(call);
  if (t.UbOffset() % align != 0)
    Fail(call, "%s starts at byte %u of %s, not %u-byte aligned", role, t.UbOffset(), MemInfoOf(t.Mem()).name, align);
  if (count > t.count_)
    Fail(call, "%s: %llu elements requested but the tensor holds %u from its start", role,
         static_cast<unsigned long long>(count), t.count_);
  return p;
}

// An operand that must lie in `mem` (the vector unit reads and writes only the unified buffer).
template <typename T>
inline void InMemory(const char* call, const char* role, const AscendC::LocalTensor<T>& t, uint8_t mem,
                     const char* why) {
  t.Ptr(call);
  if (t.Mem() != mem)
    Fail(call, "%s is in %s (TPosition::%s); %s", role, MemInfoOf(t.Mem()).name, PositionName(t.pos_), why);
}

template <typename T>
inline T* Operand(const char* call, const char* role, const AscendC::LocalTensor<T>& t, uint64_t count) {
  T* p = t.Ptr(call);
  InMemory(call, role, t, MEM_UB, "this operation works on the unified buffer only");
  if (t.UbOffset() % kBlockBytes != 0)
    Fail(call, "%s starts at unified-buffer byte %u, not 32-byte aligned", role, t.UbOffset());
  if (count > t.count_)
    Fail(call, "%s: %llu elements requested but the tensor holds %u from its start", role,
         static_cast<unsigned long long>(count), t.count_);
  return p;
}

inline void CheckCount(const char* call, int64_t count) {
  if (count < 0) Fail(call, "calCount %lld is negative", static_cast<long long>(count));
}

// Destination may coincide with a source, but may not partially overlap it.
template <typename A, typename B>
inline void NoPartialOverlap(const char* call, const A* dst, uint64_t dstBytes, const B* src, uint64_t srcBytes) {
  const uint8_t* d = reinterpret_cast<const uint8_t*>(dst);
  const uint8_t* s = reinterpret_cast<const uint8_t*>(src);
  if (d == s) return;
  if (d < s + srcBytes && s < d + dstBytes) Fail(call, "destination partially overlaps a source");
}

template <typename T>
inline T StoreF(float v) { return FromF<T>(v); }

}  // namespace qwen_sim

namespace AscendC {

// ============================================================ vector ops, count form

#define QWEN_SIM_BINARY(NAME, EXPR, TYPES_OK, TYPES_MSG)                                                      \
  template <typename T>                                                                                      \
  inline void NAME(const LocalTensor<T>& dstLocal, const LocalTensor<T>& src0Local,                          \
                   const LocalTensor<T>& src1Local, const int32_t& calCount) {                               \
    static_assert(TYPES_OK, #NAME ": " TYPES_MSG);                                                           \
    qwen_sim::CheckCount(#NAME, calCount);                                                                   \
    T* d = qwen_sim::Operand(#NAME, "dst", dstLocal, calCount);                                              \
    const T* a = qwen_sim::Operand(#NAME, "src0", src0Local, calCount);                                      \
    const T* b = qwen_sim::Operand(#NAME, "src1", src1Local, calCount);                                      \
    qwen_sim::NoPartialOverlap(#NAME, d, calCount * sizeof(T), a, calCount * sizeof(T));                     \
    qwen_sim::NoPartialOverlap(#NAME, d, calCount * sizeof(T), b, calCount * sizeof(T));                     \
    for (int32_t i = 0; i < calCount; ++i) {                                                                 \
      const float x = qwen_sim::ToF(a[i]);                                                                   \
      const float y = qwen_sim::ToF(b[i]);                                                                   \
      d[i] = qwen_sim::StoreF<T>(EXPR);                                                                      \
    }                                                                                                        \
  }

QWEN_SIM_BINARY(Add, x + y, qwen_sim::IsVecFloat<T>::value, "half and float only in this stand-in")
QWEN_SIM_BINARY(Sub, x - y, qwen_sim::IsVecFloat<T>::value, "half and float only in this stand-in")
QWEN_SIM_BINARY(Mul, x * y, qwen_sim::IsVecFloat<T>::value, "half and float only in this stand-in")
QWEN_SIM_BINARY(Div, x / y, qwen_sim::IsVecFloat<T>::value, "half and float only")
QWEN_SIM_BINARY(Max, (x > y || x != x) ? x : y, qwen_sim::IsVecFloat<T>::value, "half and float only in this stand-in")
QWEN_SIM_BINARY(Min, (x < y || x != x) ? x : y, qwen_sim::IsVecFloat<T>::value, "half and float only in this stand-in")
#undef QWEN_SIM_BINARY

#define QWEN_SIM_UNARY(NAME, EXPR)                                                                           \
  template <typename T>                                                                                      \
  inline void NAME(const LocalTensor<T>& dstLocal, const LocalTensor<T>& srcLocal, const int32_t& calCount) { \
    static_assert(qwen_sim::IsVecFloat<T>::value, #NAME ": half and float only");                           \
    qwen_sim::CheckCount(#NAME, calCount);                                                                   \
    T* d = qwen_sim::Operand(#NAME, "dst", dstLocal, calCount);                                              \
    const T* a = qwen_sim::Operand(#NAME, "src", srcLocal, calCount);                                        \
    qwen_sim::NoPartialOverlap(#NAME, d, calCount * sizeof(T), a, calCount * sizeof(T));                     \
    for (int32_t i = 0; i < calCount; ++i) {                                                                 \
      const float x = qwen_sim::ToF(a[i]);                                                                   \
      d[i] = qwen_sim::StoreF<T>(EXPR);                                                                      \
    }                                                                                                        \
  }

QWEN_SIM_UNARY(Exp, __builtin_expf(x))
QWEN_SIM_UNARY(Ln, __builtin_logf(x))
QWEN_SIM_UNARY(Sqrt, __builtin_sqrtf(x))
QWEN_SIM_UNARY(Abs, __builtin_fabsf(x))
QWEN_SIM_UNARY(Reciprocal, 1.0f / x)
#undef QWEN_SIM_UNARY

#define QWEN_SIM_SCALAR(NAME, EXPR)                                                                          \
  template <typename T>                                                                                      \
  inline void NAME(const LocalTensor<T>& dstLocal, const LocalTensor<T>& srcLocal, const T& scalarValue,    \
                   const int32_t& calCount) {                                                                \
    static_assert(qwen_sim::IsVecFloat<T>::value, #NAME ": half and float only in this stand-in");          \
    qwen_sim::CheckCount(#NAME, calCount);                                                                   \
    T* d = qwen_sim::Operand(#NAME, "dst", dstLocal, calCount);                                              \
    const T* a = qwen_sim::Operand(#NAME, "src", srcLocal, calCount);                                        \
    qwen_sim::NoPartialOverlap(#NAME, d, calCount * sizeof(T), a, calCount * sizeof(T));                     \
    const float y = qwen_sim::ToF(scalarValue);                                                              \
    for (int32_t i = 0; i < calCount; ++i) {                                                                 \
      const float x = qwen_sim::ToF(a[i]);                                                                   \
      d[i] = qwen_sim::StoreF<T>(EXPR);                                                                      \
    }                                                                                                        \
  }

QWEN_SIM_SCALAR(Adds, x + y)
QWEN_SIM_SCALAR(Muls, x * y)
QWEN_SIM_SCALAR(Maxs, (x > y || x != x) ? x : y)
QWEN_SIM_SCALAR(Mins, (x < y || x != x) ? x : y)
#undef QWEN_SIM_SCALAR

template <typename T>
inline void Duplicate(const LocalTensor<T>& dstLocal, const T& scalarValue, const int32_t& calCount) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "Duplicate: 16- and 32-bit types only");
  qwen_sim::CheckCount("Duplicate", calCount);
  T* d = qwen_sim::Operand("Duplicate", "dst", dstLocal, calCount);
  for (int32_t i = 0; i < calCount; ++i) d[i] = scalarValue;
}

// dst = dst + src * scalar (the multiply is rounded to T first, as two instructions would be)
template <typename T, typename U>
inline void Axpy(const LocalTensor<T>& dstLocal, const LocalTensor<U>& srcLocal, const U& scalarValue,
                 const int32_t& calCount) {
  static_assert(qwen_sim::SameType<T, U>::value && qwen_sim::IsVecFloat<T>::value,
                "Axpy: half/half or float/float in this stand-in");
  qwen_sim::CheckCount("Axpy", calCount);
  T* d = qwen_sim::Operand("Axpy", "dst", dstLocal, calCount);
  const U* a = qwen_sim::Operand("Axpy", "src", srcLocal, calCount);
  qwen_sim::NoPartialOverlap("Axpy", d, calCount * sizeof(T), a, calCount * sizeof(U));
  const float y = qwen_sim::ToF(scalarValue);
  for (int32_t i = 0; i < calCount; ++i) {
    const float prod = qwen_sim::ToF(qwen_sim::StoreF<T>(qwen_sim::ToF(a[i]) * y));
    d[i] = qwen_sim::StoreF<T>(qwen_sim::ToF(d[i]) + prod);
  }
}

// ============================================================ reductions, count form
// Work tensor size as the documentation prescribes: the first pass writes one
// value per 256-byte repeat (ReduceMax: a value/index pair), rounded up to a
// whole datablock.
namespace detail {
template <typename T>
inline uint32_t ReduceWorkElems(int32_t count, bool pairs) {
  const uint32_t perRepeat = qwen_sim::kRepeatBytes / sizeof(T);
  const uint32_t perBlock = qwen_sim::kBlockBytes / sizeof(T);
  const uint32_t repeats = (static_cast<uint32_t>(count) + perRepeat - 1) / perRepeat;
  const uint32_t first = pairs ? repeats * 2 : repeats;
  return (first + perBlock - 1) / perBlock * perBlock;
}
}  // namespace detail

template <typename T>
inline void ReduceMax(const LocalTensor<T>& dstLocal, const LocalTensor<T>& srcLocal, const LocalTensor<T>& workLocal,
                      const int32_t count, bool calIndex = 0) {
  static_assert(qwen_sim::IsVecFloat<T>::value, "ReduceMax: half and float only");
  if (count < 1) qwen_sim::Fail("ReduceMax", "count %d < 1", count);
  T* d = qwen_sim::Operand("ReduceMax", "dst", dstLocal, calIndex ? 2 : 1);
  const T* s = qwen_sim::Operand("ReduceMax", "src", srcLocal, count);
  const uint32_t need = detail::ReduceWorkElems<T>(count, true);
  qwen_sim::Operand("ReduceMax", "workLocal (needs the documented size)", workLocal, need);
  float best = qwen_sim::ToF(s[0]);
  uint32_t at = 0;
  for (int32_t i = 1; i < count; ++i) {
    const float v = qwen_sim::ToF(s[i]);
    if (v > best) { best = v; at = static_cast<uint32_t>(i); }
  }
  // The work area is clobbered on the device.
  __builtin_memset(workLocal.Ptr("ReduceMax"), 0xff, need * sizeof(T));
  d[0] = qwen_sim::StoreF<T>(best);
  if (calIndex) {
    if (sizeof(T) == 4) { uint32_t idx = at; __builtin_memcpy(&d[1], &idx, 4); }
    else { uint16_t idx = static_cast<uint16_t>(at); __builtin_memcpy(&d[1], &idx, 2); }
  }
}

template <typename T>
inline void ReduceSum(const LocalTensor<T>& dstLocal, const LocalTensor<T>& srcLocal, const LocalTensor<T>& workLocal,
                      const int32_t count) {
  static_assert(qwen_sim::IsVecFloat<T>::value, "ReduceSum: half and float only");
  if (count < 1) qwen_sim::Fail("ReduceSum", "count %d < 1", count);
  T* d = qwen_sim::Operand("ReduceSum", "dst", dstLocal, 1);
  const T* s = qwen_sim::Operand("ReduceSum", "src", srcLocal, count);
  const uint32_t need = detail::ReduceWorkElems<T>(count, false);
  qwen_sim::Operand("ReduceSum", "workLocal (needs the documented size)", workLocal, need);
  // Per 256-byte repeat: a pairwise tree (rounded to T); then the repeat sums, likewise.
  const int32_t perRepeat = static_cast<int32_t>(qwen_sim::kRepeatBytes / sizeof(T));
  float partial[4096];
  int32_t n = 0;
  for (int32_t r0 = 0; r0 < count; r0 += perRepeat) {
    float lane[128];
    int32_t m = (count - r0 < perRepeat) ? count - r0 : perRepeat;
    for (int32_t i = 0; i < m; ++i) lane[i] = qwen_sim::ToF(s[r0 + i]);
    while (m > 1) {
      const int32_t h = (m + 1) / 2;
      for (int32_t i = 0; i + h < m; ++i) lane[i] = qwen_sim::ToF(qwen_sim::StoreF<T>(lane[i] + lane[i + h]));
      m = h;
    }
    partial[n++] = lane[0];
    if (n == 4096) { // fold early; counts this large do not fit a unified buffer anyway
      for (int32_t i = 1; i < n; ++i) partial[0] = qwen_sim::ToF(qwen_sim::StoreF<T>(partial[0] + partial[i]));
      n = 1;
    }
  }
  while (n > 1) {
    const int32_t h = (n + 1) / 2;
    for (int32_t i = 0; i + h < n; ++i) partial[i] = qwen_sim::ToF(qwen_sim::StoreF<T>(partial[i] + partial[i + h]));
    n = h;
  }
  __builtin_memset(workLocal.Ptr("ReduceSum"), 0xff, need * sizeof(T));
  d[0] = qwen_sim::StoreF<T>(partial[0]);
}

// ============================================================ vector ops, repeat form
// mask: number of leading elements of each repeat (continuous mode);
// repeatTime: 8-bit on the device. Strides count datablocks.
namespace detail {
template <typename T>
inline void CheckRepeat(const char* call, uint64_t mask, const qwen_sim::RepeatTimes& rep) {
  const uint64_t perRepeat = qwen_sim::kRepeatBytes / sizeof(T);
  if (rep.value < 0 || rep.value > 255)
    qwen_sim::Fail(call, "repeatTime %lld does not fit the instruction's 8-bit field (0..255)",
                   static_cast<long long>(rep.value));
  if (mask == 0 || mask > perRepeat)
    qwen_sim::Fail(call, "mask %llu outside 1..%llu elements per repeat for %s", static_cast<unsigned long long>(mask),
                   static_cast<unsigned long long>(perRepeat), qwen_sim::TypeName<T>::Get());
}
// Byte offset of element i of repeat r, and the tensor extent it needs.
template <typename T>
inline uint64_t RepeatAddr(uint64_t r, uint64_t i, uint32_t blk, uint32_t rep) {
  const uint64_t perBlock = qwen_sim::kBlockBytes / sizeof(T);
  return r * rep * qwen_sim::kBlockBytes + (i / perBlock) * blk * qwen_sim::kBlockBytes + (i % perBlock) * sizeof(T);
}
template <typename T>
inline T* RepeatOperand(const char* call, const char* role, const LocalTensor<T>& t, uint64_t mask, int64_t reps,
                        uint32_t blk, uint32_t rep) {
  T* p = qwen_sim::Operand(call, role, t, 0);
  if (reps == 0) return p;
  const uint64_t last = RepeatAddr<T>(static_cast<uint64_t>(reps - 1), mask - 1, blk, rep);
  uint64_t end = last + sizeof(T);
  for (uint64_t i = 0; i < mask; ++i) {
    const uint64_t a = RepeatAddr<T>(static_cast<uint64_t>(reps - 1), i, blk, rep) + sizeof(T);
    if (a > end) end = a;
  }
  if (end > static_cast<uint64_t>(t.count_) * sizeof(T))
    qwen_sim::Fail(call, "%s: the repeats reach byte %llu of a %llu-byte tensor", role,
                   static_cast<unsigned long long>(end), static_cast<unsigned long long>(t.count_ * sizeof(T)));
  return p;
}
}  // namespace detail

template <typename T, bool isSetMask = true>
inline void Add(const LocalTensor<T>& dstLocal, const LocalTensor<T>& src0Local, const LocalTensor<T>& src1Local,
                uint64_t mask, const qwen_sim::RepeatTimes repeatTime, const BinaryRepeatParams& p) {
  static_assert(qwen_sim::IsVecFloat<T>::value, "Add: half and float only in this stand-in");
  detail::CheckRepeat<T>("Add", mask, repeatTime);
  uint8_t* d = reinterpret_cast<uint8_t*>(detail::RepeatOperand("Add", "dst", dstLocal, mask, repeatTime.value, p.dstBlkStride, p.dstRepStride));
  const uint8_t* a = reinterpret_cast<const uint8_t*>(detail::RepeatOperand("Add", "src0", src0Local, mask, repeatTime.value, p.src0BlkStride, p.src0RepStride));
  const uint8_t* b = reinterpret_cast<const uint8_t*>(detail::RepeatOperand("Add", "src1", src1Local, mask, repeatTime.value, p.src1BlkStride, p.src1RepStride));
  for (int64_t r = 0; r < repeatTime.value; ++r)
    for (uint64_t i = 0; i < mask; ++i) {
      const T x = *reinterpret_cast<const T*>(a + detail::RepeatAddr<T>(r, i, p.src0BlkStride, p.src0RepStride));
      const T y = *reinterpret_cast<const T*>(b + detail::RepeatAddr<T>(r, i, p.src1BlkStride, p.src1RepStride));
      *reinterpret_cast<T*>(d + detail::RepeatAddr<T>(r, i, p.dstBlkStride, p.dstRepStride)) =
          qwen_sim::StoreF<T>(qwen_sim::ToF(x) + qwen_sim::ToF(y));
    }
}

template <typename T, bool isSetMask = true>
inline void Muls(const LocalTensor<T>& dstLocal, const LocalTensor<T>& srcLocal, const T& scalarValue, uint64_t mask,
                 const qwen_sim::RepeatTimes repeatTime, const UnaryRepeatParams& p) {
  static_assert(qwen_sim::IsVecFloat<T>::value, "Muls: half and float only in this stand-in");
  detail::CheckRepeat<T>("Muls", mask, repeatTime);
  uint8_t* d = reinterpret_cast<uint8_t*>(detail::RepeatOperand("Muls", "dst", dstLocal, mask, repeatTime.value, p.dstBlkStride, p.dstRepStride));
  const uint8_t* a = reinterpret_cast<const uint8_t*>(detail::RepeatOperand("Muls", "src", srcLocal, mask, repeatTime.value, p.srcBlkStride, p.srcRepStride));
  const float y = qwen_sim::ToF(scalarValue);
  for (int64_t r = 0; r < repeatTime.value; ++r)
    for (uint64_t i = 0; i < mask; ++i) {
      const T x = *reinterpret_cast<const T*>(a + detail::RepeatAddr<T>(r, i, p.srcBlkStride, p.srcRepStride));
      *reinterpret_cast<T*>(d + detail::RepeatAddr<T>(r, i, p.dstBlkStride, p.dstRepStride)) =
          qwen_sim::StoreF<T>(qwen_sim::ToF(x) * y);
    }
}

template <typename T, bool isSetMask = true>
inline void Duplicate(const LocalTensor<T>& dstLocal, const T& scalarValue, uint64_t mask,
                      const qwen_sim::RepeatTimes repeatTime, const uint16_t dstBlockStride,
                      const uint8_t dstRepeatStride) {
  detail::CheckRepeat<T>("Duplicate", mask, repeatTime);
  uint8_t* d = reinterpret_cast<uint8_t*>(detail::RepeatOperand("Duplicate", "dst", dstLocal, mask, repeatTime.value, dstBlockStride, dstRepeatStride));
  for (int64_t r = 0; r < repeatTime.value; ++r)
    for (uint64_t i = 0; i < mask; ++i)
      *reinterpret_cast<T*>(d + detail::RepeatAddr<T>(r, i, dstBlockStride, dstRepeatStride)) = scalarValue;
}

// ============================================================ Cast
// Only the conversions (and round modes) the Ascend 910B vector unit has.
// Integer destinations saturate; NaN converts to 0.
namespace detail {
enum : uint32_t { M_NONE = 1u << 0, M_RINT = 1u << 1, M_FLOOR = 1u << 2, M_CEIL = 1u << 3, M_ROUND = 1u << 4,
                  M_TRUNC = 1u << 5, M_ODD = 1u << 6 };
constexpr uint32_t M_INT = M_RINT | M_FLOOR | M_CEIL | M_ROUND | M_TRUNC;

template <typename D, typename S> struct CastModes { static constexpr uint32_t value = 0; };
template <> struct CastModes<float, half> { static constexpr uint32_t value = M_NONE; };
template <> struct CastModes<half, float> { static constexpr uint32_t value = M_NONE | M_INT | M_ODD; };
template <> struct CastModes<float, float> { static constexpr uint32_t value = M_INT; };
template <> struct CastModes<bfloat16_t, float> { static constexpr uint32_t value = M_INT; };
template <> struct CastModes<float, bfloat16_t> { static constexpr uint32_t value = M_NONE; };
template <> struct CastModes<int32_t, float> { static constexpr uint32_t value = M_INT; };
template <> struct CastModes<int16_t, float> { static constexpr uint32_t value = M_INT; };
template <> struct CastModes<int64_t, float> { static constexpr uint32_t value = M_INT; };
template <> struct CastModes<float, int32_t> { static constexpr uint32_t value = M_NONE | M_INT; };
template <> struct CastModes<int32_t, half> { static constexpr uint32_t value = M_INT; };
template <> struct CastModes<int16_t, half> { static constexpr uint32_t value = M_INT; };
template <> struct CastModes<int8_t, half> { static constexpr uint32_t value = M_NONE | M_INT; };
template <> struct CastModes<uint8_t, half> { static constexpr uint32_t value = M_NONE | M_INT; };
template <> struct CastModes<half, int8_t> { static constexpr uint32_t value = M_NONE; };
template <> struct CastModes<half, uint8_t> { static constexpr uint32_t value = M_NONE; };
template <> struct CastModes<half, int16_t> { static constexpr uint32_t value = M_NONE | M_INT; };
template <> struct CastModes<float, int16_t> { static constexpr uint32_t value = M_NONE; };
template <> struct CastModes<int32_t, bfloat16_t> { static constexpr uint32_t value = M_INT; };

inline const char* ModeName(RoundMode m) {
  switch (m) {
    case RoundMode::CAST_NONE: return "CAST_NONE";
    case RoundMode::CAST_RINT: return "CAST_RINT";
    case RoundMode::CAST_FLOOR: return "CAST_FLOOR";
    case RoundMode::CAST_CEIL: return "CAST_CEIL";
    case RoundMode::CAST_ROUND: return "CAST_ROUND";
    case RoundMode::CAST_TRUNC: return "CAST_TRUNC";
    default: return "CAST_ODD";
  }
}

// Round a float to an integer-valued double with the mode (CAST_NONE = RINT).
inline double RoundInt(float v, RoundMode m) {
  switch (m) {
    case RoundMode::CAST_FLOOR: return __builtin_floor(v);
    case RoundMode::CAST_CEIL: return __builtin_ceil(v);
    case RoundMode::CAST_ROUND: return __builtin_round(v);
    case RoundMode::CAST_TRUNC: return __builtin_trunc(v);
    default: return __builtin_nearbyint(static_cast<double>(v));
  }
}

template <typename I>
inline I SatInt(float v, RoundMode m, double lo, double hi) {
  if (v != v) return 0;
  double r = RoundInt(v, m);
  if (r < lo) r = lo;
  if (r > hi) r = hi;
  return static_cast<I>(r);
}

// float -> 16-bit float format with a round mode, through the two neighbours.
template <typename H>
inline H NarrowFloat(float v, RoundMode m) {
  H n(v);  // nearest even
  if (m == RoundMode::CAST_NONE || m == RoundMode::CAST_RINT || v != v) return n;
  const float nf = static_cast<float>(n);
  if (nf == v) return n;
  // Past the largest finite value: nearest (even or away) is infinity; the
  // directed modes may stop at the largest finite value (found by stepping below).
  if (__builtin_isinf(nf) != 0 && m == RoundMode::CAST_ROUND) return n;
  // neighbour on the other side of v
  H other;
  const bool nAbove = nf > v;
  const bool neg = (n.bits & 0x8000u) != 0;
  const uint16_t mag = n.bits & 0x7fffu;
  const bool towardZeroStep = nAbove != neg;  // moving down in value for positives
  if (towardZeroStep) {
    other.bits = mag == 0 ? static_cast<uint16_t>((neg ? 0 : 0x8000u) | 1u) : static_cast<uint16_t>(n.bits - 1u);
  } else {
    other.bits = static_cast<uint16_t>(n.bits + 1u);
  }
  const H lo = nAbove ? other : n;
  const H hi = nAbove ? n : other;
  switch (m) {
    case RoundMode::CAST_FLOOR: return lo;
    case RoundMode::CAST_CEIL: return hi;
    case RoundMode::CAST_TRUNC: return v > 0 ? lo : hi;
    case RoundMode::CAST_ODD: return (lo.bits & 1u) ? lo : hi;
    case RoundMode::CAST_ROUND: {
      const float dl = v - static_cast<float>(lo), dh = static_cast<float>(hi) - v;
      if (dl < dh) return lo;
      if (dh < dl) return hi;
      return v > 0 ? hi : lo;  // ties away from zero
    }
    default: return n;
  }
}

template <typename D, typename S>
inline D ConvertOne(S s, RoundMode m) {
  const float v = qwen_sim::ToF(s);
  if constexpr (qwen_sim::SameType<D, half>::value) {
    return NarrowFloat<half>(v, m);
  } else if constexpr (qwen_sim::SameType<D, bfloat16_t>::value) {
    return NarrowFloat<bfloat16_t>(v, m);
  } else if constexpr (qwen_sim::SameType<D, float>::value) {
    if (qwen_sim::SameType<S, float>::value) return static_cast<float>(v != v ? v : RoundInt(v, m));
    return v;
  } else if constexpr (qwen_sim::SameType<D, int8_t>::value) {
    return SatInt<int8_t>(v, m, -128.0, 127.0);
  } else if constexpr (qwen_sim::SameType<D, uint8_t>::value) {
    return SatInt<uint8_t>(v, m, 0.0, 255.0);
  } else if constexpr (qwen_sim::SameType<D, int16_t>::value) {
    return SatInt<int16_t>(v, m, -32768.0, 32767.0);
  } else if constexpr (qwen_sim::SameType<D, int32_t>::value) {
    return SatInt<int32_t>(v, m, -2147483648.0, 2147483647.0);
  } else {
    return SatInt<int64_t>(v, m, -9223372036854775808.0, 9223372036854775807.0);
  }
}
}  // namespace detail

template <typename T, typename U>
inline void Cast(const LocalTensor<T>& dstLocal, const LocalTensor<U>& srcLocal, const RoundMode& round_mode,
                 const uint32_t calCount) {
  const uint32_t modes = detail::CastModes<T, U>::value;
  if (modes == 0)
    qwen_sim::Fail("Cast", "%s -> %s is not a conversion the Ascend 910B vector unit has%s",
                   qwen_sim::TypeName<U>::Get(), qwen_sim::TypeName<T>::Get(),
                   (sizeof(T) == 1 || sizeof(U) == 1) ? " (8-bit integers convert to and from half only)" : "");
  if ((modes & (1u << static_cast<uint32_t>(round_mode))) == 0)
    qwen_sim::Fail("Cast", "%s -> %s does not support round mode %s", qwen_sim::TypeName<U>::Get(),
                   qwen_sim::TypeName<T>::Get(), detail::ModeName(round_mode));
  T* d = qwen_sim::Operand("Cast", "dst", dstLocal, calCount);
  const U* s = qwen_sim::Operand("Cast", "src", srcLocal, calCount);
  qwen_sim::NoPartialOverlap("Cast", d, static_cast<uint64_t>(calCount) * sizeof(T), s,
                             static_cast<uint64_t>(calCount) * sizeof(U));
  if (reinterpret_cast<const void*>(d) == reinterpret_cast<const void*>(s) && sizeof(T) != sizeof(U))
    qwen_sim::Fail("Cast", "in place between types of different widths");
  for (uint32_t i = 0; i < calCount; ++i) d[i] = detail::ConvertOne<T, U>(s[i], round_mode);
}

// ============================================================ data movement
namespace detail {
inline void CheckBurst(const char* call, uint32_t blockCount) {
  if (blockCount < 1 || blockCount > 4095) qwen_sim::Fail(call, "blockCount %u outside 1..4095", blockCount);
}
template <typename T>
inline void CopyBytes(T* dst, const T* src, uint64_t bytes) {
  __builtin_memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
}
// Destination of a GM-> copy: the unified buffer (MTE2 to a vector core) or L1
// (MTE2 to a cube core, ND as it is; Nd2NzParams converts to NZ on the way).
template <typename T>
inline T* GmInDst(const char* call, const LocalTensor<T>& t, uint64_t count) {
  t.Ptr(call);
  if (t.Mem() == qwen_sim::MEM_L1) return qwen_sim::OnChip(call, "dst", t, count, qwen_sim::kBlockBytes);
  return qwen_sim::Operand(call, "dst", t, count);
}
inline const char* GmInName(uint8_t mem) { return mem == qwen_sim::MEM_L1 ? "GM->L1" : "GM->UB"; }
}  // namespace detail

// --- count form: calCount * sizeof(T) must be a whole number of 32-byte blocks.
template <typename T>
inline void DataCopy(const LocalTensor<T>& dstLocal, const GlobalTensor<T>& srcGlobal, const uint32_t calCount) {
  const uint64_t bytes = static_cast<uint64_t>(calCount) * sizeof(T);
  dstLocal.Ptr("DataCopy");
  if (bytes % qwen_sim::kBlockBytes != 0)
    qwen_sim::Fail("DataCopy", "%s length %llu bytes is not a multiple of 32 bytes (use DataCopyPad)",
                   detail::GmInName(dstLocal.Mem()), static_cast<unsigned long long>(bytes));
  T* d = detail::GmInDst("DataCopy", dstLocal, calCount);
  const T* s = srcGlobal.Range("DataCopy", 0, calCount, false);
  detail::CopyBytes(d, s, bytes);
}

template <typename T>
inline void DataCopy(const GlobalTensor<T>& dstGlobal, const LocalTensor<T>& srcLocal, const uint32_t calCount) {
  const uint64_t bytes = static_cast<uint64_t>(calCount) * sizeof(T);
  if (bytes % qwen_sim::kBlockBytes != 0)
    qwen_sim::Fail("DataCopy", "UB->GM length %llu bytes is not a multiple of 32 bytes (use DataCopyPad)",
                   static_cast<unsigned long long>(bytes));
  const T* s = qwen_sim::Operand("DataCopy", "src", srcLocal, calCount);
  T* d = dstGlobal.Range("DataCopy", 0, calCount, true);
  detail::CopyBytes(d, s, bytes);
}

template <typename T>
inline void DataCopy(const LocalTensor<T>& dstLocal, const LocalTensor<T>& srcLocal, const uint32_t calCount) {
  const uint64_t bytes = static_cast<uint64_t>(calCount) * sizeof(T);
  if (bytes % qwen_sim::kBlockBytes != 0)
    qwen_sim::Fail("DataCopy", "UB->UB length %llu bytes is not a multiple of 32 bytes",
                   static_cast<unsigned long long>(bytes));
  T* d = qwen_sim::Operand("DataCopy", "dst", dstLocal, calCount);
  const T* s = qwen_sim::Operand("DataCopy", "src", srcLocal, calCount);
  detail::CopyBytes(d, s, bytes);
}

// --- DataCopyParams form: blockLen, srcStride, dstStride all in 32-byte datablocks.
template <typename T>
inline void DataCopy(const LocalTensor<T>& dstLocal, const GlobalTensor<T>& srcGlobal, const DataCopyParams& p) {
  detail::CheckBurst("DataCopy", p.blockCount);
  if (p.blockLen == 0) qwen_sim::Fail("DataCopy", "blockLen 0 (it counts 32-byte datablocks)");
  const uint64_t len = static_cast<uint64_t>(p.blockLen) * 32u;
  const uint64_t ubSpan = (static_cast<uint64_t>(p.blockCount) * (p.blockLen + p.dstStride) - p.dstStride) * 32u;
  uint8_t* d = reinterpret_cast<uint8_t*>(detail::GmInDst("DataCopy", dstLocal, ubSpan / sizeof(T)));
  for (uint32_t i = 0; i < p.blockCount; ++i) {
    const uint64_t srcOff = static_cast<uint64_t>(i) * (p.blockLen + p.srcStride) * 32u;
    const T* s = srcGlobal.Range("DataCopy", srcOff / sizeof(T), len / sizeof(T), false);
    detail::CopyBytes(d + static_cast<uint64_t>(i) * (p.blockLen + p.dstStride) * 32u, reinterpret_cast<const uint8_t*>(s), len);
  }
}

template <typename T>
inline void DataCopy(const GlobalTensor<T>& dstGlobal, const LocalTensor<T>& srcLocal, const DataCopyParams& p) {
  detail::CheckBurst("DataCopy", p.blockCount);
  if (p.blockLen == 0) qwen_sim::Fail("DataCopy", "blockLen 0 (it counts 32-byte datablocks)");
  const uint64_t len = static_cast<uint64_t>(p.blockLen) * 32u;
  const uint64_t ubSpan = (static_cast<uint64_t>(p.blockCount) * (p.blockLen + p.srcStride) - p.srcStride) * 32u;
  const uint8_t* s = reinterpret_cast<const uint8_t*>(qwen_sim::Operand("DataCopy", "src", srcLocal, ubSpan / sizeof(T)));
  for (uint32_t i = 0; i < p.blockCount; ++i) {
    const uint64_t dstOff = static_cast<uint64_t>(i) * (p.blockLen + p.dstStride) * 32u;
    T* d = dstGlobal.Range("DataCopy", dstOff / sizeof(T), len / sizeof(T), true);
    detail::CopyBytes(reinterpret_cast<uint8_t*>(d), s + static_cast<uint64_t>(i) * (p.blockLen + p.srcStride) * 32u, len);
  }
}

// --- DataCopyPad: blockLen in bytes. GM->UB: srcStride in bytes (gap between
// GM blocks), dstStride in datablocks (gap between UB blocks, each of which
// starts on a 32-byte boundary). UB->GM: srcStride in datablocks, dstStride in bytes.
namespace detail {
template <typename T>
inline void PadIn(const char* call, const LocalTensor<T>& dstLocal, const GlobalTensor<T>& srcGlobal,
                  uint32_t blockCount, uint32_t blockLen, uint64_t srcStride, uint64_t dstStride, bool isPad,
                  uint32_t left, uint32_t right, T padValue) {
  CheckBurst(call, blockCount);
  if (blockLen == 0) qwen_sim::Fail(call, "blockLen 0 bytes");
  if (blockLen % sizeof(T) != 0)
    qwen_sim::Fail(call, "blockLen %u bytes is not a whole number of %s elements", blockLen, qwen_sim::TypeName<T>::Get());
  const uint32_t perBlock = qwen_sim::kBlockBytes / sizeof(T);
  if (left > perBlock || right > perBlock)
    qwen_sim::Fail(call, "leftPadding/rightPadding (%u/%u) exceed one datablock (%u elements)", left, right, perBlock);
  const uint64_t rowBytes = static_cast<uint64_t>(left) * sizeof(T) + blockLen + static_cast<uint64_t>(right) * sizeof(T);
  const uint64_t rowAligned = (rowBytes + 31u) / 32u * 32u;
  const uint64_t pitch = rowAligned + dstStride * 32u;
  const uint64_t span = pitch * (blockCount - 1) + rowAligned;
  uint8_t* d = reinterpret_cast<uint8_t*>(qwen_sim::Operand(call, "dst", dstLocal, span / sizeof(T)));
  const uint32_t elems = blockLen / sizeof(T);
  for (uint32_t i = 0; i < blockCount; ++i) {
    const uint64_t srcOff = static_cast<uint64_t>(i) * (blockLen + srcStride);
    const T* s = srcGlobal.Range(call, srcOff / sizeof(T), elems, false);
    T* row = reinterpret_cast<T*>(d + i * pitch);
    CopyBytes(row + left, s, blockLen);
    if (isPad) {
      for (uint32_t j = 0; j < left; ++j) row[j] = padValue;
      const uint64_t total = rowAligned / sizeof(T);
      for (uint64_t j = left + elems; j < total; ++j) row[j] = padValue;
    }
  }
}

template <typename T>
inline void PadOut(const char* call, const GlobalTensor<T>& dstGlobal, const LocalTensor<T>& srcLocal,
                   uint32_t blockCount, uint32_t blockLen, uint64_t srcStride, uint64_t dstStride) {
  CheckBurst(call, blockCount);
  if (blockLen == 0) qwen_sim::Fail(call, "blockLen 0 bytes");
  if (blockLen % sizeof(T) != 0)
    qwen_sim::Fail(call, "blockLen %u bytes is not a whole number of %s elements", blockLen, qwen_sim::TypeName<T>::Get());
  const uint64_t rowAligned = (static_cast<uint64_t>(blockLen) + 31u) / 32u * 32u;
  const uint64_t pitch = rowAligned + srcStride * 32u;
  const uint64_t span = pitch * (blockCount - 1) + blockLen;
  const uint8_t* s = reinterpret_cast<const uint8_t*>(qwen_sim::Operand(call, "src", srcLocal, (span + sizeof(T) - 1) / sizeof(T)));
  const uint32_t elems = blockLen / sizeof(T);
  for (uint32_t i = 0; i < blockCount; ++i) {
    const uint64_t dstOff = static_cast<uint64_t>(i) * (blockLen + dstStride);
    T* d = dstGlobal.Range(call, dstOff / sizeof(T), elems, true);
    CopyBytes(reinterpret_cast<uint8_t*>(d), s + i * pitch, blockLen);
  }
}
}  // namespace detail

template <typename T>
inline void DataCopyPad(const LocalTensor<T>& dstLocal, const GlobalTensor<T>& srcGlobal,
                        const DataCopyExtParams& dataCopyParams, const DataCopyPadExtParams<T>& padParams) {
  detail::PadIn("DataCopyPad", dstLocal, srcGlobal, dataCopyParams.blockCount, dataCopyParams.blockLen,
                dataCopyParams.srcStride, dataCopyParams.dstStride, padParams.isPad, padParams.leftPadding,
                padParams.rightPadding, padParams.paddingValue);
}

template <typename T>
inline void DataCopyPad(const GlobalTensor<T>& dstGlobal, const LocalTensor<T>& srcLocal,
                        const DataCopyExtParams& dataCopyParams) {
  detail::PadOut("DataCopyPad", dstGlobal, srcLocal, dataCopyParams.blockCount, dataCopyParams.blockLen,
                 dataCopyParams.srcStride, dataCopyParams.dstStride);
}

template <typename T>
inline void DataCopyPad(const LocalTensor<T>& dstLocal, const GlobalTensor<T>& srcGlobal,
                        const DataCopyParams& dataCopyParams, const DataCopyPadParams& padParams) {
  T pv;
  __builtin_memcpy(&pv, &padParams.paddingValue, sizeof(T));
  detail::PadIn("DataCopyPad", dstLocal, srcGlobal, dataCopyParams.blockCount, dataCopyParams.blockLen,
                dataCopyParams.srcStride, dataCopyParams.dstStride, padParams.isPad, padParams.leftPadding,
                padParams.rightPadding, pv);
}

template <typename T>
inline void DataCopyPad(const GlobalTensor<T>& dstGlobal, const LocalTensor<T>& srcLocal,
                        const DataCopyParams& dataCopyParams) {
  detail::PadOut("DataCopyPad", dstGlobal, srcLocal, dataCopyParams.blockCount, dataCopyParams.blockLen,
                 dataCopyParams.srcStride, dataCopyParams.dstStride);
}

}  // namespace AscendC

#include "kernel_operator_cube.h"
#include "kernel_operator_mix.h"

#endif  // QWEN_SIM_KERNEL_OPERATOR_H

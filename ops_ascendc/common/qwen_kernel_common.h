// Helpers shared by the qwen_ops Ascend C kernels (device code: only
// kernel_operator.h and our own headers).
#ifndef QWEN_ASCENDC_KERNEL_COMMON_H
#define QWEN_ASCENDC_KERNEL_COMMON_H

#include "kernel_operator.h"
#include "qwen_tiling_common.h"

namespace qwen_ascendc {

using namespace AscendC;

// The tiling struct arrives in GM; copy it into registers word by word.
template <typename Tiling>
__aicore__ inline void CopyTiling(Tiling* tiling, GM_ADDR tilingGm) {
  uint32_t* dst = reinterpret_cast<uint32_t*>(tiling);
  __gm__ uint32_t* src = reinterpret_cast<__gm__ uint32_t*>(tilingGm);
  for (uint32_t i = 0; i < sizeof(Tiling) / sizeof(uint32_t); ++i) dst[i] = src[i];
}

__aicore__ inline uint32_t DtypeSize(uint32_t dt) {
  switch (dt) {
    case QWEN_DT_FLOAT: case QWEN_DT_INT32: return 4;
    case QWEN_DT_HALF: case QWEN_DT_BF16: return 2;
    case QWEN_DT_INT64: return 8;
    default: return 1;
  }
}

__aicore__ inline uint32_t RoundUp(uint32_t x, uint32_t a) { return (x + a - 1) / a * a; }
__aicore__ inline uint32_t MinU(uint32_t a, uint32_t b) { return a < b ? a : b; }
__aicore__ inline float MaxF(float a, float b) { return a > b ? a : b; }

// This core's share of the work: units [begin, end) of `numUnits`, `perCore`
// per core in core order. Cores at or beyond the tiling's `usedCores` are idle
// and return before they set up any buffer.
struct CoreShare {
  bool idle;
  uint32_t begin;
  uint32_t end;
};
__aicore__ inline CoreShare ShareOfThisCore(uint32_t numUnits, uint32_t perCore, uint32_t usedCores) {
  const uint32_t core = static_cast<uint32_t>(GetBlockIdx());
  if (core >= usedCores) return CoreShare{true, 0, 0};
  const uint32_t begin = core * perCore;
  return CoreShare{false, begin, MinU(numUnits, begin + perCore)};
}

// Scalar reads after vector results, vector use after scalar writes, and
// vector reads of what a GM -> UB copy (MTE2) brought in.
__aicore__ inline void VToS() {
  SetFlag<HardEvent::V_S>(EVENT_ID0);
  WaitFlag<HardEvent::V_S>(EVENT_ID0);
}
__aicore__ inline void SToV() {
  SetFlag<HardEvent::S_V>(EVENT_ID0);
  WaitFlag<HardEvent::S_V>(EVENT_ID0);
}
__aicore__ inline void Mte2ToV() {
  SetFlag<HardEvent::MTE2_V>(EVENT_ID0);
  WaitFlag<HardEvent::MTE2_V>(EVENT_ID0);
}

// Read one index of an int32 or int64 GM array.
__aicore__ inline int64_t ReadIndex(GM_ADDR base, uint32_t dtype, uint64_t i) {
  if (dtype == QWEN_DT_INT64) {
    GlobalTensor<int64_t> g;
    g.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(base));
    return g.GetValue(i);
  }
  GlobalTensor<int32_t> g;
  g.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(base));
  return g.GetValue(i);
}

// Read one float16/bfloat16/float32 scalar from GM as float.
__aicore__ inline float ReadScalar(GM_ADDR base, uint32_t dtype, uint64_t i) {
  if (dtype == QWEN_DT_HALF) {
    GlobalTensor<half> g;
    g.SetGlobalBuffer(reinterpret_cast<__gm__ half*>(base));
    return static_cast<float>(g.GetValue(i));
  }
  if (dtype == QWEN_DT_BF16) {
    GlobalTensor<bfloat16_t> g;
    g.SetGlobalBuffer(reinterpret_cast<__gm__ bfloat16_t*>(base));
    return static_cast<float>(g.GetValue(i));
  }
  GlobalTensor<float> g;
  g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(base));
  return g.GetValue(i);
}

// Convert `count` elements of raw data (dtype) into float. int8 goes through
// half: the vector unit has no direct int8 -> float conversion.
__aicore__ inline void ToFloat(const LocalTensor<float>& dst, const LocalTensor<uint8_t>& raw, uint32_t dtype,
                               const LocalTensor<half>& halfTmp, uint32_t count) {
  switch (dtype) {
    case QWEN_DT_FLOAT:
      Muls(dst, raw.ReinterpretCast<float>(), 1.0f, static_cast<int32_t>(count));
      break;
    case QWEN_DT_HALF:
      Cast(dst, raw.ReinterpretCast<half>(), RoundMode::CAST_NONE, count);
      break;
    case QWEN_DT_BF16:
      Cast(dst, raw.ReinterpretCast<bfloat16_t>(), RoundMode::CAST_NONE, count);
      break;
    default:  // QWEN_DT_INT8
      Cast(halfTmp, raw.ReinterpretCast<int8_t>(), RoundMode::CAST_NONE, count);
      Cast(dst, halfTmp, RoundMode::CAST_NONE, count);
      break;
  }
}

// Convert `count` floats into raw data of a float dtype, rounding to nearest even.
__aicore__ inline void FromFloat(const LocalTensor<uint8_t>& raw, const LocalTensor<float>& src, uint32_t dtype,
                                 uint32_t count) {
  switch (dtype) {
    case QWEN_DT_FLOAT:
      Muls(raw.ReinterpretCast<float>(), src, 1.0f, static_cast<int32_t>(count));
      break;
    case QWEN_DT_HALF:
      Cast(raw.ReinterpretCast<half>(), src, RoundMode::CAST_RINT, count);
      break;
    default:  // QWEN_DT_BF16
      Cast(raw.ReinterpretCast<bfloat16_t>(), src, RoundMode::CAST_RINT, count);
      break;
  }
}

// A byte view of a GM buffer.
__aicore__ inline GlobalTensor<uint8_t> Bytes(GM_ADDR p) {
  GlobalTensor<uint8_t> g;
  g.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(p));
  return g;
}

// DataCopyPad of `rows` rows of `rowBytes` bytes: GM rows `gmGap` bytes apart
// (gap between a row's end and the next row's start), UB rows `ubPitch` bytes
// apart (a multiple of 32).
__aicore__ inline void RowsIn(const LocalTensor<uint8_t>& dst, const GlobalTensor<uint8_t>& src, uint32_t rows,
                              uint32_t rowBytes, uint32_t gmGap, uint32_t ubPitch) {
  DataCopyExtParams p(static_cast<uint16_t>(rows), rowBytes, gmGap, (ubPitch - RoundUp(rowBytes, 32)) / 32, 0);
  DataCopyPadExtParams<uint8_t> pad(false, 0, 0, 0);
  DataCopyPad(dst, src, p, pad);
}
__aicore__ inline void RowsOut(const GlobalTensor<uint8_t>& dst, const LocalTensor<uint8_t>& src, uint32_t rows,
                               uint32_t rowBytes, uint32_t gmGap, uint32_t ubPitch) {
  DataCopyExtParams p(static_cast<uint16_t>(rows), rowBytes, (ubPitch - RoundUp(rowBytes, 32)) / 32, gmGap, 0);
  DataCopyPad(dst, src, p);
}

// One contiguous GM span of `count` float16/bfloat16/float32 elements (dtype)
// into the float32 `dst`, staged as raw bytes in a buffer of `que` (a VECIN
// TQue). Not for int8, whose conversion needs a half scratch buffer.
template <typename InQue>
__aicore__ inline void LoadAsFloat(InQue& que, const LocalTensor<float>& dst, const GlobalTensor<uint8_t>& src,
                                   uint32_t dtype, uint32_t count) {
  const uint32_t bytes = count * DtypeSize(dtype);
  LocalTensor<uint8_t> raw = que.template AllocTensor<uint8_t>();
  RowsIn(raw, src, 1, bytes, 0, RoundUp(bytes, 32));
  que.EnQue(raw);
  raw = que.template DeQue<uint8_t>();
  ToFloat(dst, raw, dtype, LocalTensor<half>(), count);
  que.FreeTensor(raw);
}

// The reverse: `count` floats of `src` converted to dtype (a float dtype) and
// written to one contiguous GM span, staged in a buffer of `que` (a VECOUT TQue).
template <typename OutQue>
__aicore__ inline void StoreFromFloat(OutQue& que, const GlobalTensor<uint8_t>& dst, const LocalTensor<float>& src,
                                      uint32_t dtype, uint32_t count) {
  const uint32_t bytes = count * DtypeSize(dtype);
  LocalTensor<uint8_t> raw = que.template AllocTensor<uint8_t>();
  FromFloat(raw, src, dtype, count);
  que.EnQue(raw);
  raw = que.template DeQue<uint8_t>();
  RowsOut(dst, raw, 1, bytes, 0, RoundUp(bytes, 32));
  que.FreeTensor(raw);
}

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_KERNEL_COMMON_H

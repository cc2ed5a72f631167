// The field types of the Ascend C parameter structs the kernels fill, as the
// real API declares them (read from CANN's asc-devkit headers). Compiled
// against both the real headers (tests/toolchains/test_ascendc_real_headers.py,
// in CPU-debug mode) and the stand-in (ops_ascendc/sim), so that the stand-in
// cannot drift from the real API: a field whose type differs (as
// LoadData2DParams::repeatTimes did: uint32_t in the stand-in, uint8_t on the
// device) fails to compile in one of the two. Syntax check only; nothing runs.
#include "kernel_operator.h"

namespace qwen_field_types {
template <typename A, typename B> struct Same { static constexpr bool value = false; };
template <typename A> struct Same<A, A> { static constexpr bool value = true; };
template <typename S, typename F> F FieldOf(F S::*);
}  // namespace qwen_field_types

#define QWEN_FIELD_TYPE(Struct, field, Type)                                                                   \
  static_assert(qwen_field_types::Same<decltype(qwen_field_types::FieldOf(&AscendC::Struct::field)), Type>::value, \
                #Struct "::" #field " is not " #Type)

using AscendC::CO2Layout;

// DataCopyParams
QWEN_FIELD_TYPE(DataCopyParams, blockCount, uint16_t);
QWEN_FIELD_TYPE(DataCopyParams, blockLen, uint16_t);
QWEN_FIELD_TYPE(DataCopyParams, dstStride, uint16_t);
QWEN_FIELD_TYPE(DataCopyParams, srcStride, uint16_t);
// DataCopyExtParams
QWEN_FIELD_TYPE(DataCopyExtParams, blockCount, uint16_t);
QWEN_FIELD_TYPE(DataCopyExtParams, blockLen, uint32_t);
QWEN_FIELD_TYPE(DataCopyExtParams, dstStride, uint32_t);
QWEN_FIELD_TYPE(DataCopyExtParams, rsv, uint32_t);
QWEN_FIELD_TYPE(DataCopyExtParams, srcStride, uint32_t);
// DataCopyPadParams
QWEN_FIELD_TYPE(DataCopyPadParams, isPad, bool);
QWEN_FIELD_TYPE(DataCopyPadParams, leftPadding, uint8_t);
QWEN_FIELD_TYPE(DataCopyPadParams, paddingValue, uint64_t);
QWEN_FIELD_TYPE(DataCopyPadParams, rightPadding, uint8_t);
// DataCopyPadExtParams
QWEN_FIELD_TYPE(DataCopyPadExtParams<float>, isPad, bool);
QWEN_FIELD_TYPE(DataCopyPadExtParams<float>, leftPadding, uint8_t);
QWEN_FIELD_TYPE(DataCopyPadExtParams<float>, paddingValue, float);
QWEN_FIELD_TYPE(DataCopyPadExtParams<float>, rightPadding, uint8_t);
// UnaryRepeatParams
QWEN_FIELD_TYPE(UnaryRepeatParams, dstBlkStride, uint16_t);
QWEN_FIELD_TYPE(UnaryRepeatParams, dstRepStride, uint8_t);
QWEN_FIELD_TYPE(UnaryRepeatParams, srcBlkStride, uint16_t);
QWEN_FIELD_TYPE(UnaryRepeatParams, srcRepStride, uint8_t);
// BinaryRepeatParams
QWEN_FIELD_TYPE(BinaryRepeatParams, dstBlkStride, uint8_t);
QWEN_FIELD_TYPE(BinaryRepeatParams, dstRepStride, uint8_t);
QWEN_FIELD_TYPE(BinaryRepeatParams, src0BlkStride, uint8_t);
QWEN_FIELD_TYPE(BinaryRepeatParams, src0RepStride, uint8_t);
QWEN_FIELD_TYPE(BinaryRepeatParams, src1BlkStride, uint8_t);
QWEN_FIELD_TYPE(BinaryRepeatParams, src1RepStride, uint8_t);
// Nd2NzParams
QWEN_FIELD_TYPE(Nd2NzParams, dValue, uint16_t);
QWEN_FIELD_TYPE(Nd2NzParams, dstNzC0Stride, uint16_t);
QWEN_FIELD_TYPE(Nd2NzParams, dstNzMatrixStride, uint16_t);
QWEN_FIELD_TYPE(Nd2NzParams, dstNzNStride, uint16_t);
QWEN_FIELD_TYPE(Nd2NzParams, nValue, uint16_t);
QWEN_FIELD_TYPE(Nd2NzParams, ndNum, uint16_t);
QWEN_FIELD_TYPE(Nd2NzParams, srcDValue, uint16_t);
QWEN_FIELD_TYPE(Nd2NzParams, srcNdMatrixStride, uint16_t);
// LoadData2DParams
QWEN_FIELD_TYPE(LoadData2DParams, addrMode, uint8_t);
QWEN_FIELD_TYPE(LoadData2DParams, dstGap, uint16_t);
QWEN_FIELD_TYPE(LoadData2DParams, ifTranspose, bool);
QWEN_FIELD_TYPE(LoadData2DParams, repeatTimes, uint8_t);
QWEN_FIELD_TYPE(LoadData2DParams, sid, uint8_t);
QWEN_FIELD_TYPE(LoadData2DParams, srcStride, uint16_t);
QWEN_FIELD_TYPE(LoadData2DParams, startIndex, uint16_t);
// LoadData2dTransposeParams
QWEN_FIELD_TYPE(LoadData2dTransposeParams, addrMode, uint8_t);
QWEN_FIELD_TYPE(LoadData2dTransposeParams, dstFracGap, uint16_t);
QWEN_FIELD_TYPE(LoadData2dTransposeParams, dstGap, uint16_t);
QWEN_FIELD_TYPE(LoadData2dTransposeParams, repeatTimes, uint8_t);
QWEN_FIELD_TYPE(LoadData2dTransposeParams, srcStride, uint16_t);
QWEN_FIELD_TYPE(LoadData2dTransposeParams, startIndex, uint16_t);
// MmadParams
QWEN_FIELD_TYPE(MmadParams, cmatrixInitVal, bool);
QWEN_FIELD_TYPE(MmadParams, cmatrixSource, bool);
QWEN_FIELD_TYPE(MmadParams, enSsparse, bool);
QWEN_FIELD_TYPE(MmadParams, enWinogradA, bool);
QWEN_FIELD_TYPE(MmadParams, enWinogradB, bool);
QWEN_FIELD_TYPE(MmadParams, fmOffset, int32_t);
QWEN_FIELD_TYPE(MmadParams, isBias, bool);
QWEN_FIELD_TYPE(MmadParams, k, uint16_t);
QWEN_FIELD_TYPE(MmadParams, kDirectionAlign, bool);
QWEN_FIELD_TYPE(MmadParams, m, uint16_t);
QWEN_FIELD_TYPE(MmadParams, n, uint16_t);
QWEN_FIELD_TYPE(MmadParams, unitFlag, uint8_t);
// FixpipeParamsV220
QWEN_FIELD_TYPE(FixpipeParamsV220, deqScalar, uint64_t);
QWEN_FIELD_TYPE(FixpipeParamsV220, dstNdStride, uint16_t);
QWEN_FIELD_TYPE(FixpipeParamsV220, dstStride, uint32_t);
QWEN_FIELD_TYPE(FixpipeParamsV220, mSize, uint16_t);
QWEN_FIELD_TYPE(FixpipeParamsV220, nSize, uint16_t);
QWEN_FIELD_TYPE(FixpipeParamsV220, ndNum, uint16_t);
QWEN_FIELD_TYPE(FixpipeParamsV220, quantPre, QuantMode_t);
QWEN_FIELD_TYPE(FixpipeParamsV220, reluEn, bool);
QWEN_FIELD_TYPE(FixpipeParamsV220, srcNdStride, uint16_t);
QWEN_FIELD_TYPE(FixpipeParamsV220, srcStride, uint16_t);
QWEN_FIELD_TYPE(FixpipeParamsV220, unitFlag, uint8_t);
// FixpipeConfig
QWEN_FIELD_TYPE(FixpipeConfig, format, CO2Layout);

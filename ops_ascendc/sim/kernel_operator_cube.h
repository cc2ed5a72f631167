// CPU stand-in for the Ascend C API: the cube unit (AIC) of Ascend 910B (A2/A3).
//
// Included by kernel_operator.h. The data path of a matrix product, as the
// public API exposes it:
//
//   GM --DataCopy(Nd2NzParams)--> L1 (A1/B1, NZ) --LoadData--> L0A (A2, Zz) / L0B (B2, Zn)
//      --Mmad--> L0C (CO1, Nz, float/int32) --Fixpipe(FixpipeParamsV220)--> GM (ND)
//
// Layouts (c0 = 32 bytes of elements: 16 for half/bfloat16, 8 for float, 32 for int8):
//   L1 NZ  : a rows x cols ND matrix in column blocks of c0; block b holds
//            dstNzC0Stride rows of c0 elements. The 16 x c0 pieces are the fractals.
//   L0A Zz : A (m x k) in 16 x c0 fractals, fractal rows one after the other
//            (row-major over fractals), each fractal row-major.
//   L0B Zn : B (k x n) in c0 x 16 fractals, row-major over fractals, each
//            fractal stored column by column (16 columns of c0 k-values).
//   L0C Nz : C (m x n) in 16 x 16 fractals, column-major over fractals
//            (srcStride rows per fractal column), each fractal row-major.
// There is no path from L0C to the unified buffer on A2/A3: results reach the
// vector cores through GM.
//
// Written for this project from the public Ascend C documentation; device
// style (no standard library, no exceptions, no RTTI, no dynamic allocation).
#ifndef QWEN_SIM_KERNEL_OPERATOR_CUBE_H
#define QWEN_SIM_KERNEL_OPERATOR_CUBE_H

// Fixpipe's conversion on the way out of L0C (a global scoped enum on the
// device: kernels write QuantMode_t::NoQuant, as the real headers require).
enum class QuantMode_t : uint8_t { NoQuant = 0, F322F16, F322BF16, DEQF16, VDEQF16, QF322B8_PRE, VQF322B8_PRE, REQ8, VREQ8 };

namespace qwen_sim {
// The repeat count an 8-bit `repeatTimes` field was asked to hold: the
// constructor's argument while the field still holds its low 8 bits (the
// device's truncation), else the field itself (assigned after construction).
constexpr int64_t kNoRequestedCount = -(1ll << 62);
inline int64_t RequestedCount(uint8_t field, int64_t requested) {
  return requested != kNoRequestedCount && static_cast<uint8_t>(requested) == field ? requested : field;
}
}  // namespace qwen_sim

namespace AscendC {

// GM (ND) -> L1 (NZ). Counts in elements, except the *NStride/*C0Stride fields,
// which count rows of c0 elements (32 bytes).
struct Nd2NzParams {
  Nd2NzParams() {}
  Nd2NzParams(const uint16_t ndNumIn, const uint16_t nValueIn, const uint16_t dValueIn,
              const uint16_t srcNdMatrixStrideIn, const uint16_t srcDValueIn, const uint16_t dstNzC0StrideIn,
              const uint16_t dstNzNStrideIn, const uint16_t dstNzMatrixStrideIn)
      : ndNum(ndNumIn), nValue(nValueIn), dValue(dValueIn), srcNdMatrixStride(srcNdMatrixStrideIn),
        srcDValue(srcDValueIn), dstNzC0Stride(dstNzC0StrideIn), dstNzNStride(dstNzNStrideIn),
        dstNzMatrixStride(dstNzMatrixStrideIn) {}
  uint16_t ndNum = 0;
  uint16_t nValue = 0;             // rows of each ND matrix
  uint16_t dValue = 0;             // columns of each ND matrix
  uint16_t srcNdMatrixStride = 0;  // elements from one source matrix to the next
  uint16_t srcDValue = 0;          // elements from one source row to the next
  uint16_t dstNzC0Stride = 0;      // rows (of c0) from one column block to the next
  uint16_t dstNzNStride = 0;       // rows (of c0) from one row to the next
  uint16_t dstNzMatrixStride = 0;  // elements from one destination matrix to the next
};

// L1 -> L0A/L0B, one 512-byte fractal per repeat. repeatTimes is an 8-bit
// field, as on the device (which silently keeps the low 8 bits of a larger
// count); the constructor's parameter takes any integer and remembers it, so
// that LoadData stops on a count the field cannot hold.
struct LoadData2DParams {
  LoadData2DParams() {}
  LoadData2DParams(const uint16_t startIndexIn, const qwen_sim::RepeatTimes repeatTimesIn, const uint16_t srcStrideIn,
                   const uint8_t sidIn, const uint16_t dstGapIn, const bool ifTransposeIn, const uint8_t addrModeIn)
      : startIndex(startIndexIn), dstGap(dstGapIn), srcStride(srcStrideIn), ifTranspose(ifTransposeIn),
        repeatTimes(static_cast<uint8_t>(repeatTimesIn.value)), sid(sidIn), addrMode(addrModeIn),
        requestedRepeatTimes(repeatTimesIn.value) {}
  uint16_t startIndex = 0;   // first source fractal
  uint16_t dstGap = 0;       // fractals left out between destination fractals
  uint16_t srcStride = 0;    // source fractals from one repeat to the next
  bool ifTranspose = false;  // transpose each 16x16 fractal (16-bit types only)
  uint8_t repeatTimes = 0;   // fractals to move (1..255)
  uint8_t sid = 0;
  uint8_t addrMode = 0;
  int64_t requestedRepeatTimes = qwen_sim::kNoRequestedCount;  // stand-in only: the constructor's count
};

// L1 -> L0A/L0B with a transpose per square: 16x16 for 16-bit types (one
// fractal), 32x32 for int8 (two 16x32 fractals stacked), 16x16 for float/int32
// (two 16x8 fractals side by side). The transposed square is split back into
// its fractals. srcStride counts squares; dstGap counts fractals from the end of
// one iteration's first fractal to the next iteration's first; dstFracGap
// fractals between the two fractals of one iteration (8- and 32-bit types).
struct LoadData2dTransposeParams {
  LoadData2dTransposeParams() {}
  LoadData2dTransposeParams(const uint16_t startIndexIn, const qwen_sim::RepeatTimes repeatTimesIn,
                            const uint16_t srcStrideIn, const uint16_t dstGapIn, const uint16_t dstFracGapIn,
                            const uint8_t addrModeIn = 0)
      : startIndex(startIndexIn), repeatTimes(static_cast<uint8_t>(repeatTimesIn.value)), srcStride(srcStrideIn),
        dstGap(dstGapIn), dstFracGap(dstFracGapIn), addrMode(addrModeIn), requestedRepeatTimes(repeatTimesIn.value) {}
  uint16_t startIndex = 0;   // first source square
  uint8_t repeatTimes = 0;   // squares to move (0..255; 0 moves nothing): 8 bits, as LoadData2DParams's
  uint16_t srcStride = 0;
  uint16_t dstGap = 0;
  uint16_t dstFracGap = 0;
  uint8_t addrMode = 0;
  int64_t requestedRepeatTimes = qwen_sim::kNoRequestedCount;  // stand-in only: the constructor's count
};

struct MmadParams {
  MmadParams() {}
  MmadParams(const uint16_t mIn, const uint16_t nIn, const uint16_t kIn, const bool isBiasIn, const int32_t fmOffsetIn,
             const bool enSsparseIn, const bool enWinogradAIn, const bool enWinogradBIn)
      : m(mIn), n(nIn), k(kIn), isBias(isBiasIn), fmOffset(fmOffsetIn), enSsparse(enSsparseIn),
        enWinogradA(enWinogradAIn), enWinogradB(enWinogradBIn) {}
  MmadParams(const uint16_t mIn, const uint16_t nIn, const uint16_t kIn, const uint8_t unitFlagIn,
             const bool cmatrixSourceIn, const bool cmatrixInitValIn)
      : m(mIn), n(nIn), k(kIn), unitFlag(unitFlagIn), cmatrixSource(cmatrixSourceIn), cmatrixInitVal(cmatrixInitValIn) {}
  uint16_t m = 0;
  uint16_t n = 0;
  uint16_t k = 0;
  bool isBias = false;
  int32_t fmOffset = 0;
  bool enSsparse = false;
  bool enWinogradA = false;
  bool enWinogradB = false;
  uint8_t unitFlag = 0;        // 0 off; 2 an accumulation step, 3 the last one (then Fixpipe uses 3 too)
  bool kDirectionAlign = false;
  bool cmatrixSource = false;  // false: C from L0C; true: from the bias table (not modelled)
  bool cmatrixInitVal = true;  // true: C = A*B; false: C += A*B
};

enum class CO2Layout : uint8_t { NZ = 0, ROW_MAJOR, COLUMN_MAJOR };
struct FixpipeConfig {
  CO2Layout format;
};
constexpr FixpipeConfig CFG_NZ = {CO2Layout::NZ};
constexpr FixpipeConfig CFG_ROW_MAJOR = {CO2Layout::ROW_MAJOR};
constexpr FixpipeConfig CFG_COLUMN_MAJOR = {CO2Layout::COLUMN_MAJOR};

struct FixpipeParamsV220 {
  FixpipeParamsV220() {}
  FixpipeParamsV220(const uint16_t nSizeIn, const uint16_t mSizeIn, const uint16_t srcStrideIn,
                    const uint32_t dstStrideIn, const bool reluEnIn)
      : nSize(nSizeIn), mSize(mSizeIn), srcStride(srcStrideIn), dstStride(dstStrideIn), reluEn(reluEnIn) {}
  FixpipeParamsV220(const uint16_t nSizeIn, const uint16_t mSizeIn, const uint16_t srcStrideIn,
                    const uint32_t dstStrideIn, const bool reluEnIn, const QuantMode_t quantPreIn,
                    const int64_t deqScalarIn, const uint16_t ndNumIn, const uint16_t srcNdStrideIn,
                    const uint16_t dstNdStrideIn, const uint8_t unitFlagIn)
      : nSize(nSizeIn), mSize(mSizeIn), srcStride(srcStrideIn), dstStride(dstStrideIn), reluEn(reluEnIn),
        quantPre(quantPreIn), deqScalar(deqScalarIn), ndNum(ndNumIn), srcNdStride(srcNdStrideIn),
        dstNdStride(dstNdStrideIn), unitFlag(unitFlagIn) {}
  uint16_t nSize = 0;      // columns to write
  uint16_t mSize = 0;      // rows to write
  uint16_t srcStride = 0;  // rows of the L0C Nz matrix per fractal column (m rounded up to 16, or more)
  uint32_t dstStride = 0;  // elements from one GM row to the next (ND)
  bool reluEn = false;
  QuantMode_t quantPre = QuantMode_t::NoQuant;
  uint64_t deqScalar = 0;
  uint16_t ndNum = 1;
  uint16_t srcNdStride = 0;
  uint16_t dstNdStride = 0;
  uint8_t unitFlag = 0;
};

}  // namespace AscendC

namespace qwen_sim {

template <typename T> struct C0 { static constexpr uint32_t value = kBlockBytes / sizeof(T); };
inline uint32_t RoundUp(uint32_t v, uint32_t to) { return (v + to - 1) / to * to; }

inline const char* QuantName(QuantMode_t q) {
  switch (q) {
    case QuantMode_t::NoQuant: return "NoQuant";
    case QuantMode_t::F322F16: return "F322F16";
    case QuantMode_t::F322BF16: return "F322BF16";
    case QuantMode_t::DEQF16: return "DEQF16";
    case QuantMode_t::VDEQF16: return "VDEQF16";
    default: return "a requantisation mode";
  }
}

// The Mmad input/output pairs the A2/A3 cube has: (C, A, B).
template <typename C, typename A, typename B> struct MmadPair { static constexpr bool value = false; };
template <> struct MmadPair<float, half, half> { static constexpr bool value = true; };
template <> struct MmadPair<float, bfloat16_t, bfloat16_t> { static constexpr bool value = true; };
template <> struct MmadPair<float, float, float> { static constexpr bool value = true; };
template <> struct MmadPair<int32_t, int8_t, int8_t> { static constexpr bool value = true; };

}  // namespace qwen_sim

namespace AscendC {

// ---- GM (ND) -> L1 (NZ); columns are zero-padded to a whole c0 block.
template <typename T>
inline void DataCopy(const LocalTensor<T>& dstLocal, const GlobalTensor<T>& srcGlobal, const Nd2NzParams& p) {
  const char* call = "DataCopy";
  qwen_sim::InMemory(call, "dst", dstLocal, qwen_sim::MEM_L1, "Nd2NzParams copies GM into L1 (TPosition::A1/B1)");
  const uint32_t c0 = qwen_sim::C0<T>::value;
  if (p.ndNum < 1) qwen_sim::Fail(call, "Nd2NzParams.ndNum 0");
  if (p.nValue < 1 || p.nValue > 16384) qwen_sim::Fail(call, "Nd2NzParams.nValue %u outside 1..16384", p.nValue);
  if (p.dValue < 1) qwen_sim::Fail(call, "Nd2NzParams.dValue 0");
  if (p.srcDValue < p.dValue)
    qwen_sim::Fail(call, "Nd2NzParams.srcDValue %u (the source row pitch) is less than dValue %u", p.srcDValue, p.dValue);
  if (p.dstNzC0Stride < qwen_sim::RoundUp(p.nValue, 16))
    qwen_sim::Fail(call, "Nd2NzParams.dstNzC0Stride %u is less than nValue %u rounded up to 16 (%u): column blocks "
                   "would overlap or split a fractal", p.dstNzC0Stride, p.nValue, qwen_sim::RoundUp(p.nValue, 16));
  if (p.dstNzNStride < 1) qwen_sim::Fail(call, "Nd2NzParams.dstNzNStride 0");
  const uint32_t blocks = (p.dValue + c0 - 1) / c0;
  const uint64_t span = static_cast<uint64_t>(p.ndNum - 1) * p.dstNzMatrixStride +
                        (static_cast<uint64_t>(blocks - 1) * p.dstNzC0Stride +
                         static_cast<uint64_t>(p.nValue - 1) * p.dstNzNStride + 1) * c0;
  T* d = qwen_sim::OnChip(call, "dst", dstLocal, span, qwen_sim::kBlockBytes);
  for (uint32_t t = 0; t < p.ndNum; ++t)
    for (uint32_t r = 0; r < p.nValue; ++r) {
      const T* s = srcGlobal.Range(call, static_cast<uint64_t>(t) * p.srcNdMatrixStride +
                                             static_cast<uint64_t>(r) * p.srcDValue, p.dValue, false);
      for (uint32_t b = 0; b < blocks; ++b) {
        T* row = d + static_cast<uint64_t>(t) * p.dstNzMatrixStride +
                 (static_cast<uint64_t>(b) * p.dstNzC0Stride + static_cast<uint64_t>(r) * p.dstNzNStride) * c0;
        for (uint32_t j = 0; j < c0; ++j) {
          const uint32_t col = b * c0 + j;
          if (col < p.dValue) row[j] = s[col];
          else __builtin_memset(static_cast<void*>(&row[j]), 0, sizeof(T));
        }
      }
    }
}

// ---- L1 -> L0A / L0B, fractal by fractal.
template <typename T>
inline void LoadData(const LocalTensor<T>& dstLocal, const LocalTensor<T>& srcLocal, const LoadData2DParams& p) {
  const char* call = "LoadData";
  qwen_sim::InMemory(call, "src", srcLocal, qwen_sim::MEM_L1, "LoadData2DParams moves L1 (TPosition::A1/B1) to L0A/L0B");
  dstLocal.Ptr(call);
  if (dstLocal.Mem() != qwen_sim::MEM_L0A && dstLocal.Mem() != qwen_sim::MEM_L0B)
    qwen_sim::Fail(call, "dst is in %s (TPosition::%s); LoadData2DParams loads L0A (A2) or L0B (B2)",
                   qwen_sim::MemInfoOf(dstLocal.Mem()).name, qwen_sim::PositionName(dstLocal.pos_));
  const int64_t repeats = qwen_sim::RequestedCount(p.repeatTimes, p.requestedRepeatTimes);
  if (repeats < 1 || repeats > 255)
    qwen_sim::Fail(call, "repeatTimes %lld outside 1..255 (an 8-bit field on the device)", static_cast<long long>(repeats));
  if (p.ifTranspose && sizeof(T) != 2)
    qwen_sim::Fail(call, "ifTranspose transposes 16x16 fractals of 16-bit types only; %s needs LoadDataWithTranspose",
                   qwen_sim::TypeName<T>::Get());
  const uint32_t fe = qwen_sim::kFractalBytes / sizeof(T);  // elements per fractal
  const uint64_t srcNeed = (static_cast<uint64_t>(p.startIndex) + static_cast<uint64_t>(p.repeatTimes - 1) * p.srcStride + 1) * fe;
  const uint64_t dstNeed = (static_cast<uint64_t>(p.repeatTimes - 1) * (1u + p.dstGap) + 1) * fe;
  const T* s = qwen_sim::OnChip(call, "src", srcLocal, srcNeed, qwen_sim::kBlockBytes);
  T* d = qwen_sim::OnChip(call, "dst", dstLocal, dstNeed, qwen_sim::kFractalBytes);
  for (uint32_t r = 0; r < p.repeatTimes; ++r) {
    const T* sf = s + (static_cast<uint64_t>(p.startIndex) + static_cast<uint64_t>(r) * p.srcStride) * fe;
    T* df = d + static_cast<uint64_t>(r) * (1u + p.dstGap) * fe;
    if (p.ifTranspose) {
      for (uint32_t i = 0; i < 16; ++i)
        for (uint32_t j = 0; j < 16; ++j) df[i * 16 + j] = sf[j * 16 + i];
    } else {
      __builtin_memmove(static_cast<void*>(df), static_cast<const void*>(sf), qwen_sim::kFractalBytes);
    }
  }
}

// ---- L1 -> L0A / L0B, transposing squares (int8 and float/int32 as well as 16-bit types).
template <typename T>
inline void LoadDataWithTranspose(const LocalTensor<T>& dstLocal, const LocalTensor<T>& srcLocal,
                                  const LoadData2dTransposeParams& p) {
  const char* call = "LoadDataWithTranspose";
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4, "LoadDataWithTranspose: 8-, 16- or 32-bit types");
  qwen_sim::InMemory(call, "src", srcLocal, qwen_sim::MEM_L1, "LoadDataWithTranspose moves L1 (TPosition::A1/B1) to L0A/L0B");
  dstLocal.Ptr(call);
  if (dstLocal.Mem() != qwen_sim::MEM_L0A && dstLocal.Mem() != qwen_sim::MEM_L0B)
    qwen_sim::Fail(call, "dst is in %s (TPosition::%s); LoadDataWithTranspose loads L0A (A2) or L0B (B2)",
                   qwen_sim::MemInfoOf(dstLocal.Mem()).name, qwen_sim::PositionName(dstLocal.pos_));
  const int64_t repeats = qwen_sim::RequestedCount(p.repeatTimes, p.requestedRepeatTimes);
  if (repeats < 0 || repeats > 255)
    qwen_sim::Fail(call, "repeatTimes %lld outside 0..255 (an 8-bit field on the device)", static_cast<long long>(repeats));
  if (p.repeatTimes == 0) return;
  const uint32_t fe = qwen_sim::kFractalBytes / sizeof(T);
  const uint32_t fracs = sizeof(T) == 2 ? 1u : 2u;  // fractals per square
  // Destination fractal of iteration r, half h; they may not land on each other.
  auto dstFrac = [&](uint32_t r, uint32_t h) -> uint64_t {
    return static_cast<uint64_t>(r) * (1u + p.dstGap) + (h ? 1u + p.dstFracGap : 0u);
  };
  uint64_t dstNeed = 0;
  for (uint32_t r = 0; r < p.repeatTimes; ++r)
    for (uint32_t h = 0; h < fracs; ++h) {
      const uint64_t f = dstFrac(r, h);
      if (f + 1 > dstNeed) dstNeed = f + 1;
      for (uint32_t r2 = 0; r2 <= r; ++r2)
        for (uint32_t h2 = 0; h2 < fracs; ++h2)
          if ((r2 < r || h2 < h) && dstFrac(r2, h2) == f)
            qwen_sim::Fail(call, "destination fractals overlap (iteration %u and %u both write fractal %llu): "
                           "dstGap %u, dstFracGap %u", r2, r, static_cast<unsigned long long>(f), p.dstGap,
                           p.dstFracGap);
    }
  const uint64_t srcNeed = (static_cast<uint64_t>(p.startIndex) + static_cast<uint64_t>(p.repeatTimes - 1) * p.srcStride + 1) * fracs * fe;
  const T* s = qwen_sim::OnChip(call, "src", srcLocal, srcNeed, qwen_sim::kBlockBytes);
  T* d = qwen_sim::OnChip(call, "dst", dstLocal, dstNeed * fe, qwen_sim::kFractalBytes);
  for (uint32_t r = 0; r < p.repeatTimes; ++r) {
    const T* sq = s + (static_cast<uint64_t>(p.startIndex) + static_cast<uint64_t>(r) * p.srcStride) * fracs * fe;
    T* d0 = d + dstFrac(r, 0) * fe;
    if (sizeof(T) == 2) {  // one 16x16 fractal
      for (uint32_t i = 0; i < 16; ++i)
        for (uint32_t j = 0; j < 16; ++j) d0[i * 16 + j] = sq[j * 16 + i];
      continue;
    }
    T* d1 = d + dstFrac(r, 1) * fe;
    if (sizeof(T) == 1) {  // S (32x32) = fractal 0 over fractal 1 (16x32 each); T = S^T split into rows 0..15, 16..31
      for (uint32_t i = 0; i < 32; ++i)
        for (uint32_t j = 0; j < 32; ++j) {
          const T v = sq[(j / 16) * fe + (j % 16) * 32 + i];  // S[j][i]
          (i < 16 ? d0 : d1)[(i % 16) * 32 + j] = v;
        }
    } else {  // S (16x16) = fractal 0 beside fractal 1 (16x8 each); T = S^T split into columns 0..7, 8..15
      for (uint32_t i = 0; i < 16; ++i)
        for (uint32_t j = 0; j < 16; ++j) {
          const T v = sq[(i / 8) * fe + j * 8 + i % 8];  // S[j][i]
          (j < 8 ? d0 : d1)[i * 8 + j % 8] = v;
        }
    }
  }
}

// ---- L0A x L0B -> L0C. Sums in order over k rounded up to whole fractals, so
// that k padding must hold zeros (Nd2Nz pads columns with zeros; padded rows
// of L1 keep whatever was there, poison in the stand-in). Half and bfloat16
// products are exact in float; every addition rounds to float (int32: wraps).
template <typename T, typename U, typename S>
inline void Mmad(const LocalTensor<T>& dstLocal, const LocalTensor<U>& fmLocal, const LocalTensor<S>& filterLocal,
                 const MmadParams& p) {
  const char* call = "Mmad";
  if (!qwen_sim::MmadPair<T, U, S>::value)
    qwen_sim::Fail(call, "%s x %s -> %s is not a cube data type pair on A2/A3 (half x half, bfloat16_t x bfloat16_t "
                   "and float x float give float; int8_t x int8_t gives int32_t)", qwen_sim::TypeName<U>::Get(),
                   qwen_sim::TypeName<S>::Get(), qwen_sim::TypeName<T>::Get());
  qwen_sim::InMemory(call, "dst", dstLocal, qwen_sim::MEM_L0C, "Mmad writes L0C (TPosition::CO1)");
  qwen_sim::InMemory(call, "fm (A)", fmLocal, qwen_sim::MEM_L0A, "Mmad reads A from L0A (TPosition::A2)");
  qwen_sim::InMemory(call, "filter (B)", filterLocal, qwen_sim::MEM_L0B, "Mmad reads B from L0B (TPosition::B2)");
  if (p.m < 1 || p.m > 4095 || p.n < 1 || p.n > 4095 || p.k < 1 || p.k > 4095)
    qwen_sim::Fail(call, "m, n, k = %u, %u, %u: each must be in 1..4095", p.m, p.n, p.k);
  if (p.m == 1)
    qwen_sim::Fail(call, "m = 1 switches the device to its GEMV mode, which reads A in a different layout; the "
                   "stand-in does not model it: compute at least 2 rows (pad m)");
  if (p.unitFlag != 0 && p.unitFlag != 2 && p.unitFlag != 3)
    qwen_sim::Fail(call, "unitFlag %u: 0 (off), 2 (an accumulation step) or 3 (the last one)", p.unitFlag);
  if (p.cmatrixSource) qwen_sim::Fail(call, "cmatrixSource (C from the bias table) is not modelled by the stand-in");
  if (p.isBias) qwen_sim::Fail(call, "isBias is not modelled by the stand-in");
  const uint32_t c0 = qwen_sim::C0<U>::value;
  const uint32_t M = qwen_sim::RoundUp(p.m, 16), N = qwen_sim::RoundUp(p.n, 16), K = qwen_sim::RoundUp(p.k, c0);
  T* c = qwen_sim::OnChip(call, "dst", dstLocal, static_cast<uint64_t>(M) * N, 1024u);
  const U* a = qwen_sim::OnChip(call, "fm (A)", fmLocal, static_cast<uint64_t>(M) * K, qwen_sim::kFractalBytes);
  const S* b = qwen_sim::OnChip(call, "filter (B)", filterLocal, static_cast<uint64_t>(K) * N, qwen_sim::kFractalBytes);
  const uint32_t kf = K / c0, nf = N / 16, mf = M / 16;
  for (uint32_t i = 0; i < M; ++i)
    for (uint32_t j = 0; j < N; ++j) {
      T& out = c[(static_cast<uint64_t>(j / 16) * mf + i / 16) * 256 + (i % 16) * 16 + j % 16];
      if constexpr (qwen_sim::SameType<T, int32_t>::value) {
        uint32_t acc = p.cmatrixInitVal ? 0u : static_cast<uint32_t>(out);
        for (uint32_t kk = 0; kk < K; ++kk) {
          const int32_t x = a[(static_cast<uint64_t>(i / 16) * kf + kk / c0) * 16 * c0 + (i % 16) * c0 + kk % c0];
          const int32_t y = b[(static_cast<uint64_t>(kk / c0) * nf + j / 16) * 16 * c0 + (j % 16) * c0 + kk % c0];
          acc += static_cast<uint32_t>(x * y);
        }
        out = static_cast<int32_t>(acc);
      } else {
        float acc = p.cmatrixInitVal ? 0.0f : qwen_sim::ToF(out);
        for (uint32_t kk = 0; kk < K; ++kk) {
          const float x = qwen_sim::ToF(a[(static_cast<uint64_t>(i / 16) * kf + kk / c0) * 16 * c0 + (i % 16) * c0 + kk % c0]);
          const float y = qwen_sim::ToF(b[(static_cast<uint64_t>(kk / c0) * nf + j / 16) * 16 * c0 + (j % 16) * c0 + kk % c0]);
          const float prod = x * y;
          acc = acc + prod;
        }
        out = qwen_sim::FromF<T>(acc);
      }
    }
  qwen_sim::Core()->slots[dstLocal.slot_].mmadUnitFlag = p.unitFlag;
}

// ---- L0C (Nz) -> GM (ND), converting as quantPre says.
template <typename T, typename U, const FixpipeConfig& config = CFG_ROW_MAJOR>
inline void Fixpipe(const GlobalTensor<T>& dstGlobal, const LocalTensor<U>& srcLocal, const FixpipeParamsV220& p) {
  const char* call = "Fixpipe";
  qwen_sim::InMemory(call, "src", srcLocal, qwen_sim::MEM_L0C, "Fixpipe reads L0C (TPosition::CO1)");
  if (config.format != CO2Layout::ROW_MAJOR)
    qwen_sim::Fail(call, "only the NZ->ND conversion (CFG_ROW_MAJOR, the default) is modelled by the stand-in");
  QuantMode_t want = QuantMode_t::NoQuant;
  bool pairOk = true;
  if (qwen_sim::SameType<U, float>::value && qwen_sim::SameType<T, float>::value) want = QuantMode_t::NoQuant;
  else if (qwen_sim::SameType<U, float>::value && qwen_sim::SameType<T, half>::value) want = QuantMode_t::F322F16;
  else if (qwen_sim::SameType<U, float>::value && qwen_sim::SameType<T, bfloat16_t>::value) want = QuantMode_t::F322BF16;
  else if (qwen_sim::SameType<U, int32_t>::value && qwen_sim::SameType<T, int32_t>::value) want = QuantMode_t::NoQuant;
  else pairOk = false;
  if (!pairOk)
    qwen_sim::Fail(call, "L0C %s -> GM %s is not a conversion the stand-in models (float -> float/half/bfloat16_t, "
                   "int32_t -> int32_t)", qwen_sim::TypeName<U>::Get(), qwen_sim::TypeName<T>::Get());
  if (p.quantPre != want)
    qwen_sim::Fail(call, "quantPre %s does not convert %s to %s: that takes %s", qwen_sim::QuantName(p.quantPre),
                   qwen_sim::TypeName<U>::Get(), qwen_sim::TypeName<T>::Get(), qwen_sim::QuantName(want));
  if (p.nSize < 1 || p.nSize > 4095) qwen_sim::Fail(call, "nSize %u outside 1..4095", p.nSize);
  if (p.mSize < 1 || p.mSize > 8192) qwen_sim::Fail(call, "mSize %u outside 1..8192", p.mSize);
  if (p.srcStride % 16 != 0 || p.srcStride < qwen_sim::RoundUp(p.mSize, 16))
    qwen_sim::Fail(call, "srcStride %u: the rows of one L0C fractal column, a multiple of 16 and at least mSize %u "
                   "rounded up to 16 (%u)", p.srcStride, p.mSize, qwen_sim::RoundUp(p.mSize, 16));
  if (p.dstStride == 0 || p.dstStride < p.nSize)
    qwen_sim::Fail(call, "dstStride %u: the GM row pitch in elements must be at least nSize %u (and not 0)",
                   p.dstStride, p.nSize);
  if (p.ndNum != 1) qwen_sim::Fail(call, "ndNum %u: only one matrix per Fixpipe is modelled", p.ndNum);
  if (p.unitFlag != 0 && p.unitFlag != 3)
    qwen_sim::Fail(call, "unitFlag %u: 0 (off) or 3 (after the Mmad that used 3)", p.unitFlag);
  const uint8_t last = qwen_sim::Core()->slots[srcLocal.slot_].mmadUnitFlag;
  if (last == 0xff) qwen_sim::Fail(call, "reads an L0C buffer that no Mmad has written");
  if (last == 2)
    qwen_sim::Fail(call, "the last Mmad into this L0C buffer had unitFlag 2 (more accumulation to come); the final "
                   "one must use 3 before a Fixpipe");
  if (last != p.unitFlag)
    qwen_sim::Fail(call, "unitFlag %u does not match the last Mmad's unitFlag %u (both 0, or both 3)", p.unitFlag, last);
  const uint64_t colFractals = (p.nSize + 15u) / 16u;
  const U* s = qwen_sim::OnChip(call, "src", srcLocal, colFractals * p.srcStride * 16u, 64u);
  for (uint32_t i = 0; i < p.mSize; ++i) {
    T* d = dstGlobal.Range(call, static_cast<uint64_t>(i) * p.dstStride, p.nSize, true);
    for (uint32_t j = 0; j < p.nSize; ++j) {
      U v = s[(static_cast<uint64_t>(j / 16) * p.srcStride + i) * 16 + j % 16];
      if (p.reluEn && v < U(0)) v = U(0);
      if constexpr (qwen_sim::SameType<T, U>::value) d[j] = v;
      else d[j] = T(static_cast<float>(v));  // round to nearest even
    }
  }
}

// L0C -> UB does not exist on A2/A3 (it does on later parts): the stand-in stops it.
template <typename T, typename U, const FixpipeConfig& config = CFG_ROW_MAJOR>
inline void Fixpipe(const LocalTensor<T>& dstLocal, const LocalTensor<U>& srcLocal, const FixpipeParamsV220& p) {
  dstLocal.Ptr("Fixpipe");
  qwen_sim::Fail("Fixpipe", "to a LocalTensor in %s: on Ascend 910B (A2/A3) Fixpipe writes L0C to GM only; cube "
                 "results reach the vector cores through a GM workspace", qwen_sim::MemInfoOf(dstLocal.Mem()).name);
}

}  // namespace AscendC

#endif  // QWEN_SIM_KERNEL_OPERATOR_CUBE_H

// qwen_ops._C: the Ascend C kernels as the `ascendc` backend.
//
// Every entry point re-checks its inputs (dtype, device, contiguity, shape)
// with TORCH_CHECK even though qwen_ops.ops validated them, plans the tiling
// on the host (ops_ascendc/host), and launches the kernel:
//   * CPU build (no CANN): on CPU tensors through the stand-in (ops_ascendc/sim),
//     one thread per block; a strict-check violation raises RuntimeError.
//   * CANN build (QWEN_OPS_WITH_CANN): on NPU tensors, on the current torch_npu
//     stream. This path has NOT been built or run on Ascend hardware.
#ifdef QWEN_OPS_ASCENDC  // defined when ops_ascendc/CMakeLists.txt is part of the build
#include <torch/extension.h>

#include <cstring>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tiling_host.h"

#ifdef QWEN_OPS_WITH_CANN
#include "acl/acl.h"
#include "aclrtlaunch_qwen_causal_conv1d_update.h"
#include "aclrtlaunch_qwen_gdn_recurrent.h"
#include "aclrtlaunch_qwen_paged_decode_attention.h"
#include "aclrtlaunch_qwen_reshape_and_cache.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"
#else
#include "launch.h"
extern "C" {
void qwen_reshape_and_cache(uint8_t* key, uint8_t* value, uint8_t* keyCache, uint8_t* valueCache, uint8_t* slotMapping,
                            uint8_t* kScale, uint8_t* vScale, uint8_t* tiling);
void qwen_paged_decode_attention(uint8_t* query, uint8_t* keyCache, uint8_t* valueCache, uint8_t* blockTables,
                                 uint8_t* seqLens, uint8_t* kScale, uint8_t* vScale, uint8_t* out, uint8_t* tiling);
void qwen_gdn_recurrent(uint8_t* q, uint8_t* k, uint8_t* v, uint8_t* g, uint8_t* beta, uint8_t* initialState,
                        uint8_t* cuSeqlens, uint8_t* stateIndices, uint8_t* hasInitial, uint8_t* out,
                        uint8_t* finalState, uint8_t* tiling);
void qwen_causal_conv1d_update(uint8_t* x, uint8_t* convStates, uint8_t* weight, uint8_t* bias, uint8_t* cacheIndices,
                               uint8_t* out, uint8_t* tiling);
}
#endif

namespace py = pybind11;
using qwen_ascendc::LaunchConfig;

namespace {

// ------------------------------------------------------------------ checks

#ifdef QWEN_OPS_WITH_CANN
constexpr const char* kDeviceType = "npu";
bool OnTargetDevice(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }
#else
constexpr const char* kDeviceType = "cpu";
bool OnTargetDevice(const at::Tensor& t) { return t.device().is_cpu(); }
#endif

uint32_t Code(at::ScalarType s) {
  switch (s) {
    case at::kFloat: return qwen_ascendc::DT_FLOAT;
    case at::kHalf: return qwen_ascendc::DT_HALF;
    case at::kBFloat16: return qwen_ascendc::DT_BF16;
    case at::kChar: return qwen_ascendc::DT_INT8;
    case at::kInt: return qwen_ascendc::DT_INT32;
    case at::kLong: return qwen_ascendc::DT_INT64;
    case at::kBool: return qwen_ascendc::DT_BOOL;
    default: return 0xffffffffu;
  }
}

bool IsFloat(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat || t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}
bool IsIndex(const at::Tensor& t) { return t.scalar_type() == at::kInt || t.scalar_type() == at::kLong; }

void Expect(const char* op, const char* name, const at::Tensor& t, int64_t ndim) {
  TORCH_CHECK(t.defined(), op, ": '", name, "' is undefined");
  TORCH_CHECK(OnTargetDevice(t), op, ": '", name, "' must be a ", kDeviceType, " tensor for this build of the Ascend C "
              "kernels, got ", t.device());
  TORCH_CHECK(t.is_contiguous(), op, ": '", name, "' must be contiguous");
  TORCH_CHECK(t.dim() == ndim, op, ": '", name, "' must be ", ndim, "-D, got shape ", t.sizes());
}

void ExpectShape(const char* op, const char* name, const at::Tensor& t, std::vector<int64_t> shape) {
  Expect(op, name, t, static_cast<int64_t>(shape.size()));
  TORCH_CHECK(t.sizes().vec() == shape, op, ": '", name, "' must have shape ", c10::IntArrayRef(shape), ", got ",
              t.sizes());
}

// The int8-cache scales: given exactly when the cache is int8, float32 [Hkv, D].
void ExpectScales(const char* op, bool quant, const c10::optional<at::Tensor>& kScale,
                  const c10::optional<at::Tensor>& vScale, int64_t hkv, int64_t d) {
  TORCH_CHECK(kScale.has_value() == quant && vScale.has_value() == quant, op,
              ": k_scale/v_scale are required for int8 caches and only for them");
  if (quant) {
    ExpectShape(op, "k_scale", *kScale, {hkv, d});
    ExpectShape(op, "v_scale", *vScale, {hkv, d});
    TORCH_CHECK(kScale->scalar_type() == at::kFloat && vScale->scalar_type() == at::kFloat, op,
                ": scales must be float32");
  }
}

uint32_t U32(const char* op, int64_t v, const char* what) {
  TORCH_CHECK(v >= 0 && v <= 0x7fffffffLL, op, ": ", what, " = ", v, " is out of the kernels' 31-bit range");
  return static_cast<uint32_t>(v);
}

uint8_t* Ptr(const at::Tensor& t) {
  return (t.defined() && t.numel() > 0) ? static_cast<uint8_t*>(t.data_ptr()) : nullptr;
}

LaunchConfig Config(int64_t numCores, int64_t ubBytes, int64_t maxTile) {
  TORCH_CHECK(numCores >= 0 && numCores <= 4096, "num_cores must be in [0, 4096]");
  TORCH_CHECK(ubBytes >= 0 && ubBytes <= (1 << 20), "ub_bytes must be in [0, 1 MiB]");
  TORCH_CHECK(maxTile >= 0 && maxTile <= (1 << 20), "max_tile must be >= 0");
  LaunchConfig c;
  c.numCores = static_cast<uint32_t>(numCores);
  c.ubBytes = static_cast<uint32_t>(ubBytes);
  c.maxTileTokens = static_cast<uint32_t>(maxTile);
#ifdef QWEN_OPS_WITH_CANN
  if (c.numCores == 0) {
    int32_t dev = 0;
    int64_t cores = 0;
    aclrtGetDevice(&dev);
    if (aclrtGetDeviceInfo(static_cast<uint32_t>(dev), ACL_DEV_ATTR_VECTOR_CORE_NUM, &cores) == ACL_SUCCESS && cores > 0)
      c.numCores = static_cast<uint32_t>(cores);
  }
#endif
  return c;
}

// ------------------------------------------------------------------ launch bookkeeping

// Last launch's tiling and stand-in statistics (touched with the GIL held only;
// never destroyed, so that interpreter shutdown does not race it).
py::dict& Info() {
  static py::dict* info = new py::dict();
  return *info;
}

template <typename Tiling>
at::Tensor TilingBytes(const Tiling& t, const at::Device& device) {
  at::Tensor cpu = at::empty({static_cast<int64_t>(sizeof(Tiling))}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(cpu.data_ptr(), &t, sizeof(Tiling));
  return device.is_cpu() ? cpu : cpu.to(device);
}

// ------------------------------------------------------------------ launching

// One pointer argument of a kernel. Besides the pointer, the CPU stand-in
// gets the tensor's name, size and whether the kernel may write it: any other
// GM access is a strict-check violation.
enum Access { kRead, kWrite };
struct GmArg {
  const char* name;
  uint8_t* ptr;  // null for an absent or empty tensor
  uint64_t bytes;
  Access access;
};
GmArg Arg(const char* name, const at::Tensor& t, Access access) {
  uint8_t* p = Ptr(t);
  return {name, p, p != nullptr ? static_cast<uint64_t>(t.nbytes()) : 0, access};
}
GmArg Arg(const char* name, const c10::optional<at::Tensor>& t, Access access) {
  return t.has_value() ? Arg(name, *t, access) : GmArg{name, nullptr, 0, access};
}

// The symbol that launches kernel `name` in this build.
#ifdef QWEN_OPS_WITH_CANN
#define QWEN_KERNEL(name) ACLRT_LAUNCH_KERNEL(name)
#else
#define QWEN_KERNEL(name) name
#endif

#ifndef QWEN_OPS_WITH_CANN
void RunSim(const char* kernel, uint32_t blockDim, const std::vector<qwen_sim::GmRegion>& regions,
            const std::function<void()>& body) {
  qwen_sim::LaunchStats stats;
  std::string err;
  {
    py::gil_scoped_release release;
    err = qwen_sim::Launch(kernel, blockDim, body, regions, &stats);
  }
  Info() = py::dict();
  Info()["kernel"] = kernel;
  Info()["block_dim"] = stats.blocks;
  Info()["ub_high_water"] = stats.ubHighWater;
  if (!err.empty()) throw std::runtime_error(err);
}
#endif

// Launches `kernel` (QWEN_KERNEL(name)) on tiling.usedCores cores with the
// pointer arguments `args` in the kernel's parameter order, followed by the
// tiling, copied to `device`:
//   * CANN build: on the current NPU stream.
//   * CPU build: through the stand-in, as kernel `op`, with `args` and the
//     tiling as the only GM regions it may touch.
template <typename Kernel, typename Tiling, typename... GmArgs>
void Launch(Kernel kernel, const char* op, const Tiling& tiling, const at::Device& device, const GmArgs&... args) {
  const at::Tensor tilingDev = TilingBytes(tiling, device);
  const GmArg tilingArg = Arg("tiling", tilingDev, kRead);
#ifdef QWEN_OPS_WITH_CANN
  (void)op;
  kernel(tiling.usedCores, c10_npu::getCurrentNPUStream().stream(), args.ptr..., tilingArg.ptr);
#else
  std::vector<qwen_sim::GmRegion> regions;
  for (const GmArg& a : {args..., tilingArg})
    if (a.ptr != nullptr) regions.push_back({a.ptr, a.bytes, a.access == kWrite, a.name});
  RunSim(op, tiling.usedCores, regions, [&] { kernel(args.ptr..., tilingArg.ptr); });
#endif
}

void NoteTiling(std::vector<std::pair<const char*, int64_t>> fields) {
  py::dict t;
  for (auto& f : fields) t[f.first] = f.second;
  Info()["tiling"] = t;
}

// ------------------------------------------------------------------ reshape_and_cache

void ReshapeAndCache(const at::Tensor& key, const at::Tensor& value, const at::Tensor& keyCache,
                     const at::Tensor& valueCache, const at::Tensor& slotMapping, const c10::optional<at::Tensor>& kScale,
                     const c10::optional<at::Tensor>& vScale, int64_t numCores, int64_t ubBytes, int64_t maxTile) {
  const char* op = "reshape_and_cache";
  Expect(op, "key_cache", keyCache, 4);
  const int64_t nb = keyCache.size(0), hkv = keyCache.size(1), bs = keyCache.size(2), d = keyCache.size(3);
  ExpectShape(op, "value_cache", valueCache, {nb, hkv, bs, d});
  Expect(op, "key", key, 3);
  const int64_t t = key.size(0);
  ExpectShape(op, "key", key, {t, hkv, d});
  ExpectShape(op, "value", value, {t, hkv, d});
  ExpectShape(op, "slot_mapping", slotMapping, {t});
  TORCH_CHECK(IsFloat(key) && value.scalar_type() == key.scalar_type(), op,
              ": 'key' and 'value' must share one float dtype");
  TORCH_CHECK(valueCache.scalar_type() == keyCache.scalar_type(), op, ": the caches must share one dtype");
  const bool quant = keyCache.scalar_type() == at::kChar;
  TORCH_CHECK(quant || keyCache.scalar_type() == key.scalar_type(), op, ": a float cache must have key's dtype");
  TORCH_CHECK(IsIndex(slotMapping), op, ": 'slot_mapping' must be int32 or int64");
  ExpectScales(op, quant, kScale, vScale, hkv, d);
  if (t == 0 || hkv == 0 || d == 0) return;
  const auto tiling = qwen_ascendc::PlanReshapeAndCache(
      U32(op, t, "T"), U32(op, hkv, "Hkv"), U32(op, d, "D"), U32(op, bs, "Bs"), U32(op, nb, "NB"),
      Code(key.scalar_type()), Code(keyCache.scalar_type()), Code(slotMapping.scalar_type()),
      Config(numCores, ubBytes, maxTile));
  U32(op, nb * bs, "NB * Bs");
  Launch(QWEN_KERNEL(qwen_reshape_and_cache), op, tiling, key.device(), Arg("key", key, kRead),
         Arg("value", value, kRead), Arg("key_cache", keyCache, kWrite), Arg("value_cache", valueCache, kWrite),
         Arg("slot_mapping", slotMapping, kRead), Arg("k_scale", kScale, kRead), Arg("v_scale", vScale, kRead));
  NoteTiling({{"heads_per_tile", tiling.headsPerTile}, {"tokens_per_core", tiling.tokensPerCore},
              {"used_cores", tiling.usedCores}, {"ub_planned", (int64_t)qwen_ascendc::ReshapeAndCacheUb(tiling)}});
}

// ------------------------------------------------------------------ paged_decode_attention

at::Tensor PagedDecodeAttention(const at::Tensor& query, const at::Tensor& keyCache, const at::Tensor& valueCache,
                                const at::Tensor& blockTables, const at::Tensor& seqLens, double scale,
                                const c10::optional<at::Tensor>& kScale, const c10::optional<at::Tensor>& vScale,
                                int64_t numCores, int64_t ubBytes, int64_t maxTile) {
  const char* op = "paged_decode_attention";
  Expect(op, "key_cache", keyCache, 4);
  const int64_t nb = keyCache.size(0), hkv = keyCache.size(1), bs = keyCache.size(2), d = keyCache.size(3);
  ExpectShape(op, "value_cache", valueCache, {nb, hkv, bs, d});
  Expect(op, "query", query, 3);
  const int64_t n = query.size(0), hq = query.size(1);
  ExpectShape(op, "query", query, {n, hq, d});
  Expect(op, "block_tables", blockTables, 2);
  TORCH_CHECK(blockTables.size(0) == n, op, ": 'block_tables' must have N = ", n, " rows");
  ExpectShape(op, "seq_lens", seqLens, {n});
  TORCH_CHECK(blockTables.scalar_type() == at::kInt && seqLens.scalar_type() == at::kInt, op,
              ": 'block_tables' and 'seq_lens' must be int32");
  TORCH_CHECK(IsFloat(query), op, ": 'query' must be float16/bfloat16/float32");
  TORCH_CHECK(valueCache.scalar_type() == keyCache.scalar_type(), op, ": the caches must share one dtype");
  const bool quant = keyCache.scalar_type() == at::kChar;
  TORCH_CHECK(quant || keyCache.scalar_type() == query.scalar_type(), op, ": a float cache must have query's dtype");
  TORCH_CHECK(hkv > 0 && hq % hkv == 0, op, ": Hq = ", hq, " must be a multiple of Hkv = ", hkv);
  TORCH_CHECK(d > 0 && d % 16 == 0, op, ": the Ascend C kernel needs D to be a multiple of 16, got ", d);
  ExpectScales(op, quant, kScale, vScale, hkv, d);
  at::Tensor out = at::empty_like(query);
  if (n == 0 || hq == 0) return out;
  const auto tiling = qwen_ascendc::PlanPagedAttention(
      U32(op, n, "N"), U32(op, hq, "Hq"), U32(op, hkv, "Hkv"), U32(op, d, "D"), U32(op, bs, "Bs"), U32(op, nb, "NB"),
      U32(op, blockTables.size(1), "M"), Code(query.scalar_type()), Code(keyCache.scalar_type()),
      static_cast<float>(scale), Config(numCores, ubBytes, maxTile));
  Launch(QWEN_KERNEL(qwen_paged_decode_attention), op, tiling, query.device(), Arg("query", query, kRead),
         Arg("key_cache", keyCache, kRead), Arg("value_cache", valueCache, kRead),
         Arg("block_tables", blockTables, kRead), Arg("seq_lens", seqLens, kRead), Arg("k_scale", kScale, kRead),
         Arg("v_scale", vScale, kRead), Arg("out", out, kWrite));
  NoteTiling({{"tile_tokens", tiling.tileTokens}, {"units_per_core", tiling.unitsPerCore},
              {"used_cores", tiling.usedCores}, {"ub_planned", (int64_t)qwen_ascendc::PagedAttentionUb(tiling)}});
  return out;
}

// ------------------------------------------------------------------ fused_recurrent_gated_delta_rule

std::tuple<at::Tensor, c10::optional<at::Tensor>> GdnRecurrent(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g, const at::Tensor& beta,
    double scale, const c10::optional<at::Tensor>& initialState, bool outputFinalState,
    const c10::optional<at::Tensor>& cuSeqlens, const c10::optional<at::Tensor>& stateIndices,
    const c10::optional<at::Tensor>& hasInitial, bool useL2Norm, int64_t numCores, int64_t ubBytes, int64_t maxTile) {
  const char* op = "fused_recurrent_gated_delta_rule";
  Expect(op, "q", q, 4);
  const int64_t b = q.size(0), t = q.size(1), hk = q.size(2), dk = q.size(3);
  ExpectShape(op, "k", k, {b, t, hk, dk});
  Expect(op, "v", v, 4);
  const int64_t hv = v.size(2), dv = v.size(3);
  ExpectShape(op, "v", v, {b, t, hv, dv});
  ExpectShape(op, "g", g, {b, t, hv});
  ExpectShape(op, "beta", beta, {b, t, hv});
  TORCH_CHECK(IsFloat(q) && k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), op,
              ": q, k, v must share one float dtype");
  TORCH_CHECK(g.scalar_type() == at::kFloat, op, ": 'g' must be float32");
  TORCH_CHECK(IsFloat(beta), op, ": 'beta' must be a float dtype");
  TORCH_CHECK(hk > 0 && hv % hk == 0, op, ": Hv = ", hv, " must be a multiple of Hk = ", hk);
  int64_t nseq = b;
  if (cuSeqlens.has_value()) {
    Expect(op, "cu_seqlens", *cuSeqlens, 1);
    TORCH_CHECK(IsIndex(*cuSeqlens) && cuSeqlens->numel() >= 1 && b == 1, op,
                ": 'cu_seqlens' must be int32/int64 [N+1] with B == 1");
    nseq = cuSeqlens->numel() - 1;
  }
  if (stateIndices.has_value()) {
    ExpectShape(op, "ssm_state_indices", *stateIndices, {nseq});
    TORCH_CHECK(IsIndex(*stateIndices), op, ": 'ssm_state_indices' must be int32/int64");
    TORCH_CHECK(initialState.has_value(), op, ": 'ssm_state_indices' needs the state pool 'initial_state'");
    Expect(op, "initial_state", *initialState, 4);
    ExpectShape(op, "initial_state", *initialState, {initialState->size(0), hv, dk, dv});
  } else if (initialState.has_value()) {
    ExpectShape(op, "initial_state", *initialState, {nseq, hv, dk, dv});
  }
  if (initialState.has_value())
    TORCH_CHECK(initialState->scalar_type() == at::kFloat, op, ": 'initial_state' must be float32");
  if (hasInitial.has_value()) {
    ExpectShape(op, "has_initial_state", *hasInitial, {nseq});
    TORCH_CHECK(hasInitial->scalar_type() == at::kBool, op, ": 'has_initial_state' must be bool");
    TORCH_CHECK(initialState.has_value(), op, ": 'has_initial_state' needs 'initial_state'");
  }
  at::Tensor o = at::empty_like(v);
  c10::optional<at::Tensor> finalState;
  if (outputFinalState) finalState = at::empty({nseq, hv, dk, dv}, v.options().dtype(at::kFloat));
  if (nseq == 0 || hv == 0 || dk == 0 || dv == 0) {
    if (o.numel()) o.zero_();
    return {o, finalState};
  }
  qwen_ascendc::GdnRecurrentTiling shape{};
  shape.numSeqs = U32(op, nseq, "N");
  shape.seqLen = U32(op, t, "T");
  shape.totalTokens = U32(op, b * t, "B * T");
  shape.numKHeads = U32(op, hk, "Hk");
  shape.numVHeads = U32(op, hv, "Hv");
  shape.dk = U32(op, dk, "Dk");
  shape.dv = U32(op, dv, "Dv");
  shape.qkvDtype = Code(q.scalar_type());
  shape.betaDtype = Code(beta.scalar_type());
  shape.cuDtype = cuSeqlens.has_value() ? Code(cuSeqlens->scalar_type()) : 0;
  shape.idxDtype = stateIndices.has_value() ? Code(stateIndices->scalar_type()) : 0;
  shape.hasCuSeqlens = cuSeqlens.has_value();
  shape.hasInitialState = initialState.has_value();
  shape.hasIndices = stateIndices.has_value();
  shape.hasHasInitial = hasInitial.has_value();
  shape.writeFinal = outputFinalState;
  shape.useL2Norm = useL2Norm;
  shape.scale = static_cast<float>(scale);
  const auto tiling = qwen_ascendc::PlanGdnRecurrent(shape, Config(numCores, ubBytes, maxTile));
  // A state pool (with ssm_state_indices) is updated in place; plain initial states are only read.
  const Access poolAccess = stateIndices.has_value() ? kWrite : kRead;
  Launch(QWEN_KERNEL(qwen_gdn_recurrent), op, tiling, q.device(), Arg("q", q, kRead), Arg("k", k, kRead),
         Arg("v", v, kRead), Arg("g", g, kRead), Arg("beta", beta, kRead),
         Arg("initial_state", initialState, poolAccess), Arg("cu_seqlens", cuSeqlens, kRead),
         Arg("ssm_state_indices", stateIndices, kRead), Arg("has_initial_state", hasInitial, kRead),
         Arg("o", o, kWrite), Arg("final_state", finalState, kWrite));
  NoteTiling({{"dv_tile", tiling.dvTile}, {"num_dv_tiles", tiling.numDvTiles}, {"units_per_core", tiling.unitsPerCore},
              {"used_cores", tiling.usedCores}, {"ub_planned", (int64_t)qwen_ascendc::GdnRecurrentUb(tiling)}});
  return {o, finalState};
}

// ------------------------------------------------------------------ causal_conv1d_update

at::Tensor CausalConv1dUpdate(const at::Tensor& x, const at::Tensor& convStates, const at::Tensor& weight,
                              const c10::optional<at::Tensor>& bias, const at::Tensor& cacheIndices, bool silu,
                              int64_t numCores, int64_t ubBytes, int64_t maxTile) {
  const char* op = "causal_conv1d_update";
  Expect(op, "x", x, 2);
  const int64_t b = x.size(0), c = x.size(1);
  Expect(op, "weight", weight, 2);
  const int64_t kw = weight.size(1);
  ExpectShape(op, "weight", weight, {c, kw});
  TORCH_CHECK(kw >= 2, op, ": kernel width K must be >= 2");
  Expect(op, "conv_states", convStates, 3);
  ExpectShape(op, "conv_states", convStates, {convStates.size(0), kw - 1, c});
  if (bias.has_value()) ExpectShape(op, "bias", *bias, {c});
  ExpectShape(op, "cache_indices", cacheIndices, {b});
  TORCH_CHECK(IsFloat(x) && IsFloat(weight) && IsFloat(convStates) && (!bias.has_value() || IsFloat(*bias)), op,
              ": x, weight, bias and conv_states must be float tensors");
  TORCH_CHECK(IsIndex(cacheIndices), op, ": 'cache_indices' must be int32/int64");
  at::Tensor out = at::empty_like(x);
  if (b == 0 || c == 0) return out;
  qwen_ascendc::CausalConv1dUpdateTiling shape{};
  shape.batch = U32(op, b, "B");
  shape.channels = U32(op, c, "C");
  shape.width = U32(op, kw, "K");
  shape.numStates = U32(op, convStates.size(0), "S");
  shape.xDtype = Code(x.scalar_type());
  shape.stateDtype = Code(convStates.scalar_type());
  shape.weightDtype = Code(weight.scalar_type());
  shape.biasDtype = bias.has_value() ? Code(bias->scalar_type()) : 0;
  shape.idxDtype = Code(cacheIndices.scalar_type());
  shape.hasBias = bias.has_value();
  shape.silu = silu;
  const auto tiling = qwen_ascendc::PlanCausalConv1dUpdate(shape, Config(numCores, ubBytes, maxTile));
  Launch(QWEN_KERNEL(qwen_causal_conv1d_update), op, tiling, x.device(), Arg("x", x, kRead),
         Arg("conv_states", convStates, kWrite), Arg("weight", weight, kRead), Arg("bias", bias, kRead),
         Arg("cache_indices", cacheIndices, kRead), Arg("out", out, kWrite));
  NoteTiling({{"tile_channels", tiling.tileChannels}, {"num_tiles", tiling.numTiles},
              {"units_per_core", tiling.unitsPerCore}, {"used_cores", tiling.usedCores},
              {"ub_planned", (int64_t)qwen_ascendc::CausalConv1dUpdateUb(tiling)}});
  return out;
}

py::dict LastLaunch() { return Info().attr("copy")(); }

}  // namespace

void qwen_register_ascendc(py::module_& m) {
  m.attr("ascendc_kernels") = py::make_tuple("reshape_and_cache", "paged_decode_attention",
                                             "fused_recurrent_gated_delta_rule", "causal_conv1d_update");
  m.def("ascendc_reshape_and_cache", &ReshapeAndCache, py::arg("key"), py::arg("value"), py::arg("key_cache"),
        py::arg("value_cache"), py::arg("slot_mapping"), py::arg("k_scale") = py::none(),
        py::arg("v_scale") = py::none(), py::arg("num_cores") = 0, py::arg("ub_bytes") = 0, py::arg("max_tile") = 0,
        "Ascend C reshape_and_cache (in place).");
  m.def("ascendc_paged_decode_attention", &PagedDecodeAttention, py::arg("query"), py::arg("key_cache"),
        py::arg("value_cache"), py::arg("block_tables"), py::arg("seq_lens"), py::arg("scale"),
        py::arg("k_scale") = py::none(), py::arg("v_scale") = py::none(), py::arg("num_cores") = 0,
        py::arg("ub_bytes") = 0, py::arg("max_tile") = 0, "Ascend C paged decode attention.");
  m.def("ascendc_fused_recurrent_gated_delta_rule", &GdnRecurrent, py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("g"), py::arg("beta"), py::arg("scale"), py::arg("initial_state") = py::none(),
        py::arg("output_final_state") = false, py::arg("cu_seqlens") = py::none(),
        py::arg("ssm_state_indices") = py::none(), py::arg("has_initial_state") = py::none(),
        py::arg("use_qk_l2norm_in_kernel") = false, py::arg("num_cores") = 0, py::arg("ub_bytes") = 0,
        py::arg("max_tile") = 0, "Ascend C gated delta rule, token by token.");
  m.def("ascendc_causal_conv1d_update", &CausalConv1dUpdate, py::arg("x"), py::arg("conv_states"),
        py::arg("weight"), py::arg("bias"), py::arg("cache_indices"), py::arg("silu"), py::arg("num_cores") = 0,
        py::arg("ub_bytes") = 0, py::arg("max_tile") = 0, "Ascend C causal_conv1d_update (states in place).");
  m.def("ascendc_last_launch", &LastLaunch,
        "Tiling and unified-buffer high-water mark of the last Ascend C launch (stand-in: measured).");
}

#endif  // QWEN_OPS_ASCENDC

// qwen_ops._C.ascendc_reshape_and_cache: checks, tiling and launch of the Ascend C kernel
// ops_ascendc/reshape_and_cache/.
#include "binding.h"

#include "reshape_and_cache/op_host/reshape_and_cache_tiling_host.h"

#ifdef QWEN_OPS_WITH_CANN
#include "aclrtlaunch_qwen_reshape_and_cache.h"
#else
extern "C" void qwen_reshape_and_cache(uint8_t* key, uint8_t* value, uint8_t* keyCache, uint8_t* valueCache, uint8_t* slotMapping,
                                       uint8_t* kScale, uint8_t* vScale, uint8_t* tiling);
#endif

namespace qwen_bind {
namespace {

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

}  // namespace

void RegisterReshapeAndCache(py::module_& m) {
  m.def("ascendc_reshape_and_cache", &ReshapeAndCache, py::arg("key"), py::arg("value"), py::arg("key_cache"),
        py::arg("value_cache"), py::arg("slot_mapping"), py::arg("k_scale") = py::none(),
        py::arg("v_scale") = py::none(), py::arg("num_cores") = 0, py::arg("ub_bytes") = 0, py::arg("max_tile") = 0,
        "Ascend C reshape_and_cache (in place).");
}

}  // namespace qwen_bind

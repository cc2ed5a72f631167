// qwen_ops._C.ascendc_paged_decode_attention: checks, tiling and launch of the Ascend C kernel
// ops_ascendc/paged_decode_attention/.
#include "binding.h"

#include "paged_decode_attention/op_host/paged_decode_attention_tiling_host.h"

#ifdef QWEN_OPS_WITH_CANN
#include "aclrtlaunch_qwen_paged_decode_attention.h"
#else
extern "C" void qwen_paged_decode_attention(uint8_t* query, uint8_t* keyCache, uint8_t* valueCache, uint8_t* blockTables,
                                            uint8_t* seqLens, uint8_t* kScale, uint8_t* vScale, uint8_t* out, uint8_t* tiling);
#endif

namespace qwen_bind {
namespace {

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

}  // namespace

void RegisterPagedDecodeAttention(py::module_& m) {
  m.def("ascendc_paged_decode_attention", &PagedDecodeAttention, py::arg("query"), py::arg("key_cache"),
        py::arg("value_cache"), py::arg("block_tables"), py::arg("seq_lens"), py::arg("scale"),
        py::arg("k_scale") = py::none(), py::arg("v_scale") = py::none(), py::arg("num_cores") = 0,
        py::arg("ub_bytes") = 0, py::arg("max_tile") = 0, "Ascend C paged decode attention.");
}

}  // namespace qwen_bind

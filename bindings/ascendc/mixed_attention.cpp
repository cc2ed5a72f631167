// qwen_ops._C.ascendc_mixed_attention: checks, tiling, the prefill rows' offsets and
// context lengths, GM workspace and launch of the mixed (cube + vector) Ascend C
// kernel ops_ascendc/mixed_attention/.
#include "binding.h"

#include "mixed_attention/op_host/mixed_attention_tiling_host.h"
#include "prefill_attention/op_host/prefill_attention_tiling_host.h"

#ifdef QWEN_OPS_WITH_CANN
#include "aclrtlaunch_qwen_mixed_attention.h"
#else
extern "C" void qwen_mixed_attention(uint8_t* query, uint8_t* key, uint8_t* value, uint8_t* keyCache,
                                     uint8_t* valueCache, uint8_t* blockTables, uint8_t* seqLens,
                                     uint8_t* prefillCuSeqlens, uint8_t* prefillContextLens, uint8_t* kScale,
                                     uint8_t* vScale, uint8_t* out, uint8_t* workspace, uint8_t* tiling);
#endif

namespace qwen_bind {
namespace {

at::Tensor MixedAttention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                          const at::Tensor& keyCache, const at::Tensor& valueCache, const at::Tensor& blockTables,
                          const at::Tensor& queryStartLoc, const at::Tensor& seqLens, int64_t numDecodes,
                          double scale, const c10::optional<at::Tensor>& kScale,
                          const c10::optional<at::Tensor>& vScale, int64_t numCores, int64_t ubBytes,
                          int64_t maxTile) {
  const char* op = "mixed_attention";
  Expect(op, "key_cache", keyCache, 4);
  const int64_t nb = keyCache.size(0), hkv = keyCache.size(1), bs = keyCache.size(2), d = keyCache.size(3);
  ExpectShape(op, "value_cache", valueCache, {nb, hkv, bs, d});
  Expect(op, "query", query, 3);
  const int64_t t = query.size(0), hq = query.size(1);
  ExpectShape(op, "query", query, {t, hq, d});
  ExpectShape(op, "key", key, {t, hkv, d});
  ExpectShape(op, "value", value, {t, hkv, d});
  TORCH_CHECK(IsFloat(query), op, ": 'query' must be float16/bfloat16/float32");
  TORCH_CHECK(key.scalar_type() == query.scalar_type() && value.scalar_type() == query.scalar_type(), op,
              ": 'key' and 'value' must have the query's dtype");
  TORCH_CHECK(valueCache.scalar_type() == keyCache.scalar_type(), op, ": the caches must share one dtype");
  const bool quant = keyCache.scalar_type() == at::kChar;
  TORCH_CHECK(quant || keyCache.scalar_type() == query.scalar_type(), op, ": a float cache must have query's dtype");
  Expect(op, "query_start_loc", queryStartLoc, 1);
  TORCH_CHECK(queryStartLoc.numel() >= 1 && queryStartLoc.scalar_type() == at::kInt, op,
              ": 'query_start_loc' must be [N+1] int32, N >= 0");
  const int64_t n = queryStartLoc.numel() - 1;
  ExpectShape(op, "seq_lens", seqLens, {n});
  Expect(op, "block_tables", blockTables, 2);
  TORCH_CHECK(blockTables.size(0) == n, op, ": 'block_tables' must have N = ", n, " rows");
  TORCH_CHECK(blockTables.scalar_type() == at::kInt && seqLens.scalar_type() == at::kInt, op,
              ": 'block_tables' and 'seq_lens' must be int32");
  TORCH_CHECK(numDecodes >= 0 && numDecodes <= n && numDecodes <= t, op, ": 'num_decodes' must be in [0, N = ", n,
              "] and at most T = ", t, ", got ", numDecodes);
  TORCH_CHECK(hkv > 0 && hq % hkv == 0, op, ": Hq = ", hq, " must be a multiple of Hkv = ", hkv);
  // The cube side's limits (its planner would name prefill_attention).
  TORCH_CHECK(d > 0 && d % 16 == 0 && d <= qwen_ascendc::kPrefillMaxHeadDim, op,
              ": the Ascend C kernel needs a head dim D that is a multiple of 16 and at most ",
              qwen_ascendc::kPrefillMaxHeadDim, ", got ", d);
  TORCH_CHECK(hq / hkv <= 128, op, ": the Ascend C kernel serves GQA groups of at most 128 query heads per KV head, "
              "got ", hq / hkv);
  ExpectScales(op, quant, kScale, vScale, hkv, d);
  U32(op, hq * d, "Hq * D");
  TORCH_CHECK(hq * d <= 65535 && hkv * d <= 65535, op, ": Hq * D and Hkv * D must be at most 65535 (the cube's "
              "GM row pitch is a 16-bit field), got ", hq * d, " and ", hkv * d);
  at::Tensor out = at::empty_like(query);
  if (t == 0 || n == 0 || hq == 0) return out;
  U32(op, t * hq * d, "T * Hq * D");
  const auto tiling = qwen_ascendc::PlanMixedAttention(
      U32(op, n, "N"), U32(op, numDecodes, "num_decodes"), U32(op, hq, "Hq"), U32(op, hkv, "Hkv"), U32(op, d, "D"),
      U32(op, bs, "Bs"), U32(op, nb, "NB"), U32(op, blockTables.size(1), "M"), Code(query.scalar_type()),
      Code(keyCache.scalar_type()), static_cast<float>(scale), Config(numCores, ubBytes, maxTile));
  // The prefill chunks' view, with tensor ops on the query's device (no host sync):
  // their cu_seqlens from 0, and their cached context = seq_lens - q_len.
  const at::Tensor prefillLoc = queryStartLoc.slice(0, numDecodes);
  const at::Tensor cuSeqlens = (prefillLoc - prefillLoc.slice(0, 0, 1)).contiguous();
  const at::Tensor qLens = cuSeqlens.slice(0, 1) - cuSeqlens.slice(0, 0, -1);
  const at::Tensor contextLens = (seqLens.slice(0, numDecodes) - qLens).to(at::kInt).contiguous();
  // The prefill side's hand-off ring of every group, then 16 rows of zeros (its V padding rows).
  const int64_t wsBytes = static_cast<int64_t>(tiling.prefill.wsZeros) + 16 * d * query.element_size();
  at::Tensor workspace = at::zeros({wsBytes}, query.options().dtype(at::kByte));
  LaunchOn(Cores::kMix1To2, QWEN_KERNEL(qwen_mixed_attention), op, tiling, query.device(),
           Arg("query", query, kRead), Arg("key", key, kRead), Arg("value", value, kRead),
           Arg("key_cache", keyCache, kRead), Arg("value_cache", valueCache, kRead),
           Arg("block_tables", blockTables, kRead), Arg("seq_lens", seqLens, kRead),
           Arg("prefill_cu_seqlens", cuSeqlens, kRead), Arg("prefill_context_lens", contextLens, kRead),
           Arg("k_scale", kScale, kRead), Arg("v_scale", vScale, kRead), Arg("out", out, kWrite),
           Arg("workspace", workspace, kWrite));
  NoteTiling({{"num_decodes", numDecodes}, {"decode_tile_tokens", tiling.decode.tileTokens},
              {"decode_units_per_core", tiling.decode.unitsPerCore}, {"decode_used_cores", tiling.decode.usedCores},
              {"q_tile_tokens", tiling.prefill.qTileTokens}, {"kv_tile_tokens", tiling.prefill.kvTileTokens},
              {"used_cores", tiling.usedCores}, {"workspace_bytes", wsBytes}});
  return out;
}

}  // namespace

void RegisterMixedAttention(py::module_& m) {
  m.def("ascendc_mixed_attention", &MixedAttention, py::arg("query"), py::arg("key"), py::arg("value"),
        py::arg("key_cache"), py::arg("value_cache"), py::arg("block_tables"), py::arg("query_start_loc"),
        py::arg("seq_lens"), py::arg("num_decodes"), py::arg("scale"), py::arg("k_scale") = py::none(),
        py::arg("v_scale") = py::none(), py::arg("num_cores") = 0, py::arg("ub_bytes") = 0,
        py::arg("max_tile") = 0,
        "Ascend C mixed attention: decode rows (vector cores) then prefill chunks (cube + vector) in one launch.");
}

}  // namespace qwen_bind

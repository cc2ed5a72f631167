// qwen_ops._C.ascendc_prefill_attention: checks, tiling, GM workspace and launch of the
// mixed (cube + vector) Ascend C kernel ops_ascendc/prefill_attention/.
#include "binding.h"

#include "prefill_attention/op_host/prefill_attention_tiling_host.h"

#ifdef QWEN_OPS_WITH_CANN
#include "aclrtlaunch_qwen_prefill_attention.h"
#else
extern "C" void qwen_prefill_attention(uint8_t* query, uint8_t* key, uint8_t* value, uint8_t* cuSeqlens,
                                       uint8_t* keyCache, uint8_t* valueCache, uint8_t* blockTables,
                                       uint8_t* contextLens, uint8_t* kScale, uint8_t* vScale, uint8_t* out,
                                       uint8_t* workspace, uint8_t* tiling);
#endif

namespace qwen_bind {
namespace {

at::Tensor PrefillAttention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                            const at::Tensor& cuSeqlens, double scale, const c10::optional<at::Tensor>& keyCache,
                            const c10::optional<at::Tensor>& valueCache, const c10::optional<at::Tensor>& blockTables,
                            const c10::optional<at::Tensor>& contextLens,
                            const c10::optional<at::Tensor>& kScale, const c10::optional<at::Tensor>& vScale,
                            bool causal, int64_t numCores, int64_t ubBytes, int64_t maxTile) {
  const char* op = "prefill_attention";
  Expect(op, "query", query, 3);
  const int64_t t = query.size(0), hq = query.size(1), d = query.size(2);
  Expect(op, "key", key, 3);
  const int64_t hkv = key.size(1);
  ExpectShape(op, "key", key, {t, hkv, d});
  ExpectShape(op, "value", value, {t, hkv, d});
  TORCH_CHECK(IsFloat(query), op, ": 'query' must be float16/bfloat16/float32");
  TORCH_CHECK(key.scalar_type() == query.scalar_type() && value.scalar_type() == query.scalar_type(), op,
              ": 'key' and 'value' must have the query's dtype");
  Expect(op, "cu_seqlens_q", cuSeqlens, 1);
  TORCH_CHECK(cuSeqlens.numel() >= 1 && cuSeqlens.scalar_type() == at::kInt, op,
              ": 'cu_seqlens_q' must be [N+1] int32, N >= 0");
  const int64_t n = cuSeqlens.numel() - 1;
  TORCH_CHECK(hkv > 0 && hq % hkv == 0, op, ": Hq = ", hq, " must be a multiple of Hkv = ", hkv);
  const bool hasContext = contextLens.has_value();
  TORCH_CHECK(keyCache.has_value() == hasContext && valueCache.has_value() == hasContext &&
                  blockTables.has_value() == hasContext,
              op, ": key_cache, value_cache and block_tables come with context_lens, and only with it");
  bool quant = false;
  int64_t bs = 1, maxBlocks = 1;
  if (hasContext) {
    Expect(op, "key_cache", *keyCache, 4);
    const int64_t nb = keyCache->size(0);
    bs = keyCache->size(2);
    ExpectShape(op, "key_cache", *keyCache, {nb, hkv, bs, d});
    ExpectShape(op, "value_cache", *valueCache, {nb, hkv, bs, d});
    TORCH_CHECK(valueCache->scalar_type() == keyCache->scalar_type(), op, ": the caches must share one dtype");
    quant = keyCache->scalar_type() == at::kChar;
    TORCH_CHECK(quant || keyCache->scalar_type() == query.scalar_type(), op,
                ": a float cache must have query's dtype");
    Expect(op, "block_tables", *blockTables, 2);
    TORCH_CHECK(blockTables->size(0) == n, op, ": 'block_tables' must have N = ", n, " rows");
    maxBlocks = blockTables->size(1);
    ExpectShape(op, "context_lens", *contextLens, {n});
    TORCH_CHECK(blockTables->scalar_type() == at::kInt && contextLens->scalar_type() == at::kInt, op,
                ": 'block_tables' and 'context_lens' must be int32");
  }
  ExpectScales(op, quant, kScale, vScale, hkv, d);
  U32(op, hq * d, "Hq * D");
  TORCH_CHECK(hq * d <= 65535 && hkv * d <= 65535, op, ": Hq * D and Hkv * D must be at most 65535 (the cube's "
              "GM row pitch is a 16-bit field), got ", hq * d, " and ", hkv * d);
  at::Tensor out = at::empty_like(query);
  if (t == 0 || n == 0 || hq == 0) return out;
  U32(op, t * hq * d, "T * Hq * D");
  const auto tiling = qwen_ascendc::PlanPrefillAttention(
      U32(op, n, "N"), U32(op, hq, "Hq"), U32(op, hkv, "Hkv"), U32(op, d, "D"), U32(op, bs, "Bs"),
      U32(op, maxBlocks, "M"), hasContext, causal, Code(query.scalar_type()),
      quant ? qwen_ascendc::QWEN_DT_INT8 : Code(query.scalar_type()), static_cast<float>(scale),
      Config(numCores, ubBytes, maxTile));
  // The hand-off ring of every group, then 16 rows of zeros (the V padding rows the cube multiplies by P's zeros).
  const int64_t wsBytes = static_cast<int64_t>(tiling.wsZeros) + 16 * d * query.element_size();
  at::Tensor workspace = at::zeros({wsBytes}, query.options().dtype(at::kByte));
  LaunchOn(Cores::kMix1To2, QWEN_KERNEL(qwen_prefill_attention), op, tiling, query.device(),
           Arg("query", query, kRead), Arg("key", key, kRead), Arg("value", value, kRead),
           Arg("cu_seqlens_q", cuSeqlens, kRead), Arg("key_cache", keyCache, kRead),
           Arg("value_cache", valueCache, kRead), Arg("block_tables", blockTables, kRead),
           Arg("context_lens", contextLens, kRead), Arg("k_scale", kScale, kRead), Arg("v_scale", vScale, kRead),
           Arg("out", out, kWrite), Arg("workspace", workspace, kWrite));
  NoteTiling({{"q_tile_tokens", tiling.qTileTokens}, {"kv_tile_tokens", tiling.kvTileTokens},
              {"used_cores", tiling.usedCores}, {"workspace_bytes", wsBytes},
              {"ub_planned", (int64_t)qwen_ascendc::PrefillAttentionUb(tiling)},
              {"l1_planned", (int64_t)qwen_ascendc::PrefillAttentionL1(tiling)}, {"l0a", tiling.l0a},
              {"l0b", tiling.l0b}, {"l0c", tiling.l0c}});
  return out;
}

}  // namespace

void RegisterPrefillAttention(py::module_& m) {
  m.def("ascendc_prefill_attention", &PrefillAttention, py::arg("query"), py::arg("key"), py::arg("value"),
        py::arg("cu_seqlens_q"), py::arg("scale"), py::arg("key_cache") = py::none(),
        py::arg("value_cache") = py::none(), py::arg("block_tables") = py::none(),
        py::arg("context_lens") = py::none(),
        py::arg("k_scale") = py::none(), py::arg("v_scale") = py::none(), py::arg("causal") = true,
        py::arg("num_cores") = 0, py::arg("ub_bytes") = 0, py::arg("max_tile") = 0,
        "Ascend C prefill attention (TND varlen, paged context; cube Q.K^T and P.V, vector softmax).");
}

}  // namespace qwen_bind

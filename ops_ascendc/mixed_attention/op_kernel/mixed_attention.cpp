// mixed_attention: one launch over a mixed batch, decode rows first, then
// prefill chunks, all over the paged BNSD cache [NB, Hkv, Bs, D].
//
// A mixed kernel (KERNEL_TYPE_MIX_AIC_1_2) of N groups of one AIC and two AIVs:
//   * AIVs: first their share of the decode units (request, KV head), through
//     part 1's vector kernel class (paged_decode_attention_kernel.h; on an AIV
//     GetBlockIdx() is in [0, 2N), the 2N cores its tiling was planned for),
//     then the vector side of the prefill units of their group.
//   * AIC: the cube side of its group's prefill units (prefill_attention_kernel.h);
//     its first S tile is computed while the AIVs still run decodes.
// The prefill side sees the batch from row num_decodes on: query, key, value,
// block tables and output are offset here; the prefill cu_seqlens and
// context lengths come from the host (query_start_loc[d:] - query_start_loc[d],
// seq_lens[d:] - q_lens).
#include "../../paged_decode_attention/op_kernel/paged_decode_attention_kernel.h"
#include "../../prefill_attention/op_kernel/prefill_attention_kernel.h"
#include "../op_host/mixed_attention_tiling.h"

using namespace AscendC;
using namespace qwen_ascendc;

extern "C" __global__ __aicore__ void qwen_mixed_attention(GM_ADDR query, GM_ADDR key, GM_ADDR value,
                                                           GM_ADDR keyCache, GM_ADDR valueCache, GM_ADDR blockTables,
                                                           GM_ADDR seqLens, GM_ADDR prefillCuSeqlens,
                                                           GM_ADDR prefillContextLens, GM_ADDR kScale, GM_ADDR vScale,
                                                           GM_ADDR out, GM_ADDR workspace, GM_ADDR tiling) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  MixedAttentionTiling t;
  CopyTiling(&t, tiling);
  const PrefillAttentionTiling& p = t.prefill;
  const uint64_t nd = t.numDecodes, es = DtypeSize(p.qDtype);
  const uint64_t qRow = static_cast<uint64_t>(p.numQHeads) * p.headDim * es;
  const uint64_t kvRow = static_cast<uint64_t>(p.numKvHeads) * p.headDim * es;
  // With no prefill rows these point at the end of their tensors and are never read.
  const qwen_prefill_kernel::Args a{query + nd * qRow, key + nd * kvRow, value + nd * kvRow, prefillCuSeqlens,
                                    keyCache, valueCache, blockTables + nd * p.maxBlocksPerReq * 4,
                                    prefillContextLens, kScale, vScale, out + nd * qRow, workspace};
  if ASCEND_IS_AIC {
    switch (p.qDtype) {
      case QWEN_DT_HALF: { qwen_prefill_kernel::CubeSide<half> c; c.Run(a, p); break; }
      case QWEN_DT_BF16: { qwen_prefill_kernel::CubeSide<bfloat16_t> c; c.Run(a, p); break; }
      default: { qwen_prefill_kernel::CubeSide<float> c; c.Run(a, p); break; }
    }
  } else {
    {  // its own scope: the decode TPipe is gone before the prefill side builds its own
      qwen_decode_kernel::PagedDecodeAttentionKernel d;
      d.Run(query, keyCache, valueCache, blockTables, seqLens, kScale, vScale, out, t.decode);
    }
    qwen_prefill_kernel::VectorSide v;
    v.Run(a, p);
  }
}

// paged_decode_attention: the kernel entry; the kernel class is in
// paged_decode_attention_kernel.h (shared with mixed_attention).
#include "paged_decode_attention_kernel.h"

using namespace AscendC;
using namespace qwen_ascendc;

extern "C" __global__ __aicore__ void qwen_paged_decode_attention(GM_ADDR query, GM_ADDR keyCache,
                                                                  GM_ADDR valueCache, GM_ADDR blockTables,
                                                                  GM_ADDR seqLens, GM_ADDR kScale, GM_ADDR vScale,
                                                                  GM_ADDR out, GM_ADDR tiling) {
  PagedAttentionTiling t;
  CopyTiling(&t, tiling);
  qwen_decode_kernel::PagedDecodeAttentionKernel op;
  op.Run(query, keyCache, valueCache, blockTables, seqLens, kScale, vScale, out, t);
}

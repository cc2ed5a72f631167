// prefill_attention: the kernel entry; the cube and vector sides are in
// prefill_attention_kernel.h (shared with mixed_attention).
#include "prefill_attention_kernel.h"

using namespace AscendC;
using namespace qwen_ascendc;

extern "C" __global__ __aicore__ void qwen_prefill_attention(GM_ADDR query, GM_ADDR key, GM_ADDR value,
                                                             GM_ADDR cuSeqlens, GM_ADDR keyCache, GM_ADDR valueCache,
                                                             GM_ADDR blockTables, GM_ADDR contextLens, GM_ADDR kScale,
                                                             GM_ADDR vScale, GM_ADDR out, GM_ADDR workspace,
                                                             GM_ADDR tiling) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  PrefillAttentionTiling t;
  CopyTiling(&t, tiling);
  const qwen_prefill_kernel::Args a{query, key, value, cuSeqlens, keyCache, valueCache, blockTables, contextLens, kScale, vScale, out,
               workspace};
  if ASCEND_IS_AIC {
    switch (t.qDtype) {
      case QWEN_DT_HALF: { qwen_prefill_kernel::CubeSide<half> c; c.Run(a, t); break; }
      case QWEN_DT_BF16: { qwen_prefill_kernel::CubeSide<bfloat16_t> c; c.Run(a, t); break; }
      default: { qwen_prefill_kernel::CubeSide<float> c; c.Run(a, t); break; }
    }
  } else {
    qwen_prefill_kernel::VectorSide v;
    v.Run(a, t);
  }
}

// chunk_gated_delta_rule's `checkpoint_boundaries` on the host: the checks of
// the argument and the checkpoint plan the kernel reads (its layout is in
// ops_ascendc/chunk_gated_delta_rule/op_host/chunk_gated_delta_rule_tiling.h).
#ifndef QWEN_OPS_BINDINGS_ASCENDC_GDN_CHUNK_CHECKPOINTS_H
#define QWEN_OPS_BINDINGS_ASCENDC_GDN_CHUNK_CHECKPOINTS_H

#include "binding.h"

namespace qwen_bind {

// TORCH_CHECKs `boundaries`: int32/int64 [P, 2], rows (sequence r, j), contiguous, on the build's device.
// Where it and the sequence offsets are host memory (the stand-in's case) also its values, as the op
// layer does: 0 <= r < nseq, j >= 1, 64 * j <= the length of sequence r (from `cuSeqlens`, else
// `seqLen` each), no row twice. On a device the values are the op layer's to check (reading them
// here would synchronise every call); the plan keeps the kernel inside its buffers whatever they are.
void ExpectCheckpointBoundaries(const char* op, const at::Tensor& boundaries, int64_t nseq, int64_t seqLen,
                                const c10::optional<at::Tensor>& cuSeqlens);

// The int32 checkpoint plan of `boundaries` (checked above) for `nseq` sequences, built with tensor
// ops on the boundaries' device (no host read): each sequence's first entry, then the entries
// (j, output row p) sorted by (sequence, j). j is clamped to [0, 2^31 - 1]; a sequence number outside
// [0, nseq) belongs to no sequence's entries, so its row is never written (stays zero).
at::Tensor GdnCheckpointPlan(const at::Tensor& boundaries, int64_t nseq);

}  // namespace qwen_bind

#endif  // QWEN_OPS_BINDINGS_ASCENDC_GDN_CHUNK_CHECKPOINTS_H

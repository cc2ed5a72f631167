// chunk_gated_delta_rule's `checkpoint_boundaries` on the host (gdn_chunk_checkpoints.h).
#include "gdn_chunk_checkpoints.h"

#include <cstdint>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include "chunk_gated_delta_rule/op_host/chunk_gated_delta_rule_tiling.h"

namespace qwen_bind {

void ExpectCheckpointBoundaries(const char* op, const at::Tensor& boundaries, int64_t nseq, int64_t seqLen,
                                const c10::optional<at::Tensor>& cuSeqlens) {
  Expect(op, "checkpoint_boundaries", boundaries, 2);
  TORCH_CHECK(boundaries.size(1) == 2 && IsIndex(boundaries), op,
              ": 'checkpoint_boundaries' must be int32/int64 [P, 2] rows (sequence, chunk boundary j), got ",
              boundaries.scalar_type(), " of shape ", boundaries.sizes());
  const bool onHost = boundaries.device().is_cpu() && (!cuSeqlens.has_value() || cuSeqlens->device().is_cpu());
  if (!onHost || boundaries.size(0) == 0) return;
  std::vector<int64_t> lengths(static_cast<size_t>(nseq), seqLen);
  if (cuSeqlens.has_value()) {
    const at::Tensor cu = cuSeqlens->to(at::kLong);
    const int64_t* offsets = cu.data_ptr<int64_t>();
    for (int64_t r = 0; r < nseq; ++r) lengths[r] = offsets[r + 1] - offsets[r];
  }
  const at::Tensor rows = boundaries.to(at::kLong);
  const auto row = rows.accessor<int64_t, 2>();
  const int64_t chunk = qwen_ascendc::kGdnChunk;
  std::set<std::pair<int64_t, int64_t>> seen;
  for (int64_t p = 0; p < rows.size(0); ++p) {
    const int64_t r = row[p][0], j = row[p][1];
    TORCH_CHECK(r >= 0 && r < nseq, op, ": 'checkpoint_boundaries' row ", p, " = (", r, ", ", j,
                ") names a sequence outside [0, ", nseq, ")");
    // j <= length / 64 rather than 64 * j <= length: no overflow for any int64 j.
    TORCH_CHECK(j >= 1 && j <= lengths[r] / chunk, op, ": 'checkpoint_boundaries' row ", p, " = (", r, ", ", j,
                ") must be a chunk boundary j >= 1 with ", chunk, " * j <= the sequence's length ", lengths[r]);
    TORCH_CHECK(seen.insert({r, j}).second, op, ": 'checkpoint_boundaries' repeats the row (", r, ", ", j, ")");
  }
}

at::Tensor GdnCheckpointPlan(const at::Tensor& boundaries, int64_t nseq) {
  const at::Tensor rows = boundaries.to(at::kLong);
  const at::Tensor seq = rows.select(1, 0);
  const at::Tensor j = rows.select(1, 1).clamp(0, std::numeric_limits<int32_t>::max());
  // Sorted by (sequence, j): by j first, then stably by sequence, which keeps each sequence's j ascending
  // (the kernel walks a sequence's entries with one cursor as its chunks go by).
  const at::Tensor byJ = std::get<1>(j.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
  const at::Tensor bySeq = std::get<1>(seq.index_select(0, byJ).sort(/*stable=*/true, /*dim=*/0, false));
  const at::Tensor order = byJ.index_select(0, bySeq);  // entry e -> the boundaries' row p, its output row
  // Sequence r's entries start at the first sorted sequence number >= r (the count of those below r).
  const at::Tensor firstEntry = at::searchsorted(seq.index_select(0, order), at::arange(nseq + 1, rows.options()));
  const at::Tensor entries = at::stack({j.index_select(0, order), order}, 1).reshape({-1});
  return at::cat({firstEntry, entries}).to(at::kInt).contiguous();
}

}  // namespace qwen_bind

// Host tiling of fused_experts, planned from the routing counts: unit rows
// from the busiest expert (a decode step whose experts see a few tokens each
// gets 16-row units, not 128), Mmad tiles from L1 / L0A / L0B / L0C, the
// vector step from the unified-buffer budget, and the group workspace.
#include "fused_experts_tiling_host.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace qwen_ascendc {
namespace {

// On-chip memories of one 910B (A2/A3) cube core, bytes.
constexpr uint64_t kL1 = 512u * 1024u, kL0A = 64u * 1024u, kL0B = 64u * 1024u, kL0C = 128u * 1024u;

uint32_t R16(uint64_t x) { return static_cast<uint32_t>((x + 15) / 16 * 16); }
uint32_t Down16(uint64_t x) { return static_cast<uint32_t>(x / 16 * 16); }
uint64_t R512(uint64_t x) { return (x + 511) / 512 * 512; }

}  // namespace

uint64_t FusedExpertsUb(const FusedExpertsTiling& t) { return 3 * R32(t.ubFloat) + R32(t.ubRaw); }

FusedExpertsTiling PlanFusedExperts(const FusedExpertsTiling& shape, const std::vector<int64_t>& counts,
                                    const LaunchConfig& cfg) {
  const char* op = "fused_experts";
  FusedExpertsTiling t = shape;
  const uint64_t es = DtypeBytes(t.dtype);
  const uint32_t kWide = std::max(t.hidden, t.inter);  // the k of either GEMM (H, then I)
  // A tile cap (tests force many units, column tiles and k steps with it), at least one fractal.
  const uint32_t cap = cfg.maxTileTokens ? std::max<uint32_t>(16, Down16(cfg.maxTileTokens)) : 0xffffffffu;
  int64_t busiest = 0;
  for (int64_t c : counts) busiest = std::max(busiest, c);

  t.nTile = std::min({kExpertsMaxCols, cap, R16(std::max<uint64_t>(2ull * t.inter, t.hidden))});
  // The largest unit (rows of the busiest expert, up to 128) whose whole-k A rows and one weight tile fit L1.
  t.mTile = 0;
  for (uint32_t m = std::min({kExpertsMaxRows, cap, R16(std::max<int64_t>(busiest, 2))}); m >= 16; m -= 16) {
    const uint32_t k = std::min<uint64_t>({kExpertsMaxK, cap, R16(kWide), Down16(kL0A / (m * es)),
                                           Down16(kL0B / (t.nTile * es))});
    const uint64_t l1A = static_cast<uint64_t>(m) * R16(kWide) * es, l1B = static_cast<uint64_t>(t.nTile) * k * es;
    if (k >= 16 && l1A + l1B <= kL1 && static_cast<uint64_t>(m) * t.nTile * 4 <= kL0C) {
      t.mTile = m;
      t.kTile = k;
      t.l1A = static_cast<uint32_t>(l1A);
      t.l1B = static_cast<uint32_t>(l1B);
      break;
    }
  }
  if (t.mTile == 0)
    throw std::invalid_argument(std::string(op) + ": backend 'ascendc' keeps 16 rows of the whole hidden (H) or "
                                "intermediate (I) width in L1 beside a weight tile (512 KB in all): max(H, I) = " +
                                std::to_string(kWide) + " with " + std::to_string(es) + "-byte elements needs " +
                                std::to_string(16 * R16(kWide) * es) + " bytes for the rows alone");
  t.l0a = t.mTile * t.kTile * static_cast<uint32_t>(es);
  t.l0b = t.nTile * t.kTile * static_cast<uint32_t>(es);
  t.l0c = t.mTile * t.nTile * 4;

  // AIV: three float rows (gate, up, silu scratch; or sum, expert row) and one raw row in the operand dtype.
  const uint32_t budget = Budget(cfg);
  const uint64_t step = std::min<uint64_t>({R8(kWide), cap, budget / 16 / 8 * 8});
  if (step < 8) NoFit(op, "a vector step of 8 floats (four rows)", budget);
  t.colTile = static_cast<uint32_t>(step);
  t.ubFloat = t.colTile * 4;
  t.ubRaw = t.colTile * 4;  // any operand dtype (at most 4 bytes)

  t.wsGateUp = 0;
  t.wsAct = static_cast<uint32_t>(R512(static_cast<uint64_t>(t.mTile) * 2 * t.inter * 4));
  t.actPitch = R16(t.inter);
  const uint64_t group = t.wsAct + R512(static_cast<uint64_t>(t.mTile) * t.actPitch * es);
  if (group > 0xffffffffull) throw std::invalid_argument(std::string(op) + ": the group workspace exceeds 4 GB");
  t.wsGroupBytes = static_cast<uint32_t>(group);

  uint64_t units = 0;
  for (int64_t c : counts) units += (static_cast<uint64_t>(c) + t.mTile - 1) / t.mTile;
  t.numUnits = static_cast<uint32_t>(units);
  t.usedCores = static_cast<uint32_t>(std::max<uint64_t>(1, std::min<uint64_t>(Cores(cfg), units)));
  return t;
}

}  // namespace qwen_ascendc

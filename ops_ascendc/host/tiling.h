// Tiling structs shared by the host (ops_ascendc/host/tiling.cpp, bindings)
// and the kernels (ops_ascendc/kernels/*.cpp). Plain POD of 32-bit fields:
// the host fills one, copies it to GM, and the kernel copies it back word by
// word (CopyTiling in kernels/common.h). No standard library here: kernels
// include this header.
#ifndef QWEN_ASCENDC_TILING_H
#define QWEN_ASCENDC_TILING_H

// Includes nothing: kernels get the fixed-width integer types from
// kernel_operator.h (included first), the host from <cstdint> (tiling_host.h).

namespace qwen_ascendc {

// Dtype codes carried in tilings (the kernels switch on them).
enum DType : uint32_t { DT_FLOAT = 0, DT_HALF = 1, DT_BF16 = 2, DT_INT8 = 3, DT_INT32 = 4, DT_INT64 = 5, DT_BOOL = 6 };

// Unified buffer the host tiling may plan for (184 KB usable of 192 KB on 910B).
constexpr uint32_t kUbUsableBytes = 184u * 1024u;
// Bytes the tilings keep in reserve below the usable size (small scratch, alignment).
constexpr uint32_t kUbReserveBytes = 1024u;

struct ReshapeAndCacheTiling {
  uint32_t numTokens;
  uint32_t numKvHeads;
  uint32_t headDim;
  uint32_t blockSize;
  uint32_t numSlots;       // NB * Bs
  uint32_t kvDtype;        // key/value
  uint32_t cacheDtype;     // cache (same as kvDtype, or DT_INT8)
  uint32_t slotDtype;      // DT_INT32 or DT_INT64
  uint32_t pitch;          // elements per head row in UB: headDim rounded up to 32
  uint32_t headsPerTile;   // heads moved per tile (<= numKvHeads)
  uint32_t tokensPerCore;  // core i handles tokens [i * tokensPerCore, ...)
  uint32_t usedCores;
};

struct PagedAttentionTiling {
  uint32_t numReqs;
  uint32_t numQHeads;
  uint32_t numKvHeads;
  uint32_t headDim;
  uint32_t blockSize;
  uint32_t numBlocks;
  uint32_t maxBlocksPerReq;  // columns of block_tables
  uint32_t qDtype;
  uint32_t cacheDtype;
  uint32_t groupSize;        // query heads per KV head
  uint32_t tileTokens;       // tokens streamed per tile (<= blockSize)
  uint32_t unitsPerCore;     // units are (request, KV head) pairs
  uint32_t usedCores;
  float scale;
};

struct GdnRecurrentTiling {
  uint32_t numSeqs;          // N
  uint32_t seqLen;           // T per sequence when there is no cu_seqlens
  uint32_t totalTokens;      // B * T
  uint32_t numKHeads;        // Hk
  uint32_t numVHeads;        // Hv
  uint32_t dk;
  uint32_t dv;
  uint32_t qkvDtype;
  uint32_t betaDtype;
  uint32_t cuDtype;          // DT_INT32 / DT_INT64 when cu_seqlens is given
  uint32_t idxDtype;         // DT_INT32 / DT_INT64 when ssm_state_indices is given
  uint32_t hasCuSeqlens;
  uint32_t hasInitialState;
  uint32_t hasIndices;
  uint32_t hasHasInitial;
  uint32_t writeFinal;       // final_state output [N, Hv, Dk, Dv]
  uint32_t useL2Norm;
  uint32_t dvTile;           // state columns per tile
  uint32_t pitchDv;          // dvTile rounded up to 8 floats
  uint32_t unitsPerCore;     // units are (sequence, value head, Dv tile)
  uint32_t usedCores;
  uint32_t numDvTiles;
  float scale;
};

struct CausalConv1dUpdateTiling {
  uint32_t batch;
  uint32_t channels;
  uint32_t width;            // K
  uint32_t numStates;        // S
  uint32_t xDtype;
  uint32_t stateDtype;
  uint32_t weightDtype;
  uint32_t biasDtype;
  uint32_t idxDtype;
  uint32_t hasBias;
  uint32_t silu;
  uint32_t tileChannels;     // channels per tile (multiple of 32 or all of them)
  uint32_t numTiles;
  uint32_t unitsPerCore;     // units are (channel tile, batch row), tile-major
  uint32_t usedCores;
};

}  // namespace qwen_ascendc

#endif  // QWEN_ASCENDC_TILING_H

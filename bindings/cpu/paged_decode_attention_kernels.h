// The paged decode attention kernels of qwen_ops._C (bindings/cpu/), one per instruction set: plain C++ on raw
// pointers, so each variant is its own translation unit compiled with its own -m flags (CMakeLists.txt) and none
// includes torch. The dispatcher (paged_decode_attention_cpu.cpp) checks the tensors, splits the (request, KV
// head) pairs over torch's threads and calls the variant the CPU supports (cpu_features.h).
#pragma once

#include <cstdint>

namespace qwen_ops::cpu {

// The cache's element type. bfloat16: the 16 bits of each element are a float32's upper half, widened exactly.
enum class CacheElement { kFloat32, kInt8, kBFloat16 };

// One call's operands, already checked by the dispatcher (every block id a request uses is in the cache).
struct DecodeAttentionProblem {
  const float* query;       // [N, Hq, D]
  const void* key_cache;    // [NB, Hkv, Bs, D] of `element`
  const void* value_cache;  // like key_cache
  CacheElement element;
  const float* k_scale;  // int8 only: [Hkv, D]
  const float* v_scale;  // int8 only: [Hkv, D]
  const int32_t* block_tables;  // [N, width]
  int64_t width;
  const int32_t* seq_lens;  // [N]; 0 = a zero output row
  float scale;              // the softmax scale
  int64_t hq, hkv, block_size, d;
  float* out;  // [N, Hq, D]
};

// A block's scores are kept per query head in rows of this stride, the block size rounded up to a multiple of
// every variant's lane count (padding scores are -inf, so their exponentials are 0).
static inline int64_t decode_score_stride(int64_t block_size) { return (block_size + 15) / 16 * 16; }

// Floats of scratch one thread needs for any number of pairs: the scaled query rows and the accumulators
// (G * D each, G = Hq / Hkv), the block's scores (G * stride) and three per-head running values.
static inline int64_t decode_workspace_floats(int64_t groups, int64_t d, int64_t block_size) {
  return groups * (2 * d + decode_score_stride(block_size) + 3);
}

// Computes the output rows of pairs [begin, end) (pair = request * Hkv + KV head), using workspace (at least
// decode_workspace_floats floats, the thread's own).
using DecodeAttentionPairs = void (*)(const DecodeAttentionProblem& problem, int64_t begin, int64_t end,
                                      float* workspace);

void paged_decode_attention_pairs_portable(const DecodeAttentionProblem& problem, int64_t begin, int64_t end,
                                           float* workspace);
#if defined(QWEN_OPS_X86_KERNELS)
void paged_decode_attention_pairs_avx2(const DecodeAttentionProblem& problem, int64_t begin, int64_t end,
                                       float* workspace);
void paged_decode_attention_pairs_avx512(const DecodeAttentionProblem& problem, int64_t begin, int64_t end,
                                         float* workspace);
#endif

}  // namespace qwen_ops::cpu

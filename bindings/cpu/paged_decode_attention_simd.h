// The body of every paged decode attention variant (paged_decode_attention_{portable,avx2,avx512}.cpp), written
// once on GCC vector types of QWEN_OPS_DECODE_LANES float32 lanes, which the including file defines (4: SSE2 /
// NEON, 8: AVX2, 16: AVX-512) before including this. Everything here has internal linkage (an unnamed
// namespace), so each variant keeps its own copy compiled with its own -m flags and the linker never swaps one
// variant's inline function for another's.
//
// Each (request, KV head) pair walks its blocks where they lie, one [Bs, D] K slab and V slab at a time, with an
// online softmax (running max and sum per query head, the accumulator rescaled when the max grows), so the cache
// is read once. The G = Hq / Hkv query heads of the KV head share each slab: per pass over a slab, each K or V
// vector is loaded (and, for int8 caches, widened to float32 in registers: no second pass through a widened
// copy) once and used for up to 4 heads, and 2 rows (scores) or 2 column strips (accumulation) run together so
// that 8 independent sums hide the FMA latency. The exponentials are vectorised (exp_nonpositive below).
//
// bfloat16 caches are widened to float32 in registers, exactly, as int8 ones are.
//
// INT8 caches: with x = q * scale per channel, q_row . (k * k_scale) = (q_row * k_scale) . k and
// sum_s p_s (v_s * v_scale) = v_scale * sum_s p_s v_s, so the scales go on the query and the output rows.
//
// Sums run in a different order from the reference's and the exponential is this file's, within about 2 ulp of
// the correctly rounded one: the output agrees with the reference to float32 rounding.
#pragma once

#include <cstdint>
#include <type_traits>

#include "bindings/cpu/paged_decode_attention_kernels.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#ifndef QWEN_OPS_DECODE_LANES
#error "define QWEN_OPS_DECODE_LANES (float32 lanes per vector) before including paged_decode_attention_simd.h"
#endif

namespace qwen_ops::cpu {
namespace {

constexpr int kW = QWEN_OPS_DECODE_LANES;
constexpr int kMaxHeadsPerPass = 4;  // query heads sharing one pass over a slab (4 + 4 accumulators, 2 rows)

typedef float VF __attribute__((vector_size(4 * kW)));
typedef int32_t VI __attribute__((vector_size(4 * kW)));
typedef int8_t VB __attribute__((vector_size(kW)));

inline VF splat(float x) { return VF{} + x; }
inline VF load(const float* p) {
  VF v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
// kW int8 values widened to float32 in registers: vpmovsxbd + vcvtdq2ps on x86 (spelled out: GCC 12 turns a direct
// int8 -> float vector conversion into one scalar conversion per lane).
inline VF load(const int8_t* p) {
#if defined(__AVX512F__) && QWEN_OPS_DECODE_LANES == 16
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#elif defined(__AVX2__) && QWEN_OPS_DECODE_LANES == 8
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#else
  VB b;
  __builtin_memcpy(&b, p, sizeof b);
  return __builtin_convertvector(__builtin_convertvector(b, VI), VF);
#endif
}
// kW bfloat16 values (their bits as uint16_t) widened to float32 exactly: the bits move to the upper half.
inline VF load(const uint16_t* p) {
#if defined(__AVX512F__) && QWEN_OPS_DECODE_LANES == 16
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
#elif defined(__AVX2__) && QWEN_OPS_DECODE_LANES == 8
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
#else
  typedef uint16_t VH __attribute__((vector_size(2 * kW)));
  typedef uint32_t VU __attribute__((vector_size(4 * kW)));
  VH h;
  __builtin_memcpy(&h, p, sizeof h);
  const VU bits = __builtin_convertvector(h, VU) << 16;
  VF v;
  __builtin_memcpy(&v, &bits, sizeof v);
  return v;
#endif
}
inline void store(float* p, VF v) { __builtin_memcpy(p, &v, sizeof v); }
inline float widen(float x) { return x; }
inline float widen(int8_t x) { return static_cast<float>(x); }
inline float widen(uint16_t x) {
  const uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}

inline float sum_lanes(VF v) {
#if defined(__AVX512F__) && QWEN_OPS_DECODE_LANES == 16
  return _mm512_reduce_add_ps(v);
#elif defined(__AVX2__) && QWEN_OPS_DECODE_LANES == 8
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
#else
  float s = 0.0f;
  for (int l = 0; l < kW; ++l) s += v[l];
  return s;
#endif
}

// e^x for x <= 0 (a score minus its running max), also -inf (-> 0) and NaN (-> NaN). x = n ln2 + r with
// |r| <= ln2 / 2 (Cody-Waite: ln2 split in a 9-bit high part, so n * high is exact for |n| <= 127, and the low
// part), e^r by its Taylor series to r^7 (truncation below r^8 / 8! < 6e-9 relative, a tenth of an ulp), times
// 2^n built in the exponent bits. Below -87 (e^-87 = 1.6e-38, the normal range's end) the result is 0: such a
// weight is added to a softmax sum of at least 1 and cannot change it.
inline VF exp_nonpositive(VF x) {
  const VF lowest = splat(-87.0f);
  const VF xc = x > lowest ? x : lowest;  // NaN compares false: computed on -87, restored at the end
  const VF shift = splat(12582912.0f);    // 1.5 * 2^23: adding and subtracting it rounds to an integer
  const VF n = (xc * splat(1.44269504f) + shift) - shift;
  VF r = xc - n * splat(0.693359375f);
  r = r - n * splat(-2.12194440e-4f);
  VF p = splat(1.0f / 5040.0f);
  p = p * r + splat(1.0f / 720.0f);
  p = p * r + splat(1.0f / 120.0f);
  p = p * r + splat(1.0f / 24.0f);
  p = p * r + splat(1.0f / 6.0f);
  p = p * r + splat(0.5f);
  p = p * r + splat(1.0f);
  p = p * r + splat(1.0f);
  const VI bits = (__builtin_convertvector(n, VI) + 127) << 23;  // n in [-126, 0]: a normal power of two
  VF two_n;
  __builtin_memcpy(&two_n, &bits, sizeof two_n);
  const VF y = x > lowest ? p * two_n : splat(0.0f);
  return x == x ? y : x;
}

// Rows [r, r + count) of the next block's K and V slabs (null: none), fetched into cache while this block's rows
// are scored: blocks lie anywhere in the cache, so the hardware prefetcher cannot see the next one coming, and a
// row at a time keeps the outstanding misses few.
template <typename T>
inline void prefetch_rows(const T* next_k, const T* next_v, int64_t r, int64_t count, int64_t d) {
  if (next_k == nullptr) return;
  const char* k = reinterpret_cast<const char*>(next_k + r * d);
  const char* v = reinterpret_cast<const char*>(next_v + r * d);
  for (int64_t i = 0; i < count * d * static_cast<int64_t>(sizeof(T)); i += 64) {
    __builtin_prefetch(k + i);
    __builtin_prefetch(v + i);
  }
}

// scores[g * stride + r + j] = q[g] . k[r + j] for the GB query rows q [GB, D] and ROWS rows of k from row r.
template <int GB, int ROWS, typename T>
inline void score_rows(const float* __restrict q, const T* __restrict k, int64_t r, int64_t d,
                       float* __restrict scores, int64_t stride, const T* next_k, const T* next_v) {
  prefetch_rows(next_k, next_v, r, ROWS, d);
  const int64_t vector_end = d - d % kW;
  VF sums[ROWS][GB];
  for (int j = 0; j < ROWS; ++j)
    for (int g = 0; g < GB; ++g) sums[j][g] = VF{};
  for (int64_t i = 0; i < vector_end; i += kW) {
    VF kv[ROWS];
    for (int j = 0; j < ROWS; ++j) kv[j] = load(k + (r + j) * d + i);
    for (int g = 0; g < GB; ++g) {
      const VF qv = load(q + g * d + i);
      for (int j = 0; j < ROWS; ++j) sums[j][g] += qv * kv[j];
    }
  }
  for (int j = 0; j < ROWS; ++j) {
    for (int g = 0; g < GB; ++g) {
      float s = sum_lanes(sums[j][g]);
      for (int64_t i = vector_end; i < d; ++i) s += q[g * d + i] * widen(k[(r + j) * d + i]);
      scores[g * stride + r + j] = s;
    }
  }
}

// The block's scores for GB heads; with next_k / next_v, the next block's rows are prefetched as they go (its
// rows past this block's last, if this one is short, are not needed: it is the last block).
template <int GB, typename T>
void block_scores(const float* q, const T* k, int64_t rows, int64_t d, float* scores, int64_t stride,
                  const T* next_k, const T* next_v) {
  int64_t r = 0;
  for (; r + 2 <= rows; r += 2) score_rows<GB, 2>(q, k, r, d, scores, stride, next_k, next_v);
  if (r < rows) score_rows<GB, 1>(q, k, r, d, scores, stride, next_k, next_v);
}

// acc[g][i..] = acc[g][i..] * rescale[g] + sum_r p[g * stride + r] * v[r][i..] for STRIPS strips of kW columns
// from column i, kept in registers over all the block's rows.
template <int GB, int STRIPS, typename T>
inline void accumulate_strips(const float* __restrict p, int64_t stride, const float* __restrict rescale,
                              const T* __restrict v, int64_t rows, int64_t d, int64_t i, float* __restrict acc) {
  VF a[STRIPS][GB];
  for (int g = 0; g < GB; ++g)
    for (int s = 0; s < STRIPS; ++s) a[s][g] = load(acc + g * d + i + s * kW) * rescale[g];
  for (int64_t r = 0; r < rows; ++r) {
    VF vv[STRIPS];
    for (int s = 0; s < STRIPS; ++s) vv[s] = load(v + r * d + i + s * kW);
    for (int g = 0; g < GB; ++g) {
      const VF pr = splat(p[g * stride + r]);
      for (int s = 0; s < STRIPS; ++s) a[s][g] += pr * vv[s];
    }
  }
  for (int g = 0; g < GB; ++g)
    for (int s = 0; s < STRIPS; ++s) store(acc + g * d + i + s * kW, a[s][g]);
}

template <int GB, typename T>
void block_accumulate(const float* p, int64_t stride, const float* rescale, const T* v, int64_t rows, int64_t d,
                      float* acc) {
  int64_t i = 0;
  for (; i + 2 * kW <= d; i += 2 * kW) accumulate_strips<GB, 2>(p, stride, rescale, v, rows, d, i, acc);
  for (; i + kW <= d; i += kW) accumulate_strips<GB, 1>(p, stride, rescale, v, rows, d, i, acc);
  for (; i < d; ++i) {  // the columns past the last whole strip
    for (int g = 0; g < GB; ++g) {
      float x = acc[g * d + i] * rescale[g];
      for (int64_t r = 0; r < rows; ++r) x += p[g * stride + r] * widen(v[r * d + i]);
      acc[g * d + i] = x;
    }
  }
}

// The heads [g0, g0 + count) of one pass, count in 1..kMaxHeadsPerPass, as a compile-time count.
template <typename T>
void scores_for_heads(int64_t count, const float* q, const T* k, int64_t rows, int64_t d, float* scores,
                      int64_t stride, const T* next_k, const T* next_v) {
  switch (count) {
    case 4: block_scores<4>(q, k, rows, d, scores, stride, next_k, next_v); break;
    case 3: block_scores<3>(q, k, rows, d, scores, stride, next_k, next_v); break;
    case 2: block_scores<2>(q, k, rows, d, scores, stride, next_k, next_v); break;
    default: block_scores<1>(q, k, rows, d, scores, stride, next_k, next_v); break;
  }
}

template <typename T>
void accumulate_for_heads(int64_t count, const float* p, int64_t stride, const float* rescale, const T* v,
                          int64_t rows, int64_t d, float* acc) {
  switch (count) {
    case 4: block_accumulate<4>(p, stride, rescale, v, rows, d, acc); break;
    case 3: block_accumulate<3>(p, stride, rescale, v, rows, d, acc); break;
    case 2: block_accumulate<2>(p, stride, rescale, v, rows, d, acc); break;
    default: block_accumulate<1>(p, stride, rescale, v, rows, d, acc); break;
  }
}

template <typename T>
void attend_pairs(const DecodeAttentionProblem& pb, int64_t begin, int64_t end, float* workspace) {
  const int64_t groups = pb.hq / pb.hkv, d = pb.d, block_size = pb.block_size;
  const int64_t stride = decode_score_stride(block_size), slab = block_size * d;
  float* q = workspace;
  float* acc = q + groups * d;
  float* scores = acc + groups * d;
  float* running_max = scores + groups * stride;
  float* running_sum = running_max + groups;
  float* rescale = running_sum + groups;
  const T* key_cache = static_cast<const T*>(pb.key_cache);
  const T* value_cache = static_cast<const T*>(pb.value_cache);
  constexpr bool int8 = std::is_same_v<T, int8_t>;  // the per-channel scales go on the query and the output
  const float infinity = __builtin_inff();
  for (int64_t pair = begin; pair < end; ++pair) {
    const int64_t r = pair / pb.hkv, h = pair % pb.hkv;
    float* o = pb.out + (r * pb.hq + h * groups) * d;
    const int64_t length = pb.seq_lens[r];
    if (length == 0) {  // nothing cached: the row stays zero, as in the reference
      for (int64_t i = 0; i < groups * d; ++i) o[i] = 0.0f;
      continue;
    }
    const float* qr = pb.query + (r * pb.hq + h * groups) * d;
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t i = 0; i < d; ++i) q[g * d + i] = qr[g * d + i] * pb.scale * (int8 ? pb.k_scale[h * d + i] : 1.0f);
    }
    for (int64_t i = 0; i < groups * d; ++i) acc[i] = 0.0f;
    for (int64_t g = 0; g < groups; ++g) {
      running_max[g] = -infinity;
      running_sum[g] = 0.0f;
    }
    const int32_t* table = pb.block_tables + r * pb.width;
    for (int64_t j = 0, first = 0; first < length; ++j, first += block_size) {
      const int64_t rows = length - first < block_size ? length - first : block_size;
      const int64_t offset = (static_cast<int64_t>(table[j]) * pb.hkv + h) * slab;
      const T* k = key_cache + offset;
      const T* v = value_cache + offset;
      const T *next_k = nullptr, *next_v = nullptr;  // the next block's slabs, prefetched by the first pass
      if (first + block_size < length) {
        const int64_t next = (static_cast<int64_t>(table[j + 1]) * pb.hkv + h) * slab;
        next_k = key_cache + next;
        next_v = value_cache + next;
      }
      for (int64_t g0 = 0; g0 < groups; g0 += kMaxHeadsPerPass) {
        const int64_t count = groups - g0 < kMaxHeadsPerPass ? groups - g0 : kMaxHeadsPerPass;
        scores_for_heads(count, q + g0 * d, k, rows, d, scores + g0 * stride, stride, g0 == 0 ? next_k : nullptr,
                         g0 == 0 ? next_v : nullptr);
      }
      for (int64_t g = 0; g < groups; ++g) {  // online softmax: exponentials against the running max
        float* s = scores + g * stride;
        float block_max = s[0];
        for (int64_t i = 1; i < rows; ++i) block_max = s[i] > block_max ? s[i] : block_max;
        const float new_max = running_max[g] > block_max ? running_max[g] : block_max;
        rescale[g] = __builtin_expf(running_max[g] - new_max);  // exp(-inf) = 0 on the first block
        for (int64_t i = rows; i < stride; ++i) s[i] = -infinity;  // padding: weight 0
        VF sum = VF{};
        for (int64_t i = 0; i < stride; i += kW) {
          const VF e = exp_nonpositive(load(s + i) - splat(new_max));
          store(s + i, e);
          sum += e;
        }
        running_sum[g] = running_sum[g] * rescale[g] + sum_lanes(sum);
        running_max[g] = new_max;
      }
      for (int64_t g0 = 0; g0 < groups; g0 += kMaxHeadsPerPass) {
        const int64_t count = groups - g0 < kMaxHeadsPerPass ? groups - g0 : kMaxHeadsPerPass;
        accumulate_for_heads(count, scores + g0 * stride, stride, rescale + g0, v, rows, d, acc + g0 * d);
      }
    }
    for (int64_t g = 0; g < groups; ++g) {
      const float inverse = 1.0f / running_sum[g];
      for (int64_t i = 0; i < d; ++i) o[g * d + i] = acc[g * d + i] * inverse * (int8 ? pb.v_scale[h * d + i] : 1.0f);
    }
  }
}

void attend_pairs_any(const DecodeAttentionProblem& problem, int64_t begin, int64_t end, float* workspace) {
  switch (problem.element) {
    case CacheElement::kInt8: attend_pairs<int8_t>(problem, begin, end, workspace); break;
    case CacheElement::kBFloat16: attend_pairs<uint16_t>(problem, begin, end, workspace); break;
    default: attend_pairs<float>(problem, begin, end, workspace); break;
  }
}

}  // namespace
}  // namespace qwen_ops::cpu

// Bit-level helpers of the stand-in tests' host side: half (GCC's _Float16),
// float and bfloat16 bit patterns, computed independently of the stand-in.
#ifndef QWEN_STANDIN_HOST_BITS_H
#define QWEN_STANDIN_HOST_BITS_H

#include <cmath>
#include <cstdint>
#include <cstring>

inline uint16_t H(_Float16 h) { uint16_t b; std::memcpy(&b, &h, 2); return b; }
inline _Float16 Hf(uint16_t b) { _Float16 h; std::memcpy(&h, &b, 2); return h; }
inline uint32_t FB(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float BF(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline uint16_t Bf16Rne(float f) {  // by candidates, independent of the stand-in's bias trick
  const uint32_t u = FB(f);
  const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
  const double dl = std::fabs(static_cast<double>(f) - BF(lo)), dh = std::fabs(BF(hi) - static_cast<double>(f));
  if (dl < dh) return lo >> 16;
  if (dh < dl) return hi >> 16;
  return ((lo >> 16) & 1u) ? hi >> 16 : lo >> 16;
}

#endif  // QWEN_STANDIN_HOST_BITS_H

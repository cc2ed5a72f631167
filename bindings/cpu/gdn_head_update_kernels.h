// The gated delta rule's one-head decode step (gdn_head_update.h), one function per instruction set: the GDN
// decode kernels (gdn_decode_step_cpu.cpp, gdn_recurrent_decode.cpp) pick one with QWEN_OPS_KERNEL_FOR_ISA
// (cpu_features.h). Each variant is its own translation unit with its own -m flags (CMakeLists.txt).
//
// Why variants: the state update is the GDN decode's arithmetic (three passes of Dk x Dv multiply-adds per
// head); built with the default x86-64 flags it ran 4 float32 lanes wide. At 16 sequences the step's 18
// gdn_decode_step calls took 20.6 ms of a 209.6 ms float32 step (bench/e2e/profile_decode.py).
#pragma once

#include <cstdint>

namespace qwen_ops::cpu {

// s: [dk, dv] float32 state, advanced in place; k, q: [dk] (q normalised and scaled); v: [dv]; g: the log-decay;
// beta: the write strength; scratch: 3 * dv floats; writes o: [dv].
using GdnHeadDecode = void (*)(float* s, const float* k, const float* q, const float* v, float g, float beta,
                               int64_t dk, int64_t dv, float* scratch, float* o);

void gdn_head_decode_portable(float* s, const float* k, const float* q, const float* v, float g, float beta,
                              int64_t dk, int64_t dv, float* scratch, float* o);
#if defined(QWEN_OPS_X86_KERNELS)
void gdn_head_decode_avx2(float* s, const float* k, const float* q, const float* v, float g, float beta, int64_t dk,
                          int64_t dv, float* scratch, float* o);
void gdn_head_decode_avx512(float* s, const float* k, const float* q, const float* v, float g, float beta,
                            int64_t dk, int64_t dv, float* scratch, float* o);
#endif

}  // namespace qwen_ops::cpu

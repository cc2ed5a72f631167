// Small kernels for the stand-in's own tests (compiled device-style, like
// ops_ascendc/kernels): each bad_* kernel breaks exactly one rule the device
// enforces; op_check runs one vector operation for comparison with plain C++.
#include "kernel_operator.h"

using namespace AscendC;

#define BAD(name) extern "C" __global__ __aicore__ void bad_##name(GM_ADDR in, GM_ADDR out)

namespace {
__aicore__ inline GlobalTensor<float> G(GM_ADDR p, uint64_t n = 4096) {
  GlobalTensor<float> g;
  g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(p), n);
  return g;
}
}  // namespace

BAD(ub_overflow) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> a, b;
  pipe.InitBuffer(a, 120 * 1024);
  pipe.InitBuffer(b, 64 * 1024 + 32);  // 184 KB + 32 bytes in total
}

BAD(ub_exact_ok) {  // exactly 184 KB: allowed
  TPipe pipe;
  TBuf<TPosition::VECCALC> a, b;
  pipe.InitBuffer(a, 120 * 1024);
  pipe.InitBuffer(b, 64 * 1024);
  LocalTensor<float> t = b.Get<float>();
  Duplicate(t, 1.0f, 16 * 1024);
}

BAD(datacopy_len) {
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 256);
  LocalTensor<float> t = q.AllocTensor<float>();
  DataCopy(t, G(in), 7);  // 28 bytes
}

BAD(vec_unaligned) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 1024);
  LocalTensor<float> t = b.Get<float>();
  Duplicate(t, 0.0f, 256);
  Add(t[3], t[3], t[3], 16);  // 12-byte offset
}

BAD(datacopy_unaligned_ub) {
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<float> t = q.AllocTensor<float>();
  DataCopy(t[4], G(in), 8);  // 16-byte offset in UB
}

BAD(pad_blocklen_units) {
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<float> t = q.AllocTensor<float>();
  DataCopyExtParams p(1, 6, 0, 0, 0);  // blockLen counts bytes: 6 is not whole floats
  DataCopyPad(t, G(in), p, DataCopyPadExtParams<float>(false, 0, 0, 0.0f));
}

BAD(pad_overrun) {
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 256);
  LocalTensor<float> t = q.AllocTensor<float>();
  // 4 rows of 8 floats, each followed by a 1-datablock gap in UB: 4*64-32 = 224 bytes fit;
  // dstStride is in datablocks, so 2 means 64-byte gaps: 4*96-64 = 320 bytes do not.
  DataCopyExtParams p(4, 32, 0, 2, 0);
  DataCopyPad(t, G(in), p, DataCopyPadExtParams<float>(false, 0, 0, 0.0f));
}

BAD(alloc_past_depth) {
  TPipe pipe;
  TQue<TPosition::VECIN, 2> q;
  pipe.InitBuffer(q, 2, 256);
  LocalTensor<float> a = q.AllocTensor<float>();
  LocalTensor<float> b = q.AllocTensor<float>();
  LocalTensor<float> c = q.AllocTensor<float>();
}

BAD(deque_empty) {
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 2, 256);
  LocalTensor<float> a = q.AllocTensor<float>();
  LocalTensor<float> b = q.DeQue<float>();
}

BAD(enque_past_depth) {
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 2, 256);
  LocalTensor<float> a = q.AllocTensor<float>();
  LocalTensor<float> b = q.AllocTensor<float>();
  q.EnQue(a);
  q.EnQue(b);
}

BAD(use_after_free) {
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 256);
  LocalTensor<float> a = q.AllocTensor<float>();
  DataCopy(a, G(in), 64);
  q.EnQue(a);
  LocalTensor<float> b = q.DeQue<float>();
  q.FreeTensor(b);
  Muls(b, b, 2.0f, 64);
}

BAD(double_free) {
  TPipe pipe;
  TQue<TPosition::VECOUT, 1> q;
  pipe.InitBuffer(q, 1, 256);
  LocalTensor<float> a = q.AllocTensor<float>();
  q.FreeTensor(a);
  q.FreeTensor(a);
}

BAD(touch_enqueued) {
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 256);
  LocalTensor<float> a = q.AllocTensor<float>();
  q.EnQue(a);
  Duplicate(a, 1.0f, 64);
}

BAD(repeat_overflow) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 96 * 1024);
  LocalTensor<float> t = b.Get<float>();
  int32_t repeats = 300;  // 300 * 64 floats fit in the buffer, but not in the 8-bit repeat field
  Muls(t, t, 2.0f, 64, repeats, UnaryRepeatParams(1, 1, 1, 1));
}

BAD(mask_too_big) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 4096);
  LocalTensor<float> t = b.Get<float>();
  Add(t, t, t, 128, 1, BinaryRepeatParams());  // float repeats hold 64 elements
}

BAD(cast_int8_float) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 4096);
  LocalTensor<int8_t> i8 = b.Get<int8_t>(256);
  LocalTensor<float> f = b.Get<float>()[256];
  Cast(f, i8, RoundMode::CAST_NONE, 64);
}

BAD(cast_float_int8) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 4096);
  LocalTensor<int8_t> i8 = b.Get<int8_t>(256);
  LocalTensor<float> f = b.Get<float>()[256];
  Cast(i8, f, RoundMode::CAST_RINT, 64);
}

BAD(cast_bad_mode) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 4096);
  LocalTensor<half> h = b.Get<half>(512);
  LocalTensor<float> f = b.Get<float>()[256];
  Cast(f, h, RoundMode::CAST_RINT, 64);  // half -> float only takes CAST_NONE
}

BAD(gm_out_of_bounds) {
  GlobalTensor<float> g;
  g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(in));  // size unknown: only the launch's buffers bound it
  float x = g.GetValue(4096);                              // one past the end of `in`
  (void)x;
}

BAD(gm_readonly) {
  GlobalTensor<float> g = G(in);
  g.SetValue(0, 1.0f);
}

BAD(global_size) {
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<float> t = q.AllocTensor<float>();
  DataCopy(t, G(in, 16)[8], 16);  // the GlobalTensor was set up with 16 elements
}

BAD(count_past_tensor) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 256);
  LocalTensor<float> t = b.Get<float>();
  Exp(t, t, 72);
}

BAD(reduce_work_small) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> src, work, dst;
  pipe.InitBuffer(src, 2048 * 4);
  pipe.InitBuffer(work, 32);
  pipe.InitBuffer(dst, 32);
  LocalTensor<float> s = src.Get<float>();
  Duplicate(s, 1.0f, 2048);
  ReduceSum(dst.Get<float>(), s, work.Get<float>(), 2048);  // 32 repeats: needs 32 floats of work
}

BAD(partial_overlap) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 1024);
  LocalTensor<float> t = b.Get<float>();
  Duplicate(t, 1.0f, 256);
  Adds(t[8], t, 1.0f, 64);
}

BAD(tbuf_too_big) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 1024);
  LocalTensor<float> t = b.Get<float>(257);
}

BAD(second_pipe) {
  TPipe a;
  TPipe b;
}

// Block 2 fails; the other blocks would loop for a long time and must stop early.
BAD(abort_others) {
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 1024);
  LocalTensor<float> t = b.Get<float>();
  if (GetBlockIdx() == 2) Exp(t, t, 1000);
  for (int64_t i = 0; i < 2000000000LL; ++i) Duplicate(t, 0.0f, 8);
}

// A clean multi-block kernel: each block writes its index and the block count.
BAD(block_ids) {
  GlobalTensor<float> g = G(out);
  g.SetValue(GetBlockIdx() * 2, static_cast<float>(GetBlockIdx()));
  g.SetValue(GetBlockIdx() * 2 + 1, static_cast<float>(GetBlockNum()));
}

// ---------------------------------------------------------------- op_check
// ctrl[0] = opcode, ctrl[1] = element count n. a, b: inputs; out: results.
// Inputs come as float (or half/bf16/int8 bit patterns, per opcode).
extern "C" __global__ __aicore__ void op_check(GM_ADDR a, GM_ADDR b, GM_ADDR out, GM_ADDR ctrl) {
  GlobalTensor<int32_t> c;
  c.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(ctrl), 2);
  const int32_t op = c.GetValue(0);
  const int32_t n = c.GetValue(1);
  TPipe pipe;
  TBuf<TPosition::VECCALC> ba, bb, bo, bw;
  pipe.InitBuffer(ba, 32 * 1024);
  pipe.InitBuffer(bb, 32 * 1024);
  pipe.InitBuffer(bo, 32 * 1024);
  pipe.InitBuffer(bw, 4 * 1024);
  GlobalTensor<uint8_t> ga, gb, go;
  ga.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(a), 32 * 1024);
  gb.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(b), 32 * 1024);
  go.SetGlobalBuffer(reinterpret_cast<__gm__ uint8_t*>(out), 32 * 1024);
  LocalTensor<uint8_t> la = ba.Get<uint8_t>(), lb = bb.Get<uint8_t>(), lo = bo.Get<uint8_t>();
  DataCopy(la, ga, 32 * 1024);
  DataCopy(lb, gb, 32 * 1024);
  DataCopy(lo, go, 32 * 1024);
  LocalTensor<float> fa = la.ReinterpretCast<float>(), fb = lb.ReinterpretCast<float>(), fo = lo.ReinterpretCast<float>();
  LocalTensor<half> ha = la.ReinterpretCast<half>(), hb = lb.ReinterpretCast<half>(), ho = lo.ReinterpretCast<half>();
  LocalTensor<float> work = bw.Get<float>();
  switch (op) {
    case 0: Add(fo, fa, fb, n); break;
    case 1: Sub(fo, fa, fb, n); break;
    case 2: Mul(fo, fa, fb, n); break;
    case 3: Div(fo, fa, fb, n); break;
    case 4: Max(fo, fa, fb, n); break;
    case 5: Min(fo, fa, fb, n); break;
    case 6: Adds(fo, fa, 0.75f, n); break;
    case 7: Muls(fo, fa, 1.5f, n); break;
    case 8: Maxs(fo, fa, 0.1f, n); break;
    case 9: Mins(fo, fa, 0.1f, n); break;
    case 10: Exp(fo, fa, n); break;
    case 11: Sqrt(fo, fa, n); break;
    case 12: Duplicate(fo, 3.25f, n); break;
    case 13: ReduceSum(fo, fa, work, n); break;
    case 14: ReduceMax(fo, fa, work, n); break;
    case 15: Axpy(fo, fa, 0.5f, n); break;
    case 20: Add(ho, ha, hb, n); break;
    case 21: Mul(ho, ha, hb, n); break;
    case 22: Div(ho, ha, hb, n); break;
    case 23: Exp(ho, ha, n); break;
    case 24: Muls(ho, ha, half(0.3f), n); break;
    case 25: ReduceMax(ho, ha, work.ReinterpretCast<half>(), n); break;
    case 26: Sub(ho, ha, hb, n); break;
    case 30: Cast(ho, fa, RoundMode::CAST_RINT, n); break;
    case 31: Cast(fo, ha, RoundMode::CAST_NONE, n); break;
    case 32: Cast(lo.ReinterpretCast<bfloat16_t>(), fa, RoundMode::CAST_RINT, n); break;
    case 33: Cast(fo, la.ReinterpretCast<bfloat16_t>(), RoundMode::CAST_NONE, n); break;
    case 34: Cast(fo, fa, RoundMode::CAST_RINT, n); break;
    case 35: Cast(lo.ReinterpretCast<int8_t>(), ha, RoundMode::CAST_NONE, n); break;
    case 36: Cast(ho, la.ReinterpretCast<int8_t>(), RoundMode::CAST_NONE, n); break;
    case 37: Cast(lo.ReinterpretCast<int32_t>(), fa, RoundMode::CAST_RINT, n); break;
    case 38: Cast(ho, fa, RoundMode::CAST_FLOOR, n); break;
    case 39: Cast(ho, fa, RoundMode::CAST_CEIL, n); break;
    case 40: Cast(ho, fa, RoundMode::CAST_TRUNC, n); break;
    case 41: Cast(ho, fa, RoundMode::CAST_ROUND, n); break;
    case 42: Cast(fo, fa, RoundMode::CAST_FLOOR, n); break;
    case 43: Cast(fo, fa, RoundMode::CAST_ROUND, n); break;
    case 50: {  // 4 blocks of 2 datablocks, 1-datablock gaps on both sides
      DataCopyParams p(4, 2, 1, 1);
      DataCopy(fo, G(a), p);
      break;
    }
    case 51: {  // 5 rows of 5 floats, 3 floats apart in GM, 1 extra datablock apart in UB, padded with 7
      DataCopyExtParams p(5, 20, 12, 1, 0);
      DataCopyPad(fo, G(a), p, DataCopyPadExtParams<float>(true, 0, 3, 7.0f));
      break;
    }
    case 52: {  // repeat form: 3 repeats of 40 floats, src0 repeats 16 blocks apart
      Add(fo, fa, fb, 40, 3, BinaryRepeatParams(1, 1, 1, 8, 16, 8));
      break;
    }
    case 53: {  // repeat form with a block stride of 2
      Muls(fo, fa, 2.0f, 64, 2, UnaryRepeatParams(2, 1, 16, 8));
      break;
    }
    case 54: {
      Duplicate(fo, 5.0f, 20, 3, 1, 4);
      break;
    }
    default: break;
  }
  if (op == 55) {  // DataCopyPad UB -> GM: 3 rows of 6 floats from a 32-float UB pitch to a GM gap of 2 floats
    DataCopyExtParams p(3, 24, 3, 8, 0);
    GlobalTensor<float> g = G(out);
    DataCopyPad(g, fa, p);
    return;
  }
  DataCopy(go, lo, 32 * 1024);
}

// ---------------------------------------------------------------- DataCopy out of and within the UB
BAD(datacopy_out_len) {  // UB -> GM, count form: 28 bytes
  TPipe pipe;
  TQue<TPosition::VECOUT, 1> q;
  pipe.InitBuffer(q, 1, 256);
  LocalTensor<float> t = q.AllocTensor<float>();
  Duplicate(t, 1.0f, 64);
  GlobalTensor<float> g = G(out);
  DataCopy(g, t, 7);
}

BAD(datacopy_out_unaligned) {  // UB -> GM from a 16-byte offset in UB
  TPipe pipe;
  TQue<TPosition::VECOUT, 1> q;
  pipe.InitBuffer(q, 1, 1024);
  LocalTensor<float> t = q.AllocTensor<float>();
  Duplicate(t, 1.0f, 256);
  GlobalTensor<float> g = G(out);
  DataCopy(g, t[4], 8);
}

BAD(datacopy_out_overrun) {  // UB -> GM of more elements than the UB tensor holds
  TPipe pipe;
  TQue<TPosition::VECOUT, 1> q;
  pipe.InitBuffer(q, 1, 256);
  LocalTensor<float> t = q.AllocTensor<float>();
  Duplicate(t, 1.0f, 64);
  GlobalTensor<float> g = G(out);
  DataCopy(g, t, 128);
}

BAD(datacopy_ub_len) {  // UB -> UB, count form: 28 bytes
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 1024);
  LocalTensor<float> t = b.Get<float>();
  Duplicate(t, 1.0f, 256);
  DataCopy(t[128], t, 7);
}

BAD(datacopy_ub_unaligned) {  // UB -> UB into a 16-byte offset
  TPipe pipe;
  TBuf<TPosition::VECCALC> b;
  pipe.InitBuffer(b, 1024);
  LocalTensor<float> t = b.Get<float>();
  Duplicate(t, 1.0f, 256);
  DataCopy(t[132], t, 8);
}

BAD(datacopy_params_out_overrun) {  // UB -> GM, DataCopyParams: 4 blocks of 2 datablocks 1 apart = 352 bytes of UB
  TPipe pipe;
  TQue<TPosition::VECOUT, 1> q;
  pipe.InitBuffer(q, 1, 256);
  LocalTensor<float> t = q.AllocTensor<float>();
  Duplicate(t, 1.0f, 64);
  GlobalTensor<float> g = G(out);
  DataCopy(g, t, DataCopyParams(4, 2, 1, 0));
}

BAD(datacopy_params_out_empty) {  // UB -> GM, DataCopyParams with blockLen 0
  TPipe pipe;
  TQue<TPosition::VECOUT, 1> q;
  pipe.InitBuffer(q, 1, 256);
  LocalTensor<float> t = q.AllocTensor<float>();
  Duplicate(t, 1.0f, 64);
  GlobalTensor<float> g = G(out);
  DataCopy(g, t, DataCopyParams(1, 0, 0, 0));
}

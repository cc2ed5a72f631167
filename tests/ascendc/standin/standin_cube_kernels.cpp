// Cube-side and mixed-kernel cases for the stand-in's own tests (compiled
// device-style, like ops_ascendc/kernels): each cube_* kernel breaks exactly one
// rule of the cube path or of the AIC/AIV hand-off; cube_matmul and
// mix_handoff are clean kernels whose results are compared with plain C++.
#include "kernel_operator.h"

using namespace AscendC;

#define CUBE(name) extern "C" __global__ __aicore__ void cube_##name(GM_ADDR in, GM_ADDR out)

namespace {
template <typename T>
__aicore__ inline GlobalTensor<T> Gm(GM_ADDR p, uint64_t bytes = 16384) {
  GlobalTensor<T> g;
  g.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(p), bytes / sizeof(T));
  return g;
}

// A small clean cube set-up: 32x32 half A and B in L1, L0A, L0B; 32x32 float C in L0C.
struct Tiles {
  TBuf<TPosition::A1> a1;
  TBuf<TPosition::B1> b1;
  TBuf<TPosition::A2> a2;
  TBuf<TPosition::B2> b2;
  TBuf<TPosition::CO1> c;
  __aicore__ inline void Init(TPipe& pipe) {
    pipe.InitBuffer(a1, 32 * 32 * 2);
    pipe.InitBuffer(b1, 32 * 32 * 2);
    pipe.InitBuffer(a2, 32 * 32 * 2);
    pipe.InitBuffer(b2, 32 * 32 * 2);
    pipe.InitBuffer(c, 32 * 32 * 4);
  }
  // A and B (as Bt, 32 x 32) from GM through L1 into L0A/L0B.
  __aicore__ inline void Load(GM_ADDR in) {
    GlobalTensor<half> g = Gm<half>(in);
    DataCopy(a1.Get<half>(), g, Nd2NzParams(1, 32, 32, 0, 32, 32, 1, 0));
    DataCopy(b1.Get<half>(), g, Nd2NzParams(1, 32, 32, 0, 32, 32, 1, 0));
    for (uint16_t mi = 0; mi < 2; ++mi)
      LoadData(a2.Get<half>()[mi * 2 * 256], a1.Get<half>(), LoadData2DParams(mi, 2, 2, 0, 0, false, 0));
    LoadData(b2.Get<half>(), b1.Get<half>(), LoadData2DParams(0, 4, 1, 0, 0, false, 0));
  }
  __aicore__ inline void Multiply(uint8_t unitFlag = 0) {
    Mmad(c.Get<float>(), a2.Get<half>(), b2.Get<half>(), MmadParams(32, 32, 32, unitFlag, false, true));
  }
};
}  // namespace

// ---------------------------------------------------------------- memories
CUBE(l1_overflow) {
  TPipe pipe;
  TBuf<TPosition::A1> a;
  TBuf<TPosition::B1> b;
  pipe.InitBuffer(a, 256 * 1024);
  pipe.InitBuffer(b, 256 * 1024 + 32);  // A1 and B1 share the 512 KB of L1
}

CUBE(l0a_overflow) {
  TPipe pipe;
  TBuf<TPosition::A2> a;
  pipe.InitBuffer(a, 64 * 1024 + 1);
}

CUBE(l0c_overflow) {
  TPipe pipe;
  TQue<TPosition::CO1, 1> q;
  pipe.InitBuffer(q, 2, 64 * 1024 + 64);
}

CUBE(ub_on_aic) {  // a cube core has no unified buffer
  TPipe pipe;
  TQue<TPosition::VECIN, 1> q;
  pipe.InitBuffer(q, 1, 256);
}

CUBE(l1_on_aiv) {  // launched as a vector kernel: no L1 there
  TPipe pipe;
  TBuf<TPosition::A1> a;
  pipe.InitBuffer(a, 1024);
}

CUBE(vector_op_on_l1) {
  TPipe pipe;
  TBuf<TPosition::A1> a;
  pipe.InitBuffer(a, 1024);
  LocalTensor<float> t = a.Get<float>();
  Adds(t, t, 1.0f, 64);
}

// ---------------------------------------------------------------- GM -> L1
CUBE(nd2nz_c0stride) {  // 20 rows need a column-block stride of at least 32
  TPipe pipe;
  TBuf<TPosition::A1> a;
  pipe.InitBuffer(a, 4096);
  DataCopy(a.Get<half>(), Gm<half>(in), Nd2NzParams(1, 20, 16, 0, 16, 20, 1, 0));
}

CUBE(nd2nz_src_pitch) {  // rows of 32 elements cannot be 16 elements apart in GM
  TPipe pipe;
  TBuf<TPosition::A1> a;
  pipe.InitBuffer(a, 4096);
  DataCopy(a.Get<half>(), Gm<half>(in), Nd2NzParams(1, 16, 32, 0, 16, 16, 1, 0));
}

CUBE(nd2nz_empty) {
  TPipe pipe;
  TBuf<TPosition::A1> a;
  pipe.InitBuffer(a, 4096);
  DataCopy(a.Get<half>(), Gm<half>(in), Nd2NzParams(1, 16, 0, 0, 16, 16, 1, 0));
}

CUBE(position_c1) {  // the bias-table positions are not modelled
  TPipe pipe;
  TBuf<TPosition::C1> c;
  pipe.InitBuffer(c, 1024);
}

CUBE(nd2nz_to_ub) {  // launched as a vector kernel: Nd2Nz goes to L1 only
  TPipe pipe;
  TBuf<TPosition::VECIN> u;
  pipe.InitBuffer(u, 4096);
  DataCopy(u.Get<half>(), Gm<half>(in), Nd2NzParams(1, 16, 16, 0, 16, 16, 1, 0));
}

CUBE(nd2nz_overrun) {  // 2 column blocks of 64 rows of halves = 4096 bytes into a 2048-byte buffer
  TPipe pipe;
  TBuf<TPosition::A1> a;
  pipe.InitBuffer(a, 2048);
  DataCopy(a.Get<half>(), Gm<half>(in), Nd2NzParams(1, 64, 32, 0, 32, 64, 1, 0));
}

// ---------------------------------------------------------------- L1 -> L0
CUBE(loaddata_repeat) {
  TPipe pipe;
  TBuf<TPosition::A1> a1;
  TBuf<TPosition::A2> a2;
  pipe.InitBuffer(a1, 256 * 512);
  pipe.InitBuffer(a2, 60 * 1024);
  uint32_t repeats = 256;  // fits the buffers, not the 8-bit field
  LoadData(a2.Get<half>(), a1.Get<half>(), LoadData2DParams(0, repeats, 1, 0, 0, false, 0));
}

CUBE(loaddata_transpose_b8) {
  TPipe pipe;
  TBuf<TPosition::B1> b1;
  TBuf<TPosition::B2> b2;
  pipe.InitBuffer(b1, 4096);
  pipe.InitBuffer(b2, 4096);
  LoadData(b2.Get<int8_t>(), b1.Get<int8_t>(), LoadData2DParams(0, 2, 1, 0, 0, true, 0));
}

CUBE(transpose_overlap) {  // int8: two iterations writing 2 fractals each, no gaps between iterations
  TPipe pipe;
  TBuf<TPosition::B1> b1;
  TBuf<TPosition::B2> b2;
  pipe.InitBuffer(b1, 4096);
  pipe.InitBuffer(b2, 4096);
  LoadDataWithTranspose(b2.Get<int8_t>(), b1.Get<int8_t>(), LoadData2dTransposeParams(0, 2, 1, 0, 0, 0));
}

CUBE(transpose_from_ub) {  // launched as a vector kernel: the source must be L1
  TPipe pipe;
  TBuf<TPosition::VECIN> u;
  pipe.InitBuffer(u, 4096);
  LoadDataWithTranspose(u.Get<float>(), u.Get<float>(), LoadData2dTransposeParams(0, 1, 1, 0, 0, 0));
}

CUBE(loaddata_src_l0a) {  // LoadData reads L1
  TPipe pipe;
  TBuf<TPosition::A2> a2;
  TBuf<TPosition::B2> b2;
  pipe.InitBuffer(a2, 4096);
  pipe.InitBuffer(b2, 4096);
  LoadData(b2.Get<half>(), a2.Get<half>(), LoadData2DParams(0, 2, 1, 0, 0, false, 0));
}

CUBE(loaddata_to_l0c) {
  TPipe pipe;
  TBuf<TPosition::A1> a1;
  TBuf<TPosition::CO1> c;
  pipe.InitBuffer(a1, 4096);
  pipe.InitBuffer(c, 4096);
  LoadData(c.Get<float>(), a1.Get<float>(), LoadData2DParams(0, 2, 1, 0, 0, false, 0));
}

CUBE(loaddata_dst_align) {  // L0A fractals start on 512-byte boundaries
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  LoadData(t.a2.Get<half>()[128], t.a1.Get<half>(), LoadData2DParams(0, 1, 1, 0, 0, false, 0));
}

// ---------------------------------------------------------------- Mmad
CUBE(mmad_half_out) {  // no half output from the cube
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  t.Load(in);
  Mmad(t.c.Get<half>(), t.a2.Get<half>(), t.b2.Get<half>(), MmadParams(32, 32, 32, 0, false, true));
}

CUBE(mmad_mixed_types) {
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  Mmad(t.c.Get<float>(), t.a2.Get<half>(), t.b2.Get<bfloat16_t>(), MmadParams(32, 32, 32, 0, false, true));
}

CUBE(mmad_m1) {
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  t.Load(in);
  Mmad(t.c.Get<float>(), t.a2.Get<half>(), t.b2.Get<half>(), MmadParams(1, 32, 32, 0, false, true));
}

CUBE(mmad_k_range) {
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  Mmad(t.c.Get<float>(), t.a2.Get<half>(), t.b2.Get<half>(), MmadParams(32, 32, 4096, 0, false, true));
}

CUBE(mmad_swapped) {  // A must come from L0A
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  t.Load(in);
  Mmad(t.c.Get<float>(), t.b2.Get<half>(), t.a2.Get<half>(), MmadParams(32, 32, 32, 0, false, true));
}

CUBE(mmad_dst_align) {  // Mmad writes L0C from a 1024-byte boundary
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  t.Load(in);
  Mmad(t.c.Get<float>()[64], t.a2.Get<half>(), t.b2.Get<half>(), MmadParams(16, 16, 32, 0, false, true));
}

CUBE(mmad_l0_too_small) {  // 48 rows of A do not fit a 32-row L0A buffer
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  t.Load(in);
  Mmad(t.c.Get<float>(), t.a2.Get<half>(), t.b2.Get<half>(), MmadParams(48, 16, 32, 0, false, true));
}

CUBE(mmad_bias) {  // C from the bias table is not modelled
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  t.Load(in);
  Mmad(t.c.Get<float>(), t.a2.Get<half>(), t.b2.Get<half>(), MmadParams(32, 32, 32, 0, true, true));
}

CUBE(mmad_unitflag) {
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  t.Load(in);
  t.Multiply(1);
}

// ---------------------------------------------------------------- Fixpipe
CUBE(fixpipe_quant_mismatch) {  // float -> half needs QuantMode_t::F322F16
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  t.Load(in);
  t.Multiply();
  Fixpipe(Gm<half>(out), t.c.Get<float>(), FixpipeParamsV220(32, 32, 32, 32, false, QuantMode_t::NoQuant, 0, 1, 0, 0, 0));
}

CUBE(fixpipe_bad_pair) {  // float L0C to int8 GM is a requantisation the stand-in does not model
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  t.Load(in);
  t.Multiply();
  Fixpipe(Gm<int8_t>(out), t.c.Get<float>(), FixpipeParamsV220(32, 32, 32, 32, false, QuantMode_t::QF322B8_PRE, 0, 1, 0, 0, 0));
}

CUBE(fixpipe_nz_out) {  // only NZ -> ND is modelled
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  t.Load(in);
  t.Multiply();
  Fixpipe<float, float, CFG_NZ>(Gm<float>(out), t.c.Get<float>(),
                                FixpipeParamsV220(32, 32, 32, 32, false, QuantMode_t::NoQuant, 0, 1, 0, 0, 0));
}

CUBE(fixpipe_ndnum) {
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  t.Load(in);
  t.Multiply();
  Fixpipe(Gm<float>(out), t.c.Get<float>(), FixpipeParamsV220(16, 32, 32, 32, false, QuantMode_t::NoQuant, 0, 2, 1, 16, 0));
}

CUBE(fixpipe_src_stride) {
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  t.Load(in);
  t.Multiply();
  Fixpipe(Gm<float>(out), t.c.Get<float>(), FixpipeParamsV220(32, 20, 20, 32, false, QuantMode_t::NoQuant, 0, 1, 0, 0, 0));
}

CUBE(fixpipe_dst_stride) {
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  t.Load(in);
  t.Multiply();
  Fixpipe(Gm<float>(out), t.c.Get<float>(), FixpipeParamsV220(32, 32, 32, 0, false, QuantMode_t::NoQuant, 0, 1, 0, 0, 0));
}

CUBE(fixpipe_to_local) {  // no L0C -> UB (or L1) path on A2/A3
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  t.Load(in);
  t.Multiply();
  Fixpipe(t.a1.Get<float>(), t.c.Get<float>(), FixpipeParamsV220(32, 32, 32, 32, false, QuantMode_t::NoQuant, 0, 1, 0, 0, 0));
}

CUBE(fixpipe_unwritten) {
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  Fixpipe(Gm<float>(out), t.c.Get<float>(), FixpipeParamsV220(32, 32, 32, 32, false, QuantMode_t::NoQuant, 0, 1, 0, 0, 0));
}

CUBE(fixpipe_unitflag_mismatch) {  // Mmad ran with unitFlag 3, Fixpipe without
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  t.Load(in);
  t.Multiply(3);
  Fixpipe(Gm<float>(out), t.c.Get<float>(), FixpipeParamsV220(32, 32, 32, 32, false, QuantMode_t::NoQuant, 0, 1, 0, 0, 0));
}

CUBE(fixpipe_unitflag_not_final) {  // the last Mmad said more accumulation is coming
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  t.Load(in);
  t.Multiply(2);
  Fixpipe(Gm<float>(out), t.c.Get<float>(), FixpipeParamsV220(32, 32, 32, 32, false, QuantMode_t::NoQuant, 0, 1, 0, 0, 3));
}

CUBE(fixpipe_gm_overrun) {  // 32 rows of 32 floats do not fit the 16 KB 'out' at offset 3600
  TPipe pipe;
  Tiles t;
  t.Init(pipe);
  t.Load(in);
  t.Multiply();
  Fixpipe(Gm<float>(out)[3600], t.c.Get<float>(), FixpipeParamsV220(32, 32, 32, 32, false, QuantMode_t::NoQuant, 0, 1, 0, 0, 0));
}

// ---------------------------------------------------------------- mixed kernels
CUBE(kernel_type_mismatch) {  // launched as KERNEL_TYPE_AIC_ONLY
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
}

CUBE(flag_in_vector_kernel) {
  CrossCoreSetFlag<2, PIPE_MTE3>(0);
}

CUBE(flag_pipe_s) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIC { CrossCoreSetFlag<2, PIPE_S>(0); }
}

CUBE(flag_id_range) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIV { CrossCoreWaitFlag(16); }
}

CUBE(flag_mode) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIC { CrossCoreSetFlag<0, PIPE_FIX>(1); }
}

CUBE(flag_saturation) {  // 16 sets the AIVs never wait on
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIC {
    for (int i = 0; i < 16; ++i) CrossCoreSetFlag<2, PIPE_FIX>(4);
  }
}

CUBE(deadlock) {  // the AIVs wait on a flag their AIC never sets
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIV { CrossCoreWaitFlag(3); }
}

CUBE(aic_waits_one_aiv) {  // in mode 2 the AIC's wait needs a set from each of its two AIVs
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIV {
    if (GetSubBlockIdx() == 0) CrossCoreSetFlag<2, PIPE_MTE3>(5);
  } else {
    CrossCoreWaitFlag(5);
  }
}

CUBE(syncall_missing) {  // AIV 1 returns without reaching SyncAll
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIV {
    if (GetBlockIdx() == 1) return;
    SyncAll();
  }
}

CUBE(syncall_false_in_vector_kernel) {  // launched as KERNEL_TYPE_AIV_ONLY
  SyncAll<false>();
}

CUBE(syncall_default_on_aic) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIC { SyncAll(); }
}

// The AIV reads the workspace before waiting on the AIC's flag: whichever
// happens first on the threads, the unordered pair is a race.
CUBE(race_read_before_wait) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  GlobalTensor<float> ws = Gm<float>(out);
  if ASCEND_IS_AIC {
    ws.SetValue(0, 1.0f);
    CrossCoreSetFlag<2, PIPE_FIX>(0);
  } else {
    if (GetSubBlockIdx() == 0) {
      float x = ws.GetValue(0);
      (void)x;
    }
    CrossCoreWaitFlag(0);
  }
}

// The AIC refills a workspace slot without waiting for the AIVs to have read it.
CUBE(race_ring_overwrite) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  GlobalTensor<float> ws = Gm<float>(out);
  if ASCEND_IS_AIC {
    for (int round = 0; round < 2; ++round) {
      ws.SetValue(0, static_cast<float>(round));
      CrossCoreSetFlag<2, PIPE_FIX>(0);
    }
  } else {
    for (int round = 0; round < 2; ++round) {
      CrossCoreWaitFlag(0);
      float x = ws.GetValue(0);
      (void)x;
    }
  }
}

// Two cores write the same GM word with nothing ordering them.
CUBE(race_write_write) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  GlobalTensor<float> ws = Gm<float>(out);
  if (ASCEND_IS_AIC || GetSubBlockIdx() == 0) ws.SetValue(8, 2.0f);
}

// The same race four shadow pages into a 64 KiB buffer (the race shadow is allocated page by page).
CUBE(race_write_write_far) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  GlobalTensor<float> ws = Gm<float>(out, 65536);
  if (ASCEND_IS_AIC || GetSubBlockIdx() == 0) ws.SetValue(12289, 2.0f);
}

// Clean: each core writes its own word, the words one shadow page (4096 words) apart: pages must not alias.
CUBE(mix_far_pages) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  GlobalTensor<float> ws = Gm<float>(out, 65536);
  const int64_t core = ASCEND_IS_AIC ? 0 : 1 + GetSubBlockIdx();
  ws.SetValue(5 + 4096 * core, static_cast<float>(core));
}

// Clean: the ids a 1:2 mixed launch gives each core, written through GM.
CUBE(mix_ids) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  GlobalTensor<float> o = Gm<float>(out);
  const int64_t slot = ASCEND_IS_AIC ? GetBlockIdx() : 16 + GetBlockIdx();
  o.SetValue(slot * 4 + 0, static_cast<float>(GetBlockIdx()));
  o.SetValue(slot * 4 + 1, static_cast<float>(GetBlockNum()));
  o.SetValue(slot * 4 + 2, static_cast<float>(GetSubBlockIdx()));
  o.SetValue(slot * 4 + 3, ASCEND_IS_AIC ? 1.0f : 0.0f);
}

// Clean: everybody writes, SyncAll<false>, everybody reads what the others wrote.
CUBE(syncall_orders) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  GlobalTensor<float> o = Gm<float>(out);
  const int64_t me = ASCEND_IS_AIC ? GetBlockIdx() : GetBlockNum() + GetBlockIdx();
  const int64_t total = 3 * GetBlockNum();
  o.SetValue(me, static_cast<float>(me + 1));
  SyncAll<false>();
  float sum = 0.0f;
  for (int64_t i = 0; i < total; ++i) sum += o.GetValue(i);
  SyncAll<false>();
  o.SetValue(64 + me, sum);
}

// ---------------------------------------------------------------- cube_matmul
// C (m x n) = A (m x k) . B through GM -> L1 -> L0A/L0B -> L0C -> GM.
// ctrl: variant, m, n, k. B comes as Bt (n x k, "NT", as K in Q.K^T) or, with
// `nn`, as B (k x n, as V in P.V; loaded with ifTranspose). `split` does the
// product in two k halves (cmatrixInitVal false and unitFlag 2 then 3).
namespace {
template <typename In, typename Acc, typename Out>
__aicore__ inline void Matmul(GM_ADDR a, GM_ADDR b, GM_ADDR c, uint32_t m, uint32_t n, uint32_t k, QuantMode_t quant,
                              bool nn, bool split) {
  TPipe pipe;
  TBuf<TPosition::A1> a1;
  TBuf<TPosition::B1> b1;
  TBuf<TPosition::A2> a2;
  TBuf<TPosition::B2> b2;
  TBuf<TPosition::CO1> co1;
  pipe.InitBuffer(a1, 64 * 1024);
  pipe.InitBuffer(b1, 64 * 1024);
  pipe.InitBuffer(a2, 32 * 1024);
  pipe.InitBuffer(b2, 32 * 1024);
  pipe.InitBuffer(co1, 64 * 64 * 4);
  GlobalTensor<In> ga, gb;
  GlobalTensor<Out> gc;
  ga.SetGlobalBuffer(reinterpret_cast<__gm__ In*>(a), m * k);
  gb.SetGlobalBuffer(reinterpret_cast<__gm__ In*>(b), n * k);
  gc.SetGlobalBuffer(reinterpret_cast<__gm__ Out*>(c), m * n);
  const uint32_t c0 = 32 / sizeof(In), fe = 512 / sizeof(In);
  const uint32_t M = (m + 15) / 16 * 16, N = (n + 15) / 16 * 16;
  const uint32_t K = nn ? (k + 15) / 16 * 16 : (k + c0 - 1) / c0 * c0;
  LocalTensor<In> la1 = a1.Get<In>(), lb1 = b1.Get<In>(), la2 = a2.Get<In>(), lb2 = b2.Get<In>();
  DataCopy(la1, ga, Nd2NzParams(1, m, k, 0, k, M, 1, 0));
  if (nn && sizeof(In) == 1) {  // int8 B (k x n): 32x32 squares, k and n multiples of 32 here
    DataCopy(lb1, gb, Nd2NzParams(1, k, n, 0, n, K, 1, 0));
    for (uint32_t blk = 0; blk < N / 32; ++blk)
      LoadDataWithTranspose(lb2[2 * blk * fe], lb1, LoadData2dTransposeParams(blk * (K / 32), K / 32, 1, N / 16 - 1, 0, 0));
  } else if (nn && sizeof(In) == 4) {  // float B (k x n): 16-row chunks so that two fractals make a 16x16 square
    DataCopy(lb1, gb, Nd2NzParams(K / 16, 16, n, 16 * n, n, 16, 1, 16 * N));
    for (uint32_t t = 0; t < K / 16; ++t)
      LoadDataWithTranspose(lb2[2 * t * (N / 16) * fe], lb1, LoadData2dTransposeParams(t * (N / 16), N / 16, 1, 0, N / 16 - 1, 0));
  } else if (nn) {
    DataCopy(lb1, gb, Nd2NzParams(1, k, n, 0, n, K, 1, 0));
    for (uint32_t kf = 0; kf < K / 16; ++kf)
      LoadData(lb2[kf * (N / 16) * fe], lb1, LoadData2DParams(kf, N / 16, K / 16, 0, 0, true, 0));
  } else {
    DataCopy(lb1, gb, Nd2NzParams(1, n, k, 0, k, N, 1, 0));
    LoadData(lb2, lb1, LoadData2DParams(0, (K / c0) * (N / 16), 1, 0, 0, false, 0));
  }
  LocalTensor<Acc> lc = co1.Get<Acc>();
  const uint32_t parts = split ? 2 : 1;
  const uint32_t kPart = K / parts;  // the test picks k so that this is a whole number of fractals
  for (uint32_t part = 0; part < parts; ++part) {
    const uint32_t kf0 = part * kPart / c0;
    for (uint32_t mi = 0; mi < M / 16; ++mi)
      LoadData(la2[mi * (kPart / c0) * fe], la1,
               LoadData2DParams(mi + kf0 * (M / 16), kPart / c0, M / 16, 0, 0, false, 0));
    const uint8_t unitFlag = split ? (part + 1 == parts ? 3 : 2) : 0;
    Mmad(lc, la2, lb2[kf0 * (N / 16) * fe], MmadParams(m, n, split ? kPart : k, unitFlag, false, part == 0));
  }
  Fixpipe(gc, lc, FixpipeParamsV220(n, m, M, n, false, quant, 0, 1, 0, 0, split ? 3 : 0));
}
}  // namespace

extern "C" __global__ __aicore__ void cube_matmul(GM_ADDR a, GM_ADDR b, GM_ADDR c, GM_ADDR ctrl) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
  GlobalTensor<int32_t> g;
  g.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(ctrl), 4);
  const int32_t variant = g.GetValue(0);
  const uint32_t m = g.GetValue(1), n = g.GetValue(2), k = g.GetValue(3);
  switch (variant) {
    case 0: Matmul<half, float, float>(a, b, c, m, n, k, QuantMode_t::NoQuant, false, false); break;
    case 1: Matmul<bfloat16_t, float, bfloat16_t>(a, b, c, m, n, k, QuantMode_t::F322BF16, false, false); break;
    case 2: Matmul<half, float, half>(a, b, c, m, n, k, QuantMode_t::F322F16, true, false); break;
    case 3: Matmul<float, float, float>(a, b, c, m, n, k, QuantMode_t::NoQuant, false, false); break;
    case 4: Matmul<int8_t, int32_t, int32_t>(a, b, c, m, n, k, QuantMode_t::NoQuant, false, false); break;
    case 5: Matmul<half, float, float>(a, b, c, m, n, k, QuantMode_t::NoQuant, false, true); break;
    case 6: Matmul<bfloat16_t, float, float>(a, b, c, m, n, k, QuantMode_t::NoQuant, true, false); break;
    case 7: Matmul<int8_t, int32_t, int32_t>(a, b, c, m, n, k, QuantMode_t::NoQuant, true, false); break;
    case 8: Matmul<float, float, float>(a, b, c, m, n, k, QuantMode_t::NoQuant, true, false); break;
    default: break;
  }
}

// ---------------------------------------------------------------- mix_handoff
// out (tiles*32 x 32, float) = 2 * A (tiles*32 x 64, half) . Bt^T (Bt: 32 x 64):
// each AIC multiplies its tiles on the cube and hands S through a two-slot GM
// workspace ring; its two AIVs scale their 16 rows each and write them out.
// Flag 0: slot ready (AIC -> AIVs); flag 1: slot read (AIVs -> AIC).
extern "C" __global__ __aicore__ void mix_handoff(GM_ADDR a, GM_ADDR bt, GM_ADDR out, GM_ADDR ws) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  constexpr uint32_t kTiles = 5;
  GlobalTensor<float> gws;
  gws.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws), GetBlockNum() * 2 * 1024);
  if ASCEND_IS_AIC {
    const uint32_t grp = GetBlockIdx();
    TPipe pipe;
    TBuf<TPosition::A1> a1;
    TBuf<TPosition::B1> b1;
    TBuf<TPosition::A2> a2;
    TBuf<TPosition::B2> b2;
    TBuf<TPosition::CO1> co1;
    pipe.InitBuffer(a1, 32 * 64 * 2);
    pipe.InitBuffer(b1, 32 * 64 * 2);
    pipe.InitBuffer(a2, 32 * 64 * 2);
    pipe.InitBuffer(b2, 32 * 64 * 2);
    pipe.InitBuffer(co1, 32 * 32 * 4);
    GlobalTensor<half> ga, gb;
    ga.SetGlobalBuffer(reinterpret_cast<__gm__ half*>(a), kTiles * 32 * 64);
    gb.SetGlobalBuffer(reinterpret_cast<__gm__ half*>(bt), 32 * 64);
    DataCopy(b1.Get<half>(), gb, Nd2NzParams(1, 32, 64, 0, 64, 32, 1, 0));
    LoadData(b2.Get<half>(), b1.Get<half>(), LoadData2DParams(0, 8, 1, 0, 0, false, 0));
    uint32_t local = 0;
    for (uint32_t t = grp; t < kTiles; t += GetBlockNum(), ++local) {
      if (local >= 2) CrossCoreWaitFlag(1);  // both AIVs are done with this slot
      DataCopy(a1.Get<half>(), ga[t * 32 * 64], Nd2NzParams(1, 32, 64, 0, 64, 32, 1, 0));
      for (uint32_t mi = 0; mi < 2; ++mi)
        LoadData(a2.Get<half>()[mi * 4 * 256], a1.Get<half>(), LoadData2DParams(mi, 4, 2, 0, 0, false, 0));
      Mmad(co1.Get<float>(), a2.Get<half>(), b2.Get<half>(), MmadParams(32, 32, 64, 0, false, true));
      Fixpipe(gws[(grp * 2 + local % 2) * 1024], co1.Get<float>(),
              FixpipeParamsV220(32, 32, 32, 32, false, QuantMode_t::NoQuant, 0, 1, 0, 0, 0));
      CrossCoreSetFlag<2, PIPE_FIX>(0);
    }
  } else {
    const uint32_t grp = GetBlockIdx() / 2, sub = GetSubBlockIdx();
    TPipe pipe;
    TBuf<TPosition::VECCALC> u;
    pipe.InitBuffer(u, 16 * 32 * 4);
    GlobalTensor<float> go;
    go.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(out), kTiles * 32 * 32);
    LocalTensor<float> lu = u.Get<float>();
    uint32_t local = 0;
    for (uint32_t t = grp; t < kTiles; t += GetBlockNum(), ++local) {
      CrossCoreWaitFlag(0);
      DataCopy(lu, gws[(grp * 2 + local % 2) * 1024 + sub * 16 * 32], 16 * 32);
      Muls(lu, lu, 2.0f, 16 * 32);
      DataCopy(go[(t * 32 + sub * 16) * 32], lu, 16 * 32);
      CrossCoreSetFlag<2, PIPE_MTE2>(1);
    }
  }
}

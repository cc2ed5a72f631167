// Driver for the stand-in's own tests (tests/ascendc/test_standin.py).
//
//   standin_tests checks : runs every bad_* kernel, prints "CHECK <name>|<message>"
//                          ("" when the kernel ran clean)
//   standin_tests cube-checks, cube-ops: the same for the cube side and mixed
//                          kernels (standin_cube_main.cpp)
//   standin_tests ops    : runs op_check for each operation and compares it with
//                          a plain C++ computation; prints "PASS <name>" or
//                          "FAIL <name>: <detail>"
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "host_bits.h"
#include "launch.h"

extern "C" {
#define DECL(name) void bad_##name(uint8_t*, uint8_t*);
DECL(ub_overflow) DECL(ub_exact_ok) DECL(datacopy_len) DECL(vec_unaligned) DECL(datacopy_unaligned_ub)
DECL(pad_blocklen_units) DECL(pad_overrun) DECL(alloc_past_depth) DECL(deque_empty) DECL(enque_past_depth)
DECL(use_after_free) DECL(double_free) DECL(touch_enqueued) DECL(repeat_overflow) DECL(mask_too_big)
DECL(cast_int8_float) DECL(cast_float_int8) DECL(cast_bad_mode) DECL(gm_out_of_bounds) DECL(gm_readonly)
DECL(global_size) DECL(count_past_tensor) DECL(reduce_work_small) DECL(partial_overlap) DECL(tbuf_too_big)
DECL(second_pipe) DECL(abort_others) DECL(block_ids)
DECL(datacopy_out_len) DECL(datacopy_out_unaligned) DECL(datacopy_out_overrun) DECL(datacopy_ub_len)
DECL(datacopy_ub_unaligned) DECL(datacopy_params_out_overrun) DECL(datacopy_params_out_empty)
#undef DECL
void op_check(uint8_t*, uint8_t*, uint8_t*, uint8_t*);
}

// standin_cube_main.cpp
int CubeChecks();
int CubeOps();

namespace {

std::vector<float> gIn(4096, 1.0f), gOut(4096, 0.0f);

std::string RunBad(const char* name, void (*fn)(uint8_t*, uint8_t*), uint32_t blocks = 1) {
  std::vector<qwen_sim::GmRegion> regions = {{gIn.data(), gIn.size() * 4, false, "in"},
                                             {gOut.data(), gOut.size() * 4, true, "out"}};
  return qwen_sim::Launch(name, blocks, [&] { fn(reinterpret_cast<uint8_t*>(gIn.data()),
                                                 reinterpret_cast<uint8_t*>(gOut.data())); }, regions);
}

int Checks() {
  struct Case { const char* name; void (*fn)(uint8_t*, uint8_t*); uint32_t blocks; };
  const Case cases[] = {
#define C(n) {#n, bad_##n, 1},
      C(ub_overflow) C(ub_exact_ok) C(datacopy_len) C(vec_unaligned) C(datacopy_unaligned_ub) C(pad_blocklen_units)
      C(pad_overrun) C(alloc_past_depth) C(deque_empty) C(enque_past_depth) C(use_after_free) C(double_free)
      C(touch_enqueued) C(repeat_overflow) C(mask_too_big) C(cast_int8_float) C(cast_float_int8) C(cast_bad_mode)
      C(gm_out_of_bounds) C(gm_readonly) C(global_size) C(count_past_tensor) C(reduce_work_small)
      C(partial_overlap) C(tbuf_too_big) C(second_pipe)
      C(datacopy_out_len) C(datacopy_out_unaligned) C(datacopy_out_overrun) C(datacopy_ub_len)
      C(datacopy_ub_unaligned) C(datacopy_params_out_overrun) C(datacopy_params_out_empty)
#undef C
      {"abort_others", bad_abort_others, 4},
      {"block_ids", bad_block_ids, 5},
  };
  for (const Case& c : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string msg = RunBad(c.name, c.fn, c.blocks);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (char& ch : msg)
      if (ch == '\n') ch = ' ';
    if (std::strcmp(c.name, "block_ids") == 0 && msg.empty()) {
      for (int i = 0; i < 5; ++i)
        if (gOut[2 * i] != i || gOut[2 * i + 1] != 5) msg = "wrong block index/count";
    }
    std::printf("CHECK %s|%.3f|%s\n", c.name, secs, msg.c_str());
  }
  return 0;
}

// ---------------------------------------------------------------- plain references


// Every finite half value, ascending (for directed rounding by search).
std::vector<double> AllHalves() {
  std::vector<double> v;
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const double x = static_cast<double>(Hf(static_cast<uint16_t>(b)));
    if (!std::isnan(x)) v.push_back(x);  // with the infinities
  }
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

uint16_t HalfDirected(float f, int mode) {  // 0 floor, 1 ceil, 2 trunc, 3 round-half-away
  static const std::vector<double> all = AllHalves();
  const double x = f;
  auto it = std::lower_bound(all.begin(), all.end(), x);
  double hi = *it, lo = (*it == x) ? x : *(it - 1);
  double r;
  switch (mode) {
    case 0: r = lo; break;
    case 1: r = hi; break;
    case 2: r = x > 0 ? lo : hi; break;
    default: r = (x - lo < hi - x) ? lo : (hi - x < x - lo) ? hi : (x > 0 ? hi : lo);
  }
  if (r == 0.0) r = std::signbit(x) ? -0.0 : 0.0;  // a zero result keeps the sign of the input
  return H(static_cast<_Float16>(r));  // exact: r is a half value
}


struct OpResult { bool ok; std::string detail; };

int Ops() {
  const int n = 300;  // not a multiple of any repeat: exercises tails
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> U(-4.0f, 4.0f);
  int failures = 0;
  auto run = [&](int op, std::vector<uint8_t>& a, std::vector<uint8_t>& b, std::vector<uint8_t>& out) {
    int32_t ctrl[2] = {op, n};
    std::vector<qwen_sim::GmRegion> regions = {{a.data(), a.size(), false, "a"}, {b.data(), b.size(), false, "b"},
                                               {out.data(), out.size(), true, "out"}, {ctrl, 8, false, "ctrl"}};
    return qwen_sim::Launch("op_check", 1, [&] { op_check(a.data(), b.data(), out.data(), reinterpret_cast<uint8_t*>(ctrl)); },
                            regions);
  };
  auto report = [&](const char* name, const std::string& err, const std::string& bad) {
    if (!err.empty() || !bad.empty()) {
      ++failures;
      std::printf("FAIL %s: %s%s\n", name, err.c_str(), bad.c_str());
    } else {
      std::printf("PASS %s\n", name);
    }
  };
  const size_t bytes = 32 * 1024;
  auto fill = [&](std::vector<uint8_t>& v, const std::function<float(int)>& f) {
    v.assign(bytes, 0);
    float* p = reinterpret_cast<float*>(v.data());
    for (int i = 0; i < static_cast<int>(bytes / 4); ++i) p[i] = f(i);
  };
  auto fillH = [&](std::vector<uint8_t>& v, const std::function<float(int)>& f) {
    v.assign(bytes, 0);
    uint16_t* p = reinterpret_cast<uint16_t*>(v.data());
    for (int i = 0; i < static_cast<int>(bytes / 2); ++i) p[i] = H(static_cast<_Float16>(f(i)));
  };
  auto F = [](std::vector<uint8_t>& v) { return reinterpret_cast<float*>(v.data()); };
  auto Hp = [](std::vector<uint8_t>& v) { return reinterpret_cast<uint16_t*>(v.data()); };
  char buf[256];

  // ---- float elementwise, bit exact
  struct FOp { int code; const char* name; std::function<float(float, float)> f; bool positive; };
  const FOp fops[] = {
      {0, "Add/float", [](float x, float y) { return x + y; }, false},
      {1, "Sub/float", [](float x, float y) { return x - y; }, false},
      {2, "Mul/float", [](float x, float y) { return x * y; }, false},
      {3, "Div/float", [](float x, float y) { return x / y; }, false},
      {4, "Max/float", [](float x, float y) { return x > y ? x : y; }, false},
      {5, "Min/float", [](float x, float y) { return x < y ? x : y; }, false},
      {6, "Adds/float", [](float x, float) { return x + 0.75f; }, false},
      {7, "Muls/float", [](float x, float) { return x * 1.5f; }, false},
      {8, "Maxs/float", [](float x, float) { return x > 0.1f ? x : 0.1f; }, false},
      {9, "Mins/float", [](float x, float) { return x < 0.1f ? x : 0.1f; }, false},
      {10, "Exp/float", [](float x, float) { return std::exp(x); }, false},
      {11, "Sqrt/float", [](float x, float) { return std::sqrt(x); }, true},
      {12, "Duplicate/float", [](float, float) { return 3.25f; }, false},
      {15, "Axpy/float", [](float x, float y) { return -1.0f + x * 0.5f; }, false},
  };
  for (const FOp& o : fops) {
    std::vector<uint8_t> a, b, out;
    fill(a, [&](int) { float v = U(rng); return o.positive ? std::fabs(v) : v; });
    fill(b, [&](int) { float v = U(rng); return std::fabs(v) < 0.01f ? 0.5f : v; });
    fill(out, [](int) { return -1.0f; });
    std::string err = run(o.code, a, b, out), bad;
    for (int i = 0; i < 8192 && err.empty() && bad.empty(); ++i) {
      const float want = i < n ? o.f(F(a)[i], F(b)[i]) : -1.0f;
      if (FB(F(out)[i]) != FB(want)) {
        std::snprintf(buf, sizeof buf, "element %d: got %.9g want %.9g", i, F(out)[i], want);
        bad = buf;
      }
    }
    report(o.name, err, bad);
  }
  // ---- reductions
  {
    std::vector<uint8_t> a, b, out;
    fill(a, [&](int) { return U(rng); });
    fill(b, [](int) { return 0.0f; });
    fill(out, [](int) { return -1.0f; });
    std::string err = run(13, a, b, out), bad;
    double sum = 0, mag = 0;
    for (int i = 0; i < n; ++i) { sum += F(a)[i]; mag += std::fabs(F(a)[i]); }
    if (err.empty() && std::fabs(F(out)[0] - sum) > 1e-6 * mag) bad = "sum off";
    if (err.empty() && F(out)[1] != -1.0f) bad = "ReduceSum wrote past dst[0]";
    report("ReduceSum/float", err, bad);
    fill(out, [](int) { return -1.0f; });
    err = run(14, a, b, out);
    bad.clear();
    float mx = F(a)[0];
    for (int i = 1; i < n; ++i) mx = std::max(mx, F(a)[i]);
    if (err.empty() && F(out)[0] != mx) bad = "max off";
    report("ReduceMax/float", err, bad);
  }
  // ---- half arithmetic: rounded to nearest even after every operation
  struct HOp { int code; const char* name; std::function<_Float16(_Float16, _Float16)> f; };
  const HOp hops[] = {
      {20, "Add/half", [](_Float16 x, _Float16 y) { return static_cast<_Float16>(static_cast<float>(x) + static_cast<float>(y)); }},
      {26, "Sub/half", [](_Float16 x, _Float16 y) { return static_cast<_Float16>(static_cast<float>(x) - static_cast<float>(y)); }},
      {21, "Mul/half", [](_Float16 x, _Float16 y) { return static_cast<_Float16>(static_cast<double>(x) * static_cast<double>(y)); }},
      {22, "Div/half", [](_Float16 x, _Float16 y) { return static_cast<_Float16>(static_cast<double>(x) / static_cast<double>(y)); }},
      {23, "Exp/half", [](_Float16 x, _Float16) { return static_cast<_Float16>(std::exp(static_cast<float>(x))); }},
      {24, "Muls/half", [](_Float16 x, _Float16) {
         return static_cast<_Float16>(static_cast<double>(x) * static_cast<double>(static_cast<_Float16>(0.3f))); }},
  };
  for (const HOp& o : hops) {
    std::vector<uint8_t> a, b, out;
    fillH(a, [&](int) { return U(rng) * 3.0f; });
    fillH(b, [&](int) { float v = U(rng); return std::fabs(v) < 0.01f ? 0.5f : v; });
    fillH(out, [](int) { return -1.0f; });
    std::string err = run(o.code, a, b, out), bad;
    for (int i = 0; i < 16384 && err.empty() && bad.empty(); ++i) {
      const uint16_t want = i < n ? H(o.f(Hf(Hp(a)[i]), Hf(Hp(b)[i]))) : H(static_cast<_Float16>(-1.0f));
      if (Hp(out)[i] != want) {
        std::snprintf(buf, sizeof buf, "element %d: got 0x%04x want 0x%04x", i, Hp(out)[i], want);
        bad = buf;
      }
    }
    report(o.name, err, bad);
  }
  {
    std::vector<uint8_t> a, b, out;
    fillH(a, [&](int) { return U(rng); });
    fillH(b, [](int) { return 0.0f; });
    fillH(out, [](int) { return -1.0f; });
    std::string err = run(25, a, b, out), bad;
    _Float16 mx = Hf(Hp(a)[0]);
    for (int i = 1; i < n; ++i) mx = std::max(mx, Hf(Hp(a)[i]));
    if (err.empty() && Hp(out)[0] != H(mx)) bad = "max off";
    report("ReduceMax/half", err, bad);
  }
  // ---- casts
  struct COp { int code; const char* name; std::function<float(int)> gen; int inKind; int outKind;
               std::function<uint32_t(uint32_t)> f; };  // kinds: 0 float, 1 half, 2 bf16, 3 int8, 4 int32
  auto ties = [&](int i) { return (i % 3 == 0) ? (i % 40 - 20) + 0.5f : U(rng) * 50.0f; };
  auto f2h = [&](int i) {  // values near half rounding boundaries, overflow and tiny ones
    if (i % 7 == 0) return BF(FB(1.0f + 1.0f / 2048.0f) + (i % 2));
    if (i % 11 == 0) return 70000.0f * (i % 2 ? 1.0f : -1.0f);
    if (i % 13 == 0) return 3e-8f;
    return U(rng) * 100.0f;
  };
  const COp cops[] = {
      {30, "Cast/float->half/RINT", f2h, 0, 1, [](uint32_t x) { return H(static_cast<_Float16>(BF(x))); }},
      {31, "Cast/half->float", [&](int) { return U(rng); }, 1, 0, [](uint32_t x) { return FB(static_cast<float>(Hf(x))); }},
      {32, "Cast/float->bf16/RINT", [&](int i) { return i % 5 == 0 ? BF(0x3f808000u + (i & 0x10000)) : U(rng); }, 0, 2,
       [](uint32_t x) { return Bf16Rne(BF(x)); }},
      {33, "Cast/bf16->float", [&](int) { return U(rng); }, 2, 0, [](uint32_t x) { return x << 16; }},
      {34, "Cast/float->float/RINT", ties, 0, 0, [](uint32_t x) { return FB(std::nearbyint(BF(x))); }},
      {35, "Cast/half->int8 (saturating)", [&](int i) { return i % 4 == 0 ? (i % 8 ? 300.0f : -300.0f) : ties(i); }, 1, 3,
       [](uint32_t x) { double v = std::nearbyint(static_cast<double>(Hf(x))); v = std::min(127.0, std::max(-128.0, v));
                        return static_cast<uint32_t>(static_cast<uint8_t>(static_cast<int8_t>(v))); }},
      {36, "Cast/int8->half", [&](int i) { return static_cast<float>(i % 256 - 128); }, 3, 1,
       [](uint32_t x) { return H(static_cast<_Float16>(static_cast<int8_t>(x))); }},
      {37, "Cast/float->int32/RINT (saturating)", [&](int i) { return i % 5 == 0 ? (i % 10 ? 3e9f : -3e9f) : ties(i); }, 0, 4,
       [](uint32_t x) { double v = std::nearbyint(static_cast<double>(BF(x)));
                        v = std::min(2147483647.0, std::max(-2147483648.0, v));
                        return static_cast<uint32_t>(static_cast<int32_t>(v)); }},
      {38, "Cast/float->half/FLOOR", f2h, 0, 1, [](uint32_t x) { return HalfDirected(BF(x), 0); }},
      {39, "Cast/float->half/CEIL", f2h, 0, 1, [](uint32_t x) { return HalfDirected(BF(x), 1); }},
      {40, "Cast/float->half/TRUNC", f2h, 0, 1, [](uint32_t x) { return HalfDirected(BF(x), 2); }},
      {41, "Cast/float->half/ROUND", [&](int i) { return i % 3 == 0 ? 1.0f + (2 * (i % 5) + 1) / 2048.0f : U(rng); }, 0, 1,
       [](uint32_t x) { return HalfDirected(BF(x), 3); }},
      {42, "Cast/float->float/FLOOR", ties, 0, 0, [](uint32_t x) { return FB(std::floor(BF(x))); }},
      {43, "Cast/float->float/ROUND", ties, 0, 0, [](uint32_t x) { return FB(std::round(BF(x))); }},
  };
  for (const COp& o : cops) {
    std::vector<uint8_t> a(bytes, 0), b(bytes, 0), out(bytes, 0xAB);
    for (int i = 0; i < n; ++i) {
      const float v = o.gen(i);
      switch (o.inKind) {
        case 0: F(a)[i] = v; break;
        case 1: Hp(a)[i] = H(static_cast<_Float16>(v)); break;
        case 2: Hp(a)[i] = Bf16Rne(v); break;
        default: a[i] = static_cast<uint8_t>(static_cast<int8_t>(v)); break;
      }
    }
    std::string err = run(o.code, a, b, out), bad;
    const int outBytes = (o.outKind == 0 || o.outKind == 4) ? 4 : (o.outKind == 3 ? 1 : 2);
    const int inBytes = o.inKind == 0 ? 4 : (o.inKind == 3 ? 1 : 2);
    for (int i = 0; i < n + 8 && err.empty() && bad.empty(); ++i) {
      uint32_t in = 0, got = 0;
      std::memcpy(&in, a.data() + i * inBytes, inBytes);
      std::memcpy(&got, out.data() + i * outBytes, outBytes);
      uint32_t want = 0;
      if (i < n) {
        want = o.f(in);
      } else {
        std::memset(&want, 0xAB, outBytes);
      }
      if (got != want) {
        std::snprintf(buf, sizeof buf, "element %d (input bits 0x%x): got 0x%x want 0x%x", i, in, got, want);
        bad = buf;
      }
    }
    report(o.name, err, bad);
  }
  // ---- data movement and repeat forms, against plain loops
  auto layout = [&](int code, const char* name, const std::function<void(float*, const float*, const float*)>& expect) {
    std::vector<uint8_t> a, b, out;
    fill(a, [](int i) { return static_cast<float>(i); });
    fill(b, [](int i) { return 1000.0f + i; });
    fill(out, [](int) { return -1.0f; });
    std::vector<float> want(F(out), F(out) + bytes / 4);
    expect(want.data(), F(a), F(b));
    std::string err = run(code, a, b, out), bad;
    for (size_t i = 0; i < want.size() && err.empty() && bad.empty(); ++i)
      if (FB(F(out)[i]) != FB(want[i])) {
        std::snprintf(buf, sizeof buf, "element %zu: got %g want %g", i, F(out)[i], want[i]);
        bad = buf;
      }
    report(name, err, bad);
  };
  layout(50, "DataCopy/DataCopyParams strides in datablocks", [](float* w, const float* a, const float*) {
    for (int blk = 0; blk < 4; ++blk)
      for (int j = 0; j < 16; ++j) w[blk * 24 + j] = a[blk * 24 + j];  // (2 + 1) datablocks = 24 floats apart
  });
  layout(51, "DataCopyPad GM->UB: bytes, GM gap in bytes, UB gap in datablocks, padding", [](float* w, const float* a, const float*) {
    for (int r = 0; r < 5; ++r) {
      for (int j = 0; j < 5; ++j) w[r * 16 + j] = a[r * 8 + j];  // GM: 5 + 3 floats apart; UB: 32 + 32 bytes apart
      for (int j = 5; j < 8; ++j) w[r * 16 + j] = 7.0f;          // padding to the datablock
    }
  });
  layout(52, "Add repeat form with strides", [](float* w, const float* a, const float* b) {
    for (int r = 0; r < 3; ++r)
      for (int i = 0; i < 40; ++i) w[r * 64 + i] = a[r * 128 + i] + b[r * 64 + i];
  });
  layout(53, "Muls repeat form with block stride", [](float* w, const float* a, const float*) {
    for (int r = 0; r < 2; ++r)
      for (int i = 0; i < 64; ++i) w[r * 128 + (i / 8) * 16 + i % 8] = a[r * 64 + i] * 2.0f;
  });
  layout(54, "Duplicate repeat form", [](float* w, const float*, const float*) {
    for (int r = 0; r < 3; ++r)
      for (int i = 0; i < 20; ++i) w[r * 32 + i] = 5.0f;
  });
  layout(55, "DataCopyPad UB->GM: UB gap in datablocks, GM gap in bytes", [](float* w, const float* a, const float*) {
    for (int r = 0; r < 3; ++r)
      for (int j = 0; j < 6; ++j) w[r * 8 + j] = a[r * 32 + j];
  });
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "checks") return Checks();
  if (mode == "ops") return Ops();
  if (mode == "cube-checks") return CubeChecks();
  if (mode == "cube-ops") return CubeOps();
  std::fprintf(stderr, "usage: standin_tests checks|ops|cube-checks|cube-ops\n");
  return 2;
}

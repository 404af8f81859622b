// CPU emulation harness for the CUDA row/vector kernels (see run.sh): references in double.
#define __shared__ static
#include "emu.h"
thread_local dim3e threadIdx, blockIdx;
dim3e blockDim, gridDim;
std::barrier<> *g_bar;
float *g_slot;
#include "backend/cuda/cu_common.cuh"
#include "backend/cuda/cuda_internal.h"
#include "cuvec.inc"
#include "kfused.inc"
#undef GS_LOOP
#include "kvec.inc"
#include <cstdio>
#include <cstdlib>
#include <functional>

static void launch(unsigned grid, unsigned block, std::function<void()> f) {
  blockDim.x = block; gridDim.x = grid;
  std::vector<float> slot(block);
  g_slot = slot.data();
  for (unsigned b = 0; b < grid; b++) {
    std::barrier<> bar(block);
    g_bar = &bar;
    std::vector<std::thread> th;
    for (unsigned t = 0; t < block; t++) th.emplace_back([&, t, b] { threadIdx.x = t; blockIdx.x = b; f(); });
    for (auto &x : th) x.join();
  }
}
static unsigned long long sd = 88172645463325252ull;
static float rnd() { sd ^= sd << 13; sd ^= sd >> 7; sd ^= sd << 17; return (float)((sd >> 11) * (1.0 / 9007199254740992.0)) * 2 - 1; }
static int fails = 0;
static void cmp(const char *n, const float *a, const double *r, long cnt, double tol) {
  double md = 0, mr = 0;
  for (long i = 0; i < cnt; i++) { md = fmax(md, fabs(a[i] - r[i])); mr = fmax(mr, fabs(r[i])); if (!std::isfinite(a[i])) md = 1e30; }
  bool ok = md / mr <= tol;
  if (!ok) fails++;
  printf("%s %s rel %.3g\n", ok ? "ok  " : "FAIL", n, md / mr);
}
static double rmsinv(const float *x, long D, double eps) { double s = 0; for (long i = 0; i < D; i++) s += (double)x[i] * x[i]; return 1 / sqrt(s / D + eps); }

// row kernels, F32 storage (exact up to fp32 rounding)
template <int NC>
static void test_row(long B, long S, long D, bool resid, bool withh, int gm, bool scale, bool bcast) {
  long n = B * S * D, D8 = D / 8;
  std::vector<float> x(n), r(n), h(n, NAN), g(B * D), sc(B * D), wr(D), wh(D);
  for (auto &v : x) v = rnd(); for (auto &v : r) v = 3 * rnd(); for (auto &v : g) v = rnd(); for (auto &v : sc) v = rnd();
  for (auto &v : wr) v = 1 + 0.2f * rnd(); for (auto &v : wh) v = 1 + 0.2f * rnd();
  long vbs = bcast ? 0 : D;
  std::vector<double> xr(n), hr(n);
  for (long row = 0; row < B * S; row++) {
    long b = row / S;
    const float *xs = &x[row * D];
    std::vector<float> xn(xs, xs + D);
    if (resid) {
      double ri = rmsinv(&r[row * D], D, 1e-6);
      for (long i = 0; i < D; i++) {
        double gv = gm == 0 ? 1 : gm == 1 ? g[b * vbs + i] : tanh(g[b * vbs + i]);
        xr[row * D + i] = xs[i] + gv * r[row * D + i] * ri * wr[i];
        xn[i] = (float)xr[row * D + i];
      }
    }
    double ri = rmsinv(xn.data(), D, 1e-6);
    for (long i = 0; i < D; i++) hr[row * D + i] = xn[i] * ri * wh[i] * (1 + (scale ? sc[b * vbs + i] : 0));
  }
  cu_rowargs a = {};
  a.wr = wr.data(); a.wrdt = 0; a.gate = gm ? g.data() : nullptr; a.gdt = 0; a.tanh_gate = gm == 2;
  a.wh = wh.data(); a.whdt = 0; a.scale = scale ? sc.data() : nullptr; a.sdt = 0; a.vbs = vbs; a.eps = 1e-6f;
  long threads = ((D8 + NC - 1) / NC + 31) / 32 * 32;
  float *hp = withh ? h.data() : nullptr;
  launch((unsigned)(B * S), (unsigned)threads, [&] { kf_row<float, NC>(hp, x.data(), resid ? r.data() : nullptr, S, D, a); });
  char name[200];
  snprintf(name, sizeof name, "row NC%d B%ld S%ld D%ld resid %d h %d gate %d scale %d bcast %d", NC, B, S, D, resid, withh, gm, scale, bcast);
  if (resid) cmp((std::string(name) + " x").c_str(), x.data(), xr.data(), n, 1e-6);
  if (withh || !resid) cmp((std::string(name) + " h").c_str(), h.data(), hr.data(), n, 1e-6);
}

// gated residual + LayerNorm + modulate rows (kf_ln_row), F32 storage
template <int NC>
static void test_ln_row(long B, long S, long D, bool resid, bool gate, bool withh, bool scale, bool shift, bool bcast) {
  long n = B * S * D, D8 = D / 8;
  std::vector<float> x(n), r(n), h(n, NAN), g(B * D), sc(B * D), sf(B * D);
  for (auto &v : x) v = rnd() + 0.3f; for (auto &v : r) v = 3 * rnd(); for (auto &v : g) v = rnd();
  for (auto &v : sc) v = rnd(); for (auto &v : sf) v = rnd();
  long vbs = bcast ? 0 : D;
  std::vector<double> xr(n), hr(n);
  for (long row = 0; row < B * S; row++) {
    long b = row / S;
    std::vector<float> xn(&x[row * D], &x[row * D] + D);
    if (resid)
      for (long i = 0; i < D; i++) {
        xr[row * D + i] = xn[i] + (gate ? g[b * vbs + i] : 1.0) * r[row * D + i];
        xn[i] = (float)xr[row * D + i];
      }
    double m = 0, v = 0;
    for (long i = 0; i < D; i++) m += xn[i];
    m /= D;
    for (long i = 0; i < D; i++) v += (xn[i] - m) * (xn[i] - m);
    double ri = 1 / sqrt(v / D + 1e-6);
    for (long i = 0; i < D; i++)
      hr[row * D + i] = (xn[i] - m) * ri * (1 + (scale ? sc[b * vbs + i] : 0)) + (shift ? sf[b * vbs + i] : 0);
  }
  cu_rowargs a = {};
  a.gate = gate ? g.data() : nullptr; a.scale = scale ? sc.data() : nullptr; a.shift = shift ? sf.data() : nullptr;
  a.vbs = vbs; a.eps = 1e-6f;
  long threads = ((D8 + NC - 1) / NC + 31) / 32 * 32;
  float *hp = withh ? h.data() : nullptr;
  launch((unsigned)(B * S), (unsigned)threads, [&] { kf_ln_row<float, NC>(hp, x.data(), resid ? r.data() : nullptr, S, D, a); });
  char name[200];
  snprintf(name, sizeof name, "ln_row NC%d B%ld S%ld D%ld resid %d gate %d h %d scale %d shift %d bcast %d", NC, B, S, D,
           resid, gate, withh, scale, shift, bcast);
  if (resid) cmp((std::string(name) + " x").c_str(), x.data(), xr.data(), n, 1e-6);
  if (withh) cmp((std::string(name) + " h").c_str(), h.data(), hr.data(), n, 2e-6);
}

template <int L>
static void test_team(long B, long S, long H, long D, bool rope, bool scale, bool shared) {
  long rows = B * S * H, n = rows * D;
  std::vector<float> x(n), h(n, NAN), w(D), sc(B * D), c(B * S * D / 2), s(B * S * D / 2);
  for (auto &v : x) v = rnd(); for (auto &v : w) v = 1 + 0.2f * rnd(); for (auto &v : sc) v = rnd();
  for (auto &v : c) v = rnd(); for (auto &v : s) v = rnd();
  long csb = shared ? 0 : S * D / 2;
  std::vector<double> ref(n);
  for (long row = 0; row < rows; row++) {
    double ri = rmsinv(&x[row * D], D, 1e-5);
    std::vector<double> nv(D);
    for (long i = 0; i < D; i++) nv[i] = x[row * D + i] * ri * w[i];
    if (!rope) {
      long b = row / S;  // H = 1
      for (long i = 0; i < D; i++) ref[row * D + i] = nv[i] * (1 + (scale ? sc[b * D + i] : 0));
      continue;
    }
    long t = (row / H) % S, b = row / (H * S);
    for (long i = 0; i < D / 2; i++) {
      double cc = c[b * csb + t * D / 2 + i], ss = s[b * csb + t * D / 2 + i];
      ref[row * D + 2 * i] = nv[2 * i] * cc - nv[2 * i + 1] * ss;
      ref[row * D + 2 * i + 1] = nv[2 * i + 1] * cc + nv[2 * i] * ss;
    }
  }
  cu_rowargs a = {};
  a.wh = w.data(); a.whdt = 0; a.scale = scale ? sc.data() : nullptr; a.sdt = 0; a.vbs = D; a.eps = 1e-5f;
  long blocks = (rows * L + 255) / 256;
  float *out = rope ? x.data() : h.data();
  const kf_strides st = rope ? kf_strides{S * H * D, H * D, D} : kf_strides{S * D, D, D};
  launch((unsigned)blocks, 256, [&] { kf_team<float, L>(out, x.data(), rows, S, rope ? H : 1, D, a, rope ? c.data() : nullptr, s.data(), csb, st); });
  char name[200];
  snprintf(name, sizeof name, "team L%d B%ld S%ld H%ld D%ld rope %d scale %d shared %d", L, B, S, H, D, rope, scale, shared);
  cmp(name, out, ref.data(), n, 1e-6);
}


static float silu_(float v) { return v / (1 + expf(-v)); }
static void test_vec() {
  long B = 2, S = 5, D = 48, n = B * S * D, n8 = n / 8;
  std::vector<float> a(n), b(n), y(n), v1(B * D), v2(B * D);
  for (auto &v : a) v = rnd(); for (auto &v : b) v = rnd(); for (auto &v : v1) v = rnd(); for (auto &v : v2) v = rnd();
  std::vector<double> ref(n);
  for (int op = 0; op < 5; op++) {
    for (long i = 0; i < n; i++)
      ref[i] = op == 0 ? a[i] + b[i] : op == 1 ? a[i] * b[i] : op == 2 ? silu_(a[i]) * b[i] : op == 3 ? a[i] * 0.3 : silu_(a[i]);
    std::fill(y.begin(), y.end(), NAN);
    launch(3, 32, [&] { k8_ew<float>(y.data(), a.data(), op <= 2 ? b.data() : nullptr, n8, op, 0.3f, 1); });
    char nm[64]; snprintf(nm, sizeof nm, "k8_ew op %d", op); cmp(nm, y.data(), ref.data(), n, 1e-6);
  }
  for (int sh = 0; sh < 2; sh++) {
    for (long i = 0; i < n; i++) { long d = i % D, bi = i / (S * D); ref[i] = a[i] * (1 + v1[bi * D + d]) + (sh ? v2[bi * D + d] : 0); }
    std::fill(y.begin(), y.end(), NAN);
    launch(2, 32, [&] { k8_mod<float>(y.data(), a.data(), nullptr, S, D, n8, v1.data(), sh ? v2.data() : nullptr, 0, D, 0, 0); });
    cmp(sh ? "k8_mod shift" : "k8_mod", y.data(), ref.data(), n, 1e-6);
  }
  for (int tg = 0; tg < 2; tg++) {
    std::vector<float> x = a;
    for (long i = 0; i < n; i++) { long d = i % D, bi = i / (S * D); double g = tg ? tanh(v1[bi * D + d]) : v1[bi * D + d]; ref[i] = a[i] + g * b[i]; }
    launch(2, 32, [&] { k8_mod<float>(x.data(), x.data(), b.data(), S, D, n8, v1.data(), nullptr, 0, D, 1, tg); });
    cmp(tg ? "k8 gated_add tanh" : "k8 gated_add", x.data(), ref.data(), n, 1e-6);
  }
  /* rope [B,S,H,Dh] */
  long H = 3, Dh = 32, nr = B * S * H * Dh;
  std::vector<float> x(nr), c(B * S * Dh / 2), sn(B * S * Dh / 2);
  for (auto &v : x) v = rnd(); for (auto &v : c) v = rnd(); for (auto &v : sn) v = rnd();
  std::vector<double> rr(nr);
  for (long row = 0; row < B * S * H; row++) {
    long t = (row / H) % S, bb = row / (H * S);
    for (long i = 0; i < Dh / 2; i++) {
      double cc = c[bb * S * Dh / 2 + t * Dh / 2 + i], ss = sn[bb * S * Dh / 2 + t * Dh / 2 + i];
      double x0 = x[row * Dh + 2 * i], x1 = x[row * Dh + 2 * i + 1];
      rr[row * Dh + 2 * i] = x0 * cc - x1 * ss; rr[row * Dh + 2 * i + 1] = x0 * ss + x1 * cc;
    }
  }
  launch(2, 32, [&] { k8_rope<float>(x.data(), S, H, Dh, c.data(), sn.data(), S * Dh / 2, nr / 8); });
  cmp("k8_rope", x.data(), rr.data(), nr, 1e-6);
}

/* bf16 storage: the row kernel and the team rope kernel against a double reference on the rounded inputs */
static void test_bf16() {
  long B = 2, S = 3, D = 3840, n = B * S * D;
  std::vector<float> xf(n), rf(n), g(B * D), sc(B * D), w(D);
  for (auto &v : xf) v = rnd(); for (auto &v : rf) v = 3 * rnd(); for (auto &v : g) v = rnd(); for (auto &v : sc) v = rnd();
  for (auto &v : w) v = 1 + 0.2f * rnd();
  std::vector<__nv_bfloat16> x(n), r(n), h(n), gb(B * D), sb(B * D), wb(D);
  for (long i = 0; i < n; i++) { x[i] = __float2bfloat16_rn(xf[i]); xf[i] = __bfloat162float(x[i]); r[i] = __float2bfloat16_rn(rf[i]); rf[i] = __bfloat162float(r[i]); }
  for (long i = 0; i < B * D; i++) { gb[i] = __float2bfloat16_rn(g[i]); g[i] = __bfloat162float(gb[i]); sb[i] = __float2bfloat16_rn(sc[i]); sc[i] = __bfloat162float(sb[i]); }
  for (long i = 0; i < D; i++) { wb[i] = __float2bfloat16_rn(w[i]); w[i] = __bfloat162float(wb[i]); }
  std::vector<double> xr(n), hr(n);
  for (long row = 0; row < B * S; row++) {
    long b = row / S;
    double ri = rmsinv(&rf[row * D], D, 1e-6);
    std::vector<float> xn(D);
    for (long i = 0; i < D; i++) { xr[row * D + i] = xf[row * D + i] + tanh(g[b * D + i]) * rf[row * D + i] * ri * w[i]; xn[i] = (float)xr[row * D + i]; }
    double r2 = rmsinv(xn.data(), D, 1e-6);
    for (long i = 0; i < D; i++) hr[row * D + i] = xn[i] * r2 * w[i] * (1 + sc[b * D + i]);
  }
  cu_rowargs a = {};
  a.wr = wb.data(); a.wrdt = 1; a.gate = gb.data(); a.gdt = 1; a.tanh_gate = 1; a.wh = wb.data(); a.whdt = 1;
  a.scale = sb.data(); a.sdt = 1; a.vbs = D; a.eps = 1e-6f;
  launch((unsigned)(B * S), 256, [&] { kf_row<__nv_bfloat16, 2>(h.data(), x.data(), r.data(), S, D, a); });
  std::vector<float> xo(n), ho(n);
  for (long i = 0; i < n; i++) xo[i] = __bfloat162float(x[i]), ho[i] = __bfloat162float(h[i]);
  cmp("bf16 row resid x", xo.data(), xr.data(), n, 1e-2);
  cmp("bf16 row resid h", ho.data(), hr.data(), n, 1e-2);
}

/* RMSNorm + RoPE in place on a strided view: heads of row (b, s) at (b * S + s) * ld + h * D,
 * ld = H * D + pad (a column slice of a wider buffer); the pad columns must stay as they are. */
template <int L>
static void test_team_strided(long B, long S, long H, long D, long pad) {
  const long ld = H * D + pad, rows = B * S * H, n = B * S * ld;
  std::vector<float> x(n), x0, w(D), c(S * D / 2), s(S * D / 2);
  for (auto &v : x) v = rnd(); for (auto &v : w) v = 1 + 0.2f * rnd();
  for (auto &v : c) v = rnd(); for (auto &v : s) v = rnd();
  x0 = x;
  std::vector<double> ref(x.begin(), x.end());
  for (long row = 0; row < rows; row++) {
    long hh = row % H, t = (row / H) % S, b = row / (H * S), o = (b * S + t) * ld + hh * D;
    double ri = rmsinv(&x0[o], D, 1e-5);
    for (long i = 0; i < D / 2; i++) {
      double n0 = x0[o + 2 * i] * ri * w[2 * i], n1 = x0[o + 2 * i + 1] * ri * w[2 * i + 1];
      double cc = c[t * D / 2 + i], ss = s[t * D / 2 + i];
      ref[o + 2 * i] = n0 * cc - n1 * ss;
      ref[o + 2 * i + 1] = n1 * cc + n0 * ss;
    }
  }
  cu_rowargs a = {};
  a.wh = w.data(); a.whdt = 0; a.eps = 1e-5f;
  long blocks = (rows * L + 255) / 256;
  const kf_strides st = {S * ld, ld, D};
  launch((unsigned)blocks, 256, [&] { kf_team<float, L>(x.data(), x.data(), rows, S, H, D, a, c.data(), s.data(), 0, st); });
  char name[200];
  snprintf(name, sizeof name, "team strided L%d B%ld S%ld H%ld D%ld ld%ld", L, B, S, H, D, ld);
  cmp(name, x.data(), ref.data(), n, 1e-6);
}

/* k_ew_rows: swiglu over rows of column slices (row strides 40, 24 and 16 for 16 columns). */
static void test_ew_rows() {
  const long R = 7, Cn = 16, la = 40, lb = 24, ly = 16;
  std::vector<float> a(R * la), b(R * lb), y(R * ly, NAN);
  for (auto &v : a) v = rnd(); for (auto &v : b) v = rnd();
  std::vector<double> ref(R * ly);
  for (long r = 0; r < R; r++)
    for (long i = 0; i < Cn; i++) ref[r * ly + i] = silu_(a[r * la + 8 + i]) * b[r * lb + i];
  for (int v8 = 0; v8 < 2; v8++) {
    std::fill(y.begin(), y.end(), NAN);
    if (v8) launch(2, 32, [&] { k_ew_rows<float, 8>(y.data(), ly, a.data() + 8, la, b.data(), lb, R, Cn, 2); });
    else launch(2, 32, [&] { k_ew_rows<float, 1>(y.data(), ly, a.data() + 8, la, b.data(), lb, R, Cn, 2); });
    cmp(v8 ? "k_ew_rows swiglu v8" : "k_ew_rows swiglu scalar", y.data(), ref.data(), R * ly, 1e-6);
  }
}

int main() {
  test_vec();
  test_bf16();
  test_row<2>(2, 3, 3840, true, true, 2, true, false);
  test_row<2>(2, 3, 3840, true, false, 1, false, false);
  test_row<2>(1, 2, 3840, false, true, 0, true, false);
  test_row<1>(2, 3, 1000, true, true, 0, true, true);
  test_row<1>(2, 2, 40, true, true, 2, true, false);
  test_row<4>(1, 2, 6000, true, true, 2, true, false);
  test_row<8>(1, 2, 20000, true, true, 1, true, false);
  test_row<8>(1, 2, 20000, false, true, 1, false, false);
  test_team<16>(2, 5, 3, 128, true, false, false);
  test_team<16>(1, 7, 3, 128, true, false, true);
  test_team<4>(2, 3, 2, 24, true, false, false);
  test_team<32>(1, 3, 2, 256, true, false, false);
  test_team<8>(2, 9, 1, 40, false, true, false);
  test_team<16>(3, 7, 1, 128, false, false, false);
  test_team<1>(2, 3, 1, 8, false, true, false);
  test_team_strided<16>(2, 5, 3, 128, 24); /* q of a fused QKV + MLP projection */
  test_team_strided<8>(1, 4, 2, 64, 8);
  test_ew_rows();
  test_ln_row<2>(2, 3, 3072, true, true, true, true, true, false);
  test_ln_row<2>(1, 2, 3072, true, false, true, true, false, false);
  test_ln_row<2>(2, 2, 3072, true, true, false, false, false, false);
  test_ln_row<1>(2, 3, 1000, false, false, true, true, true, true);
  test_ln_row<1>(1, 2, 64, false, false, true, false, false, false);
  test_ln_row<4>(1, 2, 6000, true, true, true, true, true, false);
  test_ln_row<8>(1, 1, 20000, true, true, true, true, true, true);
  printf("%d failures\n", fails);
  return fails != 0;
}

/* The GEMM core of the CPU backend and the linear op built on it. Design: W (the
 * [N,K] weight, in its stored dtype) is packed per (NC x KC) block into fp32 panels of
 * NR columns, so the upcast happens per tile in a thread-private buffer and never for the
 * whole model; a register-blocked micro-kernel then multiplies MR rows of x by a panel.
 * Work items are (M block, N block) pairs shared over the threads. The portable C
 * kernel always exists; an AVX-512 kernel (cpu_gemm_avx512.c) is chosen at run time.
 * Block-quantized W (GGUF's Q8_0, Q4_K ...) and fp8 W are dequantized (blocks exactly as ggml does)
 * while it is packed: the AVX512-BF16 pack does it 16 rows at a time into L1; the other
 * paths dequantize the (NC x KC) block into a thread-private fp32 staging buffer first.
 * The weights stay quantized in memory and no full-precision copy is made. A per-tensor
 * weight scale (scaled fp8) multiplies the fp32 sums in the epilogue, before the bias. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_gemm.h"
#include "backend/cpu/cpu_internal.h"
#include "core/quant.h"

/* Packs rows n0 .. n0+nc of w, columns k0 .. k0+kc, into panels of nr: panel p holds
 * wp[p*kc*nr + k*nr + j] = w[n0 + p*nr + j][k0 + k] (zero beyond nc). */
void cpu_pack_w_c(float *wp, const void *w, dit_dtype wt, int64_t ldw, int64_t n0, int64_t nc, int64_t k0,
                  int64_t kc, int nr) {
  int64_t np = (nc + nr - 1) / nr;
  for (int64_t p = 0; p < np; p++) {
    float *dst = wp + p * kc * nr;
    for (int j = 0; j < nr; j++) {
      int64_t n = p * nr + j;
      if (n >= nc) {
        for (int64_t k = 0; k < kc; k++) dst[k * nr + j] = 0.0f;
        continue;
      }
      int64_t off = (n0 + n) * ldw + k0;
      if (wt == DIT_BF16) {
        const uint16_t *s = (const uint16_t *)w + off;
        for (int64_t k = 0; k < kc; k++) dst[k * nr + j] = dit_bf16_to_f32(s[k]);
      } else if (wt == DIT_F16) {
        const uint16_t *s = (const uint16_t *)w + off;
        for (int64_t k = 0; k < kc; k++) dst[k * nr + j] = dit_f16_to_f32(s[k]);
      } else {
        const float *s = (const float *)w + off;
        for (int64_t k = 0; k < kc; k++) dst[k * nr + j] = s[k];
      }
    }
  }
}

/* Portable kernel: GCC/Clang generic vectors of 4 floats (SSE on x86-64, NEON on arm64,
 * scalar code elsewhere), 4 rows x 8 columns = 8 accumulators, which fit the 16
 * registers of SSE2 (a float c[4][16] array was kept on the stack by GCC -O2). */
#define C_MR 4
#define C_NR 8

typedef float cpu_v4 __attribute__((vector_size(16)));

static inline cpu_v4 v4_ld(const float *p) {
  cpu_v4 v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* y[0..mr, 0..nr] (+)= x[0..mr, 0..kc] * panel (kc x C_NR). */
static void kern_c(int mr, int nr, int64_t kc, const float *x, int64_t ldx, const float *wp, float *y,
                   int64_t ldy, bool acc) {
  /* rows beyond mr repeat row 0: computed, never stored, never read out of bounds */
  const float *x0 = x, *x1 = x + (mr > 1 ? ldx : 0), *x2 = x + (mr > 2 ? 2 * ldx : 0),
              *x3 = x + (mr > 3 ? 3 * ldx : 0);
  cpu_v4 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
  for (int64_t k = 0; k < kc; k++) {
    cpu_v4 b0 = v4_ld(wp + k * C_NR), b1 = v4_ld(wp + k * C_NR + 4);
    float a0 = x0[k], a1 = x1[k], a2 = x2[k], a3 = x3[k];
    c00 += b0 * a0, c01 += b1 * a0;
    c10 += b0 * a1, c11 += b1 * a1;
    c20 += b0 * a2, c21 += b1 * a2;
    c30 += b0 * a3, c31 += b1 * a3;
  }
  float c[C_MR][C_NR];
  memcpy(&c[0][0], &c00, 16), memcpy(&c[0][4], &c01, 16), memcpy(&c[1][0], &c10, 16), memcpy(&c[1][4], &c11, 16);
  memcpy(&c[2][0], &c20, 16), memcpy(&c[2][4], &c21, 16), memcpy(&c[3][0], &c30, 16), memcpy(&c[3][4], &c31, 16);
  for (int i = 0; i < mr; i++) {
    float *yr = y + i * ldy;
    if (acc)
      for (int j = 0; j < nr; j++) yr[j] += c[i][j];
    else
      for (int j = 0; j < nr; j++) yr[j] = c[i][j];
  }
}

void cpu_pack_kn(float *wp, const float *src, int64_t ld, int64_t n0, int64_t nc, int64_t kc, int nr) {
  int64_t np = (nc + nr - 1) / nr;
  for (int64_t p = 0; p < np; p++) {
    float *dst = wp + p * kc * nr;
    int64_t nv = nc - p * nr < nr ? nc - p * nr : nr;
    for (int64_t k = 0; k < kc; k++) {
      const float *s = src + k * ld + n0 + p * nr;
      float *d = dst + k * nr;
      for (int64_t j = 0; j < nv; j++) d[j] = s[j];
      for (int64_t j = nv; j < nr; j++) d[j] = 0.0f;
    }
  }
}

float cpu_row_max_c(const float *s, int64_t n) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; i++) m = s[i] > m ? s[i] : m;
  return m;
}

float cpu_exp_sum_c(float *s, int64_t n, float m) {
  float sum = 0;
  for (int64_t i = 0; i < n; i++) {
    s[i] = expf(s[i] - m);
    sum += s[i];
  }
  return sum;
}

static const cpu_gemm_path path_c = {C_MR, C_NR, cpu_pack_w_c, kern_c, cpu_row_max_c, cpu_exp_sum_c};

const cpu_gemm_path *cpu_gemm_path_for(const dit_backend *be) {
  const cpu_impl *im = (const cpu_impl *)be->impl;
#if defined(DIT_CPU_X86)
  if (cpu_simd(be)) return &cpu_gemm_path_avx512;
  if (im->have_avx2 && im->use_simd) return &cpu_gemm_path_avx2;
#endif
#if defined(DIT_CPU_ARM64)
  if (im->have_neon && im->use_simd) return &cpu_gemm_path_neon;
#endif
  (void)im; /* a build with neither */
  return &path_c;
}

/* Blocking: a KC x NC block of W, packed to fp32 per thread (384 KiB, stays in L2), is
 * multiplied by MC rows of x; MC is as large as the thread count allows so each W block
 * is converted and packed as few times as possible. The bf16 path packs KC_BF = 512 k
 * (same bytes). Up to STREAM_MAX_M(_BF) rows, W is read in place without packing. */
#define GEMM_KC 256
#define GEMM_KC_BF 512
#define GEMM_NC 384
#define STREAM_MAX_M 64     /* measured: at M=100 the packed fp32 path is ~10% faster */
#define STREAM_MAX_M_BF 128 /* measured: at M=100 the bf16 stream is 0-35% faster than packing */

static void epilogue(float *y, int64_t ldy, int64_t mc, int64_t n0, int64_t nc, float ws, const void *b,
                     dit_dtype bt, dit_act act) {
  if (!b && act == DIT_ACT_NONE) { /* a scale alone: one tight loop (the general one is per element) */
    for (int64_t i = 0; ws != 1.0f && i < mc; i++)
      for (float *yr = y + i * ldy, *e = yr + nc; yr < e; yr++) *yr *= ws;
    return;
  }
  for (int64_t i = 0; i < mc; i++) {
    float *yr = y + i * ldy;
    for (int64_t j = 0; j < nc; j++) {
      float v = yr[j] * ws + (b ? cpu_ld(b, bt, n0 + j) : 0.0f);
      yr[j] = cpu_act(v, act);
    }
  }
}

static inline float round_bf16(float v) { return dit_bf16_to_f32(dit_f32_to_bf16(v)); }

/* One GEMM call's operands and its work split into (M block, N block) items. */
typedef struct gemm_job {
  int64_t M, N, K, ldx, ldw, ldy;
  const float *x;
  const void *w, *b;
  dit_dtype wt, bt;
  float ws; /* W's per-tensor scale, applied in the epilogue */
  dit_act act;
  float *y;
  int64_t MC, NC, nmb, nnb;
  bool round_w;       /* portable bf16 precision: round the packed W to bf16 values */
  size_t stage_off;   /* block-quantized W: byte offset of the fp32 staging area in a thread's buffer */
  void (*deq)(dit_dtype, const void *, float *, int64_t); /* and its row dequantizer */
  const uint16_t *xb; /* the bf16 packed GEMM: x rounded to bf16 rows, ldxb apart */
  int64_t ldxb;
} gemm_job;

/* Bytes of the fp32 staging area for a KC-deep block of a quantized W (0 otherwise). */
static size_t stage_bytes(const gemm_job *J, int64_t kc) {
  return dit_dtype_is_quant(J->wt) ? (size_t)kc * GEMM_NC * sizeof(float) : 0;
}

/* The W block rows n0 .. n0+nc, columns k0 .. k0+kc as the pack functions read it: W itself,
 * or for a quantized W its dequantization into the staging area st (rows kc apart; for the
 * block types k0 and kc are whole blocks because K and the KC sizes are). */
typedef struct wsrc {
  const void *w;
  dit_dtype wt;
  int64_t ldw, n0, k0;
} wsrc;

static wsrc w_block(const gemm_job *J, float *st, int64_t n0, int64_t nc, int64_t k0, int64_t kc) {
  if (!dit_dtype_is_quant(J->wt)) return (wsrc){J->w, J->wt, J->ldw, n0, k0};
  uint64_t row = 0, skip = 0;
  dit_dtype_row_bytes(J->wt, (uint64_t)J->K, &row); /* checked by cpu_linear */
  dit_dtype_row_bytes(J->wt, (uint64_t)k0, &skip);
  for (int64_t n = 0; n < nc; n++)
    J->deq(J->wt, (const char *)J->w + (uint64_t)(n0 + n) * row + skip, st + n * kc, kc);
  return (wsrc){st, DIT_F32, kc, 0, 0};
}

/* Computes one work item of J, y rows m0 .. m0+mc and columns n0 .. n0+nc, with a kernel
 * path and the thread's packing buffer wp. */
typedef void (*gemm_item_fn)(const void *path, void *wp, const gemm_job *J, int64_t m0, int64_t mc, int64_t n0,
                             int64_t nc);

static void gemm_item(const void *path, void *wpv, const gemm_job *J, int64_t m0, int64_t mc, int64_t n0,
                      int64_t nc) {
  const cpu_gemm_path *P = path;
  float *wp = wpv;
  const float *x = J->x;
  int64_t K = J->K, ldx = J->ldx, ldy = J->ldy;
  float *y = J->y;
  if (K == 0) {
    for (int64_t i = 0; i < mc; i++) memset(y + (m0 + i) * ldy + n0, 0, (size_t)nc * sizeof(float));
    return;
  }
  for (int64_t k0 = 0; k0 < K; k0 += GEMM_KC) {
    int64_t kc = K - k0 < GEMM_KC ? K - k0 : GEMM_KC;
    wsrc ws = w_block(J, (float *)((char *)wpv + J->stage_off), n0, nc, k0, kc);
    P->pack(wp, ws.w, ws.wt, ws.ldw, ws.n0, nc, ws.k0, kc, P->nr);
    if (J->round_w)
      for (int64_t e = 0, ne = (nc + P->nr - 1) / P->nr * P->nr * kc; e < ne; e++) wp[e] = round_bf16(wp[e]);
    for (int64_t i = 0; i < mc; i += P->mr) {
      int mr = (int)(mc - i < P->mr ? mc - i : P->mr);
      const float *xr = x + (m0 + i) * ldx + k0;
      /* x rows are read once per block from memory: fetch the next MR rows into L2 while
       * this sliver is multiplied with every panel (hardware prefetch starts too late) */
      for (int64_t r = i + P->mr; r < i + 2 * P->mr && r < mc; r++)
        for (int64_t k = 0; k < kc; k += 16) __builtin_prefetch(x + (m0 + r) * ldx + k0 + k, 0, 2);
      for (int64_t j = 0; j < nc; j += P->nr) {
        int nr = (int)(nc - j < P->nr ? nc - j : P->nr);
        P->kern(mr, nr, kc, xr, ldx, wp + (j / P->nr) * kc * P->nr, y + (m0 + i) * ldy + n0 + j, ldy, k0 > 0);
      }
    }
  }
}

/* Splits J into about 8 items per thread (dynamic balance): N blocks are narrowed first
 * (costs nothing), then M is split (each M block converts and packs W again). Returns the
 * thread count to use. */
static int gemm_plan(gemm_job *J, int mr, int nr, int nt, int64_t min_m) {
  int64_t M = J->M, N = J->N;
  int64_t target = 8 * nt, NC = GEMM_NC;
  if ((N + NC - 1) / NC < target) {
    NC = (N + target - 1) / target;
    NC = (NC + nr - 1) / nr * nr;
    if (NC < 2 * nr) NC = 2 * nr;
    if (NC > GEMM_NC) NC = GEMM_NC;
  }
  int64_t nnb = (N + NC - 1) / NC;
  /* M blocks of at least min_m rows keep the repacking cost small, unless that leaves a
   * thread idle */
  int64_t nmb = (target + nnb - 1) / nnb;
  if (nmb > (M + min_m - 1) / min_m) nmb = (M + min_m - 1) / min_m;
  if (nmb * nnb < nt) nmb = (nt + nnb - 1) / nnb;
  if (nmb > (M + mr - 1) / mr) nmb = (M + mr - 1) / mr;
  if (nmb < 1) nmb = 1;
  int64_t MC = (M + nmb - 1) / nmb;
  MC = (MC + mr - 1) / mr * mr;
  nmb = (M + MC - 1) / MC;
  J->MC = MC, J->NC = NC, J->nmb = nmb, J->nnb = nnb;
  return nmb * nnb < nt ? (int)(nmb * nnb) : nt;
}

/* Runs J's items over nt threads (dynamic balance), each thread packing into its own
 * per-byte piece of buf, the bias and activation applied per item. Items are in N-major
 * order: consecutive items share the same W block in L3. */
static void run_items(gemm_item_fn item, const void *path, int nt, const gemm_job *J, char *buf, size_t per) {
  int64_t items = J->nmb * J->nnb;
#pragma omp parallel num_threads(nt)
  {
    void *wp = buf + per * (size_t)omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; it++) {
      int64_t nb = it / J->nmb, mb = it % J->nmb;
      int64_t m0 = mb * J->MC, n0 = nb * J->NC;
      int64_t mc = J->M - m0 < J->MC ? J->M - m0 : J->MC;
      int64_t nc = J->N - n0 < J->NC ? J->N - n0 : J->NC;
      item(path, wp, J, m0, mc, n0, nc);
      epilogue(J->y + m0 * J->ldy + n0, J->ldy, mc, n0, nc, J->ws, J->b, J->bt, J->act);
    }
  }
}

/* The per-thread bytes of an fp32 GEMM's packing panels and staged x block (sets J's offset
 * of the stage within them). */
static size_t f32_panel_bytes(gemm_job *J) {
  size_t per = (size_t)GEMM_KC * (size_t)(GEMM_NC + 64) * sizeof(float);
  J->stage_off = per;
  return per + stage_bytes(J, GEMM_KC);
}

/* fp32 packed GEMM (and, with round_w and an x already rounded, the portable bf16 one). */
static dit_status gemm_f32(const dit_backend *be, const cpu_gemm_path *P, int nt, gemm_job *J, dit_error *err) {
  nt = gemm_plan(J, P->mr, P->nr, nt, 192);
  const size_t per = f32_panel_bytes(J);
  void *buf;
  DIT_TRY(cpu_scratch_take(be, 1, (size_t[]){per * (size_t)nt}, &buf, "gemm", err));
  run_items(gemm_item, P, nt, J, buf, per);
  return DIT_OK;
}

/* Portable bf16 precision: x rounded to bf16 values (an fp32 copy), W rounded per packed
 * block, then the fp32 kernel: the same products as vdpbf16ps, fp32 sums. */
static dit_status gemm_bf16_portable(const dit_backend *be, const cpu_gemm_path *P, int nt, gemm_job *J,
                                     dit_error *err) {
  gemm_job R = *J;
  R.ldx = J->K, R.round_w = true;
  nt = gemm_plan(&R, P->mr, P->nr, nt, 192);
  const size_t per = f32_panel_bytes(&R);
  void *part[2];
  DIT_TRY(cpu_scratch_take(be, 2, (size_t[]){sizeof(float) * (size_t)(J->M * J->K + 1), per * (size_t)nt}, part,
                           "gemm", err));
  float *xr = part[0];
  for (int64_t i = 0; i < J->M; i++)
    for (int64_t k = 0; k < J->K; k++) xr[i * J->K + k] = round_bf16(J->x[i * J->ldx + k]);
  R.x = xr;
  run_items(gemm_item, P, nt, &R, part[1], per);
  return DIT_OK;
}

#if defined(DIT_CPU_X86)
/* The row length of x rounded to bf16: K rounded up to even (zero-padded). */
static int64_t round_x_kp(const gemm_job *J) { return (J->K + 1) & ~(int64_t)1; }

/* x rounded to bf16 rows of round_x_kp(J) into xb, over the threads. */
static void round_x(const cpu_gemm_bf16_path *B, int nt, const gemm_job *J, uint16_t *xb) {
  const int64_t Kp = round_x_kp(J);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t i = 0; i < J->M; i += 16) {
    int64_t r = J->M - i < 16 ? J->M - i : 16;
    B->round_rows(xb + i * Kp, Kp, J->x + i * J->ldx, J->ldx, r, J->K);
  }
}

static void gemm_item_bf16(const void *path, void *wpv, const gemm_job *J, int64_t m0, int64_t mc, int64_t n0,
                           int64_t nc) {
  const cpu_gemm_bf16_path *B = path;
  uint16_t *wp = wpv;
  const uint16_t *xb = J->xb;
  int64_t ldxb = J->ldxb;
  for (int64_t k0 = 0; k0 < J->K; k0 += GEMM_KC_BF) {
    int64_t kc = J->K - k0 < GEMM_KC_BF ? J->K - k0 : GEMM_KC_BF, kp = (kc + 1) / 2;
    B->pack(wp, J->w, J->wt, J->ldw, n0, nc, k0, kc); /* block-quantized W included */
    for (int64_t i = 0; i < mc; i += B->mr) {
      int mr = (int)(mc - i < B->mr ? mc - i : B->mr);
      const uint16_t *xr = xb + (m0 + i) * ldxb + k0;
      for (int64_t j = 0; j < nc; j += B->nr) {
        int nr = (int)(nc - j < B->nr ? nc - j : B->nr);
        B->kern(mr, nr, kp, xr, ldxb, wp + (j / B->nr) * kp * 2 * B->nr, J->y + (m0 + i) * J->ldy + n0 + j, J->ldy,
                k0 > 0);
      }
    }
  }
}

/* bf16 packed GEMM with vdpbf16ps. */
static dit_status gemm_bf16(const dit_backend *be, const cpu_gemm_bf16_path *B, int nt, gemm_job *J,
                            dit_error *err) {
  /* 384: packing is relatively twice as costly next to vdpbf16ps (measured at M=384,
   * K=3840, N=3840: 425-408 GFLOP/s per CPU-second with 192, 452-533 with 384) */
  nt = gemm_plan(J, B->mr, B->nr, nt, 384);
  J->ldxb = round_x_kp(J);
  const size_t per = (size_t)GEMM_KC_BF * (size_t)(GEMM_NC + 64) * 2;
  void *part[2];
  DIT_TRY(cpu_scratch_take(be, 2, (size_t[]){(size_t)(J->M * J->ldxb) * 2, per * (size_t)nt}, part, "gemm", err));
  round_x(B, nt, J, part[0]);
  J->xb = part[0];
  run_items(gemm_item_bf16, B, nt, J, part[1], per);
  return DIT_OK;
}

/* Small M: every thread takes blocks of 16 W rows (output columns) and streams them in
 * place against all of x (fp32, or rounded to bf16), k blocked so x's block stays in L2. */
static dit_status gemm_stream(const dit_backend *be, const cpu_gemm_bf16_path *B, int nt, bool bf, gemm_job *J,
                              dit_error *err) {
  const void *xs = J->x;
  int64_t ldxs = J->ldx;
  if (bf) {
    ldxs = round_x_kp(J);
    void *xb;
    DIT_TRY(cpu_scratch_take(be, 1, (size_t[]){(size_t)(J->M * ldxs) * 2}, &xb, "gemm", err));
    round_x(B, nt, J, xb);
    xs = xb;
  }
  size_t xsz = bf ? 2 : 4, wsz = dit_dtype_size(J->wt);
  int64_t M = J->M, K = J->K, N = J->N, NB = 16;
  int64_t kc = 262144 / (M * (int64_t)xsz) / 32 * 32;
  if (kc < 256) kc = 256;
  if (kc > K) kc = K;
  int64_t items = (N + NB - 1) / NB;
  if (items < nt) nt = (int)items;
  void (*st)(int, int, int64_t, const void *, int64_t, const void *, dit_dtype, int64_t, float *, int64_t, bool) =
      bf ? B->stream_bf16 : B->stream_f32;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
  for (int64_t it = 0; it < items; it++) {
    int64_t n0 = it * NB, nc = N - n0 < NB ? N - n0 : NB;
    if (K == 0)
      for (int64_t i = 0; i < M; i++) memset(J->y + i * J->ldy + n0, 0, (size_t)nc * sizeof(float));
    for (int64_t k0 = 0; k0 < K; k0 += kc) {
      int64_t kk = K - k0 < kc ? K - k0 : kc;
      for (int64_t i = 0; i < M; i += B->st_mr) {
        int mr = (int)(M - i < B->st_mr ? M - i : B->st_mr);
        const char *xr = (const char *)xs + (size_t)(i * ldxs + k0) * xsz;
        for (int64_t j = 0; j < nc; j += B->st_nr) {
          int nr = (int)(nc - j < B->st_nr ? nc - j : B->st_nr);
          const char *wr = (const char *)J->w + (size_t)((n0 + j) * J->ldw + k0) * wsz;
          st(mr, nr, kk, xr, ldxs, wr, J->wt, J->ldw, J->y + i * J->ldy + n0 + j, J->ldy, k0 > 0);
        }
      }
    }
    epilogue(J->y + n0, J->ldy, M, n0, nc, J->ws, J->b, J->bt, J->act);
  }
  return DIT_OK;
}
#endif

dit_status cpu_gemm(const dit_backend *be, int64_t M, int64_t N, int64_t K, const float *x, int64_t ldx,
                    const void *w, dit_dtype wt, float ws, int64_t ldw, const void *b, dit_dtype bt, dit_act act,
                    float *y, int64_t ldy, dit_error *err) {
  if (M <= 0 || N <= 0) return DIT_OK;
  gemm_job J = {M, N, K, ldx, ldw, ldy, x, w, b, wt, bt, ws, act, y, 0, 0, 0, 0, false, 0, dit_dequant_row, NULL, 0};
  int nt = be->n_threads < 1 ? 1 : be->n_threads;
  bool bf = cpu_precision(be) == DIT_CPU_PRECISION_BF16;
#if defined(DIT_CPU_X86)
  if (cpu_simd_bf16(be)) {
    J.deq = cpu_dequant_row_avx512;
    /* the stream kernels read W in place: F32/BF16/F16 only */
    if (M <= (bf ? STREAM_MAX_M_BF : STREAM_MAX_M) && !dit_dtype_is_quant(wt))
      return gemm_stream(be, &cpu_gemm_bf16_avx512, nt, bf, &J, err);
    if (bf) return gemm_bf16(be, &cpu_gemm_bf16_avx512, nt, &J, err);
  }
#endif
  if (bf) return gemm_bf16_portable(be, cpu_gemm_path_for(be), nt, &J, err);
  return gemm_f32(be, cpu_gemm_path_for(be), nt, &J, err);
}

/* w's low-rank term fits w: a [R, K] and b [N, R], F32, on the host. */
static dit_status check_lowrank(const dit_tensor *w, dit_error *err) {
  const dit_lowrank *L = w->lowrank;
  const int64_t N = w->shape[0], K = w->shape[1];
  if (L->a.ndim != 2 || L->b.ndim != 2 || L->a.dtype != DIT_F32 || L->b.dtype != DIT_F32 || !L->a.data ||
      !L->b.data || L->a.shape[1] != K || L->b.shape[0] != N || L->b.shape[1] != L->a.shape[0] || L->a.shape[0] < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "linear: the low-rank term of a [%lld, %lld] weight is not F32 a [R, "
                      "%lld] and b [%lld, R]", (long long)N, (long long)K, (long long)K, (long long)N);
  return DIT_OK;
}

/* y[M, N] += (x a^T) b^T: the low-rank term through two small GEMMs (R columns between), in
 * blocks of LOWRANK_ROWS rows so the buffers stay small whatever M is (no M x N copy). */
#define LOWRANK_ROWS 64
static dit_status add_lowrank(const dit_backend *be, const dit_lowrank *L, int64_t M, const float *x, int64_t ldx,
                              float *y, int64_t ldy, dit_error *err) {
  const int64_t R = L->a.shape[0], K = L->a.shape[1], N = L->b.shape[0];
  float *t = malloc((size_t)(LOWRANK_ROWS * R) * sizeof *t), *u = malloc((size_t)(LOWRANK_ROWS * N) * sizeof *u);
  dit_status s = t && u ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "linear: out of memory for the low-rank term");
  for (int64_t i0 = 0; s == DIT_OK && i0 < M; i0 += LOWRANK_ROWS) {
    const int64_t m = M - i0 < LOWRANK_ROWS ? M - i0 : LOWRANK_ROWS;
    s = cpu_gemm(be, m, R, K, x + i0 * ldx, ldx, L->a.data, DIT_F32, 1.0f, K, NULL, DIT_F32, DIT_ACT_NONE, t, R, err);
    if (s == DIT_OK)
      s = cpu_gemm(be, m, N, R, t, R, L->b.data, DIT_F32, 1.0f, R, NULL, DIT_F32, DIT_ACT_NONE, u, N, err);
    for (int64_t i = 0; s == DIT_OK && i < m; i++)
      for (int64_t j = 0; j < N; j++) y[(i0 + i) * ldy + j] += u[i * N + j];
  }
  free(t), free(u);
  return s;
}

dit_status cpu_linear(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w,
                      const dit_tensor *b, dit_act act, dit_error *err) {
  dit_rowview xv, yv;
  DIT_TRY(cpu_check_rows("linear", "x", x, &xv, err));
  DIT_TRY(cpu_check_rows("linear", "y", y, &yv, err));
  DIT_TRY(dit_check_matrix("linear", "w", w, DIT_DEV_CPU, err));
  char s1[128], s2[128];
  if (x->ndim < 1 || w->ndim != 2 || w->shape[1] != x->shape[x->ndim - 1])
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "linear: x %s does not match w %s (want x [..., K], w [N, K])",
                      dit_shape_str(x->shape, x->ndim, s1, sizeof s1), dit_shape_str(w->shape, w->ndim, s2, sizeof s2));
  int64_t N = w->shape[0], K = w->shape[1];
  bool yok = y->ndim == x->ndim && y->shape[y->ndim - 1] == N;
  for (int i = 0; yok && i < x->ndim - 1; i++) yok = y->shape[i] == x->shape[i];
  if (!yok)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "linear: y %s, expected x's leading dims with last dim %lld",
                      dit_shape_str(y->shape, y->ndim, s1, sizeof s1), (long long)N);
  if (b) DIT_TRY(cpu_check_w("linear", "b", b, N, err));
  if (y->data == x->data && dit_tensor_numel(x) > 0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "linear: y must not alias x");
  /* strided x / y (row strides != K / N, per-block offsets): one GEMM per block of rows */
  int64_t P = xv.P > yv.P ? xv.P : yv.P;
  if (!dit_rowview_split(&xv, P) || !dit_rowview_split(&yv, P) || xv.M != yv.M)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "linear: the row layouts of x and y do not match");
  if (w->lowrank) DIT_TRY(check_lowrank(w, err));
  for (int64_t p = 0; p < P; p++) {
    const float *xp = (const float *)x->data + p * xv.ps;
    float *yp = (float *)y->data + p * yv.ps;
    if (w->lowrank) {
      DIT_TRY(cpu_gemm(be, xv.M, N, K, xp, xv.rs, w->data, w->dtype, dit_tensor_scale(w), K, NULL, DIT_F32,
                       DIT_ACT_NONE, yp, yv.rs, err));
      DIT_TRY(add_lowrank(be, w->lowrank, xv.M, xp, xv.rs, yp, yv.rs, err));
      epilogue(yp, yv.rs, xv.M, 0, N, 1.0f, b ? b->data : NULL, b ? b->dtype : DIT_F32, act);
      continue;
    }
    DIT_TRY(cpu_gemm(be, xv.M, N, K, xp, xv.rs, w->data, w->dtype, dit_tensor_scale(w), K,
                     b ? b->data : NULL, b ? b->dtype : DIT_F32, act, yp, yv.rs, err));
  }
  return DIT_OK;
}

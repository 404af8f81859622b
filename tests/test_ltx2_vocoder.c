/* The LTX-2 vocoders against diffusers (fixtures models/ltx2-tiny/vocoder: LTX2Vocoder with
 * leaky ReLU and tanh; models/ltx23-tiny/vocoder: LTX2VocoderWithBWE with anti-aliased
 * snake-beta, the causal log-mel STFT, the BWE vocoder and the Hann resampler): the vocoder of
 * the reference mel (vocoder.0.arg0) within relative error 1e-4 of vocoder.0.out0 (float32
 * against float32). First the four ops the vocoders add (unary, snake, resample1d, complex_abs)
 * against direct loops, resample1d's against torch's padded conv1d / conv_transpose1d. The
 * tiny BWE checkpoint's DFT basis and mel filterbank are zeros (its BWE vocoder sees a constant
 * log-mel), so the log-mel is also checked with random bases against a direct loop. Then
 * inputs and configs the vocoder refuses. With DIT_TEST_DEVICE=cuda the same on the GPU
 * (normalized MSE 1e-4: its GEMMs round F32 activations to the weights' bf16). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/dtype.h"
#include "io/safetensors.h"
#include "fixture.h"
#include "models/vocoder_ltx2.h"
#include "models/vocoder_ltx2_internal.h"
#include "testing.h"

#define TOL 1e-4

static dit_backend *g_be;
static bool g_gpu;

static dit_tensor dev(void *p, int nd, const int64_t *shape) {
  dit_tensor t = dit_tensor_make(DIT_F32, p, nd, shape);
  t.device = dit_backend_device(g_be);
  return t;
}
#define DEV(p, ...) dev(p, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

static void free_dev(void **p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) g_be->ops->free(g_be, p[i]);
}

/* ---- the ops against direct loops ---- */

static void test_unary_op(const dt_args *a) {
  (void)a;
  enum { N = 1000 };
  float x[N], ref[N];
  dt_fill_random(x, N, 31);
  for (int i = 0; i < N; i++) x[i] *= i % 3 ? 3.0f : 1e-5f; /* some values near the log floor */
  static const struct {
    dit_unary fn;
    float a, b;
    const char *name;
  } cases[] = {{DIT_UNARY_LEAKY_RELU, 0.1f, 0, "leaky_relu 0.1"}, {DIT_UNARY_LEAKY_RELU, 0.01f, 0, "leaky_relu 0.01"},
               {DIT_UNARY_TANH, 0, 0, "tanh"}, {DIT_UNARY_CLAMP, -1.0f, 1.0f, "clamp [-1, 1]"},
               {DIT_UNARY_LOG_CLAMP, 1e-5f, 0, "log(clamp(x, 1e-5))"}};
  void *dx = dt_to_device(g_be, x, N), *dy = dt_to_device(g_be, x, N);
  dit_tensor tx = DEV(dx, 10, N / 10), ty = DEV(dy, 10, N / 10);
  dit_error e = {0};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    for (int i = 0; i < N; i++) {
      const double v = x[i];
      switch (cases[c].fn) {
        case DIT_UNARY_LEAKY_RELU: ref[i] = (float)(v > 0 ? v : v * cases[c].a); break;
        case DIT_UNARY_TANH: ref[i] = (float)tanh(v); break;
        case DIT_UNARY_CLAMP: ref[i] = (float)(v < cases[c].a ? cases[c].a : v > cases[c].b ? cases[c].b : v); break;
        default: ref[i] = (float)log(v < cases[c].a ? cases[c].a : v); break;
      }
    }
    const bool inplace = c % 2 == 1;
    if (inplace) g_be->ops->upload(g_be, dy, x, sizeof x, &e);
    CHECK_MSG(dit_op_unary(g_be, &ty, inplace ? &ty : &tx, cases[c].fn, cases[c].a, cases[c].b, &e) == DIT_OK, "%s",
              e.msg);
    float *got = dt_to_host(g_be, dy, N);
    if (got) {
      const double er = dt_rel_err(got, ref, N);
      CHECK_MSG(er <= 1e-6, "%s: %.3g", cases[c].name, er);
      printf("unary %s%s against a direct loop: %.3g\n", cases[c].name, inplace ? " (in place)" : "", er);
    }
    free(got);
  }
  dit_tensor bad = DEV(dy, 10, N / 10 - 1);
  CHECK(dit_op_unary(g_be, &bad, &tx, DIT_UNARY_TANH, 0, 0, &e) == DIT_ERR_INVALID_ARG);
  CHECK(dit_op_unary(g_be, &ty, &tx, DIT_UNARY_COUNT, 0, 0, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "unary"));
  void *d[] = {dx, dy};
  free_dev(d, 2);
}

static void test_snake_op(const dt_args *a) {
  (void)a;
  enum { R = 37, C = 12 };
  float x[R * C], al[C], be[C], ref[R * C];
  dt_fill_random(x, R * C, 41);
  dt_fill_random(al, C, 42);
  dt_fill_random(be, C, 43);
  for (int c = 0; c < C; c++) al[c] = expf(al[c]), be[c] = expf(be[c]);
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) {
      const double v = 3.0 * x[r * C + c], s = sin(v * al[c]);
      x[r * C + c] = (float)v;
      ref[r * C + c] = (float)(v + s * s / (be[c] + 1e-9));
    }
  void *dx = dt_to_device(g_be, x, R * C), *da = dt_to_device(g_be, al, C), *db = dt_to_device(g_be, be, C);
  void *dy = dt_to_device(g_be, x, R * C);
  dit_tensor tx = DEV(dx, 1, R, C), ty = DEV(dy, 1, R, C), ta = DEV(da, C), tb = DEV(db, C);
  dit_error e = {0};
  CHECK_MSG(dit_op_snake(g_be, &ty, &tx, &ta, &tb, 1e-9f, &e) == DIT_OK, "%s", e.msg);
  float *got = dt_to_host(g_be, dy, R * C);
  if (got) {
    const double er = dt_rel_err(got, ref, R * C);
    CHECK_MSG(er <= 1e-6, "snake: %.3g", er);
    printf("snake [%d, %d] against a direct loop: %.3g\n", R, C, er);
  }
  free(got);
  CHECK_MSG(dit_op_snake(g_be, &tx, &tx, &ta, &tb, 1e-9f, &e) == DIT_OK, "%s", e.msg); /* in place */
  got = dt_to_host(g_be, dx, R * C);
  if (got) CHECK(dt_rel_err(got, ref, R * C) <= 1e-6);
  free(got);
  dit_tensor short_a = DEV(da, C - 1);
  CHECK(dit_op_snake(g_be, &ty, &tx, &short_a, &tb, 1e-9f, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "alpha"));
  void *d[] = {dx, da, db, dy};
  free_dev(d, 4);
}

static int clampi(int64_t i, int64_t n) { return (int)(i < 0 ? 0 : i >= n ? n - 1 : i); }

/* torch's DownSample1d: replicate-pad (pl, pr), conv1d with f, stride r. */
static void ref_down(float *y, const float *x, int B, int Ti, int C, const float *f, int K, int r, int pl, int To) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < To; t++)
      for (int c = 0; c < C; c++) {
        double s = 0;
        for (int k = 0; k < K; k++) s += (double)f[k] * x[(b * Ti + clampi(t * r + k - pl, Ti)) * C + c];
        y[(b * To + t) * C + c] = (float)s;
      }
}

/* torch's UpSample1d: replicate-pad (pad, pad), r * conv_transpose1d with f, stride r, crop
 * [pl, len - pr). */
static void ref_up(float *y, const float *x, int B, int Ti, int C, const float *f, int K, int r, int pad, int pl,
                   int To) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < To; t++)
      for (int c = 0; c < C; c++) {
        double s = 0;
        const int n = t + pl; /* index into the transposed convolution's output */
        for (int i = 0; i < Ti + 2 * pad; i++) {
          const int k = n - i * r;
          if (k >= 0 && k < K) s += (double)f[k] * x[(b * Ti + clampi(i - pad, Ti)) * C + c];
        }
        y[(b * To + t) * C + c] = (float)(r * s);
      }
}

/* One resample1d case: up (f reversed, the vocoder's offsets) or down, against ref_up / ref_down. */
static void resample_case(bool up, int r, int K, int B, int Ti, int C, const char *name) {
  const int pad = K / r - 1, pl_up = pad * r + (K - r) / 2, pr_up = pad * r + (K - r + 1) / 2;
  const int pl_dn = K / 2 + K % 2 - 1, pr_dn = K / 2;
  const int To = up ? (Ti + 2 * pad - 1) * r + K - pl_up - pr_up : (Ti + pl_dn + pr_dn - K) / r + 1;
  float *x = malloc(sizeof(float) * B * Ti * C), *f = malloc(sizeof(float) * K), *fr = malloc(sizeof(float) * K);
  float *ref = malloc(sizeof(float) * B * To * C);
  dt_fill_random(x, (size_t)(B * Ti * C), 51 + K);
  dt_fill_random(f, (size_t)K, 52 + K);
  for (int k = 0; k < K; k++) fr[k] = f[K - 1 - k];
  if (up) ref_up(ref, x, B, Ti, C, f, K, r, pad, pl_up, To);
  else ref_down(ref, x, B, Ti, C, f, K, r, pl_dn, To);
  void *dx = dt_to_device(g_be, x, (size_t)(B * Ti * C)), *df = dt_to_device(g_be, up ? fr : f, (size_t)K);
  void *dy = dt_to_device(g_be, ref, (size_t)(B * To * C)); /* overwritten */
  dit_tensor tx = DEV(dx, B, Ti, C), ty = DEV(dy, B, To, C), tf = DEV(df, K);
  dit_error e = {0};
  const int off = up ? K - 1 + pad * r - pl_up : pl_dn;
  CHECK_MSG(dit_op_resample1d(g_be, &ty, &tx, &tf, up ? r : 1, up ? 1 : r, off, up ? (float)r : 1.0f, &e) == DIT_OK,
            "%s", e.msg);
  float *got = dt_to_host(g_be, dy, (size_t)(B * To * C));
  if (got) {
    const double er = dt_rel_err(got, ref, (size_t)(B * To * C));
    CHECK_MSG(er <= 1e-6, "resample1d %s: %.3g", name, er);
    printf("resample1d %s (K %d, ratio %d) [%d,%d,%d] -> [%d,%d,%d] against torch's loops: %.3g\n", name, K, r, B, Ti,
           C, B, To, C, er);
  }
  CHECK(dit_op_resample1d(g_be, &tx, &tx, &tf, 1, r, off, 1.0f, &e) == DIT_ERR_INVALID_ARG); /* y aliases x */
  CHECK(dit_op_resample1d(g_be, &ty, &tx, &tf, 0, 1, off, 1.0f, &e) == DIT_ERR_INVALID_ARG);
  void *d[] = {dx, df, dy};
  free_dev(d, 3);
  free(x), free(f), free(fr), free(ref), free(got);
}

static void test_resample_op(const dt_args *a) {
  (void)a;
  resample_case(false, 2, 12, 2, 19, 5, "down (anti-alias)");
  resample_case(false, 2, 12, 1, 40, 3, "down (anti-alias, even)");
  resample_case(true, 2, 12, 2, 19, 5, "up (anti-alias)");
  resample_case(true, 3, 12, 1, 7, 4, "up (ratio 3)");
  resample_case(true, 3, 43, 1, 30, 2, "up (the BWE's Hann size, K 43)");
}

static void test_complex_abs_op(const dt_args *a) {
  (void)a;
  enum { R = 9, F = 33 };
  float x[R * 2 * F], ref[R * F];
  dt_fill_random(x, R * 2 * F, 61);
  for (int r = 0; r < R; r++)
    for (int f = 0; f < F; f++) ref[r * F + f] = (float)hypot(x[r * 2 * F + f], x[r * 2 * F + F + f]);
  void *dx = dt_to_device(g_be, x, R * 2 * F), *dy = dt_to_device(g_be, ref, R * F);
  dit_tensor tx = DEV(dx, 3, 3, 2 * F), ty = DEV(dy, 3, 3, F);
  dit_error e = {0};
  CHECK_MSG(dit_op_complex_abs(g_be, &ty, &tx, &e) == DIT_OK, "%s", e.msg);
  float *got = dt_to_host(g_be, dy, R * F);
  if (got) {
    const double er = dt_rel_err(got, ref, R * F);
    CHECK_MSG(er <= 1e-6, "complex_abs: %.3g", er);
    printf("complex_abs [3,3,%d] -> [3,3,%d] against a direct loop: %.3g\n", 2 * F, F, er);
  }
  free(got);
  dit_tensor bad = DEV(dy, 3, 3, F - 1);
  CHECK(dit_op_complex_abs(g_be, &bad, &tx, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "complex_abs"));
  void *d[] = {dx, dy};
  free_dev(d, 2);
}

/* ---- the fixtures ---- */

/* Inputs the vocoder refuses: NULLs, a wrong mel size, a wrong output shape, a BF16 mel. */
static void check_refusals(dit_vocoder_ltx2 *m, void *dx, const int64_t *xs, void *dy, const int64_t *ys) {
  dit_error e = {0};
  dit_tensor x = DEV(dx, xs[0], xs[1], xs[2], xs[3]), y = DEV(dy, ys[0], ys[1], ys[2]);
  CHECK(dit_vocoder_ltx2_run(m, NULL, &y, &e) == DIT_ERR_INVALID_ARG);
  CHECK(dit_vocoder_ltx2_run(m, &x, NULL, &e) == DIT_ERR_INVALID_ARG);
  CHECK(dit_vocoder_ltx2_run(NULL, &x, &y, &e) == DIT_ERR_INVALID_ARG);
  dit_tensor bad = DEV(dx, xs[0], xs[1], xs[2], xs[3] - 1);
  CHECK(dit_vocoder_ltx2_run(m, &bad, &y, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "mel bins"));
  printf("  %lld mel bins: %s\n", (long long)bad.shape[3], e.msg);
  bad = DEV(dy, ys[0], ys[1], ys[2] + 1); /* describes more than dy holds: refused before use */
  CHECK(dit_vocoder_ltx2_run(m, &x, &bad, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "expected"));
  printf("  one sample too many: %s\n", e.msg);
  bad = x;
  bad.dtype = DIT_BF16;
  CHECK(dit_vocoder_ltx2_run(m, &bad, &y, &e) == DIT_ERR_INVALID_ARG);
  bad = DEV(dx, xs[0] * xs[1], xs[2], xs[3]);
  CHECK(dit_vocoder_ltx2_run(m, &bad, &y, &e) == DIT_ERR_INVALID_ARG);
}

/* What a fixture's config must give. */
typedef struct expect {
  bool bwe;
  int rate;
  int64_t samples_per_frame;
} expect;

static void check_fixture(const dt_args *a, const char *name, const expect *ex) {
  char dir[1024], sub[128], ref[1200], vdir[1200];
  snprintf(sub, sizeof sub, "models/%s", name);
  dt_path(dir, sizeof dir, a->data, sub);
  json_t *rj = dt_load_reference(dir, NULL, 0);
  if (!rj) return;
  json_decref(rj);
  dt_path(ref, sizeof ref, dir, "reference.safetensors");
  dt_path(vdir, sizeof vdir, dir, "vocoder");
  dit_vocoder_ltx2 *m = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_vocoder_ltx2_load(g_be, vdir, &m, &e) == DIT_OK, "%s: %s", name, e.msg);
  float *x = NULL, *y = NULL;
  int64_t xs[8], ys[8];
  int xn = 0, yn = 0;
  if (!m || dt_load_f32(ref, "vocoder.0.arg0", &x, xs, &xn) || dt_load_f32(ref, "vocoder.0.out0", &y, ys, &yn)) {
    dit_vocoder_ltx2_free(m);
    free(x);
    return;
  }
  const dit_vocoder_ltx2_config *c = dit_vocoder_ltx2_get_config(m);
  const int64_t S = dit_vocoder_ltx2_output_samples(m, xs[2]);
  CHECK(xn == 4 && yn == 3 && ys[0] == xs[0] && ys[1] == dit_vocoder_ltx2_channels(m) && ys[2] == S);
  CHECK(c->bwe == ex->bwe && dit_vocoder_ltx2_sample_rate(m) == ex->rate && S == xs[2] * ex->samples_per_frame);
  CHECK(dit_vocoder_ltx2_in_channels(m) == xs[1] * xs[3] && dit_vocoder_ltx2_output_samples(m, 0) == 0);
  printf("%s (%s, %s): mel [%lld,%lld,%lld,%lld] -> audio [%lld,%lld,%lld] at %d Hz\n", name,
         c->bwe ? "LTX2VocoderWithBWE" : "LTX2Vocoder", g_gpu ? "cuda, nmse" : "cpu, rel err", (long long)xs[0],
         (long long)xs[1], (long long)xs[2], (long long)xs[3], (long long)ys[0], (long long)ys[1], (long long)ys[2],
         dit_vocoder_ltx2_sample_rate(m));
  const size_t nx = (size_t)(xs[0] * xs[1] * xs[2] * xs[3]), ny = (size_t)(ys[0] * ys[1] * ys[2]);
  void *dx = dt_to_device(g_be, x, nx), *dy = NULL;
  CHECK(dx && g_be->ops->alloc(g_be, ny * sizeof(float), &dy, &e) == DIT_OK);
  if (dx && dy) {
    dit_tensor tx = DEV(dx, xs[0], xs[1], xs[2], xs[3]), ty = DEV(dy, ys[0], ys[1], ys[2]);
    for (int rep = 0; rep < 2; rep++) { /* the second run reuses the activation buffers */
      CHECK_MSG(dit_vocoder_ltx2_run(m, &tx, &ty, &e) == DIT_OK, "%s: %s", name, e.msg);
      float *got = dt_to_host(g_be, dy, ny);
      if (got) {
        const double er = dt_error_of(g_gpu, got, y, ny);
        double mx = 0;
        for (size_t i = 0; i < ny; i++) mx = fabs(got[i] - y[i]) > mx ? fabs(got[i] - y[i]) : mx;
        CHECK_MSG(er <= TOL, "%s run %d: %.3g", name, rep, er);
        printf("  run %d: %.3g (max abs diff %.3g)\n", rep, er, mx);
      }
      free(got);
    }
    check_refusals(m, dx, xs, dy, ys);
  }
  void *d[] = {dx, dy};
  free_dev(d, 2);
  dit_vocoder_ltx2_free(m);
  free(x), free(y);
}

static void test_ltx20(const dt_args *a) { check_fixture(a, "ltx2-tiny", &(expect){false, 16000, 4}); }
static void test_ltx23(const dt_args *a) { check_fixture(a, "ltx23-tiny", &(expect){true, 48000, 12}); }

/* ---- configs refused at load ---- */

/* Writes dir/config.json: fixture `name`'s vocoder config with `field` set to the JSON `value`,
 * and links its weights. */
static void write_config(const dt_args *a, const char *name, const char *dir, const char *field, const char *value) {
  char src[1200], path[1300], sub[160], cmd[3000];
  snprintf(sub, sizeof sub, "models/%s/vocoder/config.json", name);
  dt_path(src, sizeof src, a->data, sub);
  json_error_t je;
  json_t *j = json_load_file(src, 0, &je), *v = json_loads(value, JSON_DECODE_ANY, &je);
  CHECK(j && v);
  if (!j || !v) return;
  json_object_set_new(j, field, v);
  snprintf(path, sizeof path, "%s/config.json", dir);
  CHECK(json_dump_file(j, path, JSON_INDENT(1)) == 0);
  json_decref(j);
  snprintf(sub, sizeof sub, "models/%s/vocoder/diffusion_pytorch_model.safetensors", name);
  dt_path(src, sizeof src, a->data, sub);
  snprintf(cmd, sizeof cmd, "ln -sf '%s' '%s/diffusion_pytorch_model.safetensors'", src, dir);
  CHECK(dt_run(cmd, NULL) == 0);
}

/* ---- the mel STFT (the tiny checkpoint's DFT basis and filterbank are zeros) ---- */

/* A copy of a checkpoint with the mel STFT's bases replaced (bf16 values of stft [2F, L], mel [M, F]). */
typedef struct stft_ctx {
  const dit_st_file *f;
  const float *stft, *mel;
} stft_ctx;

static dit_status fill_stft(void *user, size_t i, void *dst, size_t nbytes, dit_error *err) {
  const stft_ctx *c = user;
  const dit_st_tensor *t = &c->f->tensors[i];
  const float *v = !strcmp(t->name, "mel_stft.stft_fn.forward_basis") ? c->stft
                   : !strcmp(t->name, "mel_stft.mel_basis")           ? c->mel
                                                                      : NULL;
  if (!v) {
    memcpy(dst, t->data, nbytes);
    return DIT_OK;
  }
  for (size_t k = 0; k < nbytes / 2; k++) ((uint16_t *)dst)[k] = dit_f32_to_bf16(v[k]);
  return DIT_OK;
}

/* log(max(mel_basis @ |stft_basis @ frames|, 1e-5)) of one channel's n samples (zero padded
 * window - hop before, to a multiple of the hop after), frame f's M values at out[f * ostride]. */
static void ref_log_mel(const float *w, int n, const float *stft, const float *melb, int L, int hop, int M,
                        float *out, int ostride) {
  const int F = L / 2 + 1, frames = (n + hop - 1) / hop;
  double mag[512];
  for (int f = 0; f < frames; f++) {
    for (int k = 0; k < 2 * F; k++) {
      double s = 0;
      for (int l = 0; l < L; l++) {
        const int i = f * hop + l - (L - hop);
        if (i >= 0 && i < n) s += (double)stft[k * L + l] * w[i];
      }
      mag[k] = s;
    }
    for (int k = 0; k < F; k++) mag[k] = sqrt(mag[k] * mag[k] + mag[F + k] * mag[F + k]);
    for (int m = 0; m < M; m++) {
      double s = 0;
      for (int k = 0; k < F; k++) s += (double)melb[m * F + k] * mag[k];
      out[f * ostride + m] = (float)log(s > 1e-5 ? s : 1e-5);
    }
  }
}

static void write_stft_checkpoint(const dt_args *a, const char *dir, const float *stft, const float *melb) {
  char src[1200], dst[1300], cmd[1400];
  dt_path(src, sizeof src, a->data, "models/ltx23-tiny/vocoder/diffusion_pytorch_model.safetensors");
  snprintf(dst, sizeof dst, "%s/diffusion_pytorch_model.safetensors", dir);
  snprintf(cmd, sizeof cmd, "rm -f '%s'", dst);
  CHECK(dt_run(cmd, NULL) == 0);
  dit_st_file *f = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_st_open(src, NULL, &f, &e) == DIT_OK, "%s", e.msg);
  if (!f) return;
  dit_out_tensor *o = calloc(f->n_tensors, sizeof *o);
  for (size_t i = 0; o && i < f->n_tensors; i++) {
    const dit_st_tensor *t = &f->tensors[i];
    o[i] = (dit_out_tensor){t->name, t->dtype, t->ndim, {0}};
    memcpy(o[i].shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
  }
  stft_ctx c = {f, stft, melb};
  CHECK_MSG(o && dit_st_write(dst, true, NULL, 0, o, f->n_tensors, fill_stft, &c, &e) == DIT_OK, "%s", e.msg);
  free(o);
  dit_st_close(f);
}

static void test_mel_stft(const dt_args *a) {
  enum { L = 64, HOP = 16, F = L / 2 + 1, M = 8, CH = 2, B = 2, N = 100, FR = (N + HOP - 1) / HOP };
  char dir[1200];
  dt_path(dir, sizeof dir, a->tmp, "vocoder_stft");
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  CHECK(dt_run(cmd, NULL) == 0);
  static float stft[2 * F * L], melb[M * F], w[B * CH * N], ref[B * CH * FR * M];
  dt_fill_random(stft, 2 * F * L, 71);
  dt_fill_random(melb, M * F, 72);
  dt_fill_random(w, B * CH * N, 73);
  for (int i = 0; i < 2 * F * L; i++) stft[i] = dit_bf16_to_f32(dit_f32_to_bf16(stft[i]));
  for (int i = 0; i < M * F; i++) /* the last mel bin's values under the floor */
    melb[i] = dit_bf16_to_f32(dit_f32_to_bf16(fabsf(melb[i]) * (i / F == M - 1 ? 1e-9f : 0.1f)));
  for (int i = 0; i < B * CH; i++) ref_log_mel(w + i * N, N, stft, melb, L, HOP, M, ref + i * FR * M, M);
  for (int i = 0; i < B * CH * FR; i++) CHECK(ref[i * M + M - 1] == logf(1e-5f) && ref[i * M] > logf(1e-5f));
  write_config(a, "ltx23-tiny", dir, "_note", "\"random mel STFT bases\"");
  write_stft_checkpoint(a, dir, stft, melb);
  dit_vocoder_ltx2 *m = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_vocoder_ltx2_load(g_be, dir, &m, &e) == DIT_OK, "%s", e.msg);
  if (!m) return;
  CHECK(dit_vocoder_ltx2_mel_frames(m, N) == FR && dit_vocoder_ltx2_mel_frames(m, 0) == 0);
  void *dw = dt_to_device(g_be, w, B * CH * N), *dm = dt_to_device(g_be, ref, B * CH * FR * M);
  dit_tensor tw = DEV(dw, B, CH, N), tm = DEV(dm, B, CH, FR, M);
  CHECK_MSG(dit_vocoder_ltx2_log_mel(m, &tw, &tm, &e) == DIT_OK, "%s", e.msg);
  float *got = dt_to_host(g_be, dm, B * CH * FR * M);
  if (got) {
    const double er = dt_error_of(g_gpu, got, ref, B * CH * FR * M);
    CHECK_MSG(er <= (g_gpu ? TOL : 1e-5), "log-mel: %.3g", er);
    printf("log-mel of [%d, %d, %d] (random bases, the last bin under the 1e-5 floor) -> [%d, %d, %d, %d] against a "
           "direct loop: %.3g\n", B, CH, N, B, CH, FR, M, er);
  }
  free(got);
  dit_tensor bad = DEV(dm, B, CH, FR + 1, M);
  CHECK(dit_vocoder_ltx2_log_mel(m, &tw, &bad, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "expected"));
  /* the whole vocoder now reads a mel that is not constant: it runs, finite, in [-1, 1] */
  enum { T = 9, S = T * 12 };
  float mel_in[CH * T * M];
  dt_fill_random(mel_in, CH * T * M, 74);
  void *dx = dt_to_device(g_be, mel_in, CH * T * M), *dy = NULL;
  CHECK(g_be->ops->alloc(g_be, CH * S * sizeof(float), &dy, &e) == DIT_OK);
  dit_tensor tx = DEV(dx, 1, CH, T, M), ty = DEV(dy, 1, CH, S);
  CHECK_MSG(dit_vocoder_ltx2_run(m, &tx, &ty, &e) == DIT_OK, "%s", e.msg);
  float *y = dt_to_host(g_be, dy, CH * S);
  int bad_n = 0;
  for (int i = 0; y && i < CH * S; i++) bad_n += !(y[i] >= -1.0f && y[i] <= 1.0f);
  CHECK(y && bad_n == 0);
  free(y);
  void *d[] = {dw, dm, dx, dy};
  free_dev(d, 4);
  dit_vocoder_ltx2_free(m);
}

/* ---- parallel resblocks: three copies of each level's one resblock average to it ---- */

typedef struct dup_ctx {
  const dit_st_file *f;
  size_t *src; /* source tensor of each written one */
} dup_ctx;

static dit_status fill_dup(void *user, size_t i, void *dst, size_t nbytes, dit_error *err) {
  const dup_ctx *c = user;
  memcpy(dst, c->f->tensors[c->src[i]].data, nbytes);
  return DIT_OK;
}

/* dir's weights: fixture `model`'s vocoder with "resnets.L.*" written as "resnets.(L n + i).*",
 * i < n, and without the anti-aliasing filters ("*.filter") when drop_filters. */
static void write_dup_checkpoint(const dt_args *a, const char *model, const char *dir, int n, bool drop_filters) {
  char src[1200], dst[1300], cmd[1400], sub[200];
  snprintf(sub, sizeof sub, "models/%s/vocoder/diffusion_pytorch_model.safetensors", model);
  dt_path(src, sizeof src, a->data, sub);
  snprintf(dst, sizeof dst, "%s/diffusion_pytorch_model.safetensors", dir);
  snprintf(cmd, sizeof cmd, "rm -f '%s'", dst);
  CHECK(dt_run(cmd, NULL) == 0);
  dit_st_file *f = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_st_open(src, NULL, &f, &e) == DIT_OK, "%s", e.msg);
  if (!f) return;
  const size_t cap = f->n_tensors * (size_t)n;
  dit_out_tensor *o = calloc(cap, sizeof *o);
  char(*names)[128] = calloc(cap, sizeof *names);
  size_t *from = calloc(cap, sizeof *from), k = 0;
  for (size_t i = 0; o && names && from && i < f->n_tensors; i++) {
    const dit_st_tensor *t = &f->tensors[i];
    const size_t len = strlen(t->name);
    if (drop_filters && len > 7 && !strcmp(t->name + len - 7, ".filter")) continue;
    int lvl = -1, off = 0;
    const bool res = sscanf(t->name, "resnets.%d.%n", &lvl, &off) == 1 && off > 0;
    for (int r = 0; r < (res ? n : 1); r++, k++) {
      if (res) snprintf(names[k], sizeof names[k], "resnets.%d.%s", lvl * n + r, t->name + off);
      else snprintf(names[k], sizeof names[k], "%s", t->name);
      o[k] = (dit_out_tensor){names[k], t->dtype, t->ndim, {0}};
      memcpy(o[k].shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
      from[k] = i;
    }
  }
  dup_ctx c = {f, from};
  CHECK_MSG(o && names && from && dit_st_write(dst, true, NULL, 0, o, k, fill_dup, &c, &e) == DIT_OK, "%s", e.msg);
  free(o), free(names), free(from);
  dit_st_close(f);
}

static void test_parallel_resblocks(const dt_args *a) {
  char dir[1200], cmd[1400], ref[1200];
  dt_path(dir, sizeof dir, a->tmp, "vocoder_res3");
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  CHECK(dt_run(cmd, NULL) == 0);
  write_config(a, "ltx2-tiny", dir, "resnet_kernel_sizes", "[3, 3, 3]");
  char cfg[1300];
  snprintf(cfg, sizeof cfg, "%s/config.json", dir); /* the dilations once per kernel size */
  json_error_t je;
  json_t *j = json_load_file(cfg, 0, &je);
  CHECK(j && json_object_set_new(j, "resnet_dilations", json_loads("[[1,3,5],[1,3,5],[1,3,5]]", 0, &je)) == 0 &&
        json_dump_file(j, cfg, JSON_INDENT(1)) == 0);
  json_decref(j);
  write_dup_checkpoint(a, "ltx2-tiny", dir, 3, false);
  dit_vocoder_ltx2 *m = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_vocoder_ltx2_load(g_be, dir, &m, &e) == DIT_OK, "%s", e.msg);
  dt_path(ref, sizeof ref, a->data, "models/ltx2-tiny/reference.safetensors");
  float *x = NULL, *y = NULL;
  int64_t xs[8], ys[8];
  int xn = 0, yn = 0;
  if (!m || dt_load_f32(ref, "vocoder.0.arg0", &x, xs, &xn) || dt_load_f32(ref, "vocoder.0.out0", &y, ys, &yn)) {
    dit_vocoder_ltx2_free(m);
    free(x);
    return;
  }
  CHECK(dit_vocoder_ltx2_get_config(m)->voc.n_res == 3);
  const size_t nx = (size_t)(xs[0] * xs[1] * xs[2] * xs[3]), ny = (size_t)(ys[0] * ys[1] * ys[2]);
  void *dx = dt_to_device(g_be, x, nx), *dy = dt_to_device(g_be, y, ny);
  dit_tensor tx = DEV(dx, xs[0], xs[1], xs[2], xs[3]), ty = DEV(dy, ys[0], ys[1], ys[2]);
  CHECK_MSG(dit_vocoder_ltx2_run(m, &tx, &ty, &e) == DIT_OK, "%s", e.msg);
  float *got = dt_to_host(g_be, dy, ny);
  if (got) {
    const double er = dt_error_of(g_gpu, got, y, ny);
    CHECK_MSG(er <= TOL, "3 parallel resblocks: %.3g", er);
    printf("ltx2-tiny with each level's resblock three times (the mean of three copies) against the reference: "
           "%.3g\n", er);
  }
  void *d[] = {dx, dy};
  free_dev(d, 2);
  dit_vocoder_ltx2_free(m);
  free(x), free(y), free(got);
}

/* A checkpoint without the anti-aliasing filters: the Kaiser sinc filters computed at load, whose
 * bf16 roundings the fixture stores (so the output is near the reference, not at float precision). */
static void test_computed_filters(const dt_args *a) {
  char dir[1200], cmd[1400], ref[1200];
  dt_path(dir, sizeof dir, a->tmp, "vocoder_nofilters");
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  CHECK(dt_run(cmd, NULL) == 0);
  write_config(a, "ltx23-tiny", dir, "_note", "\"no filters\"");
  write_dup_checkpoint(a, "ltx23-tiny", dir, 1, true);
  dit_vocoder_ltx2 *m = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_vocoder_ltx2_load(g_be, dir, &m, &e) == DIT_OK, "%s", e.msg);
  char vdir[1200];
  dt_path(vdir, sizeof vdir, a->data, "models/ltx23-tiny/vocoder");
  dit_vocoder_ltx2 *ms = NULL; /* the stored filters */
  CHECK_MSG(dit_vocoder_ltx2_load(g_be, vdir, &ms, &e) == DIT_OK, "%s", e.msg);
  if (m && ms) { /* each computed filter within bf16 rounding of the stored one */
    const voc_act *ac = &m->gen[1].act_out, *as = &ms->gen[1].act_out;
    float *fc = dt_to_host(g_be, ac->fu.data, (size_t)ac->K), *fs = dt_to_host(g_be, as->fu.data, (size_t)as->K);
    float *dc = dt_to_host(g_be, ac->fd.data, (size_t)ac->K), *ds = dt_to_host(g_be, as->fd.data, (size_t)as->K);
    int off = 0;
    for (int k = 0; fc && fs && dc && ds && k < ac->K; k++)
      off += fabsf(fc[k] - fs[k]) > fabsf(fc[k]) / 256 || fabsf(dc[k] - ds[k]) > fabsf(dc[k]) / 256;
    CHECK(fc && fs && dc && ds && ac->K == 12 && off == 0);
    printf("computed Kaiser sinc filters (K %d) within bf16 rounding of the checkpoint's: %d off\n", ac->K, off);
    free(fc), free(fs), free(dc), free(ds);
  }
  dit_vocoder_ltx2_free(ms);
  dt_path(ref, sizeof ref, a->data, "models/ltx23-tiny/reference.safetensors");
  float *x = NULL, *y = NULL;
  int64_t xs[8], ys[8];
  int xn = 0, yn = 0;
  if (!m || dt_load_f32(ref, "vocoder.0.arg0", &x, xs, &xn) || dt_load_f32(ref, "vocoder.0.out0", &y, ys, &yn)) {
    dit_vocoder_ltx2_free(m);
    free(x);
    return;
  }
  const size_t nx = (size_t)(xs[0] * xs[1] * xs[2] * xs[3]), ny = (size_t)(ys[0] * ys[1] * ys[2]);
  void *dx = dt_to_device(g_be, x, nx), *dy = dt_to_device(g_be, y, ny);
  dit_tensor tx = DEV(dx, xs[0], xs[1], xs[2], xs[3]), ty = DEV(dy, ys[0], ys[1], ys[2]);
  CHECK_MSG(dit_vocoder_ltx2_run(m, &tx, &ty, &e) == DIT_OK, "%s", e.msg);
  float *got = dt_to_host(g_be, dy, ny);
  if (got) {
    const double er = dt_error_of(g_gpu, got, y, ny); /* the GPU's bf16 GEMMs add their own error */
    CHECK_MSG(g_gpu ? er <= 1e-3 : er <= 2e-2 && er > 1e-6, "computed filters: %.3g", er);
    printf("ltx23-tiny with Kaiser filters computed at load (the fixture's are their bf16 roundings): %.3g\n", er);
  }
  void *d[] = {dx, dy};
  free_dev(d, 2);
  dit_vocoder_ltx2_free(m);
  free(x), free(y), free(got);
}

static void test_refused_configs(const dt_args *a) {
  static const struct {
    const char *model, *field, *value, *says;
    dit_status st;
  } cases[] = {
      {"ltx2-tiny", "act_fn", "\"gelu\"", "act_fn", DIT_ERR_UNSUPPORTED},
      {"ltx2-tiny", "final_act_fn", "\"relu\"", "final_act_fn", DIT_ERR_UNSUPPORTED},
      {"ltx2-tiny", "antialias", "true", "antialias", DIT_ERR_UNSUPPORTED},
      {"ltx2-tiny", "upsample_kernel_sizes", "[1, 4]", "upsample_kernel_sizes", DIT_ERR_UNSUPPORTED},
      {"ltx2-tiny", "upsample_factors", "[2, 2, 2]", "upsample_factors", DIT_ERR_FORMAT},
      {"ltx2-tiny", "resnet_dilations", "[[1, 3], [1]]", "resnet_dilations", DIT_ERR_FORMAT},
      {"ltx2-tiny", "_class_name", "\"AutoencoderKL\"", "_class_name", DIT_ERR_FORMAT},
      {"ltx2-tiny", "hidden_channels", "32", "conv_in.weight", DIT_ERR_FORMAT},
      {"ltx23-tiny", "window_length", "32", "window_length", DIT_ERR_UNSUPPORTED},
      {"ltx23-tiny", "output_sampling_rate", "44100", "output_sampling_rate", DIT_ERR_UNSUPPORTED},
      {"ltx23-tiny", "bwe_out_channels", "1", "bwe_out_channels", DIT_ERR_UNSUPPORTED},
      {"ltx23-tiny", "hop_length", "8", "bwe_upsample_factors", DIT_ERR_UNSUPPORTED},
      {"ltx23-tiny", "bwe_upsample_kernel_sizes", "[8, 8, 6]", "bwe_upsample_kernel_sizes", DIT_ERR_UNSUPPORTED},
      {"ltx23-tiny", "bwe_act_fn", "\"relu\"", "bwe_act_fn", DIT_ERR_UNSUPPORTED},
  };
  char dir[1200], cmd[1400];
  dt_path(dir, sizeof dir, a->tmp, "vocoder_config");
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  CHECK(dt_run(cmd, NULL) == 0);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_config(a, cases[i].model, dir, cases[i].field, cases[i].value);
    dit_vocoder_ltx2 *m = NULL;
    dit_error e = {0};
    const dit_status s = dit_vocoder_ltx2_load(g_be, dir, &m, &e);
    CHECK_MSG(s == cases[i].st && !m && strstr(e.msg, cases[i].says), "%s = %s: status %d, %s", cases[i].field,
              cases[i].value, (int)s, e.msg);
    printf("%s: %s = %s: %s\n", cases[i].model, cases[i].field, cases[i].value, e.msg);
  }
  dit_vocoder_ltx2 *m = NULL;
  dit_error e = {0};
  CHECK(dit_vocoder_ltx2_load(g_be, NULL, &m, &e) == DIT_ERR_INVALID_ARG && !m);
  CHECK(dit_vocoder_ltx2_load(NULL, dir, &m, &e) == DIT_ERR_INVALID_ARG && !m);
  CHECK(dit_vocoder_ltx2_load(g_be, dir, NULL, &e) == DIT_ERR_INVALID_ARG);
  CHECK(dit_vocoder_ltx2_output_samples(NULL, 10) == 0 && dit_vocoder_ltx2_sample_rate(NULL) == 0);
}

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_unary_op,  test_snake_op, test_resample_op,
                                                   test_complex_abs_op, test_ltx20, test_ltx23,
                                                   test_mel_stft, test_parallel_resblocks, test_computed_filters,
                                                   test_refused_configs};
  return dt_main_on_env_backend(argc, argv, cases, sizeof cases / sizeof cases[0], &g_be, &g_gpu);
}

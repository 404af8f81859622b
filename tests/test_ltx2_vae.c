/* The LTX-2 video VAE decoder against diffusers (fixtures models/ltx2-tiny: residual
 * upsamplers, reflect padding; ltx23-tiny: plain upsamplers, zero padding; both
 * non-causal): vae.decode of the reference latents (vae_decode.0.arg0) within relative error
 * 1e-4 of vae_decode.0.out0 (float32 against float32), and the pipeline's denormalization of
 * its final packed latents (step_video.2.out0, unpacked) giving those latents. First the two
 * ops the decoder adds (conv3d, pixel_norm) against direct loops. Then inputs and configs the
 * decoder cannot take are refused; the tiled decode against diffusers' tiling algorithm written
 * out on the untiled decode of each tile. The encoder against diffusers (reference_i2v: the
 * encoder alone on a 9-frame clip, and the image-to-video pipeline's image: its bilinear
 * preprocessing, its encoding and the normalized latents), its size rules and the configs it
 * refuses. With DIT_TEST_DEVICE=cuda the same on the GPU (normalized MSE 1e-4: its convolutions
 * round their inputs to bf16). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "fixture.h"
#include "io/image_read.h"
#include "models/vae_ltx2.h"
#include "pipeline/image_prep.h"
#include "testing.h"

#define TOL 1e-4

static dit_backend *g_be;
static bool g_gpu;

static dit_tensor dev5(void *p, int64_t a, int64_t b, int64_t c, int64_t d, int64_t e) {
  dit_tensor t = dit_tensor_make(DIT_F32, p, 5, (int64_t[]){a, b, c, d, e});
  t.device = dit_backend_device(g_be);
  return t;
}

/* ---- the ops against direct loops ---- */

static void test_conv3d_op(const dt_args *a) {
  (void)a;
  enum { B = 2, CI = 3, T = 4, H = 5, W = 6, CO = 4, KT = 3, K = 3, PT = 1, PH = 1, PW = 0 };
  enum { TO = T + 2 * PT - KT + 1, HO = H + 2 * PH - K + 1, WO = W + 2 * PW - K + 1 };
  const size_t nx = B * CI * T * H * W, nw = CO * CI * KT * K * K, ny = B * CO * TO * HO * WO;
  float *x = malloc(nx * sizeof *x), *w = malloc(nw * sizeof *w), bias[CO], *ref = calloc(ny, sizeof *ref);
  dt_fill_random(x, nx, 11);
  dt_fill_random(w, nw, 12);
  dt_fill_random(bias, CO, 13);
  for (int b = 0; b < B; b++)
    for (int co = 0; co < CO; co++)
      for (int t = 0; t < TO; t++)
        for (int y = 0; y < HO; y++)
          for (int z = 0; z < WO; z++) {
            double s = bias[co];
            for (int ci = 0; ci < CI; ci++)
              for (int kt = 0; kt < KT; kt++)
                for (int ky = 0; ky < K; ky++)
                  for (int kx = 0; kx < K; kx++) {
                    int it = t - PT + kt, iy = y - PH + ky, ix = z - PW + kx;
                    if (it < 0 || it >= T || iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                    s += (double)w[(((co * CI + ci) * KT + kt) * K + ky) * K + kx] *
                         x[(((b * CI + ci) * T + it) * H + iy) * W + ix];
                  }
            ref[(((b * CO + co) * TO + t) * HO + y) * WO + z] = (float)s;
          }
  void *dx = dt_to_device(g_be, x, nx), *dw = dt_to_device(g_be, w, nw), *db = dt_to_device(g_be, bias, CO);
  void *dy = dt_to_device(g_be, ref, ny); /* overwritten */
  dit_tensor tx = dev5(dx, B, CI, T, H, W), tw = dev5(dw, CO, CI, KT, K, K), ty = dev5(dy, B, CO, TO, HO, WO);
  dit_tensor tb = dit_tensor_1d(DIT_F32, db, CO);
  tb.device = tx.device;
  dit_error e = {0};
  CHECK_MSG(dit_op_conv3d(g_be, &ty, &tx, &tw, &tb, PT, PH, PW, &e) == DIT_OK, "%s", e.msg);
  float *got = dt_to_host(g_be, dy, ny);
  if (got) {
    const double er = dt_error_of(g_gpu, got, ref, ny);
    CHECK_MSG(er <= (g_gpu ? TOL : 1e-6), "conv3d: %.3g", er);
    printf("conv3d [%d,%d,%d,%d,%d] k %dx%dx%d pad (%d,%d,%d) against a direct loop: %.3g\n", B, CI, T, H, W, KT, K, K,
           PT, PH, PW, er);
  }
  /* refused: a wrong y shape, y aliasing x */
  dit_tensor bad = dev5(dy, B, CO, TO + 1, HO, WO);
  CHECK(dit_op_conv3d(g_be, &bad, &tx, &tw, &tb, PT, PH, PW, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "conv3d"));
  CHECK(dit_op_conv3d(g_be, &tx, &tx, &tw, &tb, PT, PH, PW, &e) == DIT_ERR_INVALID_ARG);
  void *dev[] = {dx, dw, db, dy};
  for (size_t i = 0; i < 4; i++)
    if (dev[i]) g_be->ops->free(g_be, dev[i]);
  free(x), free(w), free(ref), free(got);
}

static void test_pixel_norm_op(const dt_args *a) {
  (void)a;
  enum { B = 2, C = 7, N = 45 };
  float x[B * C * N], ref[B * C * N];
  dt_fill_random(x, B * C * N, 21);
  for (int i = 0; i < N; i++) x[i] *= 1e-4f; /* small positions: eps matters */
  for (int b = 0; b < B; b++)
    for (int p = 0; p < N; p++) {
      double ss = 0;
      for (int c = 0; c < C; c++) ss += (double)x[(b * C + c) * N + p] * x[(b * C + c) * N + p];
      const double rms = sqrt(ss / C + 1e-8);
      for (int c = 0; c < C; c++) {
        const double v = x[(b * C + c) * N + p] / rms;
        ref[(b * C + c) * N + p] = (float)(v / (1.0 + exp(-v)));
      }
    }
  void *dx = dt_to_device(g_be, x, B * C * N);
  dit_tensor t = dit_tensor_3d(DIT_F32, dx, B, C, N);
  t.device = dit_backend_device(g_be);
  dit_error e = {0};
  CHECK_MSG(dit_op_pixel_norm(g_be, &t, &t, 1e-8f, true, &e) == DIT_OK, "%s", e.msg);
  float *got = dx ? dt_to_host(g_be, dx, B * C * N) : NULL;
  if (got) {
    const double er = dt_rel_err(got, ref, B * C * N);
    CHECK_MSG(er <= 1e-5, "pixel_norm: %.3g", er);
    printf("pixel_norm + SiLU (eps 1e-8, in place) against a direct loop: %.3g\n", er);
  }
  if (dx) g_be->ops->free(g_be, dx);
  free(got);
}

/* ---- the fixtures ---- */

/* step_video.2.out0 [1, F*H*W, C] (tokens frame-major, channels last) unpacked to [C, F, H, W],
 * denormalized on the backend, against the decoder's input. */
static void check_denormalize(dit_vae_ltx2 *m, const char *ref, const float *z, const int64_t *zs) {
  float *packed = NULL;
  int64_t ps[8];
  int pn = 0;
  if (dt_load_f32(ref, "step_video.2.out0", &packed, ps, &pn)) return;
  const int64_t C = zs[1], n = zs[2] * zs[3] * zs[4];
  CHECK(pn == 3 && ps[0] == 1 && ps[1] == n && ps[2] == C);
  float *u = malloc((size_t)(C * n) * sizeof *u);
  for (int64_t c = 0; u && c < C && pn == 3 && ps[1] == n && ps[2] == C; c++)
    for (int64_t i = 0; i < n; i++) u[c * n + i] = packed[i * C + c];
  void *d = u ? dt_to_device(g_be, u, (size_t)(C * n)) : NULL;
  dit_tensor t = dev5(d, 1, C, zs[2], zs[3], zs[4]);
  dit_error e = {0};
  CHECK_MSG(d && dit_vae_ltx2_denormalize(m, &t, &e) == DIT_OK, "denormalize: %s", e.msg);
  float *got = d ? dt_to_host(g_be, d, (size_t)(C * n)) : NULL;
  if (got) {
    const double er = dt_rel_err(got, z, (size_t)(C * n));
    CHECK_MSG(er <= 1e-6, "denormalize: %.3g", er);
    printf("  denormalize(unpack(step_video.2.out0)) against the decoder's input: %.3g\n", er);
  }
  if (d) g_be->ops->free(g_be, d);
  free(packed), free(u), free(got);
}

/* Inputs the decoder refuses: a NULL, a wrong channel count, a wrong output shape. */
static void check_refusals(dit_vae_ltx2 *m, void *dz, const int64_t *zs, void *dy, const int64_t *ys) {
  dit_error e = {0};
  dit_tensor z = dev5(dz, zs[0], zs[1], zs[2], zs[3], zs[4]), y = dev5(dy, ys[0], ys[1], ys[2], ys[3], ys[4]);
  CHECK(dit_vae_ltx2_decode(m, NULL, &y, &e) == DIT_ERR_INVALID_ARG);
  CHECK(dit_vae_ltx2_decode(m, &z, NULL, &e) == DIT_ERR_INVALID_ARG);
  CHECK(dit_vae_ltx2_decode(NULL, &z, &y, &e) == DIT_ERR_INVALID_ARG);
  CHECK(dit_vae_ltx2_denormalize(m, NULL, &e) == DIT_ERR_INVALID_ARG);
  dit_tensor bad = dev5(dz, zs[0], zs[1] - 1, zs[2], zs[3], zs[4]);
  CHECK(dit_vae_ltx2_decode(m, &bad, &y, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "channels"));
  printf("  %lld latent channels: %s\n", (long long)bad.shape[1], e.msg);
  CHECK(dit_vae_ltx2_denormalize(m, &bad, &e) == DIT_ERR_INVALID_ARG);
  bad = dev5(dy, ys[0], ys[1], ys[2] + 1, ys[3], ys[4]); /* describes more than dy holds: refused before use */
  CHECK(dit_vae_ltx2_decode(m, &z, &bad, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "expected"));
  printf("  one frame too many: %s\n", e.msg);
  bad = z;
  bad.dtype = DIT_BF16;
  CHECK(dit_vae_ltx2_decode(m, &bad, &y, &e) == DIT_ERR_INVALID_ARG);
}

/* What a fixture's config must give (the two tiny ones). */
typedef struct expect {
  bool reflect, residual;
} expect;

/* The decode of dir's reference (dir/reference.safetensors, dir/vae); ex: the config checks
 * (NULL: none). */
static void check_dir(const char *dir, const char *name, const expect *ex) {
  char ref[1200], vdir[1200];
  dt_path(ref, sizeof ref, dir, "reference.safetensors");
  dt_path(vdir, sizeof vdir, dir, "vae");
  dit_vae_ltx2 *m = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_vae_ltx2_load(g_be, vdir, &m, &e) == DIT_OK, "%s: %s", name, e.msg);
  float *z = NULL, *y = NULL;
  int64_t zs[8], ys[8];
  int zn = 0, yn = 0;
  if (!m || dt_load_f32(ref, "vae_decode.0.arg0", &z, zs, &zn) || dt_load_f32(ref, "vae_decode.0.out0", &y, ys, &yn)) {
    dit_vae_ltx2_free(m);
    free(z);
    return;
  }
  const dit_vae_ltx2_config *c = dit_vae_ltx2_get_config(m);
  int T, H, W;
  dit_vae_ltx2_output_size(m, (int)zs[2], (int)zs[3], (int)zs[4], &T, &H, &W);
  CHECK(zn == 5 && yn == 5 && ys[2] == T && ys[3] == H && ys[4] == W);
  if (ex) {
    CHECK(c->reflect == ex->reflect && c->up_residual[0] == ex->residual && !c->causal && c->has_latents_stats);
    CHECK(c->latent_channels == 8 && c->spatial_ratio == 16 && c->temporal_ratio == 4 && c->n_up == 2);
    CHECK(T == 1 + (int)(zs[2] - 1) * c->temporal_ratio && H == (int)zs[3] * c->spatial_ratio);
  }
  printf("%s (%s%s%s): latents [%lld,%lld,%lld,%lld,%lld] -> video [%lld,%lld,%d,%d,%d]\n", name,
         g_gpu ? "cuda, nmse" : "cpu, rel err", c->causal ? ", causal" : "", c->reflect ? ", reflect" : ", zeros",
         (long long)zs[0], (long long)zs[1], (long long)zs[2],
         (long long)zs[3], (long long)zs[4], (long long)ys[0], (long long)ys[1], T, H, W);
  const size_t nz = (size_t)(zs[0] * zs[1] * zs[2] * zs[3] * zs[4]), ny = (size_t)(ys[0] * ys[1] * ys[2] * ys[3] * ys[4]);
  void *dz = dt_to_device(g_be, z, nz), *dy = NULL;
  CHECK(dz && g_be->ops->alloc(g_be, ny * sizeof(float), &dy, &e) == DIT_OK);
  if (dz && dy) {
    dit_tensor tz = dev5(dz, zs[0], zs[1], zs[2], zs[3], zs[4]), ty = dev5(dy, ys[0], ys[1], ys[2], ys[3], ys[4]);
    for (int rep = 0; rep < 2; rep++) { /* the second decode reuses the activation buffers */
      CHECK_MSG(dit_vae_ltx2_decode(m, &tz, &ty, &e) == DIT_OK, "%s: %s", name, e.msg);
      float *got = dt_to_host(g_be, dy, ny);
      if (got) {
        const double er = dt_error_of(g_gpu, got, y, ny);
        CHECK_MSG(er <= TOL, "%s decode %d: %.3g", name, rep, er);
        printf("  decode %d: %.3g\n", rep, er);
      }
      free(got);
    }
    if (ex) check_denormalize(m, ref, z, zs);
    check_refusals(m, dz, zs, dy, ys);
  }
  if (dz) g_be->ops->free(g_be, dz);
  if (dy) g_be->ops->free(g_be, dy);
  dit_vae_ltx2_free(m);
  free(z), free(y);
}

static void check_fixture(const dt_args *a, const char *name, const expect *ex) {
  char dir[1024], sub[128];
  snprintf(sub, sizeof sub, "models/%s", name);
  dt_path(dir, sizeof dir, a->data, sub);
  json_t *rj = dt_load_reference(dir, NULL, 0);
  if (!rj) return;
  json_decref(rj);
  check_dir(dir, name, ex);
}

static void test_ltx20(const dt_args *a) { check_fixture(a, "ltx2-tiny", &(expect){true, true}); }
static void test_ltx23(const dt_args *a) { check_fixture(a, "ltx23-tiny", &(expect){false, false}); }

/* --fixture DIR: another reference of the same layout (DIR/vae, DIR/reference.safetensors with
 * vae_decode.0.arg0 / out0), e.g. a causal config with channel-changing resnets. */
static void test_extra(const dt_args *a) {
  if (a->fixture) check_dir(a->fixture, a->fixture, NULL);
  else printf("no --fixture: no extra reference\n");
}

/* ---- the tiled decode against diffusers' algorithm written out ---- */

/* A host video [oc, T, H, W]. */
typedef struct vid {
  float *v;
  int oc, T, H, W;
} vid;

static float *px(const vid *a, int c, int t, int y, int x) { return a->v + (((size_t)c * a->T + t) * a->H + y) * a->W + x; }

/* The untiled decode of latents z [C, F, h, w] (host) window [f0, +nf) x [y0, +nh) x [x0, +nw). */
static vid decode_host(dit_vae_ltx2 *m, const float *z, int C, int F, int h, int w, int f0, int nf, int y0, int nh,
                       int x0, int nw) {
  vid o = {NULL, dit_vae_ltx2_get_config(m)->out_channels, 0, 0, 0};
  dit_vae_ltx2_output_size(m, nf, nh, nw, &o.T, &o.H, &o.W);
  float *win = malloc((size_t)C * nf * nh * nw * sizeof *win);
  if (!win) return o;
  for (int c = 0; c < C; c++)
    for (int f = 0; f < nf; f++)
      for (int y = 0; y < nh; y++)
        memcpy(win + (((size_t)c * nf + f) * nh + y) * nw, z + (((size_t)c * F + f0 + f) * h + y0 + y) * w + x0,
               (size_t)nw * sizeof *win);
  const size_t n = (size_t)o.oc * o.T * o.H * o.W;
  void *dz = dt_to_device(g_be, win, (size_t)C * nf * nh * nw), *dy = NULL;
  dit_error e = {0};
  if (dz && g_be->ops->alloc(g_be, n * sizeof(float), &dy, &e) == DIT_OK) {
    dit_tensor tz = dev5(dz, 1, C, nf, nh, nw), ty = dev5(dy, 1, o.oc, o.T, o.H, o.W);
    CHECK_MSG(dit_vae_ltx2_decode(m, &tz, &ty, &e) == DIT_OK, "window decode: %s", e.msg);
    o.v = dt_to_host(g_be, dy, n);
  }
  if (dz) g_be->ops->free(g_be, dz);
  if (dy) g_be->ops->free(g_be, dy);
  free(win);
  return o;
}

/* diffusers' blend_v / blend_h / blend_t: b's first rows (axis 0 frames, 1 height, 2 width) from a's last. */
static void blend_ref(const vid *a, vid *b, int axis, int extent) {
  const int na = axis == 0 ? a->T : axis == 1 ? a->H : a->W, nb = axis == 0 ? b->T : axis == 1 ? b->H : b->W;
  const int e = extent < na ? (extent < nb ? extent : nb) : (na < nb ? na : nb);
  for (int k = 0; k < e; k++)
    for (int c = 0; c < b->oc; c++)
      for (int t = 0; t < b->T; t++)
        for (int y = 0; y < b->H; y++)
          for (int x = 0; x < b->W; x++) {
            const int kb = axis == 0 ? t : axis == 1 ? y : x;
            if (kb != k) continue;
            const int ka = na - e + k;
            const float u = *px(a, c, axis == 0 ? ka : t, axis == 1 ? ka : y, axis == 2 ? ka : x) *
                            (float)(1.0 - (double)k / e);
            const float v = *px(b, c, t, y, x) * (float)((double)k / e);
            *px(b, c, t, y, x) = u + v;
          }
}

/* tiled_decode of frames [f0, +nf): every tile decoded first (rows x cols), then blended in
 * place in row-major order, cropped to the stride and concatenated, cut to the full size. */
static vid spatial_ref(dit_vae_ltx2 *m, const float *z, int C, int F, int h, int w, int f0, int nf,
                       const dit_vae_ltx2_tiling *t) {
  const int sp = dit_vae_ltx2_get_config(m)->spatial_ratio, tlh = t->min_h / sp, tlw = t->min_w / sp;
  const int slh = t->stride_h / sp, slw = t->stride_w / sp, ny = (h + slh - 1) / slh, nx = (w + slw - 1) / slw;
  vid *tiles = calloc((size_t)ny * nx, sizeof *tiles), o = {NULL, dit_vae_ltx2_get_config(m)->out_channels, 0, 0, 0};
  dit_vae_ltx2_output_size(m, nf, h, w, &o.T, &o.H, &o.W);
  o.v = calloc((size_t)o.oc * o.T * o.H * o.W, sizeof(float));
  for (int i = 0; i < ny; i++)
    for (int j = 0; j < nx; j++)
      tiles[i * nx + j] = decode_host(m, z, C, F, h, w, f0, nf, i * slh, h - i * slh < tlh ? h - i * slh : tlh, j * slw,
                                      w - j * slw < tlw ? w - j * slw : tlw);
  for (int i = 0; i < ny; i++)
    for (int j = 0; j < nx; j++) {
      vid *b = &tiles[i * nx + j];
      if (!b->v || !o.v) continue;
      if (i > 0) blend_ref(&tiles[(i - 1) * nx + j], b, 1, t->min_h - t->stride_h);
      if (j > 0) blend_ref(&tiles[i * nx + j - 1], b, 2, t->min_w - t->stride_w);
      for (int c = 0; c < o.oc; c++)
        for (int tt = 0; tt < o.T; tt++)
          for (int y = 0; y < b->H && y < t->stride_h && i * t->stride_h + y < o.H; y++)
            for (int x = 0; x < b->W && x < t->stride_w && j * t->stride_w + x < o.W; x++)
              *px(&o, c, tt, i * t->stride_h + y, j * t->stride_w + x) = *px(b, c, tt, y, x);
    }
  for (int i = 0; i < ny * nx; i++) free(tiles[i].v);
  free(tiles);
  return o;
}

/* _temporal_tiled_decode: windows of tile + 1 latent frames every stride (spatially tiled), the
 * last frame of each but the first dropped, blended in place in order, cropped, concatenated. */
static vid temporal_ref(dit_vae_ltx2 *m, const float *z, int C, int F, int h, int w, const dit_vae_ltx2_tiling *t) {
  const dit_vae_ltx2_config *c = dit_vae_ltx2_get_config(m);
  const int tlf = t->min_frames / c->temporal_ratio, slf = t->stride_frames / c->temporal_ratio;
  const int n = (F + slf - 1) / slf;
  vid *win = calloc((size_t)n, sizeof *win), o = {NULL, c->out_channels, 0, 0, 0};
  dit_vae_ltx2_output_size(m, F, h, w, &o.T, &o.H, &o.W);
  o.v = calloc((size_t)o.oc * o.T * o.H * o.W, sizeof(float));
  for (int k = 0; k < n; k++) {
    const int i = k * slf, nf = F - i < tlf + 1 ? F - i : tlf + 1;
    const int sp = c->spatial_ratio;
    win[k] = t->spatial && (w > t->min_w / sp || h > t->min_h / sp) ? spatial_ref(m, z, C, F, h, w, i, nf, t)
                                                                   : decode_host(m, z, C, F, h, w, i, nf, 0, h, 0, w);
    if (k > 0 && win[k].v) { /* decoded[:, :, :-1]: the frames keep their places */
      vid cut = win[k];
      cut.T -= 1;
      cut.v = malloc((size_t)cut.oc * cut.T * cut.H * cut.W * sizeof(float));
      for (int ch = 0; cut.v && ch < cut.oc; ch++)
        for (int f = 0; f < cut.T; f++) memcpy(px(&cut, ch, f, 0, 0), px(&win[k], ch, f, 0, 0), (size_t)cut.H * cut.W * sizeof(float));
      free(win[k].v);
      win[k] = cut;
    }
  }
  for (int k = 0, t0 = 0; k < n && o.v; k++) {
    if (!win[k].v) continue;
    if (k > 0) blend_ref(&win[k - 1], &win[k], 0, t->min_frames - t->stride_frames);
    const int keep = k == 0 ? t->stride_frames + 1 : t->stride_frames;
    for (int f = 0; f < keep && f < win[k].T && t0 + f < o.T; f++)
      for (int ch = 0; ch < o.oc; ch++) memcpy(px(&o, ch, t0 + f, 0, 0), px(&win[k], ch, f, 0, 0), (size_t)o.H * o.W * sizeof(float));
    t0 += keep < win[k].T ? keep : win[k].T;
  }
  for (int k = 0; k < n; k++) free(win[k].v);
  free(win);
  return o;
}

/* dit_vae_ltx2_decode_tiled on random latents [1, C, 6, 6, 8] of the ltx2-tiny VAE (16x spatial,
 * 4x temporal) against the reference above: spatial tiles of 3 latent pixels every 2, windows of
 * 2 latent frames every 1, each alone and both; tiles as large as the latents give the untiled
 * decode bit for bit; bad tilings are refused. */
static void test_tiled(const dt_args *a) {
  char dir[1024];
  dt_path(dir, sizeof dir, a->data, "models/ltx2-tiny/vae");
  dit_vae_ltx2 *m = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_vae_ltx2_load(g_be, dir, &m, &e) == DIT_OK, "%s", e.msg);
  if (!m) return;
  const dit_vae_ltx2_config *c = dit_vae_ltx2_get_config(m);
  /* 6 x 8 latent pixels: the last tiles are 2 wide (reflect padding, as in diffusers, takes no 1-wide piece) */
  const int C = c->latent_channels, F = 6, h = 6, w = 8, sp = c->spatial_ratio, st = c->temporal_ratio;
  const size_t nz = (size_t)C * F * h * w;
  float *z = malloc(nz * sizeof *z);
  if (!z) return;
  dt_fill_random(z, nz, 77);
  vid full = decode_host(m, z, C, F, h, w, 0, F, 0, h, 0, w);
  const size_t ny = (size_t)full.oc * full.T * full.H * full.W;
  void *dz = dt_to_device(g_be, z, nz), *dy = NULL;
  CHECK(dz && g_be->ops->alloc(g_be, ny * sizeof(float), &dy, &e) == DIT_OK);
  dit_tensor tz = dev5(dz, 1, C, F, h, w), ty = dev5(dy, 1, full.oc, full.T, full.H, full.W);
  dit_vae_ltx2_tiling t;
  dit_vae_ltx2_tiling_default(&t);
  for (int mode = 0; mode < 4 && dz && dy && full.v; mode++) { /* spatial, temporal, both, tiles as large as all */
    dit_vae_ltx2_tiling_default(&t);
    t.spatial = mode != 1, t.temporal = mode != 0;
    t.min_h = t.min_w = (mode == 3 ? 8 : 3) * sp, t.stride_h = t.stride_w = (mode == 3 ? 8 : 2) * sp;
    t.min_frames = (mode == 3 ? 8 : 2) * st, t.stride_frames = (mode == 3 ? 8 : 1) * st;
    CHECK_MSG(dit_vae_ltx2_decode_tiled(m, &tz, &ty, &t, &e) == DIT_OK, "tiled decode %d: %s", mode, e.msg);
    float *got = dt_to_host(g_be, dy, ny);
    vid ref = mode == 3 ? full : t.temporal ? temporal_ref(m, z, C, F, h, w, &t) : spatial_ref(m, z, C, F, h, w, 0, F, &t);
    if (got && ref.v) {
      const double er = mode == 3 ? 0 : dt_error_of(g_gpu, got, ref.v, ny), seam = dt_error_of(g_gpu, got, full.v, ny);
      if (mode == 3) CHECK_MSG(!memcmp(got, full.v, ny * sizeof(float)), "tiles as large as the latents: not the untiled decode");
      else CHECK_MSG(er <= 1e-6 && seam > 1e-4, "tiled decode %d: %.3g from the reference, %.3g from the untiled", mode,
                     er, seam);
      printf("tiled decode (%s) of [1,%d,%d,%d,%d] -> [%d,%d,%d,%d]: %.3g from diffusers' algorithm, %.3g from the "
             "untiled decode\n", mode == 0 ? "spatial 3 every 2" : mode == 1 ? "temporal 2 every 1" : mode == 2 ?
             "both" : "tiles larger than the latents", C, F, h, w, full.oc, full.T, full.H, full.W, er, seam);
    }
    if (mode != 3) free(ref.v);
    free(got);
  }
  t.spatial = true, t.stride_h = t.min_h + sp; /* a stride beyond its tile */
  CHECK(dit_vae_ltx2_decode_tiled(m, &tz, &ty, &t, &e) == DIT_ERR_INVALID_ARG);
  dit_vae_ltx2_tiling_default(&t);
  t.temporal = true, t.min_frames = st + 1; /* not a multiple of the compression */
  CHECK(dit_vae_ltx2_decode_tiled(m, &tz, &ty, &t, &e) == DIT_ERR_INVALID_ARG);
  if (dz) g_be->ops->free(g_be, dz);
  if (dy) g_be->ops->free(g_be, dy);
  free(full.v);
  free(z);
  dit_vae_ltx2_free(m);
}

/* ---- the encoder ---- */

/* Encodes x [1, 3, T, H, W] (host) and compares the mean with the first latent channels of the
 * encoder's raw output ref [1, 2 C, F, h, w]; *mean_out (when not NULL): the mean, malloc'd. */
static void check_encode(dit_vae_ltx2_enc *e, const char *what, const float *x, const int64_t *xs, const float *ref,
                         const int64_t *rs, float **mean_out) {
  const int C = dit_vae_ltx2_enc_latent_channels(e);
  int F, h, w;
  dit_error er = {0};
  CHECK_MSG(dit_vae_ltx2_enc_latent_size(e, (int)xs[2], (int)xs[3], (int)xs[4], &F, &h, &w, &er) == DIT_OK, "%s",
            er.msg);
  CHECK(rs[1] == 2 * C && rs[2] == F && rs[3] == h && rs[4] == w);
  const size_t nx = (size_t)(xs[1] * xs[2] * xs[3] * xs[4]), nm = (size_t)C * F * h * w;
  void *dx = dt_to_device(g_be, x, nx), *dm = NULL;
  CHECK(dx && g_be->ops->alloc(g_be, nm * sizeof(float), &dm, &er) == DIT_OK);
  if (dx && dm) {
    dit_tensor tx = dev5(dx, 1, xs[1], xs[2], xs[3], xs[4]), tm = dev5(dm, 1, C, F, h, w);
    for (int rep = 0; rep < 2; rep++) { /* the second reuses the activation buffers */
      CHECK_MSG(dit_vae_ltx2_encode(e, &tx, &tm, &er) == DIT_OK, "%s: %s", what, er.msg);
      float *got = dt_to_host(g_be, dm, nm);
      if (got) { /* the reference's first C channels: the mean (the rest repeat the log-variance) */
        const double d = dt_error_of(g_gpu, got, ref, nm);
        CHECK_MSG(d <= TOL, "%s encode %d: %.3g", what, rep, d);
        printf("  %s: [1,3,%lld,%lld,%lld] -> [1,%d,%d,%d,%d]: %.3g\n", what, (long long)xs[2], (long long)xs[3],
               (long long)xs[4], C, F, h, w, d);
        if (mean_out && rep == 1) *mean_out = got, got = NULL;
      }
      free(got);
    }
    /* refused: a mean of the wrong size, an input the encoder cannot take */
    dit_tensor bad = dev5(dm, 1, C, F, h + 1, w);
    CHECK(dit_vae_ltx2_encode(e, &tx, &bad, &er) == DIT_ERR_INVALID_ARG && strstr(er.msg, "mean"));
  }
  if (dx) g_be->ops->free(g_be, dx);
  if (dm) g_be->ops->free(g_be, dm);
}

/* The pipeline's image: rgb.png resized (bilinear) and normalized as prepare_latents received it,
 * encoded, and normalized into the first latent frame of the latents prepare_latents returned. */
static void check_i2v_image(const dt_args *a, dit_vae_ltx2_enc *e, const char *ref) {
  float *px = NULL, *raw = NULL, *lat = NULL, *mean = NULL;
  int64_t ps[8], rs[8], ls[8];
  int pn = 0, rn = 0, ln = 0;
  if (dt_load_f32(ref, "prepare_latents.0.arg0", &px, ps, &pn) ||
      dt_load_f32(ref, "vae_encoder.0.out0", &raw, rs, &rn) || dt_load_f32(ref, "prepare_latents.0.out0", &lat, ls, &ln)) {
    CHECK_MSG(false, "%s: the image-to-video references are missing", ref);
    free(px), free(raw);
    return;
  }
  CHECK(pn == 4 && ps[0] == 1 && ps[1] == 3 && rn == 5 && ln == 3);
  char path[1200];
  dt_path(path, sizeof path, a->data, "images/in/rgb.png");
  FILE *f = fopen(path, "rb");
  uint8_t buf[1 << 16];
  const size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
  if (f) fclose(f);
  dit_image img = {0};
  dit_error er = {0};
  CHECK_MSG(n > 0 && dit_image_decode(buf, n, "rgb.png", DIT_IMAGE_DEFAULT_MAX_PIXELS, &img, &er) == DIT_OK, "%s", er.msg);
  float *mine = NULL;
  const int H = (int)ps[2], W = (int)ps[3];
  CHECK_MSG(dit_image_to_pixels(&img, W, H, DIT_RESAMPLE_BILINEAR, &mine, &er) == DIT_OK, "%s", er.msg);
  if (mine) {
    const double d = dt_rel_err(mine, px, (size_t)3 * H * W);
    CHECK_MSG(d <= 1e-7, "preprocessed image: %.3g", d);
    printf("  image %dx%d -> %dx%d (bilinear): %.3g from diffusers' VideoProcessor\n", img.width, img.height, W, H, d);
  }
  const int64_t xs[5] = {1, 3, 1, H, W};
  check_encode(e, "image", px, xs, raw, rs, &mean);
  if (mean) { /* normalized: the first frame's tokens [h w, C] of the packed latents */
    const int C = (int)rs[1] / 2, hw = (int)(rs[3] * rs[4]);
    dit_vae_ltx2_enc_normalize(e, mean, hw);
    double num = 0, den = 0;
    for (int t = 0; t < hw; t++)
      for (int c = 0; c < C; c++) {
        const double r = lat[(size_t)t * C + c], g = mean[(size_t)c * hw + t];
        num += (g - r) * (g - r), den += r * r;
      }
    const double d = g_gpu ? num / den : sqrt(num / den);
    CHECK_MSG(d <= TOL, "normalized first frame: %.3g", d);
    printf("  normalized into the first latent frame: %.3g\n", d);
  }
  dit_image_free(&img);
  free(px), free(raw), free(lat), free(mean), free(mine);
}

static void check_encoder(const dt_args *a, const char *name) {
  char dir[1024], sub[160], ref[1200], vdir[1200];
  snprintf(sub, sizeof sub, "models/%s", name);
  dt_path(dir, sizeof dir, a->data, sub);
  dt_path(ref, sizeof ref, dir, "reference_i2v.safetensors");
  dt_path(vdir, sizeof vdir, dir, "vae");
  dit_vae_ltx2_enc *e = NULL;
  dit_error er = {0};
  CHECK_MSG(dit_vae_ltx2_enc_load(g_be, vdir, &e, &er) == DIT_OK, "%s: %s", name, er.msg);
  if (!e) return;
  printf("%s encoder (%s):\n", name, g_gpu ? "cuda, nmse" : "cpu, rel err");
  CHECK(dit_vae_ltx2_enc_latent_channels(e) == 8 && dit_vae_ltx2_enc_in_channels(e) == 3);
  float *x = NULL, *y = NULL;
  int64_t xs[8], ys[8];
  int xn = 0, yn = 0;
  const bool have =
      !dt_load_f32(ref, "encoder_clip.in", &x, xs, &xn) && !dt_load_f32(ref, "encoder_clip.out", &y, ys, &yn);
  CHECK_MSG(have && xn == 5 && yn == 5, "%s: no encoder_clip reference", name);
  if (have && xn == 5 && yn == 5) check_encode(e, "clip", x, xs, y, ys, NULL);
  free(x), free(y);
  check_i2v_image(a, e, ref);
  /* sizes it cannot take: 16-pixel multiples, 1 + a multiple of 4 frames */
  int F, h, w;
  CHECK(dit_vae_ltx2_enc_latent_size(e, 1, 48, 64, &F, &h, &w, &er) == DIT_OK && F == 1 && h == 3 && w == 4);
  CHECK(dit_vae_ltx2_enc_latent_size(e, 9, 32, 64, &F, &h, &w, &er) == DIT_OK && F == 3 && h == 2 && w == 4);
  CHECK(dit_vae_ltx2_enc_latent_size(e, 1, 40, 64, &F, &h, &w, &er) == DIT_ERR_INVALID_ARG && strstr(er.msg, "16"));
  CHECK(dit_vae_ltx2_enc_latent_size(e, 3, 32, 64, &F, &h, &w, &er) == DIT_ERR_INVALID_ARG && strstr(er.msg, "4"));
  dit_vae_ltx2_enc_free(e);
}

static void test_encoder(const dt_args *a) {
  check_encoder(a, "ltx2-tiny");
  check_encoder(a, "ltx23-tiny");
}

/* ---- configs refused at load ---- */

/* Writes dir/config.json: the ltx2-tiny VAE config with `field` set to the JSON `value`. */
static void write_config(const dt_args *a, const char *dir, const char *field, const char *value) {
  char src[1200], path[1300], sub[128];
  snprintf(sub, sizeof sub, "models/ltx2-tiny/vae/config.json");
  dt_path(src, sizeof src, a->data, sub);
  json_error_t je;
  json_t *j = json_load_file(src, 0, &je), *v = json_loads(value, JSON_DECODE_ANY, &je);
  CHECK(j && v);
  if (!j || !v) return;
  json_object_set_new(j, field, v);
  snprintf(path, sizeof path, "%s/config.json", dir);
  CHECK(json_dump_file(j, path, JSON_INDENT(1)) == 0);
  json_decref(j);
}

static void test_refused_configs(const dt_args *a) {
  static const struct {
    const char *field, *value;
    dit_status st;
  } cases[] = {
      {"timestep_conditioning", "true", DIT_ERR_UNSUPPORTED},
      {"decoder_inject_noise", "[false, true, false]", DIT_ERR_UNSUPPORTED},
      {"decoder_inject_noise", "true", DIT_ERR_UNSUPPORTED},
      {"patch_size_t", "2", DIT_ERR_UNSUPPORTED},
      {"decoder_spatial_padding_mode", "\"circular\"", DIT_ERR_UNSUPPORTED},
      {"upsample_type", "[\"spatiotemporal\", \"diagonal\"]", DIT_ERR_UNSUPPORTED},
      {"decoder_layers_per_block", "[1, 1]", DIT_ERR_FORMAT},
      {"_class_name", "\"AutoencoderKL\"", DIT_ERR_FORMAT},
  };
  char dir[1200];
  dt_path(dir, sizeof dir, a->tmp, "vae_config");
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  CHECK(dt_run(cmd, NULL) == 0);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_config(a, dir, cases[i].field, cases[i].value);
    dit_vae_ltx2 *m = NULL;
    dit_error e = {0};
    const dit_status s = dit_vae_ltx2_load(g_be, dir, &m, &e);
    CHECK_MSG(s == cases[i].st && !m && strstr(e.msg, cases[i].field), "%s = %s: status %d, %s", cases[i].field,
              cases[i].value, (int)s, e.msg);
    printf("%s = %s: %s\n", cases[i].field, cases[i].value, e.msg);
  }
  static const struct {
    const char *field, *value;
    dit_status st;
  } enc_cases[] = {
      {"downsample_type", "[\"conv\", \"spatiotemporal\"]", DIT_ERR_UNSUPPORTED},
      {"downsample_type", "[\"spatial\"]", DIT_ERR_FORMAT},
      {"encoder_spatial_padding_mode", "\"circular\"", DIT_ERR_UNSUPPORTED},
      {"patch_size_t", "2", DIT_ERR_UNSUPPORTED},
      {"block_out_channels", "[8, 12]", DIT_ERR_UNSUPPORTED},
      {"down_block_types", "[\"LTX2VideoDownBlock3D\", \"DownBlock3D\"]", DIT_ERR_UNSUPPORTED},
  };
  for (size_t i = 0; i < sizeof enc_cases / sizeof enc_cases[0]; i++) {
    write_config(a, dir, enc_cases[i].field, enc_cases[i].value);
    dit_vae_ltx2_enc *en = NULL;
    dit_error e = {0};
    const dit_status s = dit_vae_ltx2_enc_load(g_be, dir, &en, &e);
    const char *named = strcmp(enc_cases[i].field, "block_out_channels") ? enc_cases[i].field : "down block 1";
    CHECK_MSG(s == enc_cases[i].st && !en && strstr(e.msg, named), "encoder %s = %s: status %d, %s",
              enc_cases[i].field, enc_cases[i].value, (int)s, e.msg);
    printf("encoder: %s = %s: %s\n", enc_cases[i].field, enc_cases[i].value, e.msg);
  }
  dit_vae_ltx2 *m = NULL;
  dit_error e = {0};
  CHECK(dit_vae_ltx2_load(g_be, NULL, &m, &e) == DIT_ERR_INVALID_ARG && !m);
  CHECK(dit_vae_ltx2_load(NULL, dir, &m, &e) == DIT_ERR_INVALID_ARG && !m);
}

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_conv3d_op, test_pixel_norm_op, test_ltx20, test_ltx23,
                                                   test_extra, test_tiled, test_encoder, test_refused_configs};
  return dt_main_on_env_backend(argc, argv, cases, sizeof cases / sizeof cases[0], &g_be, &g_gpu);
}

/* The Z-Image transformer on the GPU (CUDA backend), for `bench/gpu_run.sh`: the
 * zimage-tiny fixture's batched (ragged, masked) and single forwards against the
 * diffusers float32 reference, with F32 and with BF16 activations, and a random-weight
 * model at the real width (D 3840, 30 heads of 128) on the GPU against the same model on
 * the CPU. Without a CUDA build or a usable GPU it reports SKIP and passes (ctest on the
 * CPU machines).
 *
 * Tolerances, normalized MSE sum((a-b)^2)/sum(b^2), fixed before the first GPU run: the
 * op suite allows 1e-4 per op with bf16 operands; GEMM inputs are rounded to bf16 (the
 * weights are bf16) so F32 activations get 1e-4 for the whole model, BF16 activations
 * (every intermediate rounded, residual stream in bf16, as diffusers in bf16) 1e-3
 * (SNR >= 30 dB). NaN/Inf never pass. The fixture's VAE decoder (vae_z -> vae_image) is
 * checked on the GPU the same way: F32 activations 1e-4, BF16 activations 1e-3. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/backend.h"
#include "fixture.h"
#include "models/vae_kl.h"
#include "models/zimage.h"
#include "testing.h"

#define NMSE_F32_ACT 1e-4
#define NMSE_BF16_ACT 1e-3

#ifdef DIT_HAVE_CUDA
/* Items [first, first + n) of the fixture in one forward on the GPU; checks each output. */
static void gpu_forward(dit_backend *be, dit_zimage *m, dt_zimage_case *d, int first, int n, double tol, const char *tag) {
  dit_tensor x[2], cap[2], out[2];
  void *dx[2] = {0}, *dc[2] = {0}, *dout[2] = {0};
  size_t nx[2];
  int ok = 1;
  for (int j = 0; j < n; j++) {
    int i = first + j;
    dt_zimage_case_item(d, i, &x[j], &cap[j]); /* data: device copies below */
    nx[j] = (size_t)dit_tensor_numel(&x[j]);
    float *poison = malloc(nx[j] * sizeof(float));
    for (size_t k = 0; poison && k < nx[j]; k++) poison[k] = NAN;
    dx[j] = dt_to_device(be, d->x[i], nx[j]);
    dc[j] = dt_to_device(be, d->cap[i], (size_t)dit_tensor_numel(&cap[j]));
    dout[j] = poison ? dt_to_device(be, poison, nx[j]) : NULL; /* every element must be written */
    free(poison);
    ok &= dx[j] && dc[j] && dout[j];
    x[j].data = dx[j], cap[j].data = dc[j];
    out[j] = dit_tensor_make(DIT_F32, dout[j], 4, d->xs[i]);
    x[j].device = cap[j].device = out[j].device = DIT_DEV_CUDA;
  }
  CHECK_MSG(ok, "%s: device buffers", tag);
  dit_error err = {0};
  dit_status s = ok ? dit_zimage_forward(m, n, x, cap, d->t + first, out, &err) : DIT_ERR_NOMEM;
  CHECK_MSG(s == DIT_OK, "%s: forward of %d item(s) from %d: %s", tag, n, first, err.msg);
  for (int j = 0; j < n && s == DIT_OK; j++) {
    int i = first + j;
    float *o = malloc(nx[j] * sizeof(float));
    CHECK(o && be->ops->download(be, o, dout[j], nx[j] * sizeof(float), &err) == DIT_OK);
    long bad = 0;
    double e = o ? dt_nmse(o, d->ref[i], nx[j], &bad) : 1;
    double rel = o ? dt_rel_err(o, d->ref[i], nx[j]) : 1;
    printf("gpu zimage %s dit_out%d (batch of %d): nmse %.3g, max rel err %.3g, non-finite %ld\n", tag, i, n, e, rel,
           bad);
    CHECK_MSG(bad == 0 && e <= tol, "%s dit_out%d: nmse %g > %g or %ld non-finite", tag, i, e, tol, bad);
    free(o);
  }
  for (int j = 0; j < n; j++) {
    if (dx[j]) be->ops->free(be, dx[j]);
    if (dc[j]) be->ops->free(be, dc[j]);
    if (dout[j]) be->ops->free(be, dout[j]);
  }
}

/* Host tensors into a GPU model (the staged path a CPU pipeline uses): the batched
 * fixture case again, same tolerance as the device-tensor call. */
static void test_staged(dit_zimage *m, dt_zimage_case *d) {
  dit_tensor x[2], cap[2], out[2];
  float *o[2];
  for (int i = 0; i < 2; i++) {
    dt_zimage_case_item(d, i, &x[i], &cap[i]);
    size_t nx = (size_t)dit_tensor_numel(&x[i]);
    o[i] = malloc(nx * sizeof(float));
    for (size_t k = 0; o[i] && k < nx; k++) o[i][k] = NAN;
    out[i] = dit_tensor_make(DIT_F32, o[i], 4, d->xs[i]);
  }
  dit_error err = {0};
  dit_status s = o[0] && o[1] ? dit_zimage_forward(m, 2, x, cap, d->t, out, &err) : DIT_ERR_NOMEM;
  CHECK_MSG(s == DIT_OK, "staged forward: %s", err.msg);
  for (int i = 0; i < 2 && s == DIT_OK; i++) {
    long bad = 0;
    double e = dt_nmse(o[i], d->ref[i], (size_t)dit_tensor_numel(&x[i]), &bad);
    printf("gpu zimage staged (host tensors) bf16-act dit_out%d: nmse %.3g, non-finite %ld\n", i, e, bad);
    CHECK_MSG(bad == 0 && e <= NMSE_BF16_ACT, "staged dit_out%d: nmse %g", i, e);
  }
  /* mixed host and GPU tensors are refused */
  dit_tensor xm = x[1];
  xm.device = DIT_DEV_CUDA;
  dit_tensor xs2[2] = {x[0], xm};
  CHECK(dit_zimage_forward(m, 2, xs2, cap, d->t, out, &err) == DIT_ERR_INVALID_ARG);
  free(o[0]), free(o[1]);
}

static void test_fixture(dit_backend *be, const dt_args *a) {
  char fixture[4096], tdir[4096], comp[4096];
  dt_model_dir(a, a->data, "zimage-tiny", fixture, sizeof fixture);
  dt_path(tdir, sizeof tdir, fixture, "transformer");
  dt_path(comp, sizeof comp, fixture, "components.safetensors");
  dt_zimage_case d;
  int loaded = dt_zimage_case_load(comp, &d) == 0;
  CHECK_MSG(loaded, "cannot load the dit_* tensors of %s", comp);
  dit_zimage *m = NULL;
  dit_error err = {0};
  dit_status s = dit_zimage_load(be, tdir, &m, &err);
  CHECK_MSG(s == DIT_OK, "load %s on the GPU: %s", tdir, err.msg);
  if (s == DIT_OK && loaded) {
    gpu_forward(be, m, &d, 0, 2, NMSE_F32_ACT, "f32-act");
    gpu_forward(be, m, &d, 0, 1, NMSE_F32_ACT, "f32-act");
    gpu_forward(be, m, &d, 1, 1, NMSE_F32_ACT, "f32-act");
    CHECK(dit_zimage_set_act_dtype(m, DIT_BF16, &err) == DIT_OK);
    gpu_forward(be, m, &d, 0, 2, NMSE_BF16_ACT, "bf16-act");
    gpu_forward(be, m, &d, 1, 1, NMSE_BF16_ACT, "bf16-act");
    gpu_forward(be, m, &d, 0, 2, NMSE_BF16_ACT, "bf16-act"); /* cached tables, reused buffer */
    test_staged(m, &d);
  }
  dit_zimage_free(m);
  dt_zimage_case_free(&d);
}

/* Random-weight model at the real width, 1 main + 1 refiner layer, 256x256 image and 77
 * caption tokens: GPU (BF16 activations) against the CPU (F32), same seed. */
static void test_real_width(dit_backend *gpu) {
  dit_error err = {0};
  dit_backend *cpu = NULL;
  CHECK(dit_backend_cpu_create(0, &cpu, &err) == DIT_OK);
  dit_zimage_config c;
  dit_zimage_config_turbo(&c);
  c.n_layers = 1, c.n_refiner_layers = 1;
  dit_zimage *mc = NULL, *mg = NULL;
  CHECK_MSG(dit_zimage_create_random(cpu, &c, DIT_BF16, 5, &mc, &err) == DIT_OK, "%s", err.msg);
  CHECK_MSG(dit_zimage_create_random(gpu, &c, DIT_BF16, 5, &mg, &err) == DIT_OK, "%s", err.msg);
  if (mg) CHECK(dit_zimage_set_act_dtype(mg, DIT_BF16, &err) == DIT_OK);
  const int64_t L = 77, lat = 32, nx = 16 * lat * lat;
  float *xh = malloc((size_t)nx * sizeof(float)), *ch = malloc((size_t)(L * 2560) * sizeof(float));
  float *oc = malloc((size_t)nx * sizeof(float)), *og = malloc((size_t)nx * sizeof(float));
  if (mc && mg && xh && ch && oc && og) {
    dt_fill_random(xh, (size_t)nx, 11);
    dt_fill_random(ch, (size_t)(L * 2560), 12);
    float t = 0.7f;
    dit_tensor x = dit_tensor_4d(DIT_F32, xh, 16, 1, lat, lat), cap = dit_tensor_2d(DIT_F32, ch, L, 2560);
    dit_tensor out = dit_tensor_4d(DIT_F32, oc, 16, 1, lat, lat);
    CHECK_MSG(dit_zimage_forward(mc, 1, &x, &cap, &t, &out, &err) == DIT_OK, "cpu: %s", err.msg);
    void *dx = dt_to_device(gpu, xh, (size_t)nx), *dc = dt_to_device(gpu, ch, (size_t)(L * 2560)), *dout = dt_to_device(gpu, xh, (size_t)nx);
    if (dx && dc && dout) {
      x.data = dx, cap.data = dc, out.data = dout;
      x.device = cap.device = out.device = DIT_DEV_CUDA;
      CHECK_MSG(dit_zimage_forward(mg, 1, &x, &cap, &t, &out, &err) == DIT_OK, "gpu: %s", err.msg);
      CHECK(gpu->ops->download(gpu, og, dout, (size_t)nx * sizeof(float), &err) == DIT_OK);
      long bad = 0;
      double e = dt_nmse(og, oc, (size_t)nx, &bad);
      printf("gpu zimage real width (1+1 layers, 256x256, 77 tokens) bf16-act vs cpu: nmse %.3g, max rel err %.3g, "
             "non-finite %ld\n", e, dt_rel_err(og, oc, (size_t)nx), bad);
      CHECK_MSG(bad == 0 && e <= NMSE_BF16_ACT, "real width: nmse %g > %g or %ld non-finite", e, NMSE_BF16_ACT, bad);
    }
    if (dx) gpu->ops->free(gpu, dx);
    if (dc) gpu->ops->free(gpu, dc);
    if (dout) gpu->ops->free(gpu, dout);
  }
  free(xh), free(ch), free(oc), free(og);
  dit_zimage_free(mc);
  dit_zimage_free(mg);
  dit_backend_free(cpu);
}

/* Graph replay: Z-Image at the real width (1 + 1 layers), host tensors, four calls with new
 * latents and timesteps in the same buffers; calls 2-4 are recorded / launched as a CUDA
 * graph and must equal, bit for bit, a model run op by op (on a profiler wrapper, which
 * refuses capture) on the same inputs. */
static void test_replay(dit_backend *gpu) {
  dit_error err = {0};
  dit_backend *prof = NULL;
  CHECK(dit_backend_profiler_create(gpu, &prof, &err) == DIT_OK);
  dit_zimage_config c;
  dit_zimage_config_turbo(&c);
  c.n_layers = 2, c.n_refiner_layers = 1;
  dit_zimage *mg = NULL, *me = NULL;
  CHECK_MSG(dit_zimage_create_random(gpu, &c, DIT_BF16, 7, &mg, &err) == DIT_OK, "%s", err.msg);
  CHECK_MSG(prof && dit_zimage_create_random(prof, &c, DIT_BF16, 7, &me, &err) == DIT_OK, "%s", err.msg);
  if (mg) CHECK(dit_zimage_set_act_dtype(mg, DIT_BF16, &err) == DIT_OK);
  if (me) CHECK(dit_zimage_set_act_dtype(me, DIT_BF16, &err) == DIT_OK);
  if (prof) dit_backend_profiler_enable(prof, true);
  const int64_t L = 45, lat = 32, nx = 16 * lat * lat;
  float *xh = malloc((size_t)nx * sizeof(float)), *ch = malloc((size_t)(L * 2560) * sizeof(float));
  float *og = malloc((size_t)nx * sizeof(float)), *oe = malloc((size_t)nx * sizeof(float));
  if (mg && me && xh && ch && og && oe) {
    dt_fill_random(ch, (size_t)(L * 2560), 5);
    const float ts[4] = {1.0f, 0.8f, 0.45f, 0.1f};
    for (int step = 0; step < 4; step++) {
      dt_fill_random(xh, (size_t)nx, 40 + (uint64_t)step);
      dit_tensor x = dit_tensor_4d(DIT_F32, xh, 16, 1, lat, lat), cap = dit_tensor_2d(DIT_F32, ch, L, 2560);
      dit_tensor o1 = dit_tensor_4d(DIT_F32, og, 16, 1, lat, lat), o2 = dit_tensor_4d(DIT_F32, oe, 16, 1, lat, lat);
      dit_status s = dit_zimage_forward(mg, 1, &x, &cap, &ts[step], &o1, &err);
      CHECK_MSG(s == DIT_OK, "replayed forward, step %d: %s", step, err.msg);
      dit_status s2 = dit_zimage_forward(me, 1, &x, &cap, &ts[step], &o2, &err);
      CHECK_MSG(s2 == DIT_OK, "op-by-op forward, step %d: %s", step, err.msg);
      if (s != DIT_OK || s2 != DIT_OK) break;
      long cp = 0, lau = 0;
      dit_zimage_graph_counts(mg, &cp, &lau);
      dt_check_replay_step("zimage", step, ts[step], og, oe, (size_t)nx, cp, lau);
    }
  }
  free(xh), free(ch), free(og), free(oe);
  dit_zimage_free(mg);
  dit_zimage_free(me);
  dit_backend_profiler_free(prof);
}
#endif

/* The zimage-tiny VAE decoder on the GPU against diffusers' float32 decode, with F32 and
 * with BF16 activations, untiled and tiled. */
static void test_vae(dit_backend *be, const dt_args *a) {
  char fx[4096], dir[4096], file[4096];
  dt_model_dir(a, a->data, "zimage-tiny", fx, sizeof fx);
  dt_path(dir, sizeof dir, fx, "vae");
  dt_path(file, sizeof file, fx, "components.safetensors");
  float *z = NULL, *ref = NULL;
  int64_t zs[8], rs[8];
  int zn, rn;
  if (dt_load_f32(file, "vae_z", &z, zs, &zn) || dt_load_f32(file, "vae_image", &ref, rs, &rn) || zn != 4 ||
      rn != 4) {
    CHECK_MSG(0, "cannot load vae_z / vae_image from %s", file);
    free(z), free(ref);
    return;
  }
  dit_error err = {0};
  dit_vae_kl *m = NULL;
  CHECK_MSG(dit_vae_kl_load(be, dir, &m, &err) == DIT_OK, "gpu vae load %s: %s", dir, err.msg);
  const size_t n = (size_t)(rs[0] * rs[1] * rs[2] * rs[3]);
  float *out = malloc(n * sizeof *out), *tiled_f32 = malloc(n * sizeof *tiled_f32);
  for (int k = 0; m && out && tiled_f32 && k < 4; k++) {
    const dit_dtype dt = k < 2 ? DIT_F32 : DIT_BF16;
    const int tile = k % 2 ? 4 : 0;
    CHECK(dit_vae_kl_set_act_dtype(m, dt, &err) == DIT_OK);
    dit_tensor tz = dit_tensor_make(DIT_F32, z, 4, zs), ti = dit_tensor_make(DIT_F32, out, 4, rs);
    dit_status s = dit_vae_kl_decode(m, &tz, &ti, tile, &err);
    CHECK_MSG(s == DIT_OK, "gpu vae decode (%s, tile %d): %s", dit_dtype_name(dt), tile, err.msg);
    if (s != DIT_OK) continue;
    /* untiled: against diffusers' decode; tiled (4-pixel tiles blend, so not the untiled image):
     * F32 kept, BF16 against it */
    const float *want = !tile ? ref : tiled_f32;
    if (tile && dt == DIT_F32) memcpy(tiled_f32, out, n * sizeof *out);
    long bad = 0;
    double e = tile && dt == DIT_F32 ? 0.0 : dt_nmse(out, want, n, &bad);
    const double tol = dt == DIT_F32 ? NMSE_F32_ACT : NMSE_BF16_ACT;
    printf("gpu vae %s-act%s: nmse %.3g%s, non-finite %ld\n", dt == DIT_F32 ? "f32" : "bf16",
           tile ? " (tiles of 4)" : "", e, tile ? (dt == DIT_F32 ? " (kept as the tiled reference)" : " vs f32 tiled")
                                              : " vs diffusers float32", bad);
    CHECK_MSG(bad == 0 && e <= tol, "gpu vae %s tile %d nmse %g > %g", dit_dtype_name(dt), tile, e, tol);
  }
  /* the kept buffers: after a tiled decode, two untiled BF16 decodes (the first plans anew, the
   * second reuses its buffers) give the same image bit for bit */
  float *again = malloc(n * sizeof *again);
  if (m && out && again) {
    dit_tensor tz = dit_tensor_make(DIT_F32, z, 4, zs), ti = dit_tensor_make(DIT_F32, out, 4, rs);
    dit_tensor ta = dit_tensor_make(DIT_F32, again, 4, rs);
    CHECK(dit_vae_kl_set_act_dtype(m, DIT_BF16, &err) == DIT_OK);
    CHECK(dit_vae_kl_decode(m, &tz, &ti, 4, &err) == DIT_OK);
    CHECK(dit_vae_kl_decode(m, &tz, &ti, 0, &err) == DIT_OK);
    CHECK(dit_vae_kl_decode(m, &tz, &ta, 0, &err) == DIT_OK);
    CHECK_MSG(!memcmp(out, again, n * sizeof *out), "gpu vae: a decode on kept buffers differs");
    long bad = 0;
    const double e = dt_nmse(again, ref, n, &bad);
    printf("gpu vae bf16-act, kept buffers: nmse %.3g vs diffusers float32\n", e);
    CHECK(bad == 0 && e <= NMSE_BF16_ACT);
  }
  free(again);
  free(tiled_f32);
  free(out), free(z), free(ref);
  dit_vae_kl_free(m);
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
#ifdef DIT_HAVE_CUDA
  dit_backend *be = NULL;
  dit_error err = {0};
  if (dit_backend_cuda_create(0, DIT_GPU_PRECISION_BF16, NULL, &be, &err) != DIT_OK) {
    printf("SKIP: no usable GPU: %s\n", err.msg);
    return dt_finish();
  }
  test_fixture(be, &a);
  test_vae(be, &a);
  test_real_width(be);
  test_replay(be);
  dit_backend_free(be);
#else
  printf("SKIP: built without CUDA\n");
#endif
  return dt_finish();
}

/* The FLUX.2 transformer on the GPU (CUDA backend): the flux2-klein-tiny fixture's
 * transformer case (dit_* of components.safetensors) against the diffusers float32
 * reference with F32 and with BF16 activations, single and batched, from device tensors
 * and from host tensors; and a random-weight model at the klein-4B width (hidden 3072,
 * 24 heads of 128, one double + one single block) on the GPU (BF16 activations) against
 * the same model on the CPU. Without a CUDA build or a usable GPU it reports SKIP and
 * passes (ctest on the CPU machines).
 * Tolerances, normalized MSE sum((a-b)^2)/sum(b^2), as test_bench_gpu.c fixed them for
 * Z-Image: 1e-4 with F32 activations (GEMM inputs rounded to bf16), 1e-3 with BF16
 * activations. NaN/Inf never pass. Usage: test_flux2_gpu [--fixture DIR]. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "fixture.h"
#include "models/flux2.h"
#include "testing.h"

#define NMSE_F32_ACT 1e-4
#define NMSE_BF16_ACT 1e-3

#ifdef DIT_HAVE_CUDA
/* B copies of the fixture case in one forward; device (on_dev) or host tensors. */
static void gpu_case(dit_backend *be, dit_flux2 *m, const dt_flux2_case *d, int B, bool on_dev, double tol, const char *tag) {
  const size_t nx = (size_t)(d->hs[1] * d->hs[2]), ne = (size_t)(d->es[1] * d->es[2]), no = (size_t)(d->os[1] * d->os[2]);
  float *hx = malloc(B * nx * sizeof(float)), *he = malloc(B * ne * sizeof(float)), *ho = calloc(B * no, sizeof(float));
  float t[4];
  for (int b = 0; b < B; b++) {
    memcpy(hx + b * nx, d->hidden, nx * sizeof(float));
    memcpy(he + b * ne, d->enc, ne * sizeof(float));
    t[b] = d->t[0];
  }
  void *dx = on_dev ? dt_to_device(be, hx, B * nx) : hx, *de = on_dev ? dt_to_device(be, he, B * ne) : he;
  void *dout = on_dev ? dt_to_device(be, ho, B * no) : ho;
  dit_tensor x = dit_tensor_3d(DIT_F32, dx, B, d->hs[1], d->hs[2]), e = dit_tensor_3d(DIT_F32, de, B, d->es[1], d->es[2]);
  dit_tensor o = dit_tensor_3d(DIT_F32, dout, B, d->os[1], d->os[2]);
  if (on_dev) x.device = e.device = o.device = DIT_DEV_CUDA;
  dit_error err = {0};
  dit_status s = dx && de && dout ? dit_flux2_forward(m, &x, &e, t, NULL, d->img_ids, d->txt_ids, &o, &err) : DIT_ERR_NOMEM;
  if (s == DIT_OK && on_dev) s = be->ops->download(be, ho, dout, B * no * sizeof(float), &err);
  if (s == DIT_OK && !on_dev) s = be->ops->sync(be, &err);
  CHECK_MSG(s == DIT_OK, "gpu flux2 %s: %s", tag, err.msg);
  for (int b = 0; s == DIT_OK && b < B; b++) {
    long bad = 0;
    double v = dt_nmse(ho + b * no, d->ref, no, &bad);
    printf("gpu flux2 %s item %d of %d (%s tensors): nmse %.3g, non-finite %ld\n", tag, b, B, on_dev ? "device" : "host",
           v, bad);
    CHECK_MSG(v <= tol && bad == 0, "gpu flux2 %s: nmse %.3g > %.3g or %ld non-finite", tag, v, tol, bad);
  }
  if (on_dev) {
    if (dx) be->ops->free(be, dx);
    if (de) be->ops->free(be, de);
    if (dout) be->ops->free(be, dout);
  }
  free(hx);
  free(he);
  free(ho);
}

static void test_fixture(dit_backend *be, const char *fixture) {
  char tdir[4200], comp[4200];
  snprintf(tdir, sizeof tdir, "%s/transformer", fixture);
  snprintf(comp, sizeof comp, "%s/components.safetensors", fixture);
  dt_flux2_case d;
  int ok = dt_flux2_case_load(comp, &d) == 0;
  CHECK_MSG(ok, "cannot load the dit_* case of %s", comp);
  dit_flux2 *m = NULL;
  dit_error err = {0};
  dit_status s = dit_flux2_load(be, tdir, &m, &err);
  CHECK_MSG(s == DIT_OK, "load %s on the GPU: %s", tdir, err.msg);
  if (s == DIT_OK && ok) {
    gpu_case(be, m, &d, 1, true, NMSE_F32_ACT, "f32-act");
    gpu_case(be, m, &d, 2, true, NMSE_F32_ACT, "f32-act");
    CHECK(dit_flux2_set_act_dtype(m, DIT_BF16, &err) == DIT_OK);
    gpu_case(be, m, &d, 1, true, NMSE_BF16_ACT, "bf16-act");
    gpu_case(be, m, &d, 2, true, NMSE_BF16_ACT, "bf16-act");
    gpu_case(be, m, &d, 1, false, NMSE_BF16_ACT, "bf16-act");
  }
  dit_flux2_free(m);
  dt_flux2_case_free(&d);
}

/* klein-4B width, 1 double + 1 single block, 16x16 latent tokens and 64 text tokens:
 * GPU (BF16 activations) against the CPU (F32), same seed. */
static void test_klein_width(dit_backend *gpu) {
  dit_error err = {0};
  dit_backend *cpu = NULL;
  CHECK(dit_backend_cpu_create(0, &cpu, &err) == DIT_OK);
  dit_flux2_config c;
  dit_flux2_config_klein(&c, false);
  c.n_layers = 1, c.n_single_layers = 1;
  dit_flux2 *mc = NULL, *mg = NULL;
  CHECK_MSG(dit_flux2_create_random(cpu, &c, DIT_BF16, 5, &mc, &err) == DIT_OK, "%s", err.msg);
  CHECK_MSG(dit_flux2_create_random(gpu, &c, DIT_BF16, 5, &mg, &err) == DIT_OK, "%s", err.msg);
  if (mg) CHECK(dit_flux2_set_act_dtype(mg, DIT_BF16, &err) == DIT_OK);
  const int64_t side = 16, Si = side * side, St = 64, C = 128, J = 7680;
  float *xh = malloc((size_t)(Si * C) * sizeof(float)), *th = malloc((size_t)(St * J) * sizeof(float));
  float *oc = malloc((size_t)(Si * C) * sizeof(float)), *og = malloc((size_t)(Si * C) * sizeof(float));
  float *ii = calloc((size_t)Si * 4, sizeof(float)), *ti = calloc((size_t)St * 4, sizeof(float));
  if (mc && mg && xh && th && oc && og && ii && ti) {
    dt_fill_random(xh, (size_t)(Si * C), 11);
    dt_fill_random(th, (size_t)(St * J), 12);
    for (int64_t r = 0; r < Si; r++) ii[4 * r + 1] = (float)(r / side), ii[4 * r + 2] = (float)(r % side);
    for (int64_t r = 0; r < St; r++) ti[4 * r + 3] = (float)r;
    float t = 0.7f;
    dit_tensor x = dit_tensor_3d(DIT_F32, xh, 1, Si, C), tx = dit_tensor_3d(DIT_F32, th, 1, St, J);
    dit_tensor o1 = dit_tensor_3d(DIT_F32, oc, 1, Si, C), o2 = dit_tensor_3d(DIT_F32, og, 1, Si, C);
    dit_status s = dit_flux2_forward(mc, &x, &tx, &t, NULL, ii, ti, &o1, &err);
    CHECK_MSG(s == DIT_OK, "cpu klein-width forward: %s", err.msg);
    dit_status s2 = dit_flux2_forward(mg, &x, &tx, &t, NULL, ii, ti, &o2, &err);
    if (s2 == DIT_OK) s2 = gpu->ops->sync(gpu, &err);
    CHECK_MSG(s2 == DIT_OK, "gpu klein-width forward: %s", err.msg);
    if (s == DIT_OK && s2 == DIT_OK) {
      long bad = 0;
      double v = dt_nmse(og, oc, (size_t)(Si * C), &bad);
      printf("gpu flux2 klein-4B width (1+1 blocks, %lld image + %lld text tokens), bf16-act vs cpu: nmse %.3g, "
             "non-finite %ld\n", (long long)Si, (long long)St, v, bad);
      CHECK_MSG(v <= NMSE_BF16_ACT && bad == 0, "klein width: nmse %.3g", v);
    }
  }
  free(xh), free(th), free(oc), free(og), free(ii), free(ti);
  dit_flux2_free(mc);
  dit_flux2_free(mg);
  dit_backend_free(cpu);
}

/* Graph replay (src/backend/replay.c, cuda_graph.c): a model whose second and third calls
 * are recorded / launched as a CUDA graph gives bit for bit what op-by-op runs give on
 * the same inputs, with new inputs and timesteps in the same buffers each call (what a
 * sampler does). The op-by-op model runs on a profiler wrapper, which refuses capture. */
static void test_replay(dit_backend *gpu) {
  dit_error err = {0};
  dit_backend *prof = NULL;
  CHECK(dit_backend_profiler_create(gpu, &prof, &err) == DIT_OK);
  dit_flux2_config c;
  dit_flux2_config_klein(&c, false);
  c.n_layers = 1, c.n_single_layers = 2;
  dit_flux2 *mg = NULL, *me = NULL;
  CHECK_MSG(dit_flux2_create_random(gpu, &c, DIT_BF16, 9, &mg, &err) == DIT_OK, "%s", err.msg);
  CHECK_MSG(prof && dit_flux2_create_random(prof, &c, DIT_BF16, 9, &me, &err) == DIT_OK, "%s", err.msg);
  if (mg) CHECK(dit_flux2_set_act_dtype(mg, DIT_BF16, &err) == DIT_OK);
  if (me) CHECK(dit_flux2_set_act_dtype(me, DIT_BF16, &err) == DIT_OK);
  if (prof) dit_backend_profiler_enable(prof, true);
  const int64_t side = 16, Si = side * side, St = 48, C = 128, J = 7680;
  float *xh = malloc((size_t)(Si * C) * sizeof(float)), *th = malloc((size_t)(St * J) * sizeof(float));
  float *og = malloc((size_t)(Si * C) * sizeof(float)), *oe = malloc((size_t)(Si * C) * sizeof(float));
  float *ii = calloc((size_t)Si * 4, sizeof(float)), *ti = calloc((size_t)St * 4, sizeof(float));
  if (mg && me && xh && th && og && oe && ii && ti) {
    for (int64_t r = 0; r < Si; r++) ii[4 * r + 1] = (float)(r / side), ii[4 * r + 2] = (float)(r % side);
    for (int64_t r = 0; r < St; r++) ti[4 * r + 3] = (float)r;
    dt_fill_random(th, (size_t)(St * J), 21);
    const float ts[4] = {1.0f, 0.75f, 0.5f, 0.25f};
    for (int step = 0; step < 4; step++) {
      dt_fill_random(xh, (size_t)(Si * C), 30 + (uint64_t)step);
      dit_tensor x = dit_tensor_3d(DIT_F32, xh, 1, Si, C), tx = dit_tensor_3d(DIT_F32, th, 1, St, J);
      dit_tensor o1 = dit_tensor_3d(DIT_F32, og, 1, Si, C), o2 = dit_tensor_3d(DIT_F32, oe, 1, Si, C);
      dit_status s = dit_flux2_forward(mg, &x, &tx, &ts[step], NULL, ii, ti, &o1, &err);
      CHECK_MSG(s == DIT_OK, "replayed forward, step %d: %s", step, err.msg);
      dit_status s2 = dit_flux2_forward(me, &x, &tx, &ts[step], NULL, ii, ti, &o2, &err);
      CHECK_MSG(s2 == DIT_OK, "op-by-op forward, step %d: %s", step, err.msg);
      if (s != DIT_OK || s2 != DIT_OK) break;
      long cap = 0, lau = 0;
      dit_flux2_graph_counts(mg, &cap, &lau);
      dt_check_replay_step("flux2", step, ts[step], og, oe, (size_t)(Si * C), cap, lau);
    }
    long cap = 0, lau = 0;
    dit_flux2_graph_counts(me, &cap, &lau);
    CHECK(cap == 0 && lau == 0);
  }
  free(xh), free(th), free(og), free(oe), free(ii), free(ti);
  dit_flux2_free(mg);
  dit_flux2_free(me);
  dit_backend_profiler_free(prof);
}
#endif

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
#ifdef DIT_HAVE_CUDA
  dit_backend *be = NULL;
  dit_error err = {0};
  if (dit_backend_cuda_create(0, DIT_GPU_PRECISION_BF16, NULL, &be, &err) != DIT_OK) {
    printf("SKIP: no usable GPU (%s)\n", err.msg);
    return dt_finish();
  }
  char fixture[4096];
  dt_model_dir(&a, a.data, "flux2-klein-tiny", fixture, sizeof fixture);
  test_fixture(be, fixture);
  test_klein_width(be);
  test_replay(be);
  dit_backend_free(be);
#else
  printf("SKIP: built without CUDA\n");
#endif
  return dt_finish();
}

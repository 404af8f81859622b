/* Krea 2 on the GPU (CUDA backend): the krea2-raw-tiny fixture's transformer case (text fusion,
 * txt_in and one forward over a masked text, dit_* of components.safetensors) against the
 * diffusers float32 reference with F32 and with BF16 activations, single and as a batch of
 * two; the Qwen-Image VAE decoder (BF16 activations) on the components' latent; and a
 * random-weight model at the released width (hidden 6144, 48 heads / 12 KV heads of 128, the
 * 2560-wide text fusion of 12 taps; one block) on the GPU (BF16 activations) against the same
 * model on the CPU; and the whole pipeline (dit_generate on the GPU) on the Raw and Turbo
 * fixtures, the image at least 35 dB PSNR from diffusers' float32 one. Without a CUDA build or a usable GPU it reports SKIP and passes.
 * Tolerances (normalized MSE, as test_flux2_gpu): 1e-4 with F32 activations, 1e-3 with BF16. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ditrun.h"

#include "backend/backend.h"
#include "fixture.h"
#include "models/krea2.h"
#include "models/vae_qwen.h"
#include "testing.h"

#define NMSE_F32_ACT 1e-4
#define NMSE_BF16_ACT 1e-3

#ifdef DIT_HAVE_CUDA
static void check_nmse(const char *what, const float *got, const float *want, size_t n, double tol) {
  long bad = 0;
  const double v = dt_nmse(got, want, n, &bad);
  printf("gpu krea2 %s: nmse %.3g, non-finite %ld\n", what, v, bad);
  CHECK_MSG(v <= tol && bad == 0, "%s: nmse %.3g > %.3g or %ld non-finite", what, v, tol, bad);
}

/* B copies of the components' case through encode_text and forward, from device tensors. */
static void gpu_case(dit_backend *be, dit_krea2 *m, const char *comp, int B, double tol, const char *tag) {
  const dit_krea2_config *c = dit_krea2_get_config(m);
  const int64_t L = 12, Si = 24, C = c->in_channels, T = c->n_taps, td = c->text_dim, D = c->dim;
  const size_t ne = (size_t)(L * T * td), nx = (size_t)(Si * C), nt = (size_t)(L * D);
  float *enc = dt_load_f32_n(comp, "dit_encoder", ne), *x = dt_load_f32_n(comp, "dit_hidden", nx);
  float *pos = dt_load_f32_n(comp, "dit_position_ids", (size_t)(3 * (L + Si))), *t1 = dt_load_f32_n(comp, "dit_t", 1);
  float *want = dt_load_f32_n(comp, "dit_out", nx), *want_t = dt_load_f32_n(comp, "dit_txt_in", nt);
  float *he = malloc(B * ne * sizeof(float)), *hx = malloc(B * nx * sizeof(float)), *ho = calloc(B * nx, sizeof(float));
  float *ht = calloc(B * nt, sizeof(float));
  uint8_t mask[2 * 12];
  for (int b = 0; b < B; b++)
    for (int i = 0; i < L; i++) mask[b * L + i] = i < 9; /* the components' mask: 9 real tokens */
  if (enc && x && pos && t1 && want && want_t && he && hx && ho && ht) {
    for (int b = 0; b < B; b++) memcpy(he + b * ne, enc, ne * sizeof(float)), memcpy(hx + b * nx, x, nx * sizeof(float));
    void *de = dt_to_device(be, he, B * ne), *dx = dt_to_device(be, hx, B * nx), *dt = dt_to_device(be, ht, B * nt);
    void *dout = dt_to_device(be, ho, B * nx);
    dit_tensor te = dit_tensor_4d(DIT_F32, de, B, L, T, td), tx = dit_tensor_3d(DIT_F32, dx, B, Si, C);
    dit_tensor tt = dit_tensor_3d(DIT_F32, dt, B, L, D), to = dit_tensor_3d(DIT_F32, dout, B, Si, C);
    te.device = tx.device = tt.device = to.device = DIT_DEV_CUDA;
    const float t[2] = {t1[0], t1[0]};
    dit_error err = {0};
    dit_status s = de && dx && dt && dout ? dit_krea2_encode_text(m, &te, mask, NULL, &tt, &err) : DIT_ERR_NOMEM;
    if (s == DIT_OK) s = dit_krea2_forward(m, &tx, &tt, mask, t, pos, &to, &err);
    if (s == DIT_OK) s = be->ops->download(be, ho, dout, B * nx * sizeof(float), &err);
    if (s == DIT_OK) s = be->ops->download(be, ht, dt, B * nt * sizeof(float), &err);
    CHECK_MSG(s == DIT_OK, "gpu krea2 %s: %s", tag, err.msg);
    for (int b = 0; s == DIT_OK && b < B; b++) {
      char what[96];
      snprintf(what, sizeof what, "%s txt_in (9 real tokens), item %d of %d", tag, b, B);
      check_nmse(what, ht + b * nt, want_t, (size_t)(9 * D), tol);
      snprintf(what, sizeof what, "%s forward, item %d of %d", tag, b, B);
      check_nmse(what, ho + b * nx, want, nx, tol);
    }
    void *bufs[4] = {de, dx, dt, dout};
    for (int i = 0; i < 4; i++)
      if (bufs[i]) be->ops->free(be, bufs[i]);
  }
  free(enc), free(x), free(pos), free(t1), free(want), free(want_t), free(he), free(hx), free(ho), free(ht);
}

static void test_fixture(dit_backend *be, const char *fixture) {
  char dir[4200], comp[4200];
  snprintf(dir, sizeof dir, "%s/transformer", fixture);
  snprintf(comp, sizeof comp, "%s/components.safetensors", fixture);
  dit_krea2 *m = NULL;
  dit_error err = {0};
  CHECK_MSG(dit_krea2_load(be, dir, &m, &err) == DIT_OK, "load %s on the GPU: %s", dir, err.msg);
  if (m) {
    gpu_case(be, m, comp, 1, NMSE_F32_ACT, "f32-act");
    CHECK(dit_krea2_set_act_dtype(m, DIT_BF16, &err) == DIT_OK);
    gpu_case(be, m, comp, 1, NMSE_BF16_ACT, "bf16-act");
    gpu_case(be, m, comp, 2, NMSE_BF16_ACT, "bf16-act");
  }
  dit_krea2_free(m);
  /* the VAE decoder, bf16 activations */
  snprintf(dir, sizeof dir, "%s/vae", fixture);
  dit_vae_qwen *v = NULL;
  CHECK_MSG(dit_vae_qwen_load(be, dir, &v, &err) == DIT_OK, "load %s on the GPU: %s", dir, err.msg);
  float *z = dt_load_f32_n(comp, "vae_z", 16 * 4 * 6), *want = dt_load_f32_n(comp, "vae_image", 3 * 32 * 48);
  float *img = calloc(3 * 32 * 48, sizeof *img);
  if (v && z && want && img && dit_vae_qwen_set_act_dtype(v, DIT_BF16, &err) == DIT_OK) {
    dit_tensor tz = dit_tensor_4d(DIT_F32, z, 1, 16, 4, 6), ti = dit_tensor_4d(DIT_F32, img, 1, 3, 32, 48);
    dit_status s = dit_vae_qwen_decode(v, &tz, &ti, 0, &err);
    CHECK_MSG(s == DIT_OK, "gpu vae decode: %s", err.msg);
    if (s == DIT_OK) check_nmse("VAE decode bf16-act", img, want, 3 * 32 * 48, NMSE_BF16_ACT);
  }
  free(z), free(want), free(img);
  dit_vae_qwen_free(v);
}

/* The released width, one block: GPU bf16 activations against the CPU (F32), same seed. */
static void test_real_width(dit_backend *gpu) {
  dit_error err = {0};
  dit_backend *cpu = NULL;
  CHECK(dit_backend_cpu_create(0, &cpu, &err) == DIT_OK);
  dit_krea2_config c;
  dit_krea2_config_default(&c);
  c.n_layers = 1, c.n_layerwise = 1, c.n_refiner = 1;
  dit_krea2 *mc = NULL, *mg = NULL;
  CHECK_MSG(dit_krea2_create_random(cpu, &c, DIT_BF16, 5, &mc, &err) == DIT_OK, "%s", err.msg);
  CHECK_MSG(dit_krea2_create_random(gpu, &c, DIT_BF16, 5, &mg, &err) == DIT_OK, "%s", err.msg);
  if (mg) CHECK(dit_krea2_set_act_dtype(mg, DIT_BF16, &err) == DIT_OK);
  const int64_t side = 16, Si = side * side, L = 64, C = 64, T = c.n_taps, td = c.text_dim, D = c.dim;
  const size_t ne = (size_t)(L * T * td), nx = (size_t)(Si * C), nt = (size_t)(L * D);
  float *eh = malloc(ne * sizeof(float)), *xh = malloc(nx * sizeof(float)), *tc = malloc(nt * sizeof(float));
  float *oc = malloc(nx * sizeof(float)), *og = malloc(nx * sizeof(float)), *pos = calloc((size_t)(L + Si) * 3, sizeof(float));
  uint8_t mask[64];
  for (int i = 0; i < L; i++) mask[i] = i < 40;
  if (mc && mg && eh && xh && tc && oc && og && pos) {
    dt_fill_random(eh, ne, 11);
    dt_fill_random(xh, nx, 12);
    for (int64_t r = 0; r < Si; r++) pos[3 * (L + r) + 1] = (float)(r / side), pos[3 * (L + r) + 2] = (float)(r % side);
    const float t = 0.7f;
    dit_tensor e = dit_tensor_4d(DIT_F32, eh, 1, L, T, td), x = dit_tensor_3d(DIT_F32, xh, 1, Si, C);
    dit_tensor tt = dit_tensor_3d(DIT_F32, tc, 1, L, D), o = dit_tensor_3d(DIT_F32, oc, 1, Si, C);
    dit_status s = dit_krea2_encode_text(mc, &e, mask, NULL, &tt, &err);
    if (s == DIT_OK) s = dit_krea2_forward(mc, &x, &tt, mask, &t, pos, &o, &err);
    CHECK_MSG(s == DIT_OK, "cpu krea2 width forward: %s", err.msg);
    void *de = dt_to_device(gpu, eh, ne), *dx = dt_to_device(gpu, xh, nx), *dt = dt_to_device(gpu, tc, nt);
    void *dout = dt_to_device(gpu, og, nx);
    dit_tensor ge = dit_tensor_4d(DIT_F32, de, 1, L, T, td), gx = dit_tensor_3d(DIT_F32, dx, 1, Si, C);
    dit_tensor gt = dit_tensor_3d(DIT_F32, dt, 1, L, D), go = dit_tensor_3d(DIT_F32, dout, 1, Si, C);
    ge.device = gx.device = gt.device = go.device = DIT_DEV_CUDA;
    dit_status s2 = de && dx && dt && dout ? dit_krea2_encode_text(mg, &ge, mask, NULL, &gt, &err) : DIT_ERR_NOMEM;
    if (s2 == DIT_OK) s2 = dit_krea2_forward(mg, &gx, &gt, mask, &t, pos, &go, &err);
    if (s2 == DIT_OK) s2 = gpu->ops->download(gpu, og, dout, nx * sizeof(float), &err);
    CHECK_MSG(s2 == DIT_OK, "gpu krea2 width forward: %s", err.msg);
    if (s == DIT_OK && s2 == DIT_OK) check_nmse("released width (1 block, 1 + 1 fusion blocks) bf16-act vs cpu", og, oc, nx, NMSE_BF16_ACT);
    /* the same call twice more: the second is recorded as a graph, the third replays it; the
     * output stays bit for bit the op-by-op one */
    float *again = malloc(nx * sizeof(float));
    for (int r = 0; s2 == DIT_OK && again && r < 2; r++) {
      s2 = dit_krea2_forward(mg, &gx, &gt, mask, &t, pos, &go, &err);
      if (s2 == DIT_OK) s2 = gpu->ops->download(gpu, again, dout, nx * sizeof(float), &err);
      CHECK_MSG(s2 == DIT_OK && !memcmp(again, og, nx * sizeof(float)), "call %d differs from the first: %s", r + 2,
                err.msg);
    }
    long cap = 0, launch = 0;
    dit_krea2_graph_counts(mg, &cap, &launch);
    printf("gpu krea2 graph replay: %ld captured, %ld launched, outputs identical\n", cap, launch);
    CHECK(cap == 1 && launch >= 1);
    free(again);
    void *bufs[4] = {de, dx, dt, dout};
    for (int i = 0; i < 4; i++)
      if (bufs[i]) gpu->ops->free(gpu, bufs[i]);
  }
  free(eh), free(xh), free(tc), free(oc), free(og), free(pos);
  dit_krea2_free(mc);
  dit_krea2_free(mg);
  dit_backend_free(cpu);
}
/* dit_generate on the GPU against the reference image (HWC floats in [0, 1]): PSNR >= 35 dB. */
static void test_pipeline(const char *fixture) {
  char ref_file[4096];
  json_t *rj = dt_load_reference(fixture, ref_file, sizeof ref_file);
  dit_ctx *ctx = NULL;
  if (!rj || dit_ctx_create(NULL, &ctx) != DIT_OK) {
    CHECK_MSG(0, "%s: no reference or context", fixture);
    json_decref(rj);
    return;
  }
  dit_gen_params p;
  dt_gen_params_from_reference(&p, fixture, rj, rj);
  p.max_sequence_length = (int)json_integer_value(json_object_get(rj, "max_sequence_length"));
  p.text_rope_bf16 = 1;
  p.device = DIT_DEVICE_CUDA;
  dit_image img;
  dit_status s = dit_generate(ctx, &p, &img, NULL);
  CHECK_MSG(s == DIT_OK, "%s on the GPU: %s", fixture, dit_ctx_last_error(ctx));
  const size_t n = (size_t)p.width * (size_t)p.height * 3;
  float *want = s == DIT_OK ? dt_load_f32_n(ref_file, "image", n) : NULL;
  if (want) {
    double se = 0;
    int worst = 0;
    for (size_t i = 0; i < n; i++) {
      const double d = img.rgb[i] - want[i] * 255.0;
      se += d * d;
      if (fabs(d) > worst) worst = (int)fabs(d);
    }
    const double psnr = se > 0 ? 10 * log10(255.0 * 255.0 / (se / (double)n)) : 99;
    printf("gpu krea2 pipeline %s: PSNR %.2f dB against diffusers float32, max diff %d levels\n", fixture, psnr, worst);
    CHECK_MSG(psnr >= 35.0, "%s: PSNR %.2f dB < 35", fixture, psnr);
  }
  if (s == DIT_OK) dit_image_free(&img);
  free(want);
  dit_ctx_free(ctx);
  json_decref(rj);
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
  dt_model_dir(&a, a.data, "krea2-raw-tiny", fixture, sizeof fixture);
  test_fixture(be, fixture);
  test_real_width(be);
  dit_backend_free(be);
  test_pipeline(fixture);
  dt_model_dir(&a, a.data, "krea2-turbo-tiny", fixture, sizeof fixture);
  test_pipeline(fixture);
#else
  printf("SKIP: built without CUDA\n");
#endif
  return dt_finish();
}

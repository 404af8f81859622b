/* The CPU backend's bf16-compute precision (issue 9): (1) the linear op in bf16 mode
 * equals a double-precision reference computed from x and w rounded to bf16 (the
 * products vdpbf16ps forms are exact in fp32; only fp32 summation error remains), on the
 * AVX512-BF16 path (packed and small-M streaming kernels) and the portable path, for
 * bf16/f32/f16 weights, odd K, ragged M and N, bias and activation; the fp32 mode
 * against the unrounded reference; conv2d likewise (im2col tiles as bf16 k-pair panels); (2) whole fixture pipelines (zimage-tiny turbo case,
 * flux2-klein-tiny) generated in fp32 and in bf16 precision: the bf16 image within
 * 1e-2 mean absolute error (in [0,1] units) of the fp32 one.
 * Usage: test_cpu_precision (fixtures under <data>/models). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "cpu_paths.h"
#include "core/dtype.h"
#include "ditrun.h"
#include "testing.h"

static float rb(float v) { return dit_bf16_to_f32(dit_f32_to_bf16(v)); }

/* One linear case: M x K times N x K weights of dtype wt, bias + SiLU when act. */
static void linear_case(dit_backend *be, bool bf, int64_t M, int64_t K, int64_t N, dit_dtype wt, bool act) {
  float *x = malloc(sizeof(float) * (size_t)(M * K + 1)), *wf = malloc(sizeof(float) * (size_t)(N * K + 1));
  float *y = malloc(sizeof(float) * (size_t)(M * N)), *bias = malloc(sizeof(float) * (size_t)N);
  double *ref = malloc(sizeof(double) * (size_t)(M * N));
  void *w = malloc(sizeof(float) * (size_t)(N * K + 1));
  dt_fill_random(x, (size_t)(M * K), 11 + (uint64_t)M);
  dt_fill_random(wf, (size_t)(N * K), 23 + (uint64_t)K);
  dt_fill_random(bias, (size_t)N, 5);
  for (int64_t i = 0; i < N * K; i++) { /* the weight as stored, and wf = its exact value */
    if (wt == DIT_BF16) ((uint16_t *)w)[i] = dit_f32_to_bf16(wf[i]), wf[i] = dit_bf16_to_f32(((uint16_t *)w)[i]);
    else if (wt == DIT_F16) ((uint16_t *)w)[i] = dit_f32_to_f16(wf[i]), wf[i] = dit_f16_to_f32(((uint16_t *)w)[i]);
    else ((float *)w)[i] = wf[i];
  }
  double mref = 0;
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double s = 0;
      for (int64_t k = 0; k < K; k++)
        s += bf ? (double)rb(x[m * K + k]) * rb(wf[n * K + k]) : (double)x[m * K + k] * wf[n * K + k];
      if (act) s += bias[n], s = s / (1 + exp(-s));
      ref[m * N + n] = s;
      mref = fabs(s) > mref ? fabs(s) : mref;
    }
  dit_tensor tx = dit_tensor_2d(DIT_F32, x, M, K), ty = dit_tensor_2d(DIT_F32, y, M, N);
  dit_tensor tw = dit_tensor_2d(wt, w, N, K), tb = dit_tensor_1d(DIT_F32, bias, N);
  dit_error err = {0};
  dit_status s = dit_op_linear(be, &ty, &tx, &tw, act ? &tb : NULL, act ? DIT_ACT_SILU : DIT_ACT_NONE, &err);
  CHECK_MSG(s == DIT_OK, "linear: %s", err.msg);
  double md = 0;
  for (int64_t i = 0; s == DIT_OK && i < M * N; i++) md = fmax(md, fabs(y[i] - ref[i]));
  double rel = mref > 0 ? md / mref : md;
  /* fp32 sums of K terms: a few ulp times sqrt(K) of the magnitudes, far below the
   * 4e-3 relative effect of rounding one operand to bf16 */
  CHECK_MSG(rel <= 2e-6, "%s M=%lld K=%lld N=%lld w %s act %d: rel err %.3g", bf ? "bf16" : "fp32", (long long)M,
            (long long)K, (long long)N, dit_dtype_name(wt), act, rel);
  free(x), free(wf), free(y), free(bias), free(ref), free(w);
}

static void test_linear(dit_backend *be) {
  static const int64_t shapes[][3] = {{1, 64, 33},   {5, 31, 17},    {20, 513, 70},  {64, 300, 40},
                                      {65, 257, 100}, {130, 1030, 67}, {300, 96, 385}, {37, 1, 9}};
  static const dit_dtype wts[] = {DIT_BF16, DIT_F32, DIT_F16};
  dit_error err = {0};
  for (int p = 0; p < 2; p++) {
    CHECK(dit_backend_cpu_set_precision(be, p ? DIT_CPU_PRECISION_BF16 : DIT_CPU_PRECISION_FP32, &err) == DIT_OK);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
      for (size_t t = 0; t < 3; t++) linear_case(be, p == 1, shapes[i][0], shapes[i][1], shapes[i][2], wts[t], i % 2);
  }
  CHECK(dit_backend_cpu_set_precision(be, (dit_cpu_precision)7, &err) == DIT_ERR_INVALID_ARG);
  CHECK(dit_backend_cpu_set_precision(be, DIT_CPU_PRECISION_FP32, &err) == DIT_OK);
}

/* conv2d in the backend's precision against a double reference (operands rounded to
 * bf16 in bf16 mode): x [1, Ci, H, W], w [Co, Ci, 3, 3] bf16, bias. */
static void conv_case(dit_backend *be, bool bf, int64_t Ci, int64_t H, int64_t W, int64_t Co, int stride) {
  int64_t K = Ci * 9, Ho = (H + 2 - 3) / stride + 1, Wo = (W + 2 - 3) / stride + 1;
  float *x = malloc(sizeof(float) * (size_t)(Ci * H * W)), *wf = malloc(sizeof(float) * (size_t)(Co * K));
  float *y = malloc(sizeof(float) * (size_t)(Co * Ho * Wo)), *bias = malloc(sizeof(float) * (size_t)Co);
  uint16_t *w = malloc(2 * (size_t)(Co * K));
  dt_fill_random(x, (size_t)(Ci * H * W), 3);
  dt_fill_random(wf, (size_t)(Co * K), 4);
  dt_fill_random(bias, (size_t)Co, 6);
  for (int64_t i = 0; i < Co * K; i++) w[i] = dit_f32_to_bf16(wf[i]), wf[i] = dit_bf16_to_f32(w[i]);
  dit_tensor tx = dit_tensor_4d(DIT_F32, x, 1, Ci, H, W), tw = dit_tensor_4d(DIT_BF16, w, Co, Ci, 3, 3);
  dit_tensor ty = dit_tensor_4d(DIT_F32, y, 1, Co, Ho, Wo), tb = dit_tensor_1d(DIT_F32, bias, Co);
  dit_error err = {0};
  dit_status s = dit_op_conv2d(be, &ty, &tx, &tw, &tb, stride, 1, &err);
  CHECK_MSG(s == DIT_OK, "conv2d: %s", err.msg);
  double md = 0, mref = 0;
  for (int64_t co = 0; s == DIT_OK && co < Co; co++)
    for (int64_t oy = 0; oy < Ho; oy++)
      for (int64_t ox = 0; ox < Wo; ox++) {
        double acc = bias[co];
        for (int64_t ci = 0; ci < Ci; ci++)
          for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 3; kx++) {
              int64_t iy = oy * stride - 1 + ky, ix = ox * stride - 1 + kx;
              if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
              float xv = x[(ci * H + iy) * W + ix];
              acc += (double)(bf ? rb(xv) : xv) * wf[co * K + ci * 9 + ky * 3 + kx];
            }
        md = fmax(md, fabs(acc - y[(co * Ho + oy) * Wo + ox]));
        mref = fmax(mref, fabs(acc));
      }
  double rel = mref > 0 ? md / mref : md;
  CHECK_MSG(rel <= 2e-6, "conv2d %s Ci=%lld %lldx%lld Co=%lld stride %d: rel err %.3g", bf ? "bf16" : "fp32",
            (long long)Ci, (long long)H, (long long)W, (long long)Co, stride, rel);
  free(x), free(wf), free(y), free(bias), free(w);
}

static void test_conv(dit_backend *be) {
  dit_error err = {0};
  for (int p = 0; p < 2; p++) {
    CHECK(dit_backend_cpu_set_precision(be, p ? DIT_CPU_PRECISION_BF16 : DIT_CPU_PRECISION_FP32, &err) == DIT_OK);
    conv_case(be, p == 1, 5, 7, 40, 13, 1);   /* K = 45 (odd), Co not a multiple of 12 */
    conv_case(be, p == 1, 64, 6, 300, 20, 1); /* K = 576 > one 512 block, rows wider than a tile */
    conv_case(be, p == 1, 3, 9, 33, 7, 2);
  }
  CHECK(dit_backend_cpu_set_precision(be, DIT_CPU_PRECISION_FP32, &err) == DIT_OK);
}

static void kernels(dit_backend *be) {
  test_linear(be);
  test_conv(be);
}

/* Generates the fixture's image in fp32 and in bf16 precision; returns 0 on success. */
static int gen(dit_ctx *ctx, const char *dir, json_t *rj, dit_cpu_precision prec, dit_image *img) {
  dit_gen_params p;
  dit_gen_params_default(&p);
  p.model_dir = dir;
  p.prompt = json_string_value(json_object_get(rj, "prompt"));
  p.width = (int)json_integer_value(json_object_get(rj, "width"));
  p.height = (int)json_integer_value(json_object_get(rj, "height"));
  p.seed = (uint64_t)json_integer_value(json_object_get(rj, "seed"));
  json_t *cs = json_object_get(json_object_get(rj, "cases"), "turbo");
  json_t *src = cs ? cs : rj;
  p.steps = (int)json_integer_value(json_object_get(src, "steps"));
  p.guidance = json_number_value(json_object_get(src, "guidance_scale"));
  p.guidance_set = 1;
  p.cpu_precision = prec;
  dit_status s = dit_generate(ctx, &p, img, NULL);
  CHECK_MSG(s == DIT_OK, "%s: %s", dir, dit_ctx_last_error(ctx));
  return s == DIT_OK ? 0 : 1;
}

static void test_pipeline(dit_ctx *ctx, const dt_args *a, const char *name) {
  char dir[4096], rf[4200];
  snprintf(dir, sizeof dir, "%s/models/%s", a->data, name);
  snprintf(rf, sizeof rf, "%s/reference.json", dir);
  json_t *rj = json_load_file(rf, 0, NULL);
  CHECK_MSG(rj != NULL, "cannot read %s", rf);
  if (!rj) return;
  dit_image i32 = {0}, i16 = {0};
  if (gen(ctx, dir, rj, DIT_CPU_PRECISION_FP32, &i32) == 0 && gen(ctx, dir, rj, DIT_CPU_PRECISION_BF16, &i16) == 0) {
    size_t n = (size_t)i32.width * (size_t)i32.height * 3;
    CHECK(i16.width == i32.width && i16.height == i32.height);
    double sum = 0;
    int mx = 0;
    for (size_t i = 0; i < n; i++) {
      int d = abs((int)i16.rgb[i] - (int)i32.rgb[i]);
      sum += d, mx = d > mx ? d : mx;
    }
    double mae = sum / (double)n / 255.0;
    printf("%s: bf16 vs fp32 image: mean abs err %.4g (bound 1e-2), max %d/255\n", name, mae, mx);
    CHECK_MSG(mae <= 1e-2, "%s: bf16 image mean abs err %.4g > 1e-2", name, mae);
    CHECK_MSG(mae > 0, "%s: bf16 and fp32 images identical: is the precision setting applied?", name);
  }
  dit_image_free(&i32);
  dit_image_free(&i16);
  json_decref(rj);
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  dt_on_cpu_paths(2, true, "AVX-512 (vdpbf16ps, streaming small M)", kernels);
  dit_error err = {0};
  CHECK(dit_backend_cpu_set_precision(NULL, DIT_CPU_PRECISION_BF16, &err) == DIT_ERR_INVALID_ARG);

  dit_ctx_params cp;
  dit_ctx_params_default(&cp);
  cp.n_threads = 2;
  dit_ctx *ctx = NULL;
  CHECK(dit_ctx_create(&cp, &ctx) == DIT_OK);
  if (ctx) {
    test_pipeline(ctx, &a, "zimage-tiny");
    test_pipeline(ctx, &a, "flux2-klein-tiny");
  }
  dit_ctx_free(ctx);
  return dt_finish();
}

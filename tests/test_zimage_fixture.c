/* Z-Image transformer against the diffusers float32 reference of the zimage-tiny fixture:
 * one batched forward of two items of different sizes (image and caption padding, key
 * masks), each item alone, and bad configs / weights rejected with messages that name
 * the field or the tensor. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "fixture.h"
#include "models/zimage.h"
#include "testing.h"

#define TOL 1e-4

/* Runs items [first, first + n) in one forward and checks each output. */
static void check_forward(dit_zimage *m, dt_zimage_case *d, int first, int n) {
  dit_tensor x[2], cap[2], out[2];
  float *o[2] = {NULL, NULL};
  size_t numel[2];
  for (int j = 0; j < n; j++) {
    int i = first + j;
    dt_zimage_case_item(d, i, &x[j], &cap[j]);
    numel[j] = (size_t)dit_tensor_numel(&x[j]);
    o[j] = malloc(numel[j] * sizeof(float));
    out[j] = dit_tensor_make(DIT_F32, o[j], 4, d->xs[i]);
  }
  dit_error err = {0};
  dit_status s = dit_zimage_forward(m, n, x, cap, d->t + first, out, &err);
  CHECK_MSG(s == DIT_OK, "forward of %d item(s) from %d: %s", n, first, err.msg);
  for (int j = 0; j < n && s == DIT_OK; j++) {
    int i = first + j;
    CHECK(dit_tensor_has_shape(&x[j], 4, d->rs[i]));
    double e = dt_rel_err(o[j], d->ref[i], numel[j]);
    printf("zimage dit_out%d (batch of %d): rel err %.3g\n", i, n, e);
    CHECK_MSG(e <= TOL, "dit_out%d rel err %g > %g", i, e, TOL);
  }
  for (int j = 0; j < n; j++) free(o[j]);
}

/* Same shapes, other timesteps (the cached-tables path): outputs must change, and the
 * next call with the fixture's timesteps must reproduce the reference again. */
static void check_timestep_change(dit_zimage *m, dt_zimage_case *d) {
  dit_tensor x[2], cap[2], out[2];
  float *o[2];
  for (int i = 0; i < 2; i++) {
    dt_zimage_case_item(d, i, &x[i], &cap[i]);
    o[i] = malloc((size_t)dit_tensor_numel(&x[i]) * sizeof(float));
    out[i] = dit_tensor_make(DIT_F32, o[i], 4, d->xs[i]);
  }
  float t2[2] = {0.1f, 0.95f};
  dit_error err = {0};
  CHECK_MSG(dit_zimage_forward(m, 2, x, cap, t2, out, &err) == DIT_OK, "%s", err.msg);
  for (int i = 0; i < 2; i++) {
    double e = dt_rel_err(o[i], d->ref[i], (size_t)dit_tensor_numel(&x[i]));
    CHECK_MSG(e > 1e-2, "item %d: other timesteps give the same output (rel diff %g)", i, e);
    free(o[i]);
  }
  check_forward(m, d, 0, 2);
}

static int copy_file(const char *from, const char *to) {
  FILE *f = fopen(from, "rb"), *g = fopen(to, "wb");
  int rc = (f && g) ? 0 : -1;
  char buf[1 << 16];
  size_t k;
  while (!rc && (k = fread(buf, 1, sizeof buf, f)) > 0)
    if (fwrite(buf, 1, k, g) != k) rc = -1;
  if (f) fclose(f);
  if (g && fclose(g)) rc = -1;
  return rc;
}

/* Writes dir/config.json = the fixture's config with `key` set to `value` (JSON text). */
static int write_config(const char *src_dir, const char *dir, const char *key, const char *value) {
  char path[4096];
  json_error_t je;
  json_t *j = json_load_file(dt_path(path, sizeof path, src_dir, "config.json"), 0, &je);
  json_t *v = json_loads(value, JSON_DECODE_ANY, &je);
  if (!j || !v) return -1;
  json_object_set_new(j, key, v);
  int rc = json_dump_file(j, dt_path(path, sizeof path, dir, "config.json"), JSON_INDENT(1));
  json_decref(j);
  return rc;
}

/* Loads dir and expects failure with a message containing `needle`. */
static void expect_load_error(dit_backend *be, const char *dir, const char *needle, const char *what) {
  dit_zimage *m = NULL;
  dit_error err = {0};
  dit_status s = dit_zimage_load(be, dir, &m, &err);
  CHECK_MSG(s != DIT_OK && m == NULL, "%s: load succeeded", what);
  CHECK_MSG(strstr(err.msg, needle) != NULL, "%s: message does not name %s: %s", what, needle, err.msg);
  if (s != DIT_OK) printf("%s -> %s\n", what, err.msg);
  dit_zimage_free(m);
}

static void test_bad_configs(dit_backend *be, const char *src_dir, const char *tmp) {
  static const struct {
    const char *key, *value, *needle;
  } cases[] = {
      {"n_heads", "3", "\"dim\""},               /* 128 % 3 != 0 */
      {"axes_dims", "[32, 48, 40]", "axes_dims"}, /* sums to 120, head dim 128 */
      {"all_patch_size", "[4]", "all_patch_size"},
      {"dim", "-256", "\"dim\""},
      {"norm_eps", "0", "norm_eps"},
      {"in_channels", "\"16\"", "in_channels"},
      {"n_kv_heads", "3", "n_kv_heads"},
      {"axes_lens", "[1024, 512]", "axes_lens"},
  };
  char dir[4096], path[8192], from[8192];
  snprintf(dir, sizeof dir, "%s/bad_config", tmp);
  dt_run((snprintf(path, sizeof path, "mkdir -p '%s'", dir), path), NULL);
  snprintf(from, sizeof from, "%s/diffusion_pytorch_model.safetensors", src_dir);
  snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
  CHECK(copy_file(from, path) == 0);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    CHECK(write_config(src_dir, dir, cases[i].key, cases[i].value) == 0);
    char what[128];
    snprintf(what, sizeof what, "config %s = %s", cases[i].key, cases[i].value);
    expect_load_error(be, dir, cases[i].needle, what);
  }
}

/* Writes dir/diffusion_pytorch_model.safetensors = the fixture's with tensor `name`
 * given `shape` (same element count) or renamed to `rename`; data bytes unchanged. */
static int write_weights(const char *src_dir, const char *dir, const char *name, const char *shape,
                         const char *rename) {
  char path[4096];
  FILE *f = fopen(dt_path(path, sizeof path, src_dir, "diffusion_pytorch_model.safetensors"), "rb");
  if (!f) return -1;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = malloc((size_t)size);
  int rc = (buf && fread(buf, 1, (size_t)size, f) == (size_t)size) ? 0 : -1;
  fclose(f);
  uint64_t hlen = 0;
  for (int i = 0; i < 8 && !rc; i++) hlen |= (uint64_t)buf[i] << (8 * i);
  json_error_t je;
  json_t *h = rc ? NULL : json_loadb((const char *)buf + 8, (size_t)hlen, 0, &je);
  json_t *e = h ? json_object_get(h, name) : NULL;
  if (!e) rc = -1;
  if (!rc && shape) json_object_set_new(e, "shape", json_loads(shape, 0, &je));
  if (!rc && rename) {
    json_object_set(h, rename, e);
    json_object_del(h, name);
  }
  char *text = rc ? NULL : json_dumps(h, JSON_COMPACT);
  if (text) {
    size_t n = strlen(text), padded = (n + 7) / 8 * 8;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(padded >> (8 * i));
    FILE *g = fopen(dt_path(path, sizeof path, dir, "diffusion_pytorch_model.safetensors"), "wb");
    rc = g ? 0 : -1;
    if (g) {
      fwrite(len8, 1, 8, g);
      fwrite(text, 1, n, g);
      for (size_t i = n; i < padded; i++) fputc(' ', g);
      fwrite(buf + 8 + hlen, 1, (size_t)size - 8 - hlen, g);
      if (fclose(g)) rc = -1;
    }
  } else {
    rc = -1;
  }
  free(text);
  json_decref(h);
  free(buf);
  return rc;
}

static void test_bad_weights(dit_backend *be, const char *src_dir, const char *tmp) {
  char dir[4096], cmd[8192], from[8192], to[8192];
  snprintf(dir, sizeof dir, "%s/bad_weights", tmp);
  dt_run((snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir), cmd), NULL);
  CHECK(copy_file(dt_path(from, sizeof from, src_dir, "config.json"), dt_path(to, sizeof to, dir, "config.json")) == 0);
  CHECK(write_weights(src_dir, dir, "layers.1.attention.to_q.weight", "[128, 512]", NULL) == 0);
  expect_load_error(be, dir, "layers.1.attention.to_q.weight", "to_q of shape [128, 512]");
  CHECK(write_weights(src_dir, dir, "cap_pad_token", NULL, "cap_pad_tokens") == 0);
  expect_load_error(be, dir, "cap_pad_token [1, 128]", "missing cap_pad_token");
  expect_load_error(be, dir, "cap_pad_tokens", "extra cap_pad_tokens");
}

/* Bad forward arguments are rejected without running. */
static void test_bad_inputs(dit_zimage *m, dt_zimage_case *d) {
  dit_error err = {0};
  float *o = malloc((size_t)(16 * 16 * 12) * sizeof(float));
  dit_tensor x = dit_tensor_make(DIT_F32, d->x[0], 4, d->xs[0]);
  dit_tensor cap = dit_tensor_make(DIT_F32, d->cap[0], 2, d->cs[0]);
  dit_tensor out = dit_tensor_make(DIT_F32, o, 4, d->xs[0]);
  dit_tensor bad = dit_tensor_4d(DIT_F32, d->x[0], 16, 1, 15, 12); /* H not a multiple of 2 */
  CHECK(dit_zimage_forward(m, 1, &bad, &cap, d->t, &out, &err) == DIT_ERR_INVALID_ARG);
  CHECK_MSG(strstr(err.msg, "x[0]") != NULL, "%s", err.msg);
  dit_tensor bcap = dit_tensor_2d(DIT_F32, d->cap[0], 7, 8); /* wrong feature width */
  CHECK(dit_zimage_forward(m, 1, &x, &bcap, d->t, &out, &err) == DIT_ERR_INVALID_ARG);
  CHECK_MSG(strstr(err.msg, "cap[0]") != NULL, "%s", err.msg);
  float tnan = NAN;
  CHECK(dit_zimage_forward(m, 1, &x, &cap, &tnan, &out, &err) == DIT_ERR_INVALID_ARG);
  CHECK(dit_zimage_forward(m, 0, &x, &cap, d->t, &out, &err) == DIT_ERR_INVALID_ARG);
  /* a 1000-token caption puts the image's frame position at 1024 + 1 > axes_lens[0] - 1 */
  float *longcap = calloc(1000 * 16, sizeof(float));
  dit_tensor lcap = dit_tensor_2d(DIT_F32, longcap, 1000, 16);
  CHECK(dit_zimage_forward(m, 1, &x, &lcap, d->t, &out, &err) == DIT_ERR_INVALID_ARG);
  CHECK_MSG(strstr(err.msg, "axes_lens") != NULL, "%s", err.msg);
  free(longcap);
  free(o);
}

/* Random weights lie back to back, so q, k and v are projected by one GEMM over the stacked
 * [3D, D] weight; the same model with three GEMMs must give the same output (the same dot
 * products; only the GEMM's blocking over N differs). */
static void test_stacked_qkv(dit_backend *be) {
  dit_zimage_config c;
  dit_zimage_config_turbo(&c);
  c.dim = 256, c.n_heads = 2, c.n_kv_heads = 2, c.n_layers = 1, c.n_refiner_layers = 1, c.cap_feat_dim = 64;
  dit_zimage *m = NULL;
  dit_error err = {0};
  dit_status s = dit_zimage_create_random(be, &c, DIT_BF16, 3, &m, &err);
  CHECK_MSG(s == DIT_OK, "random model: %s", err.msg);
  const int64_t lat = 8, nx = 16 * lat * lat, L = 21;
  float *xh = malloc(nx * sizeof(float)), *ch = malloc(L * 64 * sizeof(float));
  float *o1 = malloc(nx * sizeof(float)), *o2 = malloc(nx * sizeof(float));
  if (s == DIT_OK && xh && ch && o1 && o2) {
    dt_fill_random(xh, (size_t)nx, 11);
    dt_fill_random(ch, (size_t)(L * 64), 12);
    const float t = 0.7f;
    dit_tensor x = dit_tensor_4d(DIT_F32, xh, 16, 1, lat, lat), cap = dit_tensor_2d(DIT_F32, ch, L, 64);
    dit_tensor y1 = dit_tensor_4d(DIT_F32, o1, 16, 1, lat, lat), y2 = dit_tensor_4d(DIT_F32, o2, 16, 1, lat, lat);
    CHECK_MSG(dit_zimage_forward(m, 1, &x, &cap, &t, &y1, &err) == DIT_OK, "stacked: %s", err.msg);
    dit_zimage_set_stacked_qkv(m, false);
    CHECK_MSG(dit_zimage_forward(m, 1, &x, &cap, &t, &y2, &err) == DIT_OK, "three GEMMs: %s", err.msg);
    double e = dt_rel_err(o1, o2, (size_t)nx);
    printf("zimage stacked q/k/v vs three GEMMs: rel err %.3g\n", e);
    CHECK_MSG(e <= 1e-6, "stacked q/k/v rel err %g", e);
  }
  free(xh), free(ch), free(o1), free(o2);
  dit_zimage_free(m);
}

/* The transformer saved as Z-Image's original checkpoint names it (q, k, v fused, renamed
 * modules, an unused norm_final) with ComfyUI's prefix, and with q, k, v stored apart as
 * stable-diffusion.cpp's converter writes them: the same model, bit for bit. */
static void test_original_names(dit_backend *be, dit_zimage *ref, dt_zimage_case *d, const char *tdir,
                                const char *tmp) {
  char src[4096], dst[4096], cfg[4096];
  dt_path(src, sizeof src, tdir, "diffusion_pytorch_model.safetensors");
  dt_path(cfg, sizeof cfg, tdir, "config.json");
  dit_tensor x, cap;
  dt_zimage_case_item(d, 0, &x, &cap);
  size_t numel = (size_t)dit_tensor_numel(&x);
  float *o1 = malloc(numel * 4), *o2 = malloc(numel * 4);
  for (int split = 0; split < 2; split++) {
    const char *what = split ? "q, k, v stored apart (qkv.weight, .1, .2)" : "fused qkv";
    snprintf(dst, sizeof dst, "%s/z_image_original_%d.safetensors", tmp, split);
    dit_error err = {0};
    CHECK(dt_zimage_write_original(src, dst, split) == 0);
    dit_zimage *m = NULL;
    dit_status s = dit_zimage_load_from(be, dst, cfg, &m, &err);
    CHECK_MSG(s == DIT_OK, "load original names, %s, %s: %s", what, dst, err.msg);
    if (s != DIT_OK) continue;
    if (!split) check_forward(m, d, 0, 2);
    /* bit-identical to the diffusers-named folder */
    dit_tensor y1 = dit_tensor_make(DIT_F32, o1, 4, d->xs[0]), y2 = dit_tensor_make(DIT_F32, o2, 4, d->xs[0]);
    CHECK(dit_zimage_forward(ref, 1, &x, &cap, d->t, &y1, &err) == DIT_OK);
    CHECK(dit_zimage_forward(m, 1, &x, &cap, d->t, &y2, &err) == DIT_OK);
    CHECK_MSG(!memcmp(o1, o2, numel * 4), "original names, %s: output differs from the diffusers folder's", what);
    printf("zimage original names (ComfyUI prefix, %s): bit-identical output\n", what);
    dit_zimage_free(m);
  }
  free(o1);
  free(o2);
}

/* Scaled fp8 checkpoints: the original names with ComfyUI's scale_weight (e4m3; the fused
 * qkv's one scale follows it through the split) and diffusers' names with weight_scale
 * (e5m2). Each computes what an F32 file of its decoded values (fp8 value times scale)
 * computes, to fp32 rounding: the scale multiplies each GEMM's sums instead of each weight. */
static void test_fp8(dit_backend *be, dt_zimage_case *d, const char *tdir, const char *tmp) {
  char src[4096], orig[4096], cfg[4096], q[4096], ref[4096];
  dt_path(src, sizeof src, tdir, "diffusion_pytorch_model.safetensors");
  dt_path(cfg, sizeof cfg, tdir, "config.json");
  snprintf(orig, sizeof orig, "%s/z_image_original_fp8src.safetensors", tmp);
  CHECK(dt_zimage_write_original(src, orig, false) == 0);
  static const struct {
    bool original, weight_scale;
    dit_dtype t;
  } cases[] = {{true, false, DIT_F8_E4M3}, {false, true, DIT_F8_E5M2}};
  dit_tensor x, cap;
  dt_zimage_case_item(d, 0, &x, &cap);
  const size_t numel = (size_t)dit_tensor_numel(&x);
  float *o1 = malloc(numel * 4), *o2 = malloc(numel * 4);
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const char *from = cases[k].original ? orig : src;
    snprintf(q, sizeof q, "%s/zimage_fp8_%zu.safetensors", tmp, k);
    snprintf(ref, sizeof ref, "%s/zimage_fp8_%zu_decoded.safetensors", tmp, k);
    CHECK(dt_st_to_fp8(from, q, cases[k].t, cases[k].weight_scale, false) == 0);
    CHECK(dt_st_to_fp8(from, ref, cases[k].t, cases[k].weight_scale, true) == 0);
    dit_zimage *mq = NULL, *mr = NULL;
    dit_error err = {0};
    dit_status s = dit_zimage_load_from(be, q, cfg, &mq, &err);
    CHECK_MSG(s == DIT_OK, "load %s: %s", q, err.msg);
    if (s == DIT_OK) s = dit_zimage_load_from(be, ref, cfg, &mr, &err);
    CHECK_MSG(s == DIT_OK, "load %s: %s", ref, err.msg);
    dit_tensor y1 = dit_tensor_make(DIT_F32, o1, 4, d->xs[0]), y2 = dit_tensor_make(DIT_F32, o2, 4, d->xs[0]);
    if (s == DIT_OK) s = dit_zimage_forward(mq, 1, &x, &cap, d->t, &y1, &err);
    if (s == DIT_OK) s = dit_zimage_forward(mr, 1, &x, &cap, d->t, &y2, &err);
    CHECK_MSG(s == DIT_OK, "fp8 forward: %s", err.msg);
    if (s == DIT_OK) {
      double e = dt_rel_err(o1, o2, numel), ed = dt_rel_err(o1, d->ref[0], numel);
      CHECK_MSG(e < 1e-5, "%s: rel err %g against its decoded F32 weights", dit_dtype_name(cases[k].t), e);
      printf("zimage %s (%s names, %s): rel err %.2e vs its decoded weights in F32, %.2e vs diffusers (F32 weights)\n",
             dit_dtype_name(cases[k].t), cases[k].original ? "original" : "diffusers",
             cases[k].weight_scale ? "weight_scale" : "scale_weight + scaled_fp8", e, ed);
    }
    dit_zimage_free(mq);
    dit_zimage_free(mr);
  }
  free(o1);
  free(o2);
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  char fixture[4096], tdir[4096], comp[4096];
  if (a.fixture)
    snprintf(fixture, sizeof fixture, "%s", a.fixture);
  else
    snprintf(fixture, sizeof fixture, "%s/models/zimage-tiny", a.data);
  dt_path(tdir, sizeof tdir, fixture, "transformer");
  dt_path(comp, sizeof comp, fixture, "components.safetensors");
  dit_backend *be = NULL;
  dit_error err = {0};
  if (dit_backend_cpu_create(0, &be, &err) != DIT_OK) {
    fprintf(stderr, "cpu backend: %s\n", err.msg);
    return 1;
  }
  dit_zimage *m = NULL;
  dit_status s = dit_zimage_load(be, tdir, &m, &err);
  CHECK_MSG(s == DIT_OK, "load %s: %s", tdir, err.msg);
  dt_zimage_case d;
  int loaded = dt_zimage_case_load(comp, &d) == 0;
  CHECK_MSG(loaded, "cannot load the dit_* tensors of %s", comp);
  if (s == DIT_OK && loaded) {
    const dit_zimage_config *c = dit_zimage_get_config(m);
    CHECK(c->dim == 128 && c->head_dim == 128 && c->ffn_dim == 341 && c->n_layers == 2);
    check_forward(m, &d, 0, 2); /* batched: ragged image and caption lengths */
    check_forward(m, &d, 0, 1); /* each alone: no masks */
    check_forward(m, &d, 1, 1);
    check_forward(m, &d, 0, 2); /* again, reusing the activation buffer */
    check_forward(m, &d, 0, 2); /* same shapes: cached tables */
    check_timestep_change(m, &d);
    test_bad_inputs(m, &d);
    test_original_names(be, m, &d, tdir, a.tmp);
    test_fp8(be, &d, tdir, a.tmp);
  }
  dt_zimage_case_free(&d);
  dit_zimage_free(m);
  test_stacked_qkv(be);
  test_bad_configs(be, tdir, a.tmp);
  test_bad_weights(be, tdir, a.tmp);
  dit_backend_free(be);
  return dt_finish();
}

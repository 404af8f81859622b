/* FLUX.2 components against the diffusers float32 references of the fixture
 * (components.safetensors): the transformer call dit_* (explicit ids) and the VAE decode
 * vae_z -> vae_image, each within 1e-4 relative error; plus the bad inputs (config
 * fields, weights, shapes) ending in errors that name them, random-weight models, and the
 * transformer from single files (BFL's names, ComfyUI's prefix, a config from the shapes).
 * Usage: test_flux2_fixture [--fixture DIR] (default <data>/models/flux2-klein-tiny). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "fixture.h"
#include "models/flux2.h"
#include "models/vae_flux2.h"
#include "io/safetensors.h"
#include "testing.h"

static char g_fix[4096], g_comp[4096];

static void test_transformer(dit_backend *be) {
  char dir[4096];
  dt_path(dir, sizeof dir, g_fix, "transformer");
  dit_flux2 *m = NULL;
  dit_error err = {0};
  dit_status s = dit_flux2_load(be, dir, &m, &err);
  CHECK_MSG(s == DIT_OK, "load: %s", err.msg);
  if (s != DIT_OK) return;
  const dit_flux2_config *c = dit_flux2_get_config(m);
  CHECK(c->dim == 128 && c->n_heads == 4 && c->head_dim == 32 && c->n_layers == 1 && c->n_single_layers == 2);
  CHECK(c->mlp_hidden == 384 && c->in_channels == 32 && c->out_channels == 32 && !c->guidance_embeds);
  CHECK(c->joint_attention_dim == 48 && c->rope_theta == 2000.0 && c->axes_dims[3] == 8);
  dt_flux2_case k;
  if (dt_flux2_case_load(g_comp, &k)) {
    CHECK_MSG(0, "cannot load the dit_* case from %s", g_comp);
    dit_flux2_free(m);
    return;
  }
  size_t n = (size_t)(k.os[0] * k.os[1] * k.os[2]);
  float *out = calloc(n, sizeof *out);
  dit_tensor x = dit_tensor_make(DIT_F32, k.hidden, 3, k.hs), txt = dit_tensor_make(DIT_F32, k.enc, 3, k.es);
  dit_tensor o = dit_tensor_make(DIT_F32, out, 3, k.os);
  for (int rep = 0; rep < 2; rep++) { /* the second call reuses the buffers */
    memset(out, 0, n * sizeof *out);
    s = dit_flux2_forward(m, &x, &txt, k.t, NULL, k.img_ids, k.txt_ids, &o, &err);
    CHECK_MSG(s == DIT_OK, "forward: %s", err.msg);
    if (s == DIT_OK) {
      double e = dt_rel_err(out, k.ref, n);
      printf("flux2 transformer: x [%lld,%lld,%lld], txt %lld tokens, t %g: rel err %.3g\n", (long long)k.hs[0],
             (long long)k.hs[1], (long long)k.hs[2], (long long)k.es[1], (double)k.t[0], e);
      CHECK_MSG(e <= 1e-4, "relative error %.3g > 1e-4", e);
    }
  }
  /* a batch of two identical items gives the single result twice */
  {
    size_t nx = (size_t)(k.hs[1] * k.hs[2]), ne = (size_t)(k.es[1] * k.es[2]);
    float *x2 = malloc(2 * nx * sizeof *x2), *e2 = malloc(2 * ne * sizeof *e2), *o2 = malloc(2 * n * sizeof *o2);
    memcpy(x2, k.hidden, nx * sizeof *x2);
    memcpy(x2 + nx, k.hidden, nx * sizeof *x2);
    memcpy(e2, k.enc, ne * sizeof *e2);
    memcpy(e2 + ne, k.enc, ne * sizeof *e2);
    float t2v[2] = {k.t[0], k.t[0]};
    dit_tensor bx = dit_tensor_3d(DIT_F32, x2, 2, k.hs[1], k.hs[2]),
               be2 = dit_tensor_3d(DIT_F32, e2, 2, k.es[1], k.es[2]);
    dit_tensor bo = dit_tensor_3d(DIT_F32, o2, 2, k.os[1], k.os[2]);
    s = dit_flux2_forward(m, &bx, &be2, t2v, NULL, k.img_ids, k.txt_ids, &bo, &err);
    CHECK_MSG(s == DIT_OK, "batched forward: %s", err.msg);
    if (s == DIT_OK) {
      double e0 = dt_rel_err(o2, k.ref, n), e1 = dt_rel_err(o2 + n, k.ref, n);
      printf("flux2 transformer, batch of 2: rel err %.3g, %.3g\n", e0, e1);
      CHECK(e0 <= 1e-4 && e1 <= 1e-4);
    }
    free(x2);
    free(e2);
    free(o2);
  }
  /* bad inputs: wrong channel count, mismatched batch, non-finite t */
  {
    dit_tensor bad = dit_tensor_3d(DIT_F32, k.hidden, 1, k.hs[1] * 2, k.hs[2] / 2);
    s = dit_flux2_forward(m, &bad, &txt, k.t, NULL, k.img_ids, k.txt_ids, &o, &err);
    CHECK_MSG(s == DIT_ERR_INVALID_ARG && strstr(err.msg, "x must be"), "%s", err.msg);
    float tn = NAN;
    s = dit_flux2_forward(m, &x, &txt, &tn, NULL, k.img_ids, k.txt_ids, &o, &err);
    CHECK_MSG(s == DIT_ERR_INVALID_ARG && strstr(err.msg, "t[0]"), "%s", err.msg);
    dit_tensor bt = dit_tensor_3d(DIT_F32, k.enc, 1, k.es[1], k.es[2] - 1);
    s = dit_flux2_forward(m, &x, &bt, k.t, NULL, k.img_ids, k.txt_ids, &o, &err);
    CHECK_MSG(s == DIT_ERR_INVALID_ARG && strstr(err.msg, "txt must be"), "%s", err.msg);
  }
  free(out);
  dt_flux2_case_free(&k);
  dit_flux2_free(m);
}

static void test_vae(dit_backend *be) {
  char dir[4096];
  dt_path(dir, sizeof dir, g_fix, "vae");
  dit_vae_flux2 *v = NULL;
  dit_error err = {0};
  dit_status s = dit_vae_flux2_load(be, dir, &v, &err);
  CHECK_MSG(s == DIT_OK, "vae load: %s", err.msg);
  if (s != DIT_OK) return;
  CHECK(dit_vae_flux2_latent_channels(v) == 8);
  float *z = NULL, *ref = NULL;
  int64_t zs[8], rs[8];
  int zn, rn;
  if (dt_load_f32(g_comp, "vae_z", &z, zs, &zn) || dt_load_f32(g_comp, "vae_image", &ref, rs, &rn)) {
    CHECK_MSG(0, "cannot load vae_z / vae_image");
    free(z);
    dit_vae_flux2_free(v);
    return;
  }
  size_t n = (size_t)(rs[0] * rs[1] * rs[2] * rs[3]);
  float *out = malloc(n * sizeof *out);
  dit_tensor tz = dit_tensor_make(DIT_F32, z, 4, zs), ti = dit_tensor_make(DIT_F32, out, 4, rs);
  s = dit_vae_flux2_decode(v, &tz, &ti, 0, &err);
  CHECK_MSG(s == DIT_OK, "vae decode: %s", err.msg);
  if (s == DIT_OK) {
    double e = dt_rel_err(out, ref, n);
    printf("flux2 vae: decode [%lld,%lld,%lld,%lld] -> [%lld,%lld,%lld,%lld], rel err %.3g\n", (long long)zs[0],
           (long long)zs[1], (long long)zs[2], (long long)zs[3], (long long)rs[0], (long long)rs[1], (long long)rs[2],
           (long long)rs[3], e);
    CHECK_MSG(e <= 1e-4, "relative error %.3g > 1e-4", e);
  }
  /* the tiled path runs and stays close (tiles see less context, so not exact) */
  float *out2 = malloc(n * sizeof *out2);
  dit_tensor ti2 = dit_tensor_make(DIT_F32, out2, 4, rs);
  s = dit_vae_flux2_decode(v, &tz, &ti2, 8, &err);
  CHECK_MSG(s == DIT_OK, "tiled vae decode: %s", err.msg);
  free(out2);
  free(out);
  free(z);
  free(ref);
  dit_vae_flux2_free(v);
}

/* Copies the fixture's transformer folder to tmp with config.json replaced. */
static int bad_transformer(const char *tmp, const char *config, char *dir, size_t len) {
  snprintf(dir, len, "%s/bad_transformer", tmp);
  mkdir(dir, 0755);
  char path[4096], src[4096];
  snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
  snprintf(src, sizeof src, "%s/transformer/diffusion_pytorch_model.safetensors", g_fix);
  unlink(path);
  if (symlink(src, path) != 0) return -1;
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(config, f);
  fclose(f);
  return 0;
}

static void test_bad_config(dit_backend *be, const char *tmp) {
  static const struct {
    const char *cfg, *want;
  } cases[] = {
      {"{\"num_attention_heads\": 4, \"attention_head_dim\": 31, \"axes_dims_rope\": [8,8,8,7]}", "attention_head_dim"},
      {"{\"num_attention_heads\": 4, \"attention_head_dim\": 32, \"axes_dims_rope\": [8,8,8,6]}", "axes_dims_rope"},
      {"{\"num_attention_heads\": 4, \"attention_head_dim\": 32, \"axes_dims_rope\": [8,8,16]}", "axes_dims_rope"},
      {"{\"patch_size\": 2, \"attention_head_dim\": 32, \"axes_dims_rope\": [8,8,8,8]}", "patch_size"},
      {"{\"rope_theta\": -1, \"attention_head_dim\": 32, \"axes_dims_rope\": [8,8,8,8]}", "rope_theta"},
      {"{\"_class_name\": \"FluxTransformer2DModel\"}", "_class_name"},
      /* a valid config that does not match the stored tensors */
      {"{\"num_attention_heads\": 4, \"attention_head_dim\": 32, \"axes_dims_rope\": [8,8,8,8], \"in_channels\": 32, "
       "\"joint_attention_dim\": 48, \"num_layers\": 2, \"num_single_layers\": 2, \"guidance_embeds\": false}",
       "transformer_blocks.1"},
      {"{\"num_attention_heads\": 4, \"attention_head_dim\": 32, \"axes_dims_rope\": [8,8,8,8], \"in_channels\": 32, "
       "\"joint_attention_dim\": 48, \"num_layers\": 1, \"num_single_layers\": 2, \"guidance_embeds\": true}",
       "guidance_embedder"},
      {"{\"num_attention_heads\": 4, \"attention_head_dim\": 32, \"axes_dims_rope\": [8,8,8,8], \"in_channels\": 64, "
       "\"joint_attention_dim\": 48, \"num_layers\": 1, \"num_single_layers\": 2, \"guidance_embeds\": false}",
       "x_embedder"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char dir[4096];
    if (bad_transformer(tmp, cases[i].cfg, dir, sizeof dir)) {
      CHECK_MSG(0, "cannot prepare %s", dir);
      continue;
    }
    dit_flux2 *m = NULL;
    dit_error err = {0};
    dit_status s = dit_flux2_load(be, dir, &m, &err);
    CHECK_MSG(s != DIT_OK && m == NULL && strstr(err.msg, cases[i].want), "case %zu: status %d, message: %s", i,
              (int)s, err.msg);
    dit_flux2_free(m);
  }
}

/* The fixture's VAE folder with one config field replaced (weights linked). */
static int bad_vae(const char *tmp, const char *key, json_t *value, char *dir, size_t len) {
  snprintf(dir, len, "%s/bad_vae", tmp);
  mkdir(dir, 0755);
  char path[4200], src[4200];
  snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
  snprintf(src, sizeof src, "%s/vae/diffusion_pytorch_model.safetensors", g_fix);
  unlink(path);
  if (symlink(src, path) != 0) return -1;
  snprintf(src, sizeof src, "%s/vae/config.json", g_fix);
  json_t *j = json_load_file(src, 0, NULL);
  if (!j) return -1;
  json_object_set_new(j, key, value);
  snprintf(path, sizeof path, "%s/config.json", dir);
  int rc = json_dump_file(j, path, 0);
  json_decref(j);
  return rc;
}

static void test_bad_vae(dit_backend *be, const char *tmp) {
  const struct {
    const char *key;
    json_t *value;
    const char *want;
  } cases[] = {
      {"patch_size", json_pack("[ii]", 1, 1), "patch_size"},
      {"batch_norm_eps", json_real(-1.0), "batch_norm_eps"},
      {"_class_name", json_string("AutoencoderKL"), "_class_name"},
      {"latent_channels", json_integer(16), "post_quant_conv"},
      {"decoder_block_out_channels", json_pack("[iiii]", 32, 32, 64, 128), "decoder"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char dir[4200];
    if (bad_vae(tmp, cases[i].key, cases[i].value, dir, sizeof dir)) {
      CHECK_MSG(0, "cannot prepare %s", dir);
      continue;
    }
    dit_vae_flux2 *v = NULL;
    dit_error err = {0};
    dit_status s = dit_vae_flux2_load(be, dir, &v, &err);
    CHECK_MSG(s != DIT_OK && v == NULL && strstr(err.msg, cases[i].want), "vae case %s: status %d, message: %s",
              cases[i].key, (int)s, err.msg);
    dit_vae_flux2_free(v);
  }
}

/* Random weights at a small geometry (the klein config shrunk): builds, runs, finite;
 * a config that does not add up is refused naming the field. */
static void test_random(dit_backend *be) {
  dit_flux2_config c;
  dit_flux2_config_klein(&c, false);
  CHECK(c.in_channels == 128 && c.joint_attention_dim == 7680 && c.n_layers == 5 && c.n_single_layers == 20);
  c.n_layers = 1;
  c.n_single_layers = 1;
  c.n_heads = 2;
  c.head_dim = 16;
  for (int i = 0; i < DIT_FLUX2_N_AXES; i++) c.axes_dims[i] = 4;
  c.joint_attention_dim = 24;
  c.in_channels = 8;
  dit_flux2 *m = NULL;
  dit_error err = {0};
  dit_status s = dit_flux2_create_random(be, &c, DIT_BF16, 1, &m, &err);
  CHECK_MSG(s == DIT_OK, "create_random: %s", err.msg);
  if (s == DIT_OK) {
    CHECK(dit_flux2_get_config(m)->dim == 32 && dit_flux2_get_config(m)->mlp_hidden == 96);
    CHECK(dit_flux2_weight_bytes(m) > 0);
    enum { SI = 6, ST = 5 };
    float x[SI * 8], txt[ST * 24], out[SI * 8], ii[SI * 4] = {0}, ti[ST * 4] = {0}, t = 0.5f;
    dt_fill_random(x, SI * 8, 3);
    dt_fill_random(txt, ST * 24, 4);
    for (int r = 0; r < SI; r++) ii[4 * r + 1] = (float)(r / 3), ii[4 * r + 2] = (float)(r % 3);
    for (int r = 0; r < ST; r++) ti[4 * r + 3] = (float)r;
    dit_tensor tx = dit_tensor_3d(DIT_F32, x, 1, SI, 8), tt = dit_tensor_3d(DIT_F32, txt, 1, ST, 24);
    dit_tensor to = dit_tensor_3d(DIT_F32, out, 1, SI, 8);
    s = dit_flux2_forward(m, &tx, &tt, &t, NULL, ii, ti, &to, &err);
    CHECK_MSG(s == DIT_OK, "random forward: %s", err.msg);
    int finite = 1;
    for (int i = 0; i < SI * 8; i++) finite &= isfinite(out[i]) != 0;
    CHECK(s == DIT_OK && finite);
  }
  dit_flux2_free(m);
  c.axes_dims[0] = 6;
  s = dit_flux2_create_random(be, &c, DIT_BF16, 1, &m, &err);
  CHECK_MSG(s != DIT_OK && m == NULL && strstr(err.msg, "axes_dims_rope"), "%s", err.msg);
}

/* The transformer's forward on the fixture case from path (a folder, or a single file with
 * cfg or its shapes' config) into a new array of n floats; NULL after a failed check. */
static float *forward_file(dit_backend *be, const char *path, const char *cfg, size_t *n) {
  dit_flux2 *m = NULL;
  dit_error err = {0};
  dit_status s = dit_flux2_load_file(be, path, cfg, &m, &err);
  CHECK_MSG(s == DIT_OK, "load %s: %s", path, err.msg);
  dt_flux2_case k;
  if (s != DIT_OK || dt_flux2_case_load(g_comp, &k)) {
    dit_flux2_free(m);
    return NULL;
  }
  *n = (size_t)(k.os[0] * k.os[1] * k.os[2]);
  float *out = calloc(*n, sizeof *out);
  dit_tensor x = dit_tensor_make(DIT_F32, k.hidden, 3, k.hs), txt = dit_tensor_make(DIT_F32, k.enc, 3, k.es);
  dit_tensor o = dit_tensor_make(DIT_F32, out, 3, k.os);
  s = dit_flux2_forward(m, &x, &txt, k.t, NULL, k.img_ids, k.txt_ids, &o, &err);
  CHECK_MSG(s == DIT_OK, "forward (%s): %s", path, err.msg);
  if (s == DIT_OK) printf("flux2 transformer from %s: rel err %.3g vs the reference\n", path, dt_rel_err(out, k.ref, *n));
  dt_flux2_case_free(&k);
  dit_flux2_free(m);
  if (s == DIT_OK) return out;
  free(out);
  return NULL;
}

/* The same weights under BFL's single-file names (dt_flux2_write_bfl; its output checked
 * against diffusers' converter by tests/fixtures/gen/check_flux2_bfl.py), also with ComfyUI's
 * prefix, give the folder's output bit for bit; alone, the file's head size (32) has no
 * published RoPE axes. */
static void test_single(dit_backend *be, const char *tmp) {
  char dir[4096], cfg[4096], src[4096], single[4200], pre[4200];
  dt_path(dir, sizeof dir, g_fix, "transformer");
  dt_path(cfg, sizeof cfg, g_fix, "transformer/config.json");
  dt_path(src, sizeof src, g_fix, "transformer/diffusion_pytorch_model.safetensors");
  snprintf(single, sizeof single, "%s/klein_bfl.safetensors", tmp);
  snprintf(pre, sizeof pre, "%s/comfy_prefixed.safetensors", tmp);
  mkdir(tmp, 0755);
  CHECK_MSG(dt_flux2_write_bfl(src, single, "") == 0, "cannot write %s", single);
  CHECK_MSG(dt_flux2_write_bfl(src, pre, "model.diffusion_model.") == 0, "cannot write %s", pre);
  size_t n = 0, n1 = 0, n2 = 0;
  float *a = forward_file(be, dir, NULL, &n), *b = forward_file(be, single, cfg, &n1);
  float *c = forward_file(be, pre, cfg, &n2);
  CHECK_MSG(a && b && n1 == n && !memcmp(a, b, n * sizeof *a), "the BFL-named file gave another output");
  CHECK_MSG(a && c && n2 == n && !memcmp(a, c, n * sizeof *a), "the prefixed file gave another output");
  free(a);
  free(b);
  free(c);
  unlink(pre);
  dit_flux2 *m = NULL; /* the BFL file is kept for check_flux2_bfl.py */
  dit_error err = {0};
  dit_status s = dit_flux2_load_file(be, single, NULL, &m, &err);
  CHECK_MSG(s == DIT_ERR_UNSUPPORTED && !m && strstr(err.msg, "config.json"), "%d %s", (int)s, err.msg);
}

static dit_status fill_zero(void *user, size_t i, void *dst, size_t nbytes, dit_error *err) {
  (void)user, (void)i, (void)err;
  memset(dst, 0, nbytes);
  return DIT_OK;
}

/* A file alone gives its config: head size 128 (FLUX.2's RoPE axes), the rest from shapes. */
static void test_single_config(dit_backend *be, const char *tmp) {
  static const struct {
    const char *name;
    int64_t r, c; /* c 0: a vector */
  } ts[] = {{"img_in.weight", 128, 32},
            {"txt_in.weight", 128, 48},
            {"time_in.in_layer.weight", 128, 256},
            {"time_in.out_layer.weight", 128, 128},
            {"double_stream_modulation_img.lin.weight", 768, 128},
            {"double_stream_modulation_txt.lin.weight", 768, 128},
            {"single_stream_modulation.lin.weight", 384, 128},
            {"double_blocks.0.img_attn.qkv.weight", 384, 128},
            {"double_blocks.0.txt_attn.qkv.weight", 384, 128},
            {"double_blocks.0.img_attn.norm.query_norm.scale", 128, 0},
            {"double_blocks.0.img_attn.norm.key_norm.scale", 128, 0},
            {"double_blocks.0.txt_attn.norm.query_norm.scale", 128, 0},
            {"double_blocks.0.txt_attn.norm.key_norm.scale", 128, 0},
            {"double_blocks.0.img_attn.proj.weight", 128, 128},
            {"double_blocks.0.txt_attn.proj.weight", 128, 128},
            {"double_blocks.0.img_mlp.0.weight", 512, 128},
            {"double_blocks.0.img_mlp.2.weight", 128, 256},
            {"double_blocks.0.txt_mlp.0.weight", 512, 128},
            {"double_blocks.0.txt_mlp.2.weight", 128, 256},
            {"single_blocks.0.linear1.weight", 896, 128},
            {"single_blocks.0.linear2.weight", 128, 384},
            {"single_blocks.0.norm.query_norm.scale", 128, 0},
            {"single_blocks.0.norm.key_norm.scale", 128, 0},
            {"final_layer.adaLN_modulation.1.weight", 256, 128},
            {"final_layer.linear.weight", 32, 128}};
  enum { N = sizeof ts / sizeof ts[0] };
  dit_out_tensor o[N];
  for (int i = 0; i < N; i++) o[i] = (dit_out_tensor){ts[i].name, DIT_BF16, ts[i].c ? 2 : 1, {ts[i].r, ts[i].c}};
  char path[4200];
  snprintf(path, sizeof path, "%s/hd128.safetensors", tmp);
  mkdir(tmp, 0755);
  dit_error err = {0};
  CHECK_MSG(dit_st_write(path, true, NULL, 0, o, N, fill_zero, NULL, &err) == DIT_OK, "%s", err.msg);
  dit_flux2 *m = NULL;
  dit_status s = dit_flux2_load_file(be, path, NULL, &m, &err);
  CHECK_MSG(s == DIT_OK, "config from shapes: %s", err.msg);
  if (s == DIT_OK) {
    const dit_flux2_config *c = dit_flux2_get_config(m);
    CHECK(c->dim == 128 && c->n_heads == 1 && c->head_dim == 128 && c->n_layers == 1 && c->n_single_layers == 1);
    CHECK(c->mlp_hidden == 256 && c->in_channels == 32 && c->out_channels == 32 && c->joint_attention_dim == 48);
    CHECK(c->t_channels == 256 && !c->guidance_embeds && c->axes_dims[0] == 32 && c->axes_dims[3] == 32);
    CHECK(c->rope_theta == 2000.0);
  }
  dit_flux2_free(m);
  unlink(path);
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  if (a.fixture) snprintf(g_fix, sizeof g_fix, "%s", a.fixture);
  else snprintf(g_fix, sizeof g_fix, "%s/models/flux2-klein-tiny", a.data);
  snprintf(g_comp, sizeof g_comp, "%s/components.safetensors", g_fix);
  dit_backend *be = NULL;
  dit_error err = {0};
  if (dit_backend_cpu_create(2, &be, &err) != DIT_OK) {
    CHECK_MSG(0, "cpu backend: %s", err.msg);
    return dt_finish();
  }
  test_transformer(be);
  test_vae(be);
  test_bad_config(be, a.tmp);
  test_bad_vae(be, a.tmp);
  test_random(be);
  test_single(be, a.tmp);
  test_single_config(be, a.tmp);
  dit_backend_free(be);
  return dt_finish();
}

/* FLUX.1 transformer against the diffusers float32 references of the flux1-dev-tiny and
 * flux1-schnell-tiny fixtures (components.safetensors: one FluxTransformer2DModel call on
 * explicit inputs, dit_* ; dev with its guidance embedder, schnell without), within 1e-4
 * relative error; the same weights from the Black Forest Labs-named single file
 * (single/transformer.safetensors: fused qkv, linear1, shift-first final layer) give the
 * same output, also under ComfyUI's prefixed names; and the bad inputs of a single file
 * (missing RoPE axes, a missing or mis-shaped tensor) end in errors that name them. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "fixture.h"
#include "io/safetensors.h"
#include "models/flux1.h"
#include "testing.h"

typedef struct flux1_case {
  dt_flux2_case k; /* hidden, encoder, t, ids, reference output */
  float *pooled, *guidance;
  int64_t ps[8];
} flux1_case;

static int case_load(const char *comp, bool dev, flux1_case *c) {
  memset(c, 0, sizeof *c);
  int64_t s[8];
  int nd;
  if (dt_flux2_case_load(comp, &c->k) || dt_load_f32(comp, "dit_pooled", &c->pooled, c->ps, &nd)) return -1;
  if (dev && dt_load_f32(comp, "dit_guidance", &c->guidance, s, &nd)) return -1;
  return 0;
}

static void case_free(flux1_case *c) {
  dt_flux2_case_free(&c->k);
  free(c->pooled);
  free(c->guidance);
}

/* Runs m on the case into out (n floats); the status. */
static dit_status run_case(dit_flux2 *m, const flux1_case *c, float *out, dit_error *err) {
  const dt_flux2_case *k = &c->k;
  dit_tensor x = dit_tensor_make(DIT_F32, k->hidden, 3, k->hs), txt = dit_tensor_make(DIT_F32, k->enc, 3, k->es);
  dit_tensor o = dit_tensor_make(DIT_F32, out, 3, k->os);
  return dit_flux_forward(m, &x, &txt, c->pooled, k->t, c->guidance, k->img_ids, k->txt_ids, &o, err);
}

static float *forward_of(dit_backend *be, const char *path, const char *cfg, const flux1_case *c, size_t n,
                         const char *what) {
  dit_flux2 *m = NULL;
  dit_error err = {0};
  dit_status s = dit_flux1_load(be, path, cfg, &m, &err);
  CHECK_MSG(s == DIT_OK, "%s: load: %s", what, err.msg);
  if (s != DIT_OK) return NULL;
  float *out = calloc(n, sizeof *out);
  s = run_case(m, c, out, &err);
  CHECK_MSG(s == DIT_OK, "%s: forward: %s", what, err.msg);
  dit_flux2_free(m);
  if (s != DIT_OK) {
    free(out);
    return NULL;
  }
  return out;
}

static void test_model(dit_backend *be, const char *data, const char *name, bool dev) {
  char fix[4096], comp[4096], dir[4096], cfg[4096], single[4096];
  snprintf(fix, sizeof fix, "%s/models/%s", data, name);
  dt_path(comp, sizeof comp, fix, "components.safetensors");
  dt_path(dir, sizeof dir, fix, "transformer");
  dt_path(cfg, sizeof cfg, fix, "transformer/config.json");
  dt_path(single, sizeof single, fix, "single/transformer.safetensors");
  flux1_case c;
  if (case_load(comp, dev, &c)) {
    CHECK_MSG(0, "cannot load the dit_* case from %s", comp);
    case_free(&c);
    return;
  }
  /* the folder: config read, forward against the reference */
  dit_flux2 *m = NULL;
  dit_error err = {0};
  CHECK_MSG(dit_flux1_load(be, dir, NULL, &m, &err) == DIT_OK, "%s: %s", name, err.msg);
  if (m) {
    const dit_flux2_config *k = dit_flux2_get_config(m);
    CHECK(k->variant == DIT_FLUX_1 && k->n_axes == 3 && k->dim == 32 && k->head_dim == 16 && k->n_layers == 1);
    CHECK(k->n_single_layers == 2 && k->mlp_hidden == 128 && k->pooled_dim == 16 && k->guidance_embeds == dev);
    CHECK(k->axes_dims[0] == 4 && k->axes_dims[1] == 6 && k->axes_dims[2] == 6 && k->rope_theta == 10000.0);
    /* no pooled embedding: refused */
    dit_tensor x = dit_tensor_make(DIT_F32, c.k.hidden, 3, c.k.hs), txt = dit_tensor_make(DIT_F32, c.k.enc, 3, c.k.es);
    float dummy[1];
    dit_tensor o = dit_tensor_make(DIT_F32, dummy, 3, c.k.os);
    dit_status s = dit_flux_forward(m, &x, &txt, NULL, c.k.t, c.guidance, c.k.img_ids, c.k.txt_ids, &o, &err);
    CHECK_MSG(s == DIT_ERR_INVALID_ARG && strstr(err.msg, "pooled"), "%s", err.msg);
    dit_flux2_free(m);
  }
  size_t n = (size_t)(c.k.os[0] * c.k.os[1] * c.k.os[2]);
  float *a = forward_of(be, dir, NULL, &c, n, name);
  if (a) {
    double e = dt_rel_err(a, c.k.ref, n);
    printf("%s transformer (folder): rel err %.3g\n", name, e);
    CHECK_MSG(e <= 1e-4, "%s: relative error %.3g > 1e-4", name, e);
  }
  /* the single file with the folder's config (its RoPE axes) */
  float *b = forward_of(be, single, cfg, &c, n, name);
  if (a && b) {
    double e = dt_rel_err(b, a, n), er = dt_rel_err(b, c.k.ref, n);
    printf("%s transformer (single file): rel err %.3g vs the folder, %.3g vs the reference\n", name, e, er);
    CHECK_MSG(e <= 1e-6 && er <= 1e-4, "%s single file: %.3g / %.3g", name, e, er);
  }
  /* the single file alone: head size 16 has no published axes */
  m = NULL;
  dit_status s = dit_flux1_load(be, single, NULL, &m, &err);
  CHECK_MSG(s == DIT_ERR_UNSUPPORTED && m == NULL && strstr(err.msg, "config.json"), "%d %s", (int)s, err.msg);
  free(a);
  free(b);
  case_free(&c);
}

/* dt_st_rename callback: ComfyUI's prefix on every name. */
static int add_prefix(void *user, const char *name, char *out, size_t len, int64_t *shape, int *ndim) {
  (void)user, (void)shape, (void)ndim;
  return (size_t)snprintf(out, len, "model.diffusion_model.%s", name) < len ? 0 : -1;
}

/* The single file under ComfyUI's names (model.diffusion_model. on each) gives the same output. */
static void test_prefixed(dit_backend *be, const char *data, const char *tmp) {
  char fix[4096], comp[4096], single[4096], cfg[4096], pre[4200];
  snprintf(fix, sizeof fix, "%s/models/flux1-dev-tiny", data);
  dt_path(comp, sizeof comp, fix, "components.safetensors");
  dt_path(single, sizeof single, fix, "single/transformer.safetensors");
  dt_path(cfg, sizeof cfg, fix, "transformer/config.json");
  snprintf(pre, sizeof pre, "%s/comfy_prefixed.safetensors", tmp);
  mkdir(tmp, 0755);
  flux1_case c;
  if (case_load(comp, true, &c) || dt_st_rename(single, pre, add_prefix, NULL)) {
    CHECK_MSG(0, "cannot prepare the prefixed file");
    case_free(&c);
    return;
  }
  size_t n = (size_t)(c.k.os[0] * c.k.os[1] * c.k.os[2]);
  float *a = forward_of(be, single, cfg, &c, n, "bare names"), *b = forward_of(be, pre, cfg, &c, n, "prefixed");
  if (a && b) CHECK_MSG(!memcmp(a, b, n * sizeof *a), "the prefixed file gave another output");
  free(a);
  free(b);
  case_free(&c);
  unlink(pre);
}

/* A copy of the single file with one tensor dropped, or renamed onto a wrong shape. */
static void test_bad_single(dit_backend *be, const char *data, const char *tmp) {
  char single[4096], cfg[4096];
  snprintf(single, sizeof single, "%s/models/flux1-dev-tiny/single/transformer.safetensors", data);
  snprintf(cfg, sizeof cfg, "%s/models/flux1-dev-tiny/transformer/config.json", data);
  static const struct {
    const char *drop, *want;
    const char *shape_of; /* store drop with this other tensor's data (a wrong shape) */
  } cases[] = {
      {"double_blocks.0.img_attn.qkv.weight", "double_blocks.0.img_attn.qkv.weight", NULL},
      {"single_blocks.1.linear1.weight", "single_blocks.1.linear1.weight", "single_blocks.1.linear2.weight"},
      {"img_in.weight", "img_in.weight", NULL},
  };
  mkdir(tmp, 0755);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char out[4200];
    snprintf(out, sizeof out, "%s/bad_single_%zu.safetensors", tmp, i);
    if (dt_st_rewrite(single, out, cases[i].drop, cases[i].shape_of)) {
      CHECK_MSG(0, "cannot write %s", out);
      continue;
    }
    dit_flux2 *m = NULL;
    dit_error err = {0};
    dit_status s = dit_flux1_load(be, out, cfg, &m, &err);
    CHECK_MSG(s != DIT_OK && m == NULL && strstr(err.msg, cases[i].want), "case %zu: status %d, message: %s", i,
              (int)s, err.msg);
    dit_flux2_free(m);
    unlink(out);
  }
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  dit_backend *be = NULL;
  dit_error err = {0};
  if (dit_backend_cpu_create(2, &be, &err) != DIT_OK) {
    CHECK_MSG(0, "cpu backend: %s", err.msg);
    return dt_finish();
  }
  test_model(be, a.data, "flux1-dev-tiny", true);
  test_model(be, a.data, "flux1-schnell-tiny", false);
  test_bad_single(be, a.data, a.tmp);
  test_prefixed(be, a.data, a.tmp);
  dit_backend_free(be);
  return dt_finish();
}

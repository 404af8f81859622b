/* AutoencoderKL encoder against diffusers (tests/fixtures/edit: `vae.encode(x).latent_dist.
 * parameters` of the tiny Z-Image VAE and of FLUX.2's AutoencoderKLFlux2 on preprocessed input
 * images), the same weights under LDM names from one file, tiling (a whole-image tile is the
 * untiled encode bit for bit; smaller tiles are a bounded perturbation), the latent
 * distribution's mode and sample, and bad arguments ending in errors that name them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "fixture.h"
#include "models/vae_kl.h"
#include "testing.h"

static char g_ref[4096], g_models[4096];

/* Encodes x [1, 3, H, W] with m into a malloc'd [1, 2L, H/8, W/8]; NULL after a failed check. */
static float *encode(dit_vae_kl_enc *m, const float *x, const int64_t *xs, int tile, int64_t *ms) {
  const dit_vae_kl_config *c = dit_vae_kl_enc_get_config(m);
  ms[0] = 1, ms[1] = 2 * c->latent_channels, ms[2] = xs[2] / 8, ms[3] = xs[3] / 8;
  const size_t n = (size_t)(ms[1] * ms[2] * ms[3]);
  float *out = malloc(n * sizeof *out);
  dit_tensor tx = dit_tensor_make(DIT_F32, (void *)x, 4, xs), tm = dit_tensor_make(DIT_F32, out, 4, ms);
  dit_error err = {0};
  dit_status s = dit_vae_kl_encode(m, &tx, &tm, tile, &err);
  CHECK_MSG(s == DIT_OK, "encode: %s", err.msg);
  if (s == DIT_OK) return out;
  free(out);
  return NULL;
}

/* The fixture's pixels (stored [3, H, W]) as [1, 3, H, W], and the reference moments. */
static int load_case(const char *pix, const char *mom, float **x, int64_t *xs, float **ref, int64_t *rs) {
  int xn, rn;
  if (dt_load_f32(g_ref, pix, x, xs, &xn) || dt_load_f32(g_ref, mom, ref, rs, &rn) || xn != 3 || rn != 3) return -1;
  for (int i = 3; i > 0; i--) xs[i] = xs[i - 1], rs[i] = rs[i - 1];
  xs[0] = rs[0] = 1;
  return 0;
}

static void check_against(dit_vae_kl_enc *m, const char *label, const char *pix, const char *mom, bool tiles) {
  float *x = NULL, *ref = NULL;
  int64_t xs[8], rs[8], ms[4];
  if (load_case(pix, mom, &x, xs, &ref, rs)) {
    CHECK_MSG(0, "%s: cannot load %s / %s from %s", label, pix, mom, g_ref);
    free(x), free(ref);
    return;
  }
  float *got = encode(m, x, xs, 0, ms);
  const size_t n = (size_t)(rs[1] * rs[2] * rs[3]);
  CHECK(ms[1] == rs[1] && ms[2] == rs[2] && ms[3] == rs[3]);
  if (got) {
    const double e = dt_rel_err(got, ref, n), em = dt_rel_err(got, ref, n / 2);
    printf("%s: moments [%lld, %lld, %lld] rel err %.3g (mean %.3g)\n", label, (long long)rs[1], (long long)rs[2],
           (long long)rs[3], e, em);
    CHECK_MSG(e <= 1e-4, "%s: relative error %.3g > 1e-4", label, e);
  }
  if (got && tiles) {
    /* a tile covering the whole latent is the untiled encode, bit for bit */
    float *same = encode(m, x, xs, 64, ms);
    CHECK_MSG(same && !memcmp(same, got, n * sizeof *got), "%s: tile >= latent differs from untiled", label);
    free(same);
    /* smaller tiles see less context (GroupNorm statistics, the mid-block attention): the
     * moments move, and the less context, the more. A misplaced or unblended tile would give
     * other content, ~1.41x the rms; with these random weights and 2-channel groups, 64-pixel
     * tiles move the mean by ~0.5-0.7x (the decoder's tiling is checked exactly in
     * test_vae_fixture; the blend is the same code). */
    double rel[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
      float *t = encode(m, x, xs, k == 0 ? 8 : 12, ms);
      double sq = 0, sa = 0;
      for (size_t i = 0; t && i < n / 2; i++) sq += (t[i] - got[i]) * (double)(t[i] - got[i]), sa += (double)got[i] * got[i];
      rel[k] = t ? sqrt(sq / sa) : 9;
      free(t);
    }
    printf("%s: tiled vs untiled mean, rms diff of the rms: %.3g (tile 8), %.3g (tile 12)\n", label, rel[0], rel[1]);
    CHECK_MSG(rel[0] <= 0.9 && rel[1] < rel[0], "%s: tiled encode rms diff %.3g, %.3g", label, rel[0], rel[1]);
  }
  free(got), free(x), free(ref);
}

static void test_latent_dist(void) {
  /* mode = mean; sample = mean + exp(0.5 clamp(logvar, -30, 20)) * noise */
  const float mo[2 * 2 * 3] = {1, 2, 3, -1, 0, 0.5f, 0, 2, -2, 100, -100, 1};
  const float noise[6] = {1, 1, 1, 2, 2, 2};
  float o[6];
  dit_vae_kl_latent(mo, 2, 3, NULL, o);
  CHECK(o[0] == 1 && o[4] == 0 && o[5] == 0.5f);
  dit_vae_kl_latent(mo, 2, 3, noise, o);
  CHECK(o[0] == 2.0f && fabsf(o[1] - (2 + expf(1.0f))) < 1e-6f && fabsf(o[2] - (3 + expf(-1.0f))) < 1e-6f);
  CHECK(fabsf(o[3] - (-1 + 2 * expf(10.0f))) < 1e-1f && fabsf(o[4] - 2 * expf(-15.0f)) < 1e-9f);
}

static void expect_fail(dit_vae_kl_enc *m, const float *x, const int64_t *xs, const int64_t *ms, int tile,
                        dit_status want, const char *needle) {
  float out[2 * 16 * 8 * 8];
  dit_tensor tx = dit_tensor_make(DIT_F32, (void *)x, 4, xs), tm = dit_tensor_make(DIT_F32, out, 4, ms);
  dit_error err = {0};
  dit_status s = dit_vae_kl_encode(m, &tx, &tm, tile, &err);
  CHECK_MSG(s == want && strstr(err.msg, needle), "want %d with \"%s\", got %d: %s", want, needle, s, err.msg);
}

static void test_bad_args(dit_vae_kl_enc *m) {
  static float x[3 * 64 * 64];
  memset(x, 0, sizeof x);
  const int64_t xs[4] = {1, 3, 64, 64}, ms[4] = {1, 32, 8, 8};
  const int64_t odd[4] = {1, 3, 60, 64}, four[4] = {1, 4, 64, 48}, small[4] = {1, 32, 8, 4};
  expect_fail(m, x, odd, ms, 0, DIT_ERR_INVALID_ARG, "multiples of 8");
  expect_fail(m, x, four, ms, 0, DIT_ERR_INVALID_ARG, "img must be");
  expect_fail(m, x, xs, small, 0, DIT_ERR_INVALID_ARG, "moments must be");
  expect_fail(m, x, xs, ms, 3, DIT_ERR_INVALID_ARG, "tile");
  x[77] = NAN;
  expect_fail(m, x, xs, ms, 0, DIT_ERR_NUMERIC, "NaN");
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  dt_path(g_ref, sizeof g_ref, a.data, "edit/reference.safetensors");
  dt_path(g_models, sizeof g_models, a.data, "models");
  dit_error err = {0};
  dit_backend *be = NULL;
  if (dit_backend_cpu_create(0, &be, &err) != DIT_OK) {
    CHECK_MSG(0, "cpu backend: %s", err.msg);
    return dt_finish();
  }
  char zvae[4096], kvae[4096], wts[4096], ldm[4096], cfg[4096];
  snprintf(zvae, sizeof zvae, "%s/zimage-tiny/vae", g_models);
  snprintf(kvae, sizeof kvae, "%s/flux2-klein-tiny/vae", g_models);
  dit_vae_kl_enc *m = NULL;
  dit_status s = dit_vae_kl_enc_load(be, zvae, NULL, NULL, &m, &err);
  CHECK_MSG(s == DIT_OK, "zimage vae encoder: %s", err.msg);
  if (s == DIT_OK) {
    check_against(m, "zimage-tiny AutoencoderKL", "z_init_pixels", "z_enc_moments", true);
    test_bad_args(m);
  }
  dit_vae_kl_enc_free(m);
  /* the same weights under the LDM names in one file (ae.safetensors style), with the config */
  snprintf(wts, sizeof wts, "%s/diffusion_pytorch_model.safetensors", zvae);
  snprintf(cfg, sizeof cfg, "%s/config.json", zvae);
  dt_path(ldm, sizeof ldm, a.tmp, "ae.safetensors");
  CHECK(dt_vae_write_ldm(wts, ldm, 4, false) == 0);
  m = NULL;
  s = dit_vae_kl_enc_load(be, ldm, NULL, cfg, &m, &err);
  CHECK_MSG(s == DIT_OK, "LDM file: %s", err.msg);
  if (s == DIT_OK) check_against(m, "zimage-tiny encoder from an LDM-named file", "z_init_pixels", "z_enc_moments", false);
  dit_vae_kl_enc_free(m);
  /* the wrong class is refused by name */
  m = NULL;
  s = dit_vae_kl_enc_load(be, kvae, "AutoencoderKL", NULL, &m, &err);
  CHECK_MSG(s == DIT_ERR_UNSUPPORTED && strstr(err.msg, "AutoencoderKLFlux2"), "class check: %d %s", s, err.msg);
  m = NULL;
  s = dit_vae_kl_enc_load(be, kvae, "AutoencoderKLFlux2", NULL, &m, &err);
  CHECK_MSG(s == DIT_OK, "flux2 vae encoder: %s", err.msg);
  if (s == DIT_OK) check_against(m, "flux2-klein-tiny AutoencoderKLFlux2", "k_ref_a_pixels", "k_enc_moments", true);
  dit_vae_kl_enc_free(m);
  test_latent_dist();
  dit_backend_free(be);
  return dt_finish();
}

/* AutoencoderKL decoder from one safetensors file (dit_vae_kl_load_file): the fixture VAE
 * rewritten under the original LDM names, as FLUX.1's ae.safetensors is (attention
 * weights as 1x1 convolutions), decodes bit for bit as the folder-loaded model does and
 * matches the diffusers reference; a diffusers-named file and an LDM file with linear
 * attention weights load too; FLUX.1's default configuration on the tiny file, a missing
 * tensor and a mis-shaped one end in errors naming the LDM tensor. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "fixture.h"
#include "models/vae_kl.h"
#include "testing.h"


static const char *g_fixture;
static char g_vae_dir[4096], g_config[4096], g_weights[4096];

/* The fixture's VAE case: decoder input z, diffusers' decode ref, both shapes. */
typedef struct vae_case {
  float *z, *ref;
  int64_t zs[8], rs[8];
  size_t n; /* elements of the image */
} vae_case;

/* Decodes c->z with m into a malloc'd image; NULL after a failed check. */
static float *decode_z(dit_vae_kl *m, const vae_case *c) {
  float *img = malloc(c->n * sizeof *img);
  dit_tensor tz = dit_tensor_make(DIT_F32, c->z, 4, c->zs), ti = dit_tensor_make(DIT_F32, img, 4, c->rs);
  dit_error err = {0};
  dit_status s = img ? dit_vae_kl_decode(m, &tz, &ti, 0, &err) : DIT_ERR_NOMEM;
  CHECK_MSG(s == DIT_OK, "decode: %s", err.msg);
  if (s == DIT_OK) return img;
  free(img);
  return NULL;
}

/* Loads `file` (with the fixture's config) and checks its decode equals `want` bit for
 * bit and is within 1e-4 of the diffusers reference. */
static void check_file(dit_backend *be, const char *file, const float *want, const vae_case *c) {
  dit_vae_kl *m = NULL;
  dit_error err = {0};
  dit_status s = dit_vae_kl_load_file(be, file, g_config, &m, &err);
  CHECK_MSG(s == DIT_OK, "load %s: %s", file, err.msg);
  float *got = s == DIT_OK ? decode_z(m, c) : NULL;
  if (got) {
    CHECK_MSG(!memcmp(got, want, c->n * sizeof *got), "%s: decode differs from the folder model's", file);
    double e = dt_rel_err(got, c->ref, c->n);
    printf("%s: decode bit-identical to the folder model's, rel err to diffusers %.3g\n", file, e);
    CHECK_MSG(e <= 1e-4, "relative error %.3g > 1e-4", e);
  }
  free(got);
  dit_vae_kl_free(m);
}

/* load_file(file, config) fails with DIT_ERR_FORMAT and a message holding both needles. */
static void expect_fail(dit_backend *be, const char *file, const char *config, const char *n1, const char *n2) {
  dit_vae_kl *m = NULL;
  dit_error err = {0};
  dit_status s = dit_vae_kl_load_file(be, file, config, &m, &err);
  CHECK_MSG(s == DIT_ERR_FORMAT && !m && strstr(err.msg, n1) && strstr(err.msg, n2),
            "%s: want an error naming %s (%s), got %d: %s", file, n1, n2, s, err.msg);
  printf("expected failure: %s\n", err.msg);
  dit_vae_kl_free(m);
}

/* FLUX.1's configuration (the default) on the tiny file, through both entry points. */
static void test_default_config(dit_backend *be, const char *ldm) {
  dit_vae_kl_config c;
  dit_error ce = {0};
  dit_vae_kl_config_flux1(&c);
  CHECK_MSG(dit_vae_kl_config_check(&c, &ce) == DIT_OK, "%s", ce.msg);
  CHECK(c.latent_channels == 16 && c.n_levels == 4 && c.block_out_channels[0] == 128 && c.block_out_channels[3] == 512);
  CHECK(c.layers_per_block == 2 && c.norm_num_groups == 32 && c.mid_block_add_attention && !c.use_post_quant_conv);
  CHECK(c.scaling_factor == 0.3611f && c.has_shift_factor && c.shift_factor == 0.1159f);
  expect_fail(be, ldm, NULL, "decoder.conv_in.weight expected [512, 16, 3, 3] found [64, 16, 3, 3]", "FLUX.1");
  dit_vae_kl *m = NULL;
  dit_error err = {0};
  dit_status s = dit_vae_kl_load(be, ldm, &m, &err);
  CHECK_MSG(s == DIT_ERR_FORMAT && !m && strstr(err.msg, "mis-shaped") && strstr(err.msg, "decoder.conv_in.weight"),
            "dit_vae_kl_load of a file: want the default config's shape error, got %d: %s", s, err.msg);
  dit_vae_kl_free(m);
}

static void test_bad_files(dit_backend *be, const char *tmp, const char *ldm) {
  char bad[4096];
  dt_path(bad, sizeof bad, tmp, "no_conv_out.safetensors");
  CHECK(dt_st_rewrite(ldm, bad, "decoder.conv_out.weight", NULL) == 0);
  expect_fail(be, bad, g_config, "missing: decoder.conv_out.weight", "vae load");
  dt_path(bad, sizeof bad, tmp, "bad_q.safetensors");
  CHECK(dt_st_rewrite(ldm, bad, "decoder.mid.attn_1.q.weight", "decoder.mid.attn_1.norm.weight") == 0);
  expect_fail(be, bad, g_config, "decoder.mid.attn_1.q.weight expected [64, 64, 1, 1] found [64]", "mis-shaped");
  dt_path(bad, sizeof bad, tmp, "bad_shortcut.safetensors");
  CHECK(dt_st_rewrite(ldm, bad, "decoder.up.1.block.0.nin_shortcut.weight", "decoder.up.0.block.0.conv1.weight") == 0);
  expect_fail(be, bad, g_config, "decoder.up.1.block.0.nin_shortcut.weight expected [32, 64, 1, 1]", "mis-shaped");
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  char fx[4096];
  g_fixture = a.fixture ? a.fixture : dt_path(fx, sizeof fx, a.data, "models/zimage-tiny");
  dt_path(g_vae_dir, sizeof g_vae_dir, g_fixture, "vae");
  dt_path(g_config, sizeof g_config, g_vae_dir, "config.json");
  dt_path(g_weights, sizeof g_weights, g_vae_dir, "diffusion_pytorch_model.safetensors");
  char ldm[4096], ldm_linear[4096], comp[4096];
  dt_path(ldm, sizeof ldm, a.tmp, "ae.safetensors");
  dt_path(ldm_linear, sizeof ldm_linear, a.tmp, "ae_linear_attn.safetensors");
  CHECK(dt_vae_write_ldm(g_weights, ldm, 4, false) == 0);
  CHECK(dt_vae_write_ldm(g_weights, ldm_linear, 4, true) == 0);
  dt_path(comp, sizeof comp, g_fixture, "components.safetensors");
  vae_case c = {0};
  dit_error err = {0};
  dit_backend *be = NULL;
  if (dt_vae_case_load(comp, &c.z, c.zs, &c.ref, c.rs) || dit_backend_cpu_create(0, &be, &err) != DIT_OK) {
    CHECK_MSG(0, "no case or no cpu backend: %s", err.msg);
    free(c.z), free(c.ref);
    return dt_finish();
  }
  c.n = (size_t)(c.rs[0] * c.rs[1] * c.rs[2] * c.rs[3]);
  /* the reference decode: the same fixture loaded from its folder */
  dit_vae_kl *m = NULL;
  CHECK_MSG(dit_vae_kl_load(be, g_vae_dir, &m, &err) == DIT_OK, "folder load: %s", err.msg);
  float *want = m ? decode_z(m, &c) : NULL;
  dit_vae_kl_free(m);
  if (want) {
    check_file(be, ldm, want, &c);
    check_file(be, ldm_linear, want, &c);
    check_file(be, g_weights, want, &c); /* the diffusers-named file itself */
  }
  free(want);
  free(c.z);
  free(c.ref);
  test_default_config(be, ldm);
  test_bad_files(be, a.tmp, ldm);
  dit_backend_free(be);
  return dt_finish();
}

/* MiniMax-H3's audio VAE decoder (see vae_minimax_h3_audio.h). */
#include "models/vae_minimax_h3_audio.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "models/model_weights.h"
#include "models/vocoder_ltx2.h"

struct dit_h3_audio {
  dit_backend *be;
  dit_h3_audio_config cfg;
  float *proj_w, *proj_b; /* dec_in_proj [latent_dim, latent_channels] and [latent_dim], F32 (host) */
  dit_vocoder_ltx2 *voc;
};

/* An integer array (named key in messages) of 1..max entries in [lo, hi]. */
static dit_status int_array(const json_t *a, const char *key, int max, int lo, int hi, int *out, int *n,
                            const char *what, dit_error *err) {
  if (!json_is_array(a) || json_array_size(a) < 1 || (int)json_array_size(a) > max)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: \"%s\" must list 1 to %d integers", what, key, max);
  *n = (int)json_array_size(a);
  for (int i = 0; i < *n; i++) {
    const json_t *v = json_array_get(a, (size_t)i);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s[%d] must be an integer in %d..%d", what, key, i, lo, hi);
    out[i] = (int)json_integer_value(v);
  }
  return DIT_OK;
}

static dit_status int_list(const json_t *j, const char *key, int max, int lo, int hi, int *out, int *n,
                           const char *what, dit_error *err) {
  return int_array(json_object_get(j, key), key, max, lo, hi, out, n, what, err);
}

static dit_status read_config(const json_t *j, const char *what, dit_h3_audio_config *c, dit_voc_gen_config *g,
                              dit_error *err) {
  DIT_TRY(dit_json_class_check(j, "AutoencoderKLMiniMaxH3Audio", what, err));
  int64_t v[4] = {32, 2048, 2048, 32000};
  const char *keys[4] = {"latent_channels", "latent_dim", "decoder_dim", "sampling_rate"};
  const int64_t hi[4] = {DIT_H3_AUDIO_MAX_CHANNELS, 1 << 16, 1 << 16, 1 << 20};
  for (int i = 0; i < 4; i++) DIT_TRY(dit_json_int_opt(j, keys[i], 1, hi[i], &v[i], what, err));
  c->latent_channels = (int)v[0], c->latent_dim = (int)v[1], c->sample_rate = (int)v[3];
  memset(g, 0, sizeof *g);
  g->in_channels = (int)v[1], g->hidden_channels = (int)v[2], g->out_channels = 1;
  g->act = DIT_VOC_SNAKEBETA, g->antialias = true, g->aa_ratio = 2, g->aa_kernel = 12;
  g->final_act = DIT_VOC_FINAL_CLAMP, g->final_bias = false;
  int nk = 0;
  DIT_TRY(int_list(j, "decoder_rates", DIT_VOC_MAX_UP, 1, 64, g->up_factor, &g->n_up, what, err));
  DIT_TRY(int_list(j, "decoder_kernel_sizes", DIT_VOC_MAX_UP, 1, 256, g->up_kernel, &nk, what, err));
  if (nk != g->n_up)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: %d decoder_rates but %d decoder_kernel_sizes", what, g->n_up, nk);
  DIT_TRY(int_list(j, "resblock_kernel_sizes", DIT_VOC_MAX_RES, 1, 63, g->res_kernel, &g->n_res, what, err));
  const json_t *d = json_object_get(j, "resblock_dilation_sizes");
  if (!json_is_array(d) || (int)json_array_size(d) != g->n_res)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: resblock_dilation_sizes must hold %d lists", what, g->n_res);
  for (int i = 0; i < g->n_res; i++)
    DIT_TRY(int_array(json_array_get(d, (size_t)i), "resblock_dilation_sizes[i]", DIT_VOC_MAX_DIL, 1, 1024, g->dil[i],
                      &g->n_dil[i], what, err));
  c->hop = 1;
  for (int i = 0; i < g->n_up; i++) {
    if ((g->up_kernel[i] - g->up_factor[i]) % 2)
      return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: decoder_kernel_sizes[%d] %d - its rate %d is odd", what, i,
                        g->up_kernel[i], g->up_factor[i]);
    c->hop *= g->up_factor[i];
  }
  for (int i = 0; i < c->latent_channels; i++) c->latents_mean[i] = 0.0f, c->latents_std[i] = 1.0f;
  const char *sk[2] = {"latents_mean", "latents_std"};
  float *dst[2] = {c->latents_mean, c->latents_std};
  for (int k = 0; k < 2; k++) {
    const json_t *a = json_object_get(j, sk[k]);
    if (!a || json_is_null(a)) continue;
    if (!json_is_array(a) || (int)json_array_size(a) != c->latent_channels)
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s must hold %d numbers", what, sk[k], c->latent_channels);
    for (int i = 0; i < c->latent_channels; i++) {
      const json_t *x = json_array_get(a, (size_t)i);
      if (!json_is_number(x)) return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s[%d] is not a number", what, sk[k], i);
      dst[k][i] = (float)json_number_value(x);
    }
  }
  return DIT_OK;
}

/* dec_in_proj's weight [latent_dim, latent_channels, 1] and bias as host F32 copies. */
static dit_status load_proj(dit_h3_audio *a, const char *dir, dit_error *err) {
  const int D = a->cfg.latent_dim, C = a->cfg.latent_channels;
  dit_weights *w = NULL;
  DIT_TRY(dit_weights_open(dir, NULL, &w, err));
  dit_tensor tw = {0}, tb = {0};
  dit_wtable t;
  dit_wtable_init(&t);
  dit_wtable_add(&t, &tw, false, 3, (int64_t[]){D, C, 1}, "dec_in_proj.weight");
  dit_wtable_add(&t, &tb, false, 1, (int64_t[]){D}, "dec_in_proj.bias");
  static const char *const others[] = {"", NULL};
  dit_status s = dit_wtable_bind(&t, w, "", others, err);
  if (s == DIT_OK) s = dit_wtable_check_float(&t, err);
  a->proj_w = malloc((size_t)D * C * sizeof(float)), a->proj_b = malloc((size_t)D * sizeof(float));
  if (s == DIT_OK && (!a->proj_w || !a->proj_b)) s = dit_errorf(err, DIT_ERR_NOMEM, "h3 audio: out of memory");
  if (s == DIT_OK) {
    dit_convert_to_f32(a->proj_w, tw.data, tw.dtype, (size_t)D * C);
    dit_convert_to_f32(a->proj_b, tb.data, tb.dtype, (size_t)D);
  }
  dit_wtable_free(&t);
  dit_weights_close(w);
  return s;
}

static dit_status config_of(const char *dir, dit_h3_audio_config *c, dit_voc_gen_config *g, dit_error *err) {
  char path[4096];
  DIT_TRY(dit_model_config_path("h3 audio load", dir, path, sizeof path, err));
  json_t *j = NULL;
  DIT_TRY(dit_json_load_file(path, 16u << 20, &j, err));
  dit_status s = read_config(j, path, c, g, err);
  json_decref(j);
  return s;
}

dit_status dit_h3_audio_read_config(const char *dir, dit_h3_audio_config *c, dit_error *err) {
  dit_voc_gen_config g;
  return config_of(dir, c, &g, err);
}

dit_status dit_h3_audio_load(dit_backend *be, const char *dir, dit_h3_audio **out, dit_error *err) {
  if (!out) return dit_errorf(err, DIT_ERR_INVALID_ARG, "h3 audio load: NULL output");
  *out = NULL;
  if (!be || !dir) return dit_errorf(err, DIT_ERR_INVALID_ARG, "h3 audio load: NULL backend or folder");
  dit_h3_audio *a = calloc(1, sizeof *a);
  if (!a) return dit_errorf(err, DIT_ERR_NOMEM, "h3 audio: out of memory");
  a->be = be;
  dit_voc_gen_config g;
  dit_status s = config_of(dir, &a->cfg, &g, err);
  if (s == DIT_OK) s = load_proj(a, dir, err);
  static const char *const ignore[] = {"encoder.", "pre_block.", "mean_proj.", "logs_proj.", "dec_in_proj.", NULL};
  if (s == DIT_OK) s = dit_vocoder_bigvgan_load(be, dir, "decoder.", ignore, &g, a->cfg.sample_rate, &a->voc, err);
  DIT_HAND_OVER(s, a, out, dit_h3_audio_free);
}

void dit_h3_audio_free(dit_h3_audio *a) {
  if (!a) return;
  dit_vocoder_ltx2_free(a->voc);
  free(a->proj_w), free(a->proj_b);
  free(a);
}

const dit_h3_audio_config *dit_h3_audio_get_config(const dit_h3_audio *a) { return a ? &a->cfg : NULL; }
int64_t dit_h3_audio_samples(const dit_h3_audio *a, int T) { return a ? dit_vocoder_ltx2_output_samples(a->voc, T) : 0; }

void dit_h3_audio_cost(const dit_h3_audio *a, int B, int T, dit_cost *out) {
  dit_vocoder_ltx2_cost(a->voc, T, out);
  const size_t mel = (size_t)B * a->cfg.latent_dim * T * sizeof(float);
  out->act_bytes += 2 * mel + (size_t)B * (size_t)dit_vocoder_ltx2_output_samples(a->voc, T) * sizeof(float);
  out->flops = B * (out->flops + 2.0 * a->cfg.latent_dim * a->cfg.latent_channels * T);
}

dit_status dit_h3_audio_decode(dit_h3_audio *a, int B, int T, const float *z, float *out, dit_error *err) {
  if (!a || !z || !out || B < 1 || B > 16 || T < 1 || T > (1 << 20))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "h3 audio decode: bad arguments");
  dit_backend *be = a->be;
  const int C = a->cfg.latent_channels, D = a->cfg.latent_dim;
  const int64_t S = dit_vocoder_ltx2_output_samples(a->voc, T);
  float *mel = malloc((size_t)B * D * T * sizeof *mel);
  if (!mel) return dit_errorf(err, DIT_ERR_NOMEM, "h3 audio: out of memory");
  for (int b = 0; b < B; b++) /* dec_in_proj: a 1x1 convolution, [C, T] -> [D, T] */
    for (int o = 0; o < D; o++)
      for (int t = 0; t < T; t++) {
        float acc = 0.0f;
        for (int c = 0; c < C; c++) acc += a->proj_w[o * C + c] * z[((size_t)b * C + c) * T + t];
        mel[((size_t)b * D + o) * T + t] = acc + a->proj_b[o];
      }
  void *dm = NULL, *dout = NULL;
  dit_status s = be->ops->alloc(be, (size_t)B * D * T * sizeof *mel, &dm, err);
  if (s == DIT_OK) s = be->ops->alloc(be, (size_t)(B * S) * sizeof(float), &dout, err);
  if (s == DIT_OK) s = be->ops->upload(be, dm, mel, (size_t)B * D * T * sizeof *mel, err);
  if (s == DIT_OK) {
    dit_tensor x = dit_tensor_make(DIT_F32, dm, 4, (int64_t[]){B, D, T, 1});
    dit_tensor y = dit_tensor_3d(DIT_F32, dout, B, 1, S);
    x.device = y.device = dit_backend_device(be);
    s = dit_vocoder_ltx2_run(a->voc, &x, &y, err);
  }
  if (s == DIT_OK) s = be->ops->download(be, out, dout, (size_t)(B * S) * sizeof(float), err);
  if (dm) be->ops->free(be, dm);
  if (dout) be->ops->free(be, dout);
  free(mel);
  return s;
}

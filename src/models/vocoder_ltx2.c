/* The LTX-2 vocoders (see vocoder_ltx2.h): config, the weight table, packing the weights into
 * the layouts the forward runs (vocoder_ltx2_run.c), loading and the run call's checks. */
#include "models/vocoder_ltx2.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "io/json.h"
#include "models/model_weights.h"
#include "models/vocoder_ltx2_internal.h"

#define MAX_CHANNELS 65536

/* ---- config ---- */

/* diffusers' defaults of one vocoder. */
typedef struct gen_defaults {
  int in, hidden, out, n_up, up_k[6], up_f[6];
  dit_voc_act act;
  bool antialias;
  dit_voc_final final_act;
  bool final_bias;
} gen_defaults;

static const gen_defaults k_ltx20 = {128, 1024, 2, 5, {16, 15, 8, 4, 4}, {6, 5, 2, 2, 2}, DIT_VOC_LEAKY_RELU,
                                     false, DIT_VOC_FINAL_TANH, true};
static const gen_defaults k_ltx23 = {128, 1536, 2, 6, {11, 4, 4, 4, 4, 4}, {5, 2, 2, 2, 2, 2}, DIT_VOC_SNAKEBETA,
                                     true, DIT_VOC_FINAL_NONE, false};
static const gen_defaults k_bwe = {128, 512, 2, 5, {12, 11, 4, 4, 4}, {6, 5, 2, 2, 2}, DIT_VOC_SNAKEBETA,
                                   true, DIT_VOC_FINAL_NONE, false};

/* The config's member pre + name (its key into key). */
static const json_t *member(const json_t *j, const char *pre, const char *name, char *key, size_t len) {
  snprintf(key, len, "%s%s", pre, name);
  return json_object_get(j, key);
}

static dit_status int_opt(const json_t *j, const char *pre, const char *name, int64_t min, int64_t max, int *out,
                          const char *what, dit_error *err) {
  char key[96];
  member(j, pre, name, key, sizeof key);
  int64_t v = *out;
  DIT_TRY(dit_json_int_opt(j, key, min, max, &v, what, err));
  *out = (int)v;
  return DIT_OK;
}

/* An integer list (absent or null: def, n_def entries): *n entries in [1, max], at most cap. */
static dit_status ints_opt(const json_t *j, const char *pre, const char *name, int64_t max, const int *def, int n_def,
                           int *out, int *n, int cap, const char *what, dit_error *err) {
  char key[96];
  const json_t *v = member(j, pre, name, key, sizeof key);
  if (!v || json_is_null(v)) {
    for (int i = 0; i < n_def; i++) out[i] = def[i];
    *n = n_def;
    return DIT_OK;
  }
  int64_t a[16];
  size_t got = 0;
  DIT_TRY(dit_json_int_array(j, key, 1, max, a, (size_t)cap, &got, what, err));
  if (got < 1) return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s is empty", what, key);
  for (size_t i = 0; i < got; i++) out[i] = (int)a[i];
  *n = (int)got;
  return DIT_OK;
}

/* resnet_dilations: n lists of dilations (absent: [1, 3, 5] each). */
static dit_status dilations(const json_t *j, const char *pre, dit_voc_gen_config *c, const char *what,
                            dit_error *err) {
  char key[96];
  const json_t *v = member(j, pre, "resnet_dilations", key, sizeof key);
  for (int i = 0; i < c->n_res && (!v || json_is_null(v)); i++) {
    c->n_dil[i] = 3;
    c->dil[i][0] = 1, c->dil[i][1] = 3, c->dil[i][2] = 5;
  }
  if (!v || json_is_null(v)) return DIT_OK;
  if (!json_is_array(v) || (int)json_array_size(v) != c->n_res)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s must be a list of %d lists (one per resnet kernel size)", what,
                      key, c->n_res);
  for (int i = 0; i < c->n_res; i++) {
    const json_t *l = json_array_get(v, (size_t)i);
    const size_t n = json_is_array(l) ? json_array_size(l) : 0;
    if (n < 1 || n > DIT_VOC_MAX_DIL)
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s[%d] must list 1 to %d dilations", what, key, i, DIT_VOC_MAX_DIL);
    c->n_dil[i] = (int)n;
    for (size_t k = 0; k < n; k++) {
      const json_t *e = json_array_get(l, k);
      if (!json_is_integer(e) || json_integer_value(e) < 1 || json_integer_value(e) > 1024)
        return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s[%d][%zu] is not a dilation in [1, 1024]", what, key, i, k);
      c->dil[i][k] = (int)json_integer_value(e);
    }
  }
  return DIT_OK;
}

/* act_fn and final_act_fn (absent: the defaults; final_act_fn null: none). */
static dit_status act_fields(const json_t *j, const char *pre, dit_voc_gen_config *c, const char *what,
                             dit_error *err) {
  char key[96];
  const json_t *v = member(j, pre, "act_fn", key, sizeof key);
  if (v && !json_is_null(v)) {
    const char *s = json_string_value(v);
    if (!s) return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s is not a string", what, key);
    if (!strcmp(s, "leaky_relu")) c->act = DIT_VOC_LEAKY_RELU;
    else if (!strcmp(s, "snake")) c->act = DIT_VOC_SNAKE;
    else if (!strcmp(s, "snakebeta")) c->act = DIT_VOC_SNAKEBETA;
    else return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: %s \"%s\" is not supported (leaky_relu, snake, snakebeta)",
                           what, key, s);
  }
  v = member(j, pre, "final_act_fn", key, sizeof key);
  if (v) {
    const char *s = json_is_null(v) ? "" : json_string_value(v);
    if (!s) return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s is not a string", what, key);
    if (!*s) c->final_act = DIT_VOC_FINAL_NONE;
    else if (!strcmp(s, "tanh")) c->final_act = DIT_VOC_FINAL_TANH;
    else if (!strcmp(s, "clamp")) c->final_act = DIT_VOC_FINAL_CLAMP;
    else return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: %s \"%s\" is not supported (tanh, clamp, null)", what, key,
                           s);
  }
  return DIT_OK;
}

/* The combinations the forward cannot run, refused by field. */
static dit_status gen_refusals(const dit_voc_gen_config *c, const char *pre, const char *what, dit_error *err) {
  if (c->antialias && c->act == DIT_VOC_LEAKY_RELU)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: %santialias with act_fn leaky_relu is not supported (diffusers "
                      "nests its anti-aliased activations)", what, pre);
  for (int i = 0; i < c->n_up; i++)
    if (c->up_kernel[i] < c->up_factor[i])
      return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: %supsample_kernel_sizes[%d] %d is below its factor %d", what,
                        pre, i, c->up_kernel[i], c->up_factor[i]);
  if ((c->hidden_channels >> c->n_up) < 1)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: %shidden_channels %d cannot halve %d times", what, pre,
                      c->hidden_channels, c->n_up);
  const bool aa = c->act != DIT_VOC_LEAKY_RELU; /* act_out is anti-aliased for snake */
  const int K = c->aa_kernel, r = c->aa_ratio;
  if (aa && (K < r || K / r < 1))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: %santialias_kernel_size %d is below the ratio %d", what, pre, K,
                      r);
  if (aa) { /* the replicate edges stay inside diffusers' padding (resample1d clamps its indices) */
    const int pad = K / r - 1, pl = pad * r + (K - r) / 2, off = K - 1 + pad * r - pl;
    const int lo = (-off >= 0 ? -off / r : -((off + r - 1) / r)) + pad, hi = (K - 2 - off) / r;
    if (lo < 0 || hi > pad - 1)
      return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: %santialias_kernel_size %d with ratio %d is not supported",
                        what, pre, K, r);
  }
  return DIT_OK;
}

static dit_status read_gen(const json_t *j, const char *pre, const gen_defaults *d, dit_voc_gen_config *c,
                           const char *what, dit_error *err) {
  memset(c, 0, sizeof *c);
  c->in_channels = d->in, c->hidden_channels = d->hidden, c->out_channels = d->out;
  c->act = d->act, c->antialias = d->antialias, c->final_act = d->final_act, c->final_bias = d->final_bias;
  c->aa_ratio = 2, c->aa_kernel = 12;
  DIT_TRY(int_opt(j, pre, "in_channels", 1, MAX_CHANNELS, &c->in_channels, what, err));
  DIT_TRY(int_opt(j, pre, "hidden_channels", 1, MAX_CHANNELS, &c->hidden_channels, what, err));
  DIT_TRY(int_opt(j, pre, "out_channels", 1, 64, &c->out_channels, what, err));
  DIT_TRY(int_opt(j, pre, "antialias_ratio", 1, 16, &c->aa_ratio, what, err));
  DIT_TRY(int_opt(j, pre, "antialias_kernel_size", 1, 256, &c->aa_kernel, what, err));
  int nk = 0;
  DIT_TRY(ints_opt(j, pre, "upsample_kernel_sizes", 256, d->up_k, d->n_up, c->up_kernel, &c->n_up, DIT_VOC_MAX_UP,
                   what, err));
  DIT_TRY(ints_opt(j, pre, "upsample_factors", 64, d->up_f, d->n_up, c->up_factor, &nk, DIT_VOC_MAX_UP, what, err));
  if (nk != c->n_up)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: %supsample_factors has %d entries, %supsample_kernel_sizes %d", what,
                      pre, nk, pre, c->n_up);
  static const int res_k[3] = {3, 7, 11};
  DIT_TRY(ints_opt(j, pre, "resnet_kernel_sizes", 63, res_k, 3, c->res_kernel, &c->n_res, DIT_VOC_MAX_RES, what,
                   err));
  DIT_TRY(dilations(j, pre, c, what, err));
  DIT_TRY(act_fields(j, pre, c, what, err));
  char key[96];
  double slope = 0.1;
  member(j, pre, "leaky_relu_negative_slope", key, sizeof key);
  DIT_TRY(dit_json_double_opt(j, key, &slope, what, err));
  c->slope = (float)slope;
  member(j, pre, "antialias", key, sizeof key);
  DIT_TRY(dit_json_bool_opt(j, key, &c->antialias, what, err));
  member(j, pre, "final_bias", key, sizeof key);
  DIT_TRY(dit_json_bool_opt(j, key, &c->final_bias, what, err));
  return gen_refusals(c, pre, what, err);
}

/* The BWE fields: the mel STFT and the rates, and what must agree between the two vocoders. */
static dit_status read_bwe(const json_t *j, dit_vocoder_ltx2_config *c, const char *what, dit_error *err) {
  c->filter_length = 512, c->hop_length = 80, c->window_length = 512, c->num_mel_channels = 64;
  c->input_sampling_rate = 16000, c->output_sampling_rate = 48000;
  DIT_TRY(int_opt(j, "", "filter_length", 2, 1 << 16, &c->filter_length, what, err));
  DIT_TRY(int_opt(j, "", "hop_length", 1, 1 << 16, &c->hop_length, what, err));
  DIT_TRY(int_opt(j, "", "window_length", 1, 1 << 16, &c->window_length, what, err));
  DIT_TRY(int_opt(j, "", "num_mel_channels", 1, 4096, &c->num_mel_channels, what, err));
  DIT_TRY(int_opt(j, "", "input_sampling_rate", 1, 1 << 22, &c->input_sampling_rate, what, err));
  DIT_TRY(int_opt(j, "", "output_sampling_rate", 1, 1 << 22, &c->output_sampling_rate, what, err));
  const dit_voc_gen_config *v = &c->voc, *b = &c->bwe_gen;
  if (c->window_length != c->filter_length)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: window_length %d != filter_length %d is not supported", what,
                      c->window_length, c->filter_length);
  if (c->window_length < c->hop_length)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: hop_length %d over the window is not supported", what,
                      c->hop_length);
  const int ratio = c->output_sampling_rate / c->input_sampling_rate;
  if (ratio < 1 || ratio > 16 || ratio * c->input_sampling_rate != c->output_sampling_rate)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: output_sampling_rate %d is not 1 to 16 times %d", what,
                      c->output_sampling_rate, c->input_sampling_rate);
  if (b->in_channels != v->out_channels * c->num_mel_channels)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: bwe_in_channels %d != out_channels * num_mel_channels (%d)", what,
                      b->in_channels, v->out_channels * c->num_mel_channels);
  if (b->out_channels != v->out_channels)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: bwe_out_channels %d != out_channels %d", what, b->out_channels,
                      v->out_channels);
  int64_t prod = 1;
  for (int i = 0; i < b->n_up; i++) {
    prod *= b->up_factor[i];
    if ((b->up_kernel[i] - b->up_factor[i]) % 2)
      return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: bwe_upsample_kernel_sizes[%d] %d - its factor is odd (the "
                        "residual would not match the resampled waveform)", what, i, b->up_kernel[i]);
  }
  if (prod != (int64_t)c->hop_length * ratio)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: bwe_upsample_factors multiply to %lld, not hop_length * %d", what,
                      (long long)prod, ratio);
  return DIT_OK;
}

static dit_status read_config(const json_t *j, const char *what, dit_vocoder_ltx2_config *c, dit_error *err) {
  memset(c, 0, sizeof *c);
  const char *cls = NULL;
  DIT_TRY(dit_json_string_opt(j, "_class_name", &cls, what, err));
  if (!cls || (strcmp(cls, "LTX2Vocoder") && strcmp(cls, "LTX2VocoderWithBWE")))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: _class_name \"%s\" is not LTX2Vocoder or LTX2VocoderWithBWE", what,
                      cls ? cls : "");
  c->bwe = !strcmp(cls, "LTX2VocoderWithBWE");
  DIT_TRY(read_gen(j, "", c->bwe ? &k_ltx23 : &k_ltx20, &c->voc, what, err));
  if (!c->bwe) {
    c->output_sampling_rate = 24000;
    return int_opt(j, "", "output_sampling_rate", 1, 1 << 22, &c->output_sampling_rate, what, err);
  }
  DIT_TRY(read_gen(j, "bwe_", &k_bwe, &c->bwe_gen, what, err));
  return read_bwe(j, c, what, err);
}

/* ---- the weight table ---- */

/* A generator's checkpoint names: diffusers' LTX-2 vocoders, or BigVGAN's own with weight norm (MiniMax-H3's
 * audio decoder): each field a printf pattern after the generator's prefix. */
typedef struct voc_names {
  const char *conv_in, *up, *res, *act1, *act2, *down, *act_out, *conv_out;
  int act_stride; /* resblock k's activations: act1 and act2 of index act_stride * k (+ 1 for BigVGAN's) */
  bool weight_norm;
} voc_names;

static const voc_names k_ltx2_names = {"conv_in",  "upsamplers.%d", "resnets", "acts1.%d", "acts2.%d", "downsample",
                                       "act_out", "conv_out",      1,         false};
static const voc_names k_bigvgan_names = {"conv_pre",   "ups.%d.0", "resblocks", "activations.%d", "activations.%d",
                                          "downsample.lowpass", "activation_post", "conv_post", 2, true};

/* The weight of a conv named base: "base.weight", or weight norm's "base.weight_v" and "base.weight_g". */
static void add_weight(dit_wtable *t, dit_tensor *w, dit_tensor *g, int64_t d0, int64_t d1, int64_t k, bool wn,
                       const char *base) {
  if (!wn) {
    dit_wtable_add(t, w, false, 3, (int64_t[]){d0, d1, k}, "%s.weight", base);
    return;
  }
  dit_wtable_add(t, w, false, 3, (int64_t[]){d0, d1, k}, "%s.weight_v", base);
  dit_wtable_add(t, g, false, 3, (int64_t[]){d0, 1, 1}, "%s.weight_g", base);
}

static void add_conv(dit_wtable *t, voc_conv *cv, int ci, int co, int k, int d, bool bias, bool wn, const char *base) {
  cv->ci = ci, cv->co = co, cv->k = k, cv->d = d;
  cv->pad_l = d * (k - 1) / 2, cv->pad_r = d * (k - 1) - cv->pad_l;
  add_weight(t, &cv->rw, &cv->rg, co, ci, k, wn, base);
  if (bias) dit_wtable_add(t, &cv->rb, false, 1, (int64_t[]){co}, "%s.bias", base);
}

/* act: leaky ReLU (slope) or snake(-beta), anti-aliased when aa ("base.act.alpha" and the
 * filters) or plain ("base.alpha"). */
static void add_act(dit_wtable *t, voc_act *a, const dit_voc_gen_config *c, int C, bool snake, bool beta, bool aa,
                    float slope, const char *down, const char *base) {
  memset(a, 0, sizeof *a);
  a->snake = snake, a->aa = snake && aa, a->slope = slope, a->C = C;
  if (!snake) return;
  const char *in = a->aa ? ".act" : "";
  dit_wtable_add(t, &a->ralpha, false, 1, (int64_t[]){C}, "%s%s.alpha", base, in);
  if (beta) dit_wtable_add(t, &a->rbeta, false, 1, (int64_t[]){C}, "%s%s.beta", base, in);
  if (!a->aa) return;
  const int K = c->aa_kernel, r = c->aa_ratio, pad = K / r - 1;
  a->ratio = r, a->K = K;
  a->up_off = K - 1 + pad * r - (pad * r + (K - r) / 2);
  a->down_off = K / 2 + K % 2 - 1;
  dit_wtable_add(t, &a->rfu, true, 3, (int64_t[]){1, 1, K}, "%s.upsample.filter", base);
  dit_wtable_add(t, &a->rfd, true, 3, (int64_t[]){1, 1, K}, "%s.%s.filter", base, down);
}

/* name = pre + the pattern fmt with one index. */
static void part(char *n, size_t len, const char *pre, const char *fmt, int i) {
  char tail[96];
  snprintf(tail, sizeof tail, fmt, i);
  snprintf(n, len, "%s%s", pre, tail);
}

static dit_status build_gen(voc_gen *g, const dit_voc_gen_config *c, dit_wtable *t, const char *pre,
                            const voc_names *nm, dit_error *err) {
  g->c = *c;
  g->res = calloc((size_t)(c->n_up * c->n_res), sizeof *g->res);
  if (!g->res) return dit_errorf(err, DIT_ERR_NOMEM, "vocoder: out of memory");
  char n[192], r0[96];
  const bool wn = nm->weight_norm;
  part(n, sizeof n, pre, nm->conv_in, 0);
  add_conv(t, &g->conv_in, c->in_channels, c->hidden_channels, 7, 1, true, wn, n);
  /* diffusers' ResBlock appends acts1's last LeakyReLU again as each acts2 (same slope, same
   * numerics); with snake(-beta) every activation has its own parameters */
  const bool snake = c->act != DIT_VOC_LEAKY_RELU, beta = c->act == DIT_VOC_SNAKEBETA;
  int ch = c->hidden_channels;
  for (int l = 0; l < c->n_up; l++) {
    voc_upconv *u = &g->up[l];
    u->ci = ch, u->co = ch / 2, u->K = c->up_kernel[l], u->s = c->up_factor[l];
    u->J = (u->K + u->s - 1) / u->s, u->pad = (u->K - u->s) / 2;
    part(n, sizeof n, pre, nm->up, l);
    add_weight(t, &u->rw, &u->rg, u->ci, u->co, u->K, wn, n);
    dit_wtable_add(t, &u->rb, false, 1, (int64_t[]){u->co}, "%s.bias", n);
    ch /= 2;
    for (int i = 0; i < c->n_res; i++) {
      voc_res *r = &g->res[l * c->n_res + i];
      const int idx = l * c->n_res + i;
      r->n = c->n_dil[i];
      snprintf(r0, sizeof r0, "%s%s.%d", pre, nm->res, idx);
      for (int k = 0; k < r->n; k++) {
        part(n, sizeof n, r0, ".convs1.%d", k);
        add_conv(t, &r->c1[k], ch, ch, c->res_kernel[i], c->dil[i][k], true, wn, n);
        part(n, sizeof n, r0, ".convs2.%d", k);
        add_conv(t, &r->c2[k], ch, ch, c->res_kernel[i], 1, true, wn, n);
        char a[96];
        snprintf(a, sizeof a, ".%s", nm->act1);
        part(n, sizeof n, r0, a, nm->act_stride * k);
        add_act(t, &r->a1[k], c, ch, snake, beta, c->antialias, c->slope, nm->down, n);
        snprintf(a, sizeof a, ".%s", nm->act2);
        part(n, sizeof n, r0, a, nm->act_stride * k + (nm->act_stride > 1));
        add_act(t, &r->a2[k], c, ch, snake, beta, c->antialias, c->slope, nm->down, n);
      }
    }
  }
  part(n, sizeof n, pre, nm->act_out, 0); /* snake: always anti-aliased snake-beta; else slope 0.01 */
  add_act(t, &g->act_out, c, ch, snake, true, true, 0.01f, nm->down, n);
  part(n, sizeof n, pre, nm->conv_out, 0);
  add_conv(t, &g->conv_out, ch, c->out_channels, 7, 1, c->final_bias, wn, n);
  return DIT_OK;
}

static dit_status build(dit_vocoder_ltx2 *m, dit_wtable *t, dit_error *err) {
  const dit_vocoder_ltx2_config *c = &m->cfg;
  m->n_gen = c->bwe ? 2 : 1;
  DIT_TRY(build_gen(&m->gen[0], &c->voc, t, c->bwe ? "vocoder." : "", &k_ltx2_names, err));
  if (!c->bwe) return DIT_OK;
  DIT_TRY(build_gen(&m->gen[1], &c->bwe_gen, t, "bwe_generator.", &k_ltx2_names, err));
  const int F = c->filter_length / 2 + 1;
  dit_wtable_add(t, &m->rstft, false, 3, (int64_t[]){2 * F, 1, c->filter_length}, "mel_stft.stft_fn.forward_basis");
  dit_wtable_add(t, &m->rmel, false, 2, (int64_t[]){c->num_mel_channels, F}, "mel_stft.mel_basis");
  return DIT_OK;
}

/* ---- packing: every tensor the forward reads, in one backend block ---- */

/* Two passes over the same calls: the first (host NULL) sizes the block, the second writes
 * the host copy whose layout the block repeats. */
typedef struct voc_pack {
  char *host;
  char *base; /* the backend block (NULL in the sizing pass) */
  size_t off;
  dit_device dev;
} voc_pack;

static size_t al256(size_t n) { return (n + 255) & ~(size_t)255; }

/* Places a tensor of dt and shape in the block: *t describes it there; returns its host
 * bytes (NULL in the sizing pass). */
static void *place(voc_pack *p, dit_tensor *t, dit_dtype dt, int nd, const int64_t *shape) {
  const size_t o = p->off;
  *t = dit_tensor_make(dt, p->base ? p->base + o : NULL, nd, shape);
  t->device = p->dev;
  p->off = al256(o + (size_t)dit_tensor_numel(t) * dit_dtype_size(dt));
  return p->host ? p->host + o : NULL;
}

static void pack_copy(voc_pack *p, dit_tensor *t, const dit_tensor *raw, int nd, const int64_t *shape) {
  char *h = place(p, t, raw->dtype, nd, shape);
  if (h) memcpy(h, raw->data, (size_t)dit_tensor_numel(raw) * dit_dtype_size(raw->dtype));
}

/* Element s of src to element d of dst, es bytes each (2 or 4: the float weight dtypes). */
static inline void put_elem(char *dst, int64_t d, const char *src, int64_t s, size_t es) {
  if (es == 2) memcpy(dst + d * 2, src + s * 2, 2);
  else memcpy(dst + d * 4, src + s * 4, 4);
}

/* w [co, ci, k] to [co, k * ci]; b as stored. */
static void pack_conv(voc_pack *p, voc_conv *cv) {
  const size_t es = dit_dtype_size(cv->rw.dtype);
  char *h = place(p, &cv->w, cv->rw.dtype, 2, (int64_t[]){cv->co, (int64_t)cv->k * cv->ci});
  const char *src = cv->rw.data;
  for (int64_t o = 0; h && o < cv->co; o++)
    for (int64_t c = 0; c < cv->ci; c++)
      for (int64_t j = 0; j < cv->k; j++)
        put_elem(h, (o * cv->k + j) * cv->ci + c, src, (o * cv->ci + c) * cv->k + j, es);
  if (cv->rb.data) pack_copy(p, &cv->b, &cv->rb, 1, (int64_t[]){cv->co});
  else memset(&cv->b, 0, sizeof cv->b);
}

/* The polyphase form of a ConvTranspose1d (voc_upconv). */
static void pack_upconv(voc_pack *p, voc_upconv *u) {
  const size_t es = dit_dtype_size(u->rw.dtype);
  const int64_t cols = (int64_t)u->J * u->ci;
  char *h = place(p, &u->w, u->rw.dtype, 2, (int64_t[]){(int64_t)u->s * u->co, cols});
  const char *src = u->rw.data;
  for (int64_t r = 0; h && r < u->s; r++)
    for (int64_t o = 0; o < u->co; o++)
      for (int64_t j = 0; j < u->J; j++) {
        const int64_t kk = (u->J - 1 - j) * u->s + r;
        const int64_t d0 = (r * u->co + o) * cols + j * u->ci;
        for (int64_t c = 0; c < u->ci; c++)
          if (kk < u->K) put_elem(h, d0 + c, src, (c * u->co + o) * u->K + kk, es);
          else memset(h + (size_t)(d0 + c) * es, 0, es);
      }
  const size_t bes = dit_dtype_size(u->rb.dtype);
  char *hb = place(p, &u->b, u->rb.dtype, 1, (int64_t[]){(int64_t)u->s * u->co});
  for (int64_t r = 0; hb && r < u->s; r++) memcpy(hb + (size_t)(r * u->co) * bes, u->rb.data, (size_t)u->co * bes);
}

/* n values of raw as F32, through exp when ex, reversed when rev. */
static void pack_f32(voc_pack *p, dit_tensor *t, const dit_tensor *raw, int64_t n, bool ex, bool rev) {
  float *h = place(p, t, DIT_F32, 1, (int64_t[]){n});
  if (!h) return;
  dit_convert_to_f32(h, raw->data, raw->dtype, (size_t)n);
  for (int64_t i = 0; ex && i < n; i++) h[i] = expf(h[i]);
  for (int64_t i = 0; rev && i < n / 2; i++) {
    const float v = h[i];
    h[i] = h[n - 1 - i], h[n - 1 - i] = v;
  }
}

/* I0, the modified Bessel function of the first kind of order 0 (its power series). */
static double bessel_i0(double x) {
  double sum = 1.0, term = 1.0;
  for (int k = 1; k < 200 && term > 1e-17 * sum; k++) {
    term *= (x / (2.0 * k)) * (x / (2.0 * k));
    sum += term;
  }
  return sum;
}

/* diffusers' kaiser_sinc_filter1d(0.5 / r, 0.6 / r, K): a Kaiser-windowed sinc low-pass of
 * unit sum (computed in double), for checkpoints without the anti-aliasing filters. */
static void kaiser_sinc(float *f, int K, int r) {
  const double cutoff = 0.5 / r, half_width = 0.6 / r, pi = 3.14159265358979323846;
  const int half = K / 2;
  const double amp = 2.285 * (half - 1) * pi * (4.0 * half_width) + 7.95;
  const double beta = amp > 50.0 ? 0.1102 * (amp - 8.7)
                      : amp >= 21.0 ? 0.5842 * pow(amp - 21.0, 0.4) + 0.07886 * (amp - 21.0)
                                    : 0.0;
  double v[256], sum = 0;
  for (int n = 0; n < K; n++) {
    const double u = K > 1 ? 2.0 * n / (K - 1) - 1.0 : 0.0;
    const double win = bessel_i0(beta * sqrt(1.0 - u * u)) / bessel_i0(beta);
    const double t = 2.0 * cutoff * (K % 2 == 0 ? n - half + 0.5 : n - half);
    v[n] = 2.0 * cutoff * win * (t == 0.0 ? 1.0 : sin(pi * t) / (pi * t));
    sum += v[n];
  }
  for (int n = 0; n < K; n++) f[n] = (float)(v[n] / sum);
}

/* An anti-aliasing filter: the checkpoint's (raw), or the Kaiser sinc when it has none;
 * reversed when rev. */
static void pack_filter(voc_pack *p, dit_tensor *t, const dit_tensor *raw, int K, int r, bool rev) {
  if (raw->data) {
    pack_f32(p, t, raw, K, false, rev);
    return;
  }
  float *h = place(p, t, DIT_F32, 1, (int64_t[]){K});
  if (!h) return;
  float f[256];
  kaiser_sinc(f, K, r);
  for (int k = 0; k < K; k++) h[k] = f[rev ? K - 1 - k : k];
}

static void pack_act(voc_pack *p, voc_act *a) {
  if (!a->snake) return;
  pack_f32(p, &a->alpha, &a->ralpha, a->C, true, false);
  pack_f32(p, &a->beta, a->rbeta.data ? &a->rbeta : &a->ralpha, a->C, true, false);
  if (!a->aa) return;
  pack_filter(p, &a->fu, &a->rfu, a->K, a->ratio, true); /* the transposed convolution's, as a correlation */
  pack_filter(p, &a->fd, &a->rfd, a->K, a->ratio, false);
}

static void pack_gen(voc_pack *p, voc_gen *g) {
  pack_conv(p, &g->conv_in);
  for (int l = 0; l < g->c.n_up; l++) {
    pack_upconv(p, &g->up[l]);
    for (int i = 0; i < g->c.n_res; i++) {
      voc_res *r = &g->res[l * g->c.n_res + i];
      for (int k = 0; k < r->n; k++) {
        pack_conv(p, &r->c1[k]);
        pack_conv(p, &r->c2[k]);
        pack_act(p, &r->a1[k]);
        pack_act(p, &r->a2[k]);
      }
    }
  }
  pack_act(p, &g->act_out);
  pack_conv(p, &g->conv_out);
}

/* The BWE resampler's filter (diffusers' UpSample1d window_type "hann", ratio r, built in
 * float32 as torch does), reversed into a correlation; m->hann_off its resample1d offset. The
 * checkpoint does not hold it (a non-persistent buffer); its values are rounded to bf16, as
 * diffusers has them once the model is cast to bfloat16 (the LTX-2 pipelines' dtype; the
 * fixtures' reference too: there, float32 values would be off by about 6e-4 of the output). */
static void pack_hann(voc_pack *p, dit_vocoder_ltx2 *m) {
  const int r = m->cfg.output_sampling_rate / m->cfg.input_sampling_rate;
  const float rolloff = 0.99f;
  const int lw = 6, width = (int)ceil(6.0 / 0.99), K = 2 * width * r + 1;
  m->hann_ratio = r, m->hann_off = width * r; /* K - 1 + pad * r - pad_left with pad = width, pad_left = 2 width r */
  float *h = place(p, &m->hann, DIT_F32, 1, (int64_t[]){K});
  for (int k = 0; h && k < K; k++) {
    const float ta = ((float)k / (float)r - (float)width) * rolloff;
    const float tc = ta < (float)-lw ? (float)-lw : (ta > (float)lw ? (float)lw : ta);
    const float c = cosf(tc * (float)M_PI / (float)lw / 2.0f), win = c * c;
    const float pt = (float)M_PI * ta, sinc = ta == 0.0f ? 1.0f : sinf(pt) / pt;
    h[K - 1 - k] = dit_bf16_to_f32(dit_f32_to_bf16(sinc * win * rolloff / (float)r));
  }
}

static void pack_all(voc_pack *p, dit_vocoder_ltx2 *m) {
  for (int i = 0; i < m->n_gen; i++) pack_gen(p, &m->gen[i]);
  if (!m->cfg.bwe) return;
  const int64_t F2 = m->rstft.shape[0], L = m->rstft.shape[2];
  pack_copy(p, &m->stft, &m->rstft, 2, (int64_t[]){F2, L});
  pack_copy(p, &m->mel, &m->rmel, 2, m->rmel.shape);
  pack_hann(p, m);
}

/* Weight norm folded (torch's _weight_norm: v * (g / |v|), the norm over all but the stored first dim), in F32
 * on the host: w then points at the folded copy (kept in m->wn until the weights are packed). */
static dit_status fold_one(dit_vocoder_ltx2 *m, dit_tensor *w, const dit_tensor *g, dit_error *err) {
  if (!g->data) return DIT_OK;
  const int64_t rows = w->shape[0], n = dit_tensor_numel(w), per = n / rows;
  float *f = malloc((size_t)n * sizeof *f), *gv = malloc((size_t)rows * sizeof *gv);
  float **list = realloc(m->wn, (size_t)(m->n_wn + 1) * sizeof *list);
  if (list) m->wn = list;
  if (!f || !gv || !list) {
    free(f), free(gv);
    return dit_errorf(err, DIT_ERR_NOMEM, "vocoder: out of memory for the weight norm");
  }
  dit_convert_to_f32(f, w->data, w->dtype, (size_t)n);
  dit_convert_to_f32(gv, g->data, g->dtype, (size_t)rows);
  for (int64_t r = 0; r < rows; r++) {
    double ss = 0.0;
    for (int64_t i = 0; i < per; i++) ss += (double)f[r * per + i] * f[r * per + i];
    const float scale = gv[r] / (float)sqrt(ss);
    for (int64_t i = 0; i < per; i++) f[r * per + i] *= scale;
  }
  free(gv);
  m->wn[m->n_wn++] = f;
  *w = dit_tensor_make(DIT_F32, f, w->ndim, w->shape);
  return DIT_OK;
}

static dit_status fold_weight_norm(dit_vocoder_ltx2 *m, dit_error *err) {
  for (int i = 0; i < m->n_gen; i++) {
    voc_gen *g = &m->gen[i];
    DIT_TRY(fold_one(m, &g->conv_in.rw, &g->conv_in.rg, err));
    DIT_TRY(fold_one(m, &g->conv_out.rw, &g->conv_out.rg, err));
    for (int l = 0; l < g->c.n_up; l++) {
      DIT_TRY(fold_one(m, &g->up[l].rw, &g->up[l].rg, err));
      for (int k = 0; k < g->c.n_res; k++) {
        voc_res *r = &g->res[l * g->c.n_res + k];
        for (int d = 0; d < r->n; d++) {
          DIT_TRY(fold_one(m, &r->c1[d].rw, &r->c1[d].rg, err));
          DIT_TRY(fold_one(m, &r->c2[d].rw, &r->c2[d].rg, err));
        }
      }
    }
  }
  return DIT_OK;
}

static void free_folds(dit_vocoder_ltx2 *m) {
  for (int i = 0; i < m->n_wn; i++) free(m->wn[i]);
  free(m->wn);
  m->wn = NULL, m->n_wn = 0;
}

static dit_status upload_packed(dit_vocoder_ltx2 *m, dit_error *err) {
  dit_backend *be = m->be;
  DIT_TRY(fold_weight_norm(m, err));
  voc_pack p = {NULL, NULL, 0, dit_backend_device(be)};
  pack_all(&p, m);
  const size_t bytes = p.off ? p.off : 256;
  const bool host = dit_backend_is_host(be); /* packed in place, or on the host then uploaded */
  dit_status s = be->ops->alloc(be, bytes, &m->wblock, err);
  p.host = s != DIT_OK ? NULL : host ? m->wblock : calloc(1, bytes);
  if (s == DIT_OK && !p.host) s = dit_errorf(err, DIT_ERR_NOMEM, "vocoder: out of memory for %zu bytes", bytes);
  if (s == DIT_OK) {
    if (host) memset(p.host, 0, bytes);
    p.base = m->wblock, p.off = 0;
    pack_all(&p, m);
    if (!host) s = be->ops->upload(be, m->wblock, p.host, bytes, err);
  }
  if (!host) free(p.host);
  free_folds(m);
  const float zero = 0.0f; /* the padding's source, read through views whose strides are all 0 */
  if (s == DIT_OK) s = be->ops->alloc(be, sizeof zero, &m->zeros, err);
  if (s == DIT_OK) s = be->ops->upload(be, m->zeros, &zero, sizeof zero, err);
  if (s == DIT_OK) s = be->ops->sync(be, err);
  return s;
}

/* ---- loading ---- */

static dit_status bind_weights(dit_vocoder_ltx2 *m, const char *dir, dit_wtable *t, dit_error *err) {
  static const char *const ignore[] = {"mel_stft.stft_fn.inverse_basis", NULL};
  DIT_TRY(dit_weights_open(dir, NULL, &m->weights, err));
  dit_status s = dit_wtable_bind(t, m->weights, "", ignore, err);
  if (s != DIT_OK) {
    dit_error_prefix(err, "%s", dir);
    return s;
  }
  DIT_TRY(dit_wtable_check_float(t, err));
  s = upload_packed(m, err);
  dit_weights_close(m->weights);
  m->weights = NULL;
  return s;
}

dit_status dit_vocoder_ltx2_load(dit_backend *be, const char *folder, dit_vocoder_ltx2 **out, dit_error *err) {
  if (!out) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vocoder load: NULL output");
  *out = NULL;
  if (!be || !folder) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vocoder load: NULL backend or folder");
  char path[4096];
  DIT_TRY(dit_model_config_path("vocoder load", folder, path, sizeof path, err));
  dit_vocoder_ltx2 *m = calloc(1, sizeof *m);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "vocoder: out of memory");
  m->be = be;
  json_t *j = NULL;
  dit_status s = dit_json_load_file(path, 16u << 20, &j, err);
  if (s == DIT_OK) s = read_config(j, path, &m->cfg, err);
  json_decref(j);
  dit_wtable t;
  dit_wtable_init(&t);
  if (s == DIT_OK) s = build(m, &t, err);
  if (s == DIT_OK) s = bind_weights(m, folder, &t, err);
  dit_wtable_free(&t);
  if (s != DIT_OK) dit_error_prefix(err, "vocoder load");
  DIT_HAND_OVER(s, m, out, dit_vocoder_ltx2_free);
}

dit_status dit_vocoder_bigvgan_load(dit_backend *be, const char *dir, const char *prefix, const char *const *ignore,
                                   const dit_voc_gen_config *c, int sample_rate, dit_vocoder_ltx2 **out,
                                   dit_error *err) {
  if (!out) return dit_errorf(err, DIT_ERR_INVALID_ARG, "bigvgan load: NULL output");
  *out = NULL;
  if (!be || !dir || !c || !prefix) return dit_errorf(err, DIT_ERR_INVALID_ARG, "bigvgan load: NULL argument");
  if (c->n_up < 1 || c->n_up > DIT_VOC_MAX_UP || c->n_res < 1 || c->n_res > DIT_VOC_MAX_RES || c->in_channels < 1 ||
      c->out_channels < 1 || sample_rate < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "bigvgan load: geometry out of range");
  DIT_TRY(gen_refusals(c, "", dir, err));
  dit_vocoder_ltx2 *m = calloc(1, sizeof *m);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "vocoder: out of memory");
  m->be = be;
  m->cfg.voc = *c;
  m->cfg.output_sampling_rate = m->cfg.input_sampling_rate = sample_rate;
  m->n_gen = 1;
  dit_wtable t;
  dit_wtable_init(&t);
  dit_status s = build_gen(&m->gen[0], c, &t, prefix, &k_bigvgan_names, err);
  if (s == DIT_OK) s = dit_weights_open(dir, NULL, &m->weights, err);
  if (s == DIT_OK) s = dit_wtable_bind(&t, m->weights, "", ignore, err);
  if (s == DIT_OK) s = dit_wtable_check_float(&t, err);
  if (s == DIT_OK) s = upload_packed(m, err);
  dit_weights_close(m->weights);
  m->weights = NULL;
  dit_wtable_free(&t);
  if (s != DIT_OK) dit_error_prefix(err, "bigvgan load: %s", dir);
  DIT_HAND_OVER(s, m, out, dit_vocoder_ltx2_free);
}

void dit_vocoder_ltx2_free(dit_vocoder_ltx2 *m) {
  if (!m) return;
  free_folds(m);
  if (m->act) m->be->ops->free(m->be, m->act);
  if (m->zeros) m->be->ops->free(m->be, m->zeros);
  if (m->wblock) m->be->ops->free(m->be, m->wblock);
  dit_weights_close(m->weights);
  for (int i = 0; i < 2; i++) free(m->gen[i].res);
  free(m);
}

const dit_vocoder_ltx2_config *dit_vocoder_ltx2_get_config(const dit_vocoder_ltx2 *m) { return m ? &m->cfg : NULL; }

int64_t voc_gen_out_len(const voc_gen *g, int64_t T) {
  for (int l = 0; l < g->c.n_up && T > 0; l++) T = (T - 1) * g->up[l].s - 2 * g->up[l].pad + g->up[l].K;
  return T > 0 ? T : 0;
}

int64_t dit_vocoder_ltx2_output_samples(const dit_vocoder_ltx2 *m, int64_t T_mel) {
  if (!m || T_mel < 1) return 0;
  const int64_t n = voc_gen_out_len(&m->gen[0], T_mel);
  return m->cfg.bwe ? n * (m->cfg.output_sampling_rate / m->cfg.input_sampling_rate) : n;
}

int dit_vocoder_ltx2_sample_rate(const dit_vocoder_ltx2 *m) { return m ? m->cfg.output_sampling_rate : 0; }
int dit_vocoder_ltx2_channels(const dit_vocoder_ltx2 *m) { return m ? m->cfg.voc.out_channels : 0; }
int dit_vocoder_ltx2_in_channels(const dit_vocoder_ltx2 *m) { return m ? m->cfg.voc.in_channels : 0; }

/* ---- the call ---- */

/* t: F32, contiguous, nd dims, in be's memory, with data. */
static dit_status check_tensor(const dit_backend *be, const dit_tensor *t, int nd, const char *what, const char *op,
                               dit_error *err) {
  if (!t) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s is NULL", op, what);
  if (t->dtype != DIT_F32 || t->ndim != nd || !t->data || !dit_tensor_is_contiguous(t) ||
      t->device != dit_backend_device(be))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s must be a contiguous %d-D F32 tensor with data in the "
                      "backend's memory", op, what, nd);
  for (int i = 0; i < nd; i++)
    if (t->shape[i] < 1 || t->shape[i] > (1 << 24))
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s has an empty or huge dim %d", op, what, i);
  return DIT_OK;
}

int64_t dit_vocoder_ltx2_mel_frames(const dit_vocoder_ltx2 *m, int64_t N) {
  if (!m || !m->cfg.bwe || N < 1) return 0;
  return (N + m->cfg.hop_length - 1) / m->cfg.hop_length;
}

dit_status dit_vocoder_ltx2_log_mel(dit_vocoder_ltx2 *m, const dit_tensor *wave, dit_tensor *mel, dit_error *err) {
  const char *op = "vocoder log-mel";
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: no model", op);
  if (!m->cfg.bwe) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: an LTX2Vocoder has no mel STFT", op);
  DIT_TRY(check_tensor(m->be, wave, 3, "wave", op, err));
  DIT_TRY(check_tensor(m->be, mel, 4, "mel", op, err));
  const int64_t B = wave->shape[0], ch = wave->shape[1], N = wave->shape[2];
  const int64_t want[4] = {B, m->cfg.voc.out_channels, dit_vocoder_ltx2_mel_frames(m, N), m->cfg.num_mel_channels};
  if (ch != want[1] || !dit_tensor_has_shape(mel, 4, want)) {
    char a[128], b[128];
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: wave has %lld channels (%d expected), mel is %s, expected %s", op,
                      (long long)ch, m->cfg.voc.out_channels, dit_shape_str(mel->shape, 4, a, sizeof a),
                      dit_shape_str(want, 4, b, sizeof b));
  }
  for (int64_t b = 0; b < B; b++) {
    dit_tensor w = dit_tensor_2d(DIT_F32, (float *)wave->data + b * ch * N, ch, N);
    dit_tensor y = dit_tensor_3d(DIT_F32, (float *)mel->data + b * ch * want[2] * want[3], ch, want[2], want[3]);
    w.device = y.device = wave->device;
    dit_status s = voc_log_mel_item(m, &w, &y, err);
    if (s != DIT_OK) {
      dit_error_prefix(err, "%s (item %lld)", op, (long long)b);
      return s;
    }
  }
  return DIT_OK;
}

dit_status dit_vocoder_ltx2_run(dit_vocoder_ltx2 *m, const dit_tensor *mel, dit_tensor *out, dit_error *err) {
  const char *op = "vocoder";
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: no model", op);
  DIT_TRY(check_tensor(m->be, mel, 4, "mel", op, err));
  DIT_TRY(check_tensor(m->be, out, 3, "out", op, err));
  if (mel->shape[1] * mel->shape[3] != m->cfg.voc.in_channels)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: mel has %lld channels x %lld mel bins, the vocoder takes %d", op,
                      (long long)mel->shape[1], (long long)mel->shape[3], m->cfg.voc.in_channels);
  const int64_t T = mel->shape[2], S = dit_vocoder_ltx2_output_samples(m, T);
  const int64_t want[3] = {mel->shape[0], m->cfg.voc.out_channels, S};
  if (!dit_tensor_has_shape(out, 3, want)) {
    char a[128], b[128];
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: out is %s, expected %s", op,
                      dit_shape_str(out->shape, 3, a, sizeof a), dit_shape_str(want, 3, b, sizeof b));
  }
  const int64_t nin = dit_tensor_numel(mel) / mel->shape[0], nout = S * want[1];
  for (int64_t b = 0; b < mel->shape[0]; b++) {
    dit_tensor x = dit_tensor_3d(DIT_F32, (float *)mel->data + b * nin, mel->shape[1], T, mel->shape[3]);
    dit_tensor y = dit_tensor_2d(DIT_F32, (float *)out->data + b * nout, want[1], S);
    x.device = y.device = mel->device;
    dit_status s = voc_run_item(m, &x, &y, err);
    if (s != DIT_OK) {
      dit_error_prefix(err, "%s (item %lld)", op, (long long)b);
      return s;
    }
  }
  return DIT_OK;
}

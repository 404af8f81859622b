/* The LTX-2 audio VAE decoder (see vae_ltx2_audio.h): config, the weight table, loading, the
 * latent denormalization, the decode call's checks and the forward pass.
 *
 * The forward runs on one item [1, C, L, M] with its activations in five slots of one backend
 * buffer: two for the running activation (a block writes its output in place or into the
 * other one), the norm output, the padded input of a convolution and a convolution's output.
 * The pass runs twice with the same code: first as a plan (no op is called; each slot records
 * the largest tensor placed in it), then for real in a buffer of that size (kept for the next
 * decode).
 *
 * A causal convolution of kernel k pads its input into the pad slot with copies: the input in
 * the middle, k - 1 zero rows in front and (k - 1) / 2 zero columns on each side, written from
 * one zero element (all strides 0); then one conv2d without padding. The upsampler writes the
 * nearest-neighbour 2x input straight into the pad slot (a strided copy repeating each element
 * twice along both axes) with k - 2 zero rows in front: the conv then yields the rows after
 * the first, which diffusers drops. */
#include "models/vae_ltx2_audio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "models/model_weights.h"

#define MAX_LEVELS DIT_VAE_LTX2_AUDIO_MAX_LEVELS
#define MAX_CHANNELS 65536
#define NORM_EPS 1e-6f /* LTX2AudioPixelNorm in the resnets and norm_out */
#define DOWNSAMPLE 4   /* diffusers' LATENT_DOWNSAMPLE_FACTOR */

/* A convolution as stored: w [co, ci, k, k], b [co]. */
typedef struct lta_conv {
  int ci, co, k;
  dit_tensor w, b;
} lta_conv;

/* LTX2AudioResnetBlock: norm1, SiLU, conv1, norm2, SiLU, conv2, plus the input (through the
 * 1x1 nin_shortcut when cin != cout). */
typedef struct lta_resnet {
  int cin, cout;
  lta_conv conv1, conv2, nin; /* nin: k 0 when cin == cout */
} lta_resnet;

/* One level of the decoder (diffusers' up[level]): its resnets, then (level > 0) the
 * upsampler's conv. */
typedef struct lta_level {
  int n_res;
  lta_resnet *res; /* into dit_vae_ltx2_audio.pool */
  bool has_up;
  lta_conv up;
} lta_level;

struct dit_vae_ltx2_audio {
  dit_backend *be;
  dit_vae_ltx2_audio_config cfg;
  dit_weights *weights; /* the mapped checkpoint (CPU) */
  void *wblock;         /* every weight on a device backend */
  void *stats;          /* backend memory, F32: [S] std - 1, [S] mean, then one zero (S = base_channels) */
  lta_conv conv_in, conv_out;
  lta_resnet mid[2];
  lta_level level[MAX_LEVELS];
  lta_resnet *pool;
  dit_tensor mean_t, std_t; /* the stored latents_mean / latents_std (host, while loading) */
  void *act;                /* activation buffers (backend memory), act_bytes of them */
  size_t act_bytes;
};

/* ---- config ---- */

/* The fields the decoder cannot run: refused by name. */
static dit_status refuse_unsupported(const json_t *j, const dit_vae_ltx2_audio_config *c, const char *what,
                                     dit_error *err) {
  const char *norm = "pixel";
  DIT_TRY(dit_json_string_opt(j, "norm_type", &norm, what, err));
  if (strcmp(norm, "pixel"))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: norm_type \"%s\" is not supported (only pixel)", what, norm);
  const json_t *ca = json_object_get(j, "causality_axis");
  if (ca && json_is_null(ca))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: causality_axis null is not supported (only height)", what);
  const char *axis = "height";
  DIT_TRY(dit_json_string_opt(j, "causality_axis", &axis, what, err));
  if (strcmp(axis, "height"))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: causality_axis \"%s\" is not supported (only height)", what,
                      axis);
  bool mid_attn = false;
  DIT_TRY(dit_json_bool_opt(j, "mid_block_add_attention", &mid_attn, what, err));
  if (mid_attn)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: mid_block_add_attention true is not supported", what);
  /* attention follows a level's resnets where the level's resolution (resolution / 2^(n - 1),
   * doubling per level upwards) is listed */
  int64_t res = 256, ar[64];
  size_t na = 0;
  DIT_TRY(dit_json_int_opt(j, "resolution", 1, 1 << 24, &res, what, err));
  const json_t *av = json_object_get(j, "attn_resolutions");
  if (av && !json_is_null(av)) DIT_TRY(dit_json_int_array(j, "attn_resolutions", 0, 1 << 30, ar, 64, &na, what, err));
  int64_t cur = res >> (c->n_levels - 1);
  for (int l = c->n_levels - 1; l >= 0; l--, cur *= 2)
    for (size_t i = 0; i < na; i++)
      if (ar[i] == cur)
        return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: attn_resolutions puts attention at resolution %lld (level "
                          "%d): not supported", what, (long long)cur, l);
  return DIT_OK;
}

/* ch_mult: 1 to MAX_LEVELS multipliers, default (1, 2, 4); every level's channels in range. */
static dit_status read_levels(const json_t *j, dit_vae_ltx2_audio_config *c, const char *what, dit_error *err) {
  const json_t *v = json_object_get(j, "ch_mult");
  int64_t m[MAX_LEVELS] = {1, 2, 4};
  size_t n = 3;
  if (v && !json_is_null(v)) DIT_TRY(dit_json_int_array(j, "ch_mult", 1, MAX_CHANNELS, m, MAX_LEVELS, &n, what, err));
  if (n < 1) return dit_errorf(err, DIT_ERR_FORMAT, "%s: ch_mult is empty", what);
  c->n_levels = (int)n;
  for (size_t i = 0; i < n; i++) {
    if (m[i] * c->base_channels > MAX_CHANNELS)
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: ch_mult[%zu] %lld times base_channels %d is over %d channels", what,
                        i, (long long)m[i], c->base_channels, MAX_CHANNELS);
    c->ch_mult[i] = (int)m[i];
  }
  return DIT_OK;
}

static dit_status read_config(const json_t *j, const char *what, dit_vae_ltx2_audio_config *c, dit_error *err) {
  memset(c, 0, sizeof *c);
  const char *cls = NULL;
  DIT_TRY(dit_json_string_opt(j, "_class_name", &cls, what, err));
  if (cls && strcmp(cls, "AutoencoderKLLTX2Audio"))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: _class_name \"%s\" is not AutoencoderKLLTX2Audio", what, cls);
  int64_t lc = 8, oc = 2, bc = 128, nrb = 2, mel = 64, sr = 16000, hop = 160;
  DIT_TRY(dit_json_int_opt(j, "latent_channels", 1, MAX_CHANNELS, &lc, what, err));
  DIT_TRY(dit_json_int_opt(j, "output_channels", 1, 64, &oc, what, err));
  DIT_TRY(dit_json_int_opt(j, "base_channels", 1, DIT_VAE_LTX2_AUDIO_MAX_STATS, &bc, what, err));
  DIT_TRY(dit_json_int_opt(j, "num_res_blocks", 0, 64, &nrb, what, err));
  const json_t *mv = json_object_get(j, "mel_bins");
  if (mv && json_is_null(mv)) mel = 0;
  else DIT_TRY(dit_json_int_opt(j, "mel_bins", 1, 1 << 20, &mel, what, err));
  DIT_TRY(dit_json_int_opt(j, "sample_rate", 1, 1 << 24, &sr, what, err));
  DIT_TRY(dit_json_int_opt(j, "mel_hop_length", 1, 1 << 24, &hop, what, err));
  c->latent_channels = (int)lc, c->output_channels = (int)oc, c->base_channels = (int)bc;
  c->num_res_blocks = (int)nrb, c->mel_bins = (int)mel, c->sample_rate = (int)sr, c->mel_hop_length = (int)hop;
  c->is_causal = true;
  DIT_TRY(dit_json_bool_opt(j, "is_causal", &c->is_causal, what, err));
  c->temporal_ratio = c->mel_ratio = DOWNSAMPLE;
  DIT_TRY(read_levels(j, c, what, err));
  return refuse_unsupported(j, c, what, err);
}

/* ---- weights ---- */

static void add_conv(dit_wtable *t, lta_conv *cv, int co, int ci, int k, const char *base, const char *suffix) {
  cv->co = co, cv->ci = ci, cv->k = k;
  dit_wtable_add(t, &cv->w, false, 4, (int64_t[]){co, ci, k, k}, "%s%s.weight", base, suffix);
  dit_wtable_add(t, &cv->b, false, 1, (int64_t[]){co}, "%s%s.bias", base, suffix);
}

static void add_resnet(dit_wtable *t, lta_resnet *r, int cin, int cout, const char *base) {
  r->cin = cin, r->cout = cout;
  add_conv(t, &r->conv1, cout, cin, 3, base, ".conv1.conv");
  add_conv(t, &r->conv2, cout, cout, 3, base, ".conv2.conv");
  if (cin != cout) add_conv(t, &r->nin, cout, cin, 1, base, ".nin_shortcut.conv");
}

static dit_status build(dit_vae_ltx2_audio *m, dit_wtable *t, dit_error *err) {
  const dit_vae_ltx2_audio_config *c = &m->cfg;
  const int per = c->num_res_blocks + 1;
  m->pool = calloc((size_t)(c->n_levels * per), sizeof *m->pool);
  if (!m->pool) return dit_errorf(err, DIT_ERR_NOMEM, "audio vae: out of memory");
  int cur = c->base_channels * c->ch_mult[c->n_levels - 1];
  add_conv(t, &m->conv_in, cur, c->latent_channels, 3, "decoder.conv_in", ".conv");
  add_resnet(t, &m->mid[0], cur, cur, "decoder.mid.block_1");
  add_resnet(t, &m->mid[1], cur, cur, "decoder.mid.block_2");
  char n[160];
  for (int l = c->n_levels - 1; l >= 0; l--) {
    lta_level *lv = &m->level[l];
    const int out = c->base_channels * c->ch_mult[l];
    lv->n_res = per;
    lv->res = m->pool + l * per;
    for (int i = 0; i < per; i++, cur = out) {
      snprintf(n, sizeof n, "decoder.up.%d.block.%d", l, i);
      add_resnet(t, &lv->res[i], cur, out, n);
    }
    lv->has_up = l > 0;
    if (lv->has_up) {
      snprintf(n, sizeof n, "decoder.up.%d.upsample", l);
      add_conv(t, &lv->up, cur, cur, 3, n, ".conv.conv");
    }
  }
  add_conv(t, &m->conv_out, c->output_channels, cur, 3, "decoder.conv_out", ".conv");
  dit_wtable_add(t, &m->mean_t, true, 1, (int64_t[]){c->base_channels}, "latents_mean");
  dit_wtable_add(t, &m->std_t, true, 1, (int64_t[]){c->base_channels}, "latents_std");
  return DIT_OK;
}

/* The latent statistics (host values, before any upload) into the config, and their device
 * form for dit_vae_ltx2_audio_denormalize, followed by the zero element of the padding. */
static dit_status read_stats(dit_vae_ltx2_audio *m, dit_error *err) {
  dit_vae_ltx2_audio_config *c = &m->cfg;
  const size_t S = (size_t)c->base_channels;
  c->has_latents_stats = m->mean_t.data && m->std_t.data;
  for (size_t i = 0; i < S; i++) c->latents_mean[i] = 0.0f, c->latents_std[i] = 1.0f;
  if (m->mean_t.data) dit_convert_to_f32(c->latents_mean, m->mean_t.data, m->mean_t.dtype, S);
  if (m->std_t.data) dit_convert_to_f32(c->latents_std, m->std_t.data, m->std_t.dtype, S);
  const size_t bytes = (2 * S + 1) * sizeof(float);
  float *h = malloc(bytes);
  if (!h) return dit_errorf(err, DIT_ERR_NOMEM, "audio vae: out of memory");
  for (size_t i = 0; i < S; i++) h[i] = c->latents_std[i] - 1.0f, h[S + i] = c->latents_mean[i];
  h[2 * S] = 0.0f;
  dit_status s = m->be->ops->alloc(m->be, bytes, &m->stats, err);
  if (s == DIT_OK) s = m->be->ops->upload(m->be, m->stats, h, bytes, err);
  if (s == DIT_OK) s = m->be->ops->sync(m->be, err);
  free(h);
  return s;
}

static dit_status read_stats_cb(void *m, dit_error *err) { return read_stats(m, err); }

static dit_status bind_weights(dit_vae_ltx2_audio *m, const char *dir, dit_wtable *t, dit_error *err) {
  static const char *const ignore[] = {"encoder.", NULL};
  return dit_wtable_load_dir(m->be, dir, t, ignore, read_stats_cb, m, &m->weights, &m->wblock, err);
}

dit_status dit_vae_ltx2_audio_load(dit_backend *be, const char *folder, dit_vae_ltx2_audio **out, dit_error *err) {
  if (!out) return dit_errorf(err, DIT_ERR_INVALID_ARG, "audio vae load: NULL output");
  *out = NULL;
  if (!be || !folder) return dit_errorf(err, DIT_ERR_INVALID_ARG, "audio vae load: NULL backend or folder");
  char path[4096];
  DIT_TRY(dit_model_config_path("audio vae load", folder, path, sizeof path, err));
  dit_vae_ltx2_audio *m = calloc(1, sizeof *m);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "audio vae: out of memory");
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
  m->mean_t.data = m->std_t.data = NULL; /* read into the config; the mapping may be gone */
  if (s != DIT_OK) dit_error_prefix(err, "audio vae load");
  DIT_HAND_OVER(s, m, out, dit_vae_ltx2_audio_free);
}

void dit_vae_ltx2_audio_free(dit_vae_ltx2_audio *m) {
  if (!m) return;
  if (m->act) m->be->ops->free(m->be, m->act);
  if (m->stats) m->be->ops->free(m->be, m->stats);
  if (m->wblock) m->be->ops->free(m->be, m->wblock);
  dit_weights_close(m->weights);
  free(m->pool);
  free(m);
}

const dit_vae_ltx2_audio_config *dit_vae_ltx2_audio_get_config(const dit_vae_ltx2_audio *m) {
  return m ? &m->cfg : NULL;
}

void dit_vae_ltx2_audio_output_size(const dit_vae_ltx2_audio *m, int L, int M, int *T, int *Mo) {
  const int t = L * DOWNSAMPLE - (DOWNSAMPLE - 1);
  *T = t > 1 ? t : 1;
  *Mo = m->cfg.mel_bins > 0 ? m->cfg.mel_bins : M;
}

/* ---- the forward pass ---- */

enum { S_A, S_B, S_TMP, S_PAD, S_H, NSLOT };

typedef struct run {
  dit_vae_ltx2_audio *m;
  dit_backend *be;
  dit_device dev;
  bool plan;
  size_t need[NSLOT];
  char *slot[NSLOT];
  double flops; /* the plan pass adds up its convolutions' */
} run;

/* An activation [1, c, h, w] (h: time, w: mel bins) in slot `slot`. */
typedef struct act {
  int slot, c, h, w;
} act;

/* Calls a backend op on the real pass only. */
#define OP(call)                 \
  do {                           \
    if (!r->plan) DIT_TRY(call); \
  } while (0)

static int other(int slot) { return slot == S_A ? S_B : S_A; }

/* [1, c, h, w] F32 at the start of slot i (the plan records its size; data NULL then). */
static dit_status view(run *r, dit_tensor *t, int i, int64_t c, int64_t h, int64_t w, dit_error *err) {
  const size_t bytes = (size_t)(c * h * w) * sizeof(float);
  if (r->plan) {
    if (bytes > r->need[i]) r->need[i] = bytes;
  } else if (bytes > r->need[i]) {
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "audio vae: slot %d holds %zu bytes, %zu needed", i, r->need[i],
                      bytes);
  }
  *t = dit_tensor_make(DIT_F32, r->plan ? NULL : r->slot[i], 4, (int64_t[]){1, c, h, w});
  t->device = r->dev;
  return DIT_OK;
}

static dit_tensor view_of(const act *a, run *r) {
  dit_tensor t = dit_tensor_make(DIT_F32, r->plan ? NULL : r->slot[a->slot], 4, (int64_t[]){1, a->c, a->h, a->w});
  t.device = r->dev;
  return t;
}

/* dst (nd dims of shape, element strides sd, from element od of base_d's data) = src likewise
 * (ss, os; src NULL: the zero element, every stride 0). Real pass only. */
static dit_status copy(run *r, const dit_tensor *base_d, int64_t od, const dit_tensor *src, int64_t os, int nd,
                       const int64_t *shape, const int64_t *sd, const int64_t *ss, dit_error *err) {
  if (r->plan) return DIT_OK;
  dit_tensor d = dit_tensor_make(DIT_F32, (float *)base_d->data + od, nd, shape), s = d;
  s.data = src ? (float *)src->data + os : (float *)r->m->stats + 2 * r->m->cfg.base_channels;
  for (int i = 0; i < nd; i++) d.stride[i] = sd[i], s.stride[i] = src ? ss[i] : 0;
  d.device = s.device = r->dev;
  return dit_op_copy(r->be, &d, &s, err);
}

/* The zero border of P [1, C, top + h, w + k - 1]: top rows, then (k - 1) / 2 columns on the
 * left and the rest on the right of the h rows below. */
static dit_status pad_border(run *r, const dit_tensor *P, int top, int k, dit_error *err) {
  const int64_t C = P->shape[1], Hp = P->shape[2], Wp = P->shape[3], cs = Hp * Wp, h = Hp - top;
  const int64_t pl = (k - 1) / 2, pr = k - 1 - pl, st[3] = {cs, Wp, 1};
  if (top) DIT_TRY(copy(r, P, 0, NULL, 0, 3, (int64_t[]){C, top, Wp}, st, NULL, err));
  if (pl) DIT_TRY(copy(r, P, top * Wp, NULL, 0, 3, (int64_t[]){C, h, pl}, st, NULL, err));
  if (pr) DIT_TRY(copy(r, P, top * Wp + Wp - pr, NULL, 0, 3, (int64_t[]){C, h, pr}, st, NULL, err));
  return DIT_OK;
}

/* One of the decoder's convolutions (stride 1, no padding: y's pixels each take ci x k x k products); the plan
 * pass counts its FLOPs. */
static dit_status conv(run *r, dit_tensor *y, const dit_tensor *x, const lta_conv *cv, dit_error *err) {
  if (r->plan) r->flops += 2.0 * (double)dit_tensor_numel(y) * cv->ci * cv->k * cv->k;
  OP(dit_op_conv2d(r->be, y, x, &cv->w, &cv->b, 1, 0, err));
  return DIT_OK;
}

/* LTX2AudioCausalConv2d on x [1, ci, H, W] (contiguous) into y [1, co, H, W]. */
static dit_status causal_conv(run *r, const lta_conv *cv, const dit_tensor *x, dit_tensor *y, dit_error *err) {
  if (cv->k == 1) return conv(r, y, x, cv, err);
  const int k = cv->k, top = k - 1;
  const int64_t C = x->shape[1], H = x->shape[2], W = x->shape[3], Hp = H + top, Wp = W + k - 1;
  dit_tensor P;
  DIT_TRY(view(r, &P, S_PAD, C, Hp, Wp, err));
  DIT_TRY(pad_border(r, &P, top, k, err));
  DIT_TRY(copy(r, &P, top * Wp + (k - 1) / 2, x, 0, 3, (int64_t[]){C, H, W}, (int64_t[]){Hp * Wp, Wp, 1},
               (int64_t[]){H * W, W, 1}, err));
  return conv(r, y, &P, cv, err);
}

/* LTX2AudioResnetBlock on *a (cin channels): in place, or into the other running slot when
 * the channels change (the nin_shortcut's output there, then the residual branch added). */
static dit_status resnet(run *r, const lta_resnet *rn, act *a, dit_error *err) {
  dit_tensor x = view_of(a, r), t, h;
  DIT_TRY(view(r, &t, S_TMP, rn->cin, a->h, a->w, err));
  OP(dit_op_pixel_norm(r->be, &t, &x, NORM_EPS, true, err));
  DIT_TRY(view(r, &h, S_H, rn->cout, a->h, a->w, err));
  DIT_TRY(causal_conv(r, &rn->conv1, &t, &h, err));
  DIT_TRY(view(r, &t, S_TMP, rn->cout, a->h, a->w, err));
  OP(dit_op_pixel_norm(r->be, &t, &h, NORM_EPS, true, err));
  DIT_TRY(causal_conv(r, &rn->conv2, &t, &h, err));
  if (rn->cin == rn->cout) {
    OP(dit_op_add(r->be, &x, &x, &h, err));
    return DIT_OK;
  }
  dit_tensor y;
  a->slot = other(a->slot), a->c = rn->cout;
  DIT_TRY(view(r, &y, a->slot, a->c, a->h, a->w, err));
  DIT_TRY(causal_conv(r, &rn->nin, &x, &y, err));
  OP(dit_op_add(r->be, &y, &y, &h, err));
  return DIT_OK;
}

/* LTX2AudioUpsample on *a [1, c, H, W], into the other running slot [1, c, 2H - 1, 2W]: the
 * nearest 2x input padded (k - 2 zero rows in front: the causal k - 1 less the dropped first
 * output row) and convolved. The copy's dims (c, h, i, w, j) put x[c, h, w] at row 2h + i,
 * column 2w + j. */
static dit_status upsample(run *r, const lta_conv *cv, act *a, dit_error *err) {
  const int k = cv->k, top = k - 2;
  const int64_t C = a->c, H = a->h, W = a->w, Hp = 2 * H + top, Wp = 2 * W + k - 1;
  dit_tensor x = view_of(a, r), P, y;
  DIT_TRY(view(r, &P, S_PAD, C, Hp, Wp, err));
  DIT_TRY(pad_border(r, &P, top, k, err));
  DIT_TRY(copy(r, &P, top * Wp + (k - 1) / 2, &x, 0, 5, (int64_t[]){C, H, 2, W, 2},
               (int64_t[]){Hp * Wp, 2 * Wp, Wp, 2, 1}, (int64_t[]){H * W, W, 0, 1, 0}, err));
  act o = {other(a->slot), a->c, (int)(Hp - k + 1), (int)(2 * W)};
  DIT_TRY(view(r, &y, o.slot, o.c, o.h, o.w, err));
  DIT_TRY(conv(r, &y, &P, cv, err));
  *a = o;
  return DIT_OK;
}

/* out [1, oc, T, Mo] from the decoded y [1, oc, h, w]: the overlap copied, the rest zeros
 * (diffusers' crop, then F.pad). */
static dit_status crop_pad(run *r, const dit_tensor *y, dit_tensor *out, dit_error *err) {
  const int64_t C = out->shape[1], T = out->shape[2], Mo = out->shape[3], h = y->shape[2], w = y->shape[3];
  const int64_t th = h < T ? h : T, tw = w < Mo ? w : Mo, os[3] = {T * Mo, Mo, 1};
  DIT_TRY(copy(r, out, 0, y, 0, 3, (int64_t[]){C, th, tw}, os, (int64_t[]){h * w, w, 1}, err));
  if (tw < Mo) DIT_TRY(copy(r, out, tw, NULL, 0, 3, (int64_t[]){C, th, Mo - tw}, os, NULL, err));
  if (th < T) DIT_TRY(copy(r, out, th * Mo, NULL, 0, 3, (int64_t[]){C, T - th, Mo}, os, NULL, err));
  return DIT_OK;
}

static dit_status forward(run *r, const dit_tensor *x, dit_tensor *out, dit_error *err) {
  const dit_vae_ltx2_audio *m = r->m;
  act a = {S_A, m->conv_in.co, (int)x->shape[2], (int)x->shape[3]};
  dit_tensor t, h;
  DIT_TRY(view(r, &t, S_A, a.c, a.h, a.w, err));
  DIT_TRY(causal_conv(r, &m->conv_in, x, &t, err));
  for (int k = 0; k < 2; k++) DIT_TRY(resnet(r, &m->mid[k], &a, err));
  for (int l = m->cfg.n_levels - 1; l >= 0; l--) {
    const lta_level *lv = &m->level[l];
    for (int i = 0; i < lv->n_res; i++) DIT_TRY(resnet(r, &lv->res[i], &a, err));
    if (lv->has_up) DIT_TRY(upsample(r, &lv->up, &a, err));
  }
  dit_tensor xa = view_of(&a, r);
  DIT_TRY(view(r, &t, S_TMP, a.c, a.h, a.w, err));
  OP(dit_op_pixel_norm(r->be, &t, &xa, NORM_EPS, true, err));
  if (a.h == out->shape[2] && a.w == out->shape[3]) return causal_conv(r, &m->conv_out, &t, out, err);
  DIT_TRY(view(r, &h, S_H, m->conv_out.co, a.h, a.w, err));
  DIT_TRY(causal_conv(r, &m->conv_out, &t, &h, err));
  return crop_pad(r, &h, out, err);
}

/* One item: x [1, C, L, M] into out [1, oc, T, Mo] (both backend memory). */
static dit_status decode_item(dit_vae_ltx2_audio *m, const dit_tensor *x, dit_tensor *out, dit_error *err) {
  run r;
  memset(&r, 0, sizeof r);
  r.m = m, r.be = m->be, r.dev = dit_backend_device(m->be), r.plan = true;
  DIT_TRY(forward(&r, x, out, err));
  DIT_TRY(dit_backend_fit_slots(m->be, r.need, NSLOT, &m->act, &m->act_bytes, r.slot, err));
  r.plan = false;
  return forward(&r, x, out, err);
}

/* ---- the calls ---- */

/* t: F32, 4-D, contiguous, in be's memory, with data; C channels. */
static dit_status check_4d(const dit_backend *be, const dit_tensor *t, const char *what, int C, const char *op,
                           dit_error *err) {
  if (!t) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s is NULL", op, what);
  if (t->dtype != DIT_F32 || t->ndim != 4 || !t->data || !dit_tensor_is_contiguous(t) ||
      t->device != dit_backend_device(be))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s must be a contiguous F32 [B, C, L, M] tensor with data in "
                      "the backend's memory", op, what);
  if (t->shape[1] != C)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s has %lld channels, expected %d", op, what,
                      (long long)t->shape[1], C);
  for (int i = 0; i < 4; i++)
    if (t->shape[i] < 1 || t->shape[i] > (1 << 20))
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s has an empty or huge dim %d", op, what, i);
  return DIT_OK;
}

dit_status dit_vae_ltx2_audio_denormalize(dit_vae_ltx2_audio *m, dit_tensor *latents, dit_error *err) {
  const char *op = "audio vae denormalize";
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: no model", op);
  const int C = m->cfg.latent_channels, S = m->cfg.base_channels;
  DIT_TRY(check_4d(m->be, latents, "latents", C, op, err));
  const int64_t L = latents->shape[2], M = latents->shape[3];
  if (C * M != S)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %d channels x %lld mel bins are %lld packed features, the "
                      "statistics have %d", op, C, (long long)M, (long long)(C * M), S);
  const dit_device dev = dit_backend_device(m->be);
  dit_tensor sc = dit_tensor_2d(DIT_F32, m->stats, C, M), sh = dit_tensor_2d(DIT_F32, (float *)m->stats + S, C, M);
  sc.device = sh.device = dev;
  for (int64_t b = 0; b < latents->shape[0]; b++) { /* x [C, L, M] * (1 + scale[C, M]) + shift[C, M] */
    dit_tensor x = dit_tensor_3d(DIT_F32, (float *)latents->data + b * C * L * M, C, L, M);
    x.device = dev;
    DIT_TRY(dit_op_modulate(m->be, &x, &x, &sc, &sh, err));
  }
  return DIT_OK;
}

dit_status dit_vae_ltx2_audio_decode(dit_vae_ltx2_audio *m, const dit_tensor *latents, dit_tensor *out,
                                     dit_error *err) {
  const char *op = "audio vae decode";
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: no model", op);
  const dit_vae_ltx2_audio_config *c = &m->cfg;
  DIT_TRY(check_4d(m->be, latents, "latents", c->latent_channels, op, err));
  DIT_TRY(check_4d(m->be, out, "out", c->output_channels, op, err));
  int T, Mo;
  dit_vae_ltx2_audio_output_size(m, (int)latents->shape[2], (int)latents->shape[3], &T, &Mo);
  const int64_t want[4] = {latents->shape[0], c->output_channels, T, Mo};
  if (!dit_tensor_has_shape(out, 4, want)) {
    char a[128], b[128];
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: out is %s, expected %s", op,
                      dit_shape_str(out->shape, 4, a, sizeof a), dit_shape_str(want, 4, b, sizeof b));
  }
  const int64_t nin = dit_tensor_numel(latents) / latents->shape[0], nout = dit_tensor_numel(out) / out->shape[0];
  for (int64_t b = 0; b < latents->shape[0]; b++) {
    dit_tensor x = *latents, y = *out;
    x.shape[0] = y.shape[0] = 1;
    x.data = (float *)latents->data + b * nin;
    y.data = (float *)out->data + b * nout;
    dit_status s = decode_item(m, &x, &y, err);
    if (s != DIT_OK) {
      dit_error_prefix(err, "%s (item %lld)", op, (long long)b);
      return s;
    }
  }
  return DIT_OK;
}

dit_status dit_vae_ltx2_audio_cost(const dit_vae_ltx2_audio *m, int L, int M, dit_cost *out, dit_error *err) {
  if (!m || !out || L < 1 || M < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "audio vae cost: bad arguments");
  run r;
  memset(&r, 0, sizeof r);
  r.m = (dit_vae_ltx2_audio *)m, r.be = m->be, r.dev = dit_backend_device(m->be), r.plan = true;
  int T = 0, Mo = 0;
  dit_vae_ltx2_audio_output_size(m, L, M, &T, &Mo);
  const dit_tensor x = dit_tensor_make(DIT_F32, NULL, 4, (int64_t[]){1, m->cfg.latent_channels, L, M});
  dit_tensor o = dit_tensor_make(DIT_F32, NULL, 4, (int64_t[]){1, m->cfg.output_channels, T, Mo});
  DIT_TRY(forward(&r, &x, &o, err));
  out->act_bytes = 0;
  for (int i = 0; i < NSLOT; i++) out->act_bytes += (r.need[i] + 255) & ~(size_t)255; /* dit_backend_fit_slots' */
  out->flops = r.flops;
  return DIT_OK;
}

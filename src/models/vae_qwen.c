/* The Qwen-Image VAE decoder for single images (see vae_qwen.h): config, the weight table
 * (3-D kernels bound as stored, then cut to the 2-D kernels one frame uses), and the forward
 * on the AutoencoderKL decoder's blocks with the channel RMS norm. */
#include "models/vae_qwen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "models/model_weights.h"
#include "models/vae_kl_internal.h"

#define MAX_LEVELS DIT_VAE_KL_MAX_LEVELS
#define MAX_CHANNELS 65536

struct dit_vae_qwen {
  dit_backend *be;
  dit_vae_qwen_config cfg;
  dit_dtype adt;
  dit_weights *weights; /* the mapped checkpoint (CPU) */
  void *owned;          /* host copies of the 2-D kernels cut from 3-D ones (CPU) */
  void *wblock;         /* every weight on a device backend */
  dit_tensor pq_w, pq_b;           /* post_quant_conv [z, z, 1, 1] */
  dit_tensor conv_in_w, conv_in_b; /* decoder.conv_in [C_top, z, 3, 3] */
  vae_resnet mid_res[2];
  vae_attn mid_attn;               /* its q/k/v are row blocks of qkv_w, qkv_b */
  dit_tensor qkv_w, qkv_b, proj_w, proj_b;
  vae_up_block up[MAX_LEVELS];
  vae_resnet *pool;
  dit_tensor norm_out_w, norm_out_b; /* norm_out.gamma [C0] (no bias: b stays empty) */
  dit_tensor conv_out_w, conv_out_b; /* [out, C0, 3, 3] */
  vae_run *keep;                     /* GPU: the last decode's buffers */
};

/* ---- config ---- */

static dit_status read_config(const json_t *j, const char *what, dit_vae_qwen_config *c, dit_error *err) {
  memset(c, 0, sizeof *c);
  const char *cls = NULL;
  DIT_TRY(dit_json_string_opt(j, "_class_name", &cls, what, err));
  if (cls && strcmp(cls, "AutoencoderKLQwenImage") != 0)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: _class_name \"%s\" is not AutoencoderKLQwenImage", what, cls);
  int64_t v[DIT_VAE_QWEN_MAX_Z];
  size_t n = 0;
  int64_t base = 96, z = 16, nrb = 2, ic = 3;
  DIT_TRY(dit_json_int_opt(j, "base_dim", 1, 4096, &base, what, err));
  DIT_TRY(dit_json_int_opt(j, "z_dim", 1, DIT_VAE_QWEN_MAX_Z, &z, what, err));
  DIT_TRY(dit_json_int_opt(j, "num_res_blocks", 0, 64, &nrb, what, err));
  DIT_TRY(dit_json_int_opt(j, "input_channels", 1, 64, &ic, what, err));
  c->base_dim = (int)base, c->z_dim = (int)z, c->num_res_blocks = (int)nrb, c->out_channels = (int)ic;
  DIT_TRY(dit_json_int_array(j, "dim_mult", 1, 64, v, MAX_LEVELS, &n, what, err));
  if (n < 1) return dit_errorf(err, DIT_ERR_FORMAT, "%s: dim_mult is empty", what);
  c->n_levels = (int)n;
  for (size_t i = 0; i < n; i++) {
    c->dim_mult[i] = (int)v[i];
    if ((int64_t)c->base_dim * c->dim_mult[i] > MAX_CHANNELS)
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: base_dim x dim_mult[%zu] is too large", what, i);
  }
  const json_t *td = json_object_get(j, "temperal_downsample");
  if (!json_is_array(td) || json_array_size(td) != n - 1)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: temperal_downsample must be an array of %zu booleans", what, n - 1);
  for (size_t i = 0; i + 1 < n; i++) c->temporal_down[i] = json_is_true(json_array_get(td, i));
  static const char *const keys[2] = {"latents_mean", "latents_std"};
  for (int k = 0; k < 2; k++) {
    const json_t *a = json_object_get(j, keys[k]);
    if (!json_is_array(a) || json_array_size(a) != (size_t)c->z_dim)
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s must be an array of z_dim (%d) numbers", what, keys[k], c->z_dim);
    for (int i = 0; i < c->z_dim; i++) {
      const json_t *e = json_array_get(a, (size_t)i);
      const double d = json_number_value(e);
      if (!json_is_number(e) || !(d == d) || (k == 1 && !(d > 0)))
        return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s[%d] is not a %snumber", what, keys[k], i, k ? "positive " : "");
      (k ? c->latents_std : c->latents_mean)[i] = (float)d;
    }
  }
  return DIT_OK;
}

/* Channels after the conv_in (k = 0) and after each up block's resnets (k = i + 1). */
static int dims_at(const dit_vae_qwen_config *c, int k) {
  return c->base_dim * (k == 0 ? c->dim_mult[c->n_levels - 1] : c->dim_mult[c->n_levels - k]);
}

/* ---- weights ---- */

static void add(dit_wtable *t, dit_tensor *d, int nd, const int64_t *shape, const char *fmt, const char *base) {
  dit_wtable_add(t, d, false, nd, shape, fmt, base);
}

/* A causal conv of kernel k (3 or 1) in all three dims, as stored [co, ci, k, k, k]. */
static void add_conv3(dit_wtable *t, dit_tensor *w, dit_tensor *b, int co, int ci, int k, const char *base) {
  add(t, w, 5, (int64_t[]){co, ci, k, k, k}, "%s.weight", base);
  add(t, b, 1, (int64_t[]){co}, "%s.bias", base);
}

static void add_resnet(dit_wtable *t, vae_resnet *r, const char *base) {
  char n[192];
  add(t, &r->norm1_w, 4, (int64_t[]){r->cin, 1, 1, 1}, "%s.norm1.gamma", base);
  add(t, &r->norm2_w, 4, (int64_t[]){r->cout, 1, 1, 1}, "%s.norm2.gamma", base);
  snprintf(n, sizeof n, "%s.conv1", base);
  add_conv3(t, &r->conv1_w, &r->conv1_b, r->cout, r->cin, 3, n);
  snprintf(n, sizeof n, "%s.conv2", base);
  add_conv3(t, &r->conv2_w, &r->conv2_b, r->cout, r->cout, 3, n);
  if (r->cin != r->cout) {
    snprintf(n, sizeof n, "%s.conv_shortcut", base);
    add_conv3(t, &r->short_w, &r->short_b, r->cout, r->cin, 1, n);
  }
}

static dit_status build(dit_vae_qwen *m, dit_wtable *t, dit_error *err) {
  const dit_vae_qwen_config *c = &m->cfg;
  const int per = c->num_res_blocks + 1, top = dims_at(c, 0), z = c->z_dim;
  m->pool = calloc((size_t)(c->n_levels * per), sizeof *m->pool);
  if (!m->pool) return dit_errorf(err, DIT_ERR_NOMEM, "vae: out of memory");
  add_conv3(t, &m->pq_w, &m->pq_b, z, z, 1, "post_quant_conv");
  add_conv3(t, &m->conv_in_w, &m->conv_in_b, top, z, 3, "decoder.conv_in");
  char n[160];
  for (int k = 0; k < 2; k++) {
    vae_kl_resnet_init(&m->mid_res[k], top, top);
    snprintf(n, sizeof n, "decoder.mid_block.resnets.%d", k);
    add_resnet(t, &m->mid_res[k], n);
  }
  m->mid_attn.c = top;
  add(t, &m->mid_attn.gn_w, 3, (int64_t[]){top, 1, 1}, "%s.norm.gamma", "decoder.mid_block.attentions.0");
  add(t, &m->qkv_w, 4, (int64_t[]){3 * top, top, 1, 1}, "%s.to_qkv.weight", "decoder.mid_block.attentions.0");
  add(t, &m->qkv_b, 1, (int64_t[]){3 * top}, "%s.to_qkv.bias", "decoder.mid_block.attentions.0");
  add(t, &m->proj_w, 4, (int64_t[]){top, top, 1, 1}, "%s.proj.weight", "decoder.mid_block.attentions.0");
  add(t, &m->proj_b, 1, (int64_t[]){top}, "%s.proj.bias", "decoder.mid_block.attentions.0");
  for (int i = 0; i < c->n_levels; i++) {
    vae_up_block *ub = &m->up[i];
    ub->cin = i > 0 ? dims_at(c, i) / 2 : dims_at(c, i);
    ub->cout = dims_at(c, i + 1);
    ub->n_resnets = per;
    ub->resnets = m->pool + i * per;
    for (int k = 0; k < per; k++) {
      vae_kl_resnet_init(&ub->resnets[k], k ? ub->cout : ub->cin, ub->cout);
      snprintf(n, sizeof n, "decoder.up_blocks.%d.resnets.%d", i, k);
      add_resnet(t, &ub->resnets[k], n);
    }
    ub->upsample = i != c->n_levels - 1;
    if (ub->upsample) {
      snprintf(n, sizeof n, "decoder.up_blocks.%d.upsamplers.0.resample.1", i);
      add(t, &ub->up_w, 4, (int64_t[]){ub->cout / 2, ub->cout, 3, 3}, "%s.weight", n);
      add(t, &ub->up_b, 1, (int64_t[]){ub->cout / 2}, "%s.bias", n);
    }
  }
  const int c0 = dims_at(c, c->n_levels);
  add(t, &m->norm_out_w, 4, (int64_t[]){c0, 1, 1, 1}, "%s.gamma", "decoder.norm_out");
  add_conv3(t, &m->conv_out_w, &m->conv_out_b, c->out_channels, c0, 3, "decoder.conv_out");
  return DIT_OK;
}

/* After binding: norm scales become [C]; 1x1x1 kernels [co, ci, 1, 1] (the same data); 3x3x3
 * kernels their last temporal slice (what a first frame after causal zero padding meets),
 * copied into one host block (m->owned). */
static dit_status cut_kernels(dit_vae_qwen *m, dit_wtable *t, dit_error *err) {
  size_t bytes = 0;
  for (size_t i = 0; i < t->n; i++) {
    const dit_tensor *d = t->entries[i].dst;
    if (d->ndim == 5 && d->shape[2] == 3) bytes += (dit_tensor_nbytes(d) / 3 + 63) / 64 * 64;
  }
  m->owned = bytes ? malloc(bytes) : NULL;
  if (bytes && !m->owned) return dit_errorf(err, DIT_ERR_NOMEM, "vae: out of memory for %zu bytes of kernels", bytes);
  size_t off = 0;
  for (size_t i = 0; i < t->n; i++) {
    dit_tensor *d = t->entries[i].dst;
    if (d->ndim == 5 && d->shape[2] == 3) {
      const int64_t co = d->shape[0], ci = d->shape[1];
      const size_t es = dit_tensor_nbytes(d) / (size_t)dit_tensor_numel(d), slab = 9 * es;
      char *dst = (char *)m->owned + off;
      for (int64_t k = 0; k < co * ci; k++) memcpy(dst + (size_t)k * slab, (const char *)d->data + ((size_t)k * 27 + 18) * es, slab);
      dit_tensor nt = dit_tensor_make(d->dtype, dst, 4, (int64_t[]){co, ci, 3, 3});
      nt.device = d->device;
      *d = nt;
      off += (dit_tensor_nbytes(d) + 63) / 64 * 64;
    } else if (d->ndim == 5) {
      *d = dit_tensor_make(d->dtype, d->data, 4, (int64_t[]){d->shape[0], d->shape[1], 1, 1});
    } else if (strstr(t->entries[i].name, ".gamma")) {
      *d = dit_tensor_make(d->dtype, d->data, 1, (int64_t[]){d->shape[0]});
    }
  }
  return DIT_OK;
}

/* A [rows, cols] view of t's data from row r0 (t contiguous, any dtype and device). */
static dit_tensor rows_of(const dit_tensor *t, int64_t r0, int64_t rows, int64_t cols) {
  const size_t es = dit_tensor_nbytes(t) / (size_t)dit_tensor_numel(t);
  dit_tensor v = dit_tensor_make(t->dtype, (char *)t->data + (size_t)(r0 * cols) * es, cols > 1 ? 2 : 1,
                                 cols > 1 ? (int64_t[]){rows, cols} : (int64_t[]){rows});
  v.device = t->device;
  return v;
}

/* The mid block's attention as the AutoencoderKL one holds it: to_qkv's row blocks as q, k, v. */
static void split_attention(dit_vae_qwen *m) {
  vae_attn *a = &m->mid_attn;
  const int64_t C = a->c;
  a->q_w = rows_of(&m->qkv_w, 0, C, C), a->k_w = rows_of(&m->qkv_w, C, C, C), a->v_w = rows_of(&m->qkv_w, 2 * C, C, C);
  a->q_b = rows_of(&m->qkv_b, 0, C, 1), a->k_b = rows_of(&m->qkv_b, C, C, 1), a->v_b = rows_of(&m->qkv_b, 2 * C, C, 1);
  a->o_w = rows_of(&m->proj_w, 0, C, C), a->o_b = m->proj_b;
}

dit_status dit_vae_qwen_load(dit_backend *be, const char *dir, dit_vae_qwen **out, dit_error *err) {
  *out = NULL;
  if (!be || !dir) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae load: NULL backend or folder");
  char path[4096];
  if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae load: folder path too long");
  dit_vae_qwen *m = calloc(1, sizeof *m);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "vae: out of memory");
  m->be = be;
  m->adt = DIT_F32;
  json_t *j = NULL;
  dit_status s = dit_json_load_file(path, 16u << 20, &j, err);
  if (s == DIT_OK) s = read_config(j, path, &m->cfg, err);
  json_decref(j);
  dit_wtable t;
  dit_wtable_init(&t);
  if (s == DIT_OK) s = build(m, &t, err);
  /* the temporal upsampling (time_conv) never runs on a first frame */
  char tc[MAX_LEVELS][64];
  const char *ignore[MAX_LEVELS + 3] = {"encoder.", "quant_conv."};
  for (int i = 0; s == DIT_OK && i < m->cfg.n_levels; i++) {
    snprintf(tc[i], sizeof tc[i], "decoder.up_blocks.%d.upsamplers.0.time_conv.", i);
    ignore[2 + i] = tc[i];
  }
  if (s == DIT_OK) s = dit_weights_open(dir, NULL, &m->weights, err);
  if (s == DIT_OK) {
    s = dit_wtable_bind(&t, m->weights, "", ignore, err);
    if (s != DIT_OK) dit_error_prefix(err, "%s", dir);
  }
  if (s == DIT_OK) s = dit_wtable_check_float(&t, err);
  if (s == DIT_OK) s = cut_kernels(m, &t, err);
  if (s == DIT_OK) s = vae_kl_to_device(be, &t, &m->wblock, &m->weights, &m->owned, err);
  if (s == DIT_OK) split_attention(m);
  dit_wtable_free(&t);
  if (s != DIT_OK) dit_error_prefix(err, "vae load");
  DIT_HAND_OVER(s, m, out, dit_vae_qwen_free);
}

void dit_vae_qwen_free(dit_vae_qwen *m) {
  if (!m) return;
  vae_run_drop(m->keep);
  vae_kl_release(m->be, m->weights, m->wblock, m->owned, m->pool);
  free(m);
}

const dit_vae_qwen_config *dit_vae_qwen_get_config(const dit_vae_qwen *m) { return m ? &m->cfg : NULL; }

dit_status dit_vae_qwen_set_act_dtype(dit_vae_qwen *m, dit_dtype dt, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae: no model");
  return vae_set_act_dtype(m->be, &m->adt, &m->keep, dt, err);
}

/* ---- forward ---- */

static dit_status decoder_fwd(vae_run *r, const void *model, const float *z, float *out, int h, int w,
                              dit_error *err) {
  const dit_vae_qwen *m = model;
  const dit_vae_qwen_config *c = &m->cfg;
  vact x = {0, c->z_dim, h, w};
  dit_tensor tx, ty;
  DIT_TRY(vae_input(r, &tx, 0, z, x.c, h, w, err));
  DIT_TRY(vae_view(r, &ty, 1, x.c, h, w, err));
  VAE_STAGE(vae_conv(r, &ty, &tx, &m->pq_w, &m->pq_b, 1, 0, err), "post_quant_conv");
  const int top = dims_at(c, 0);
  DIT_TRY(vae_view(r, &tx, vae_other(1, 0), top, h, w, err));
  VAE_STAGE(vae_conv(r, &tx, &ty, &m->conv_in_w, &m->conv_in_b, 1, 1, err), "decoder.conv_in");
  x = (vact){vae_other(1, 0), top, h, w};
  DIT_TRY(vae_mid_fwd(r, m->mid_res, &m->mid_attn, VAE_CHANNEL_RMS, &x, "decoder", err));
  for (int i = 0; i < c->n_levels; i++) {
    const vae_up_block *ub = &m->up[i];
    for (int k = 0; k < ub->n_resnets; k++)
      VAE_STAGE(vae_resnet_fwd(r, &ub->resnets[k], VAE_CHANNEL_RMS, &x, err), "decoder.up_blocks.%d.resnets.%d", i, k);
    if (ub->upsample) VAE_STAGE(vae_upsample_fwd(r, ub, &x, err), "decoder.up_blocks.%d.upsamplers.0", i);
  }
  DIT_TRY(vae_view(r, &tx, x.buf, x.c, x.h, x.w, err));
  VAE_STAGE(vae_gnorm(r, &tx, &tx, VAE_CHANNEL_RMS, &m->norm_out_w, &m->norm_out_b, true, err), "decoder.norm_out");
  DIT_TRY(vae_view(r, &ty, vae_other(x.buf, 0), c->out_channels, x.h, x.w, err));
  VAE_STAGE(vae_conv(r, &ty, &tx, &m->conv_out_w, &m->conv_out_b, 1, 1, err), "decoder.conv_out");
  return vae_output(r, &ty, out, err);
}

/* The decoder's call on nb latents of h x w (buffers kept in *keep when not NULL). */
static vae_call decode_call(const dit_vae_qwen *m, int nb, int h, int w, int tile, vae_run **keep) {
  const dit_vae_qwen_config *c = &m->cfg;
  return (vae_call){m->be, m->adt, decoder_fwd, m, nb, h, w, tile, c->z_dim, 1, c->out_channels,
                    1 << (c->n_levels - 1), "vae decode", keep};
}

dit_status dit_vae_qwen_cost(const dit_vae_qwen *m, int h, int w, int tile, dit_cost *out, dit_error *err) {
  if (!m || !out || h < 1 || w < 1 || tile < 0) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae cost: bad arguments");
  const vae_call call = decode_call(m, 1, h, w, tile, NULL);
  return vae_call_cost(&call, out, err);
}

dit_status dit_vae_qwen_decode(dit_vae_qwen *m, const dit_tensor *z, dit_tensor *img, int tile, dit_error *err) {
  if (!m || !z || !img) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae decode: NULL argument");
  const dit_vae_qwen_config *c = &m->cfg;
  const int64_t f = (int64_t)1 << (c->n_levels - 1);
  DIT_TRY(vae_check_decode_io(z, img, c->z_dim, c->out_channels, f, tile, err));
  const vae_call call = decode_call(m, (int)z->shape[0], (int)z->shape[2], (int)z->shape[3], tile,
                                    dit_backend_is_host(m->be) ? NULL : &m->keep);
  DIT_TRY(vae_decode_checked(&call, z, img, err));
  float *px = img->data;
  const size_t in = (size_t)dit_tensor_numel(img);
  for (size_t i = 0; i < in; i++) px[i] = px[i] < -1.0f ? -1.0f : px[i] > 1.0f ? 1.0f : px[i];
  return DIT_OK;
}

/* MiniMax-H3's video VAE decoder (see vae_minimax_h3.h): config, weights, and one clip's decode as a
 * sequence of backend ops (F32 activations). */
#include "models/vae_minimax_h3.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "models/model_weights.h"

#define MAX_DIM 65536
#define MAX_TOKENS ((int64_t)1 << 20)

typedef struct h3v_block {
  dit_tensor norm1, norm2, q, qb, k, kb, v, vb, o, ob;
  dit_tensor ff_in, ff_in_b, ff_val, ff_val_b, ff_gate, ff_gate_b, ff_down, ff_down_b;
  dit_tensor scale1, scale2; /* as stored; s1, s2: their F32 copies (the gated adds take F32 gates) */
  dit_tensor s1, s2;
} h3v_block;

struct dit_h3_vae {
  dit_backend *be;
  dit_h3_vae_config cfg;
  dit_weights *weights;
  void *wblock, *scales; /* the device copy of the weights; the F32 branch scales */
  dit_tensor pq_w, pq_b, pq2, proj_in_w, proj_in_b, reg, norm_out_w, norm_out_b, proj_out_w, proj_out_b;
  h3v_block *blocks;
};

/* The product of an integer array field (the down factors), each 1..16. */
static dit_status factor_product(const json_t *j, const char *key, const char *what, int *out, dit_error *err) {
  const json_t *a = json_object_get(j, key);
  if (!json_is_array(a) || json_array_size(a) < 1 || json_array_size(a) > 16)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"%s\" must be an array of 1..16 integers", what, key);
  int p = 1;
  for (size_t i = 0; i < json_array_size(a); i++) {
    const json_t *v = json_array_get(a, i);
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 16)
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s[%zu] must be an integer in 1..16", what, key, i);
    p *= (int)json_integer_value(v);
  }
  if (p > 1024) return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s multiply to %d (over 1024)", what, key, p);
  *out = p;
  return DIT_OK;
}

/* latents_mean / latents_std: n numbers each (default 0 / 1). */
static dit_status stats(const json_t *j, const char *key, int n, float def, float *out, const char *what,
                        dit_error *err) {
  const json_t *a = json_object_get(j, key);
  for (int i = 0; i < n; i++) out[i] = def;
  if (!a || json_is_null(a)) return DIT_OK;
  if (!json_is_array(a) || (int)json_array_size(a) != n)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"%s\" must hold %d numbers", what, key, n);
  for (int i = 0; i < n; i++) {
    const json_t *v = json_array_get(a, (size_t)i);
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s[%d] is not a finite number", what, key, i);
    out[i] = (float)json_number_value(v);
  }
  return DIT_OK;
}

static dit_status read_config(const json_t *j, const char *what, dit_h3_vae_config *c, dit_error *err) {
  DIT_TRY(dit_json_class_check(j, "AutoencoderKLMiniMaxH3", what, err));
  const dit_json_int_field f[] = {
      {"latent_channels", 1, DIT_H3_VAE_MAX_CHANNELS, 24, &c->latent_channels, NULL},
      {"out_channels", 1, 16, 3, &c->out_channels, NULL},
      {"decoder_num_layers", 1, 1024, 36, &c->layers, NULL},
      {"decoder_num_attention_heads", 1, 1024, 32, &c->heads, NULL},
      {"decoder_attention_head_dim", 2, 512, 64, &c->head_dim, NULL},
      {"decoder_num_register_tokens", 0, 1024, 4, &c->registers, NULL},
      {"decoder_ffn_mult", 1, 64, 4, &c->ffn_mult, NULL},
      {"clip_length", 1, 1024, 17, &c->clip_length, NULL},
      {"token_drop", 0, 1024, 3, &c->token_drop, NULL},
  };
  DIT_TRY(dit_json_int_fields(j, f, sizeof f / sizeof *f, what, err));
  DIT_TRY(factor_product(j, "spatial_downsample_factors", what, &c->patch, err));
  DIT_TRY(factor_product(j, "temporal_downsample_factors", what, &c->patch_t, err));
  c->rope_theta = 100.0, c->rope_dim_ratio = 0.75;
  double eps = 1e-5;
  DIT_TRY(dit_json_double_opt(j, "decoder_rope_theta", &c->rope_theta, what, err));
  DIT_TRY(dit_json_double_opt(j, "decoder_rope_dim_ratio", &c->rope_dim_ratio, what, err));
  DIT_TRY(dit_json_double_opt(j, "decoder_norm_eps", &eps, what, err));
  c->eps = (float)eps;
  const int rd = (int)(c->head_dim * c->rope_dim_ratio);
  if (!(c->rope_theta > 1.0) || rd < 6 || rd % 6 || rd > c->head_dim)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: decoder_rope_dim_ratio %g of %d channels is not a multiple of 6 up to "
                      "the head (or decoder_rope_theta %g is not above 1)", what, c->rope_dim_ratio, c->head_dim,
                      c->rope_theta);
  if ((int64_t)c->heads * c->head_dim > MAX_DIM)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: the decoder is wider than %d", what, MAX_DIM);
  DIT_TRY(stats(j, "latents_mean", c->latent_channels, 0.0f, c->latents_mean, what, err));
  return stats(j, "latents_std", c->latent_channels, 1.0f, c->latents_std, what, err);
}

static void add_lin(dit_wtable *t, dit_tensor *w, dit_tensor *b, int64_t n, int64_t k, const char *fmt, int i) {
  char name[160];
  snprintf(name, sizeof name, fmt, i);
  dit_wtable_add(t, w, false, 2, (int64_t[]){n, k}, "%s.weight", name);
  dit_wtable_add(t, b, false, 1, (int64_t[]){n}, "%s.bias", name);
}

static dit_status build(dit_h3_vae *v, dit_wtable *t, dit_error *err) {
  const dit_h3_vae_config *c = &v->cfg;
  const int64_t C = c->latent_channels, D = (int64_t)c->heads * c->head_dim, F = (int64_t)c->ffn_mult * D;
  const int64_t P = (int64_t)c->out_channels * c->patch_t * c->patch * c->patch;
  v->blocks = calloc((size_t)c->layers, sizeof *v->blocks);
  if (!v->blocks) return dit_errorf(err, DIT_ERR_NOMEM, "h3 vae: out of memory");
  dit_wtable_add(t, &v->pq_w, false, 5, (int64_t[]){C, C, 1, 1, 1}, "post_quant_conv.weight");
  dit_wtable_add(t, &v->pq_b, false, 1, (int64_t[]){C}, "post_quant_conv.bias");
  add_lin(t, &v->proj_in_w, &v->proj_in_b, D, C, "decoder.proj_in", 0);
  dit_wtable_add(t, &v->reg, c->registers == 0, 3, (int64_t[]){1, c->registers, D}, "decoder.register_tokens");
  dit_wtable_add(t, &v->norm_out_w, false, 1, (int64_t[]){D}, "decoder.norm_out.weight");
  dit_wtable_add(t, &v->norm_out_b, false, 1, (int64_t[]){D}, "decoder.norm_out.bias");
  add_lin(t, &v->proj_out_w, &v->proj_out_b, P, D, "decoder.proj_out", 0);
  for (int i = 0; i < c->layers; i++) {
    h3v_block *b = &v->blocks[i];
    dit_wtable_add(t, &b->norm1, false, 1, (int64_t[]){D}, "decoder.transformer_blocks.%d.norm1.weight", i);
    dit_wtable_add(t, &b->norm2, false, 1, (int64_t[]){D}, "decoder.transformer_blocks.%d.norm2.weight", i);
    dit_wtable_add(t, &b->scale1, false, 1, (int64_t[]){D}, "decoder.transformer_blocks.%d.scale1", i);
    dit_wtable_add(t, &b->scale2, false, 1, (int64_t[]){D}, "decoder.transformer_blocks.%d.scale2", i);
    add_lin(t, &b->q, &b->qb, D, D, "decoder.transformer_blocks.%d.attn.to_q", i);
    add_lin(t, &b->k, &b->kb, D, D, "decoder.transformer_blocks.%d.attn.to_k", i);
    add_lin(t, &b->v, &b->vb, D, D, "decoder.transformer_blocks.%d.attn.to_v", i);
    add_lin(t, &b->o, &b->ob, D, D, "decoder.transformer_blocks.%d.attn.to_out.0", i);
    add_lin(t, &b->ff_in, &b->ff_in_b, 2 * F, D, "decoder.transformer_blocks.%d.ff.net.0.proj", i);
    add_lin(t, &b->ff_down, &b->ff_down_b, D, F, "decoder.transformer_blocks.%d.ff.net.2", i);
  }
  return DIT_OK;
}

/* A view of rows [r0, r0 + n) of t (2-D, or 1-D for a bias). */
static dit_tensor rows_of(const dit_tensor *t, int64_t r0, int64_t n) {
  const int64_t cols = t->ndim == 2 ? t->shape[1] : 1;
  dit_tensor v = dit_tensor_make(t->dtype, (char *)t->data + (size_t)(r0 * cols) * dit_dtype_size(t->dtype), t->ndim,
                                 t->ndim == 2 ? (int64_t[]){n, cols} : (int64_t[]){n});
  v.device = t->device;
  return v;
}

/* After the weights are on the backend: the SwiGLU halves ([value; gate]) as views, post_quant_conv as a
 * [C, C] matrix, and F32 copies of every block's branch scales in one block. */
static dit_status finish(dit_h3_vae *v, dit_error *err) {
  dit_backend *be = v->be;
  const dit_h3_vae_config *c = &v->cfg;
  const int64_t C = c->latent_channels, D = (int64_t)c->heads * c->head_dim, F = (int64_t)c->ffn_mult * D;
  v->pq2 = dit_tensor_make(v->pq_w.dtype, v->pq_w.data, 2, (int64_t[]){C, C});
  v->pq2.device = v->pq_w.device;
  float *host = malloc((size_t)D * (sizeof(float) + 8));
  dit_status s = host ? be->ops->alloc(be, (size_t)(2 * c->layers * D) * sizeof(float), &v->scales, err)
                      : dit_errorf(err, DIT_ERR_NOMEM, "h3 vae: out of memory");
  for (int i = 0; s == DIT_OK && i < c->layers; i++) {
    h3v_block *b = &v->blocks[i];
    b->ff_val = rows_of(&b->ff_in, 0, F), b->ff_gate = rows_of(&b->ff_in, F, F);
    b->ff_val_b = rows_of(&b->ff_in_b, 0, F), b->ff_gate_b = rows_of(&b->ff_in_b, F, F);
    for (int k = 0; s == DIT_OK && k < 2; k++) {
      const dit_tensor *src = k ? &b->scale2 : &b->scale1;
      void *raw = host + D, *dst = (char *)v->scales + (size_t)((2 * i + k) * D) * sizeof(float);
      s = be->ops->download(be, raw, src->data, dit_tensor_nbytes(src), err);
      if (s == DIT_OK) dit_convert_to_f32(host, raw, src->dtype, (size_t)D);
      if (s == DIT_OK) s = be->ops->upload(be, dst, host, (size_t)D * sizeof(float), err);
      dit_tensor *out = k ? &b->s2 : &b->s1;
      *out = dit_tensor_make(DIT_F32, dst, 2, (int64_t[]){1, D});
      out->device = dit_backend_device(be);
    }
  }
  if (s == DIT_OK) s = be->ops->sync(be, err);
  free(host);
  return s;
}

dit_status dit_h3_vae_read_config(const char *dir, dit_h3_vae_config *c, dit_error *err) {
  char path[4096];
  DIT_TRY(dit_model_config_path("h3 vae load", dir, path, sizeof path, err));
  json_t *j = NULL;
  DIT_TRY(dit_json_load_file(path, 16u << 20, &j, err));
  dit_status s = read_config(j, path, c, err);
  json_decref(j);
  return s;
}

dit_status dit_h3_vae_load(dit_backend *be, const char *dir, dit_h3_vae **out, dit_error *err) {
  if (!out) return dit_errorf(err, DIT_ERR_INVALID_ARG, "h3 vae load: NULL output");
  *out = NULL;
  if (!be || !dir) return dit_errorf(err, DIT_ERR_INVALID_ARG, "h3 vae load: NULL backend or folder");
  dit_h3_vae *v = calloc(1, sizeof *v);
  if (!v) return dit_errorf(err, DIT_ERR_NOMEM, "h3 vae: out of memory");
  v->be = be;
  dit_status s = dit_h3_vae_read_config(dir, &v->cfg, err);
  dit_wtable t;
  dit_wtable_init(&t);
  if (s == DIT_OK) s = build(v, &t, err);
  static const char *const ignore[] = {"encoder.", "quant_conv.", NULL};
  if (s == DIT_OK) s = dit_wtable_load_dir(be, dir, &t, ignore, NULL, NULL, &v->weights, &v->wblock, err);
  dit_wtable_free(&t);
  if (s == DIT_OK) s = finish(v, err);
  DIT_HAND_OVER(s, v, out, dit_h3_vae_free);
}

void dit_h3_vae_free(dit_h3_vae *v) {
  if (!v) return;
  if (v->scales) v->be->ops->free(v->be, v->scales);
  if (v->wblock) v->be->ops->free(v->be, v->wblock);
  if (v->weights) dit_weights_close(v->weights);
  free(v->blocks);
  free(v);
}

const dit_h3_vae_config *dit_h3_vae_get_config(const dit_h3_vae *v) { return v ? &v->cfg : NULL; }

/* One decode's buffers (F32, one backend block). */
typedef struct h3v_bufs {
  void *block;
  float *zt, *t1, *x, *hn, *q, *k, *v, *o, *r, *fa, *fb, *cos, *sin, *po;
} h3v_bufs;

/* The 14 buffers' floats for N voxel tokens of M in all; returns the block's bytes. */
static size_t bufs_sizes(const dit_h3_vae_config *c, int64_t N, int64_t M, int64_t n[14]) {
  const int64_t C = c->latent_channels, D = (int64_t)c->heads * c->head_dim, F = (int64_t)c->ffn_mult * D;
  const int64_t W = (int64_t)(c->head_dim * c->rope_dim_ratio) / 2;
  const int64_t P = (int64_t)c->out_channels * c->patch_t * c->patch * c->patch;
  const int64_t k[14] = {N * C, N * C, M * D, M * D, M * D, M * D, M * D,
                         M * D, M * D, M * F, M * F, M * W, M * W, N * P};
  size_t total = 0;
  for (int i = 0; i < 14; i++) total += ((size_t)(n[i] = k[i]) * sizeof(float) + 255) / 256 * 256;
  return total;
}

void dit_h3_vae_clip_cost(const dit_h3_vae *v, int T, int h, int w, dit_cost *out) {
  const dit_h3_vae_config *c = &v->cfg;
  const int64_t N = (int64_t)T * h * w, M = N + c->registers + 1, D = (int64_t)c->heads * c->head_dim;
  const int64_t W = (int64_t)(c->head_dim * c->rope_dim_ratio) / 2, C = c->latent_channels;
  const int64_t P = (int64_t)c->out_channels * c->patch_t * c->patch * c->patch, F = (int64_t)c->ffn_mult * D;
  int64_t n[14];
  const size_t block = bufs_sizes(c, N, M, n), rope = (size_t)(2 * M * W) * sizeof(float);
  const size_t zt = (size_t)(N * C > D ? N * C : D) * sizeof(float), px = (size_t)(N * P) * sizeof(float);
  size_t host = rope > zt ? rope : zt; /* one at a time: the tables, the tokens, the attention's workspace, */
  const size_t att = dit_cpu_attention_workspace(v->be, 1, M, M, c->heads, c->head_dim);
  host = att > host ? att : host;
  out->act_bytes = block + (px > host ? px : host); /* the pixels */
  const double m = (double)M, d = (double)D;
  out->flops = c->layers * (2.0 * m * (4.0 * d * d + 3.0 * d * (double)F) + 4.0 * m * m * d) +
               2.0 * (double)N * ((double)C * C + (double)C * d + d * (double)P);
}

static dit_status bufs_alloc(dit_h3_vae *v, int64_t N, int64_t M, h3v_bufs *b, dit_error *err) {
  int64_t n[14];
  const size_t total = bufs_sizes(&v->cfg, N, M, n);
  DIT_TRY(v->be->ops->alloc(v->be, total, &b->block, err));
  float **p[14] = {&b->zt, &b->t1, &b->x, &b->hn, &b->q, &b->k, &b->v, &b->o, &b->r, &b->fa, &b->fb, &b->cos, &b->sin, &b->po};
  char *at = b->block;
  for (int i = 0; i < 14; i++) {
    *p[i] = (float *)at;
    at += ((size_t)n[i] * sizeof(float) + 255) / 256 * 256;
  }
  return DIT_OK;
}

/* The RoPE tables [M, 3 F]: per axis 2 (i + 0.5) / size - 1 for the N voxel tokens (t, h, w row-major), 0 for
 * the suffix tokens; angle = (2 pi * pos) * theta^-(k * 6 / rd) in float32 as diffusers computes them. */
static dit_status upload_rope(dit_h3_vae *v, int T, int h, int w, int64_t M, const h3v_bufs *b, dit_error *err) {
  const int rd = (int)(v->cfg.head_dim * v->cfg.rope_dim_ratio), nf = rd / 6, W = rd / 2;
  float inv[64];
  const double step = 6.0 / (double)rd;
  for (int k = 0; k < nf; k++) inv[k] = 1.0f / powf((float)v->cfg.rope_theta, (float)((double)k * step));
  float *tab = calloc((size_t)(2 * M * W), sizeof *tab);
  if (!tab) return dit_errorf(err, DIT_ERR_NOMEM, "h3 vae: out of memory for RoPE tables");
  const int size[3] = {T, h, w};
  const float two_pi = (float)(2.0 * M_PI);
  for (int64_t n = 0; n < M; n++) {
    const int64_t N = (int64_t)T * h * w, idx[3] = {n / ((int64_t)h * w), (n / w) % h, n % w};
    for (int ax = 0; ax < 3; ax++) {
      const float pos = n < N ? 2.0f * (((float)idx[ax] + 0.5f) / (float)size[ax]) - 1.0f : 0.0f;
      for (int k = 0; k < nf; k++) {
        const float a = (two_pi * pos) * inv[k];
        tab[n * W + ax * nf + k] = cosf(a);
        tab[M * W + n * W + ax * nf + k] = sinf(a);
      }
    }
  }
  dit_status s = v->be->ops->upload(v->be, b->cos, tab, (size_t)(M * W) * sizeof *tab, err);
  if (s == DIT_OK) s = v->be->ops->upload(v->be, b->sin, tab + M * W, (size_t)(M * W) * sizeof *tab, err);
  free(tab);
  return s;
}

static dit_tensor f2(const dit_h3_vae *v, void *p, int64_t a, int64_t b) {
  dit_tensor t = dit_tensor_make(DIT_F32, p, 2, (int64_t[]){a, b});
  t.device = dit_backend_device(v->be);
  return t;
}

/* One block on x [M, D]: x += attn(norm1(x)) * scale1; x += ff(norm2(x)) * scale2. */
static dit_status vit_block(dit_h3_vae *v, const h3v_block *b, int64_t M, const h3v_bufs *u, dit_error *err) {
  dit_backend *be = v->be;
  const dit_h3_vae_config *c = &v->cfg;
  const int64_t H = c->heads, hd = c->head_dim, D = H * hd, F = (int64_t)c->ffn_mult * D;
  const int64_t rd = (int64_t)(hd * c->rope_dim_ratio);
  dit_tensor x = f2(v, u->x, M, D), hn = f2(v, u->hn, M, D), q = f2(v, u->q, M, D), k = f2(v, u->k, M, D);
  dit_tensor vv = f2(v, u->v, M, D), o = f2(v, u->o, M, D), r = f2(v, u->r, M, D);
  DIT_TRY(dit_op_rms_norm(be, &hn, &x, &b->norm1, c->eps, err));
  DIT_TRY(dit_op_linear(be, &q, &hn, &b->q, &b->qb, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &k, &hn, &b->k, &b->kb, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &vv, &hn, &b->v, &b->vb, DIT_ACT_NONE, err));
  dit_tensor qr = f2(v, u->q, M * H, hd), kr = f2(v, u->k, M * H, hd);
  DIT_TRY(dit_op_rms_norm(be, &qr, &qr, NULL, c->eps, err));
  DIT_TRY(dit_op_rms_norm(be, &kr, &kr, NULL, c->eps, err));
  dit_tensor cs = f2(v, u->cos, M, rd / 2), sn = f2(v, u->sin, M, rd / 2);
  for (int t = 0; t < 2; t++) { /* each head's leading rd channels */
    dit_tensor y = dit_tensor_make(DIT_F32, t ? u->k : u->q, 4, (int64_t[]){1, M, H, rd});
    y.device = dit_backend_device(be);
    y.stride[0] = M * D, y.stride[1] = D, y.stride[2] = hd, y.stride[3] = 1;
    DIT_TRY(dit_op_rope(be, &y, &cs, &sn, DIT_ROPE_HALF, err));
  }
  dit_tensor q4 = dit_tensor_make(DIT_F32, u->q, 4, (int64_t[]){1, M, H, hd}), k4 = q4, v4 = q4, o4 = q4;
  k4.data = u->k, v4.data = u->v, o4.data = u->o;
  q4.device = k4.device = v4.device = o4.device = dit_backend_device(be);
  DIT_TRY(dit_op_attention(be, &o4, &q4, &k4, &v4, NULL, 1.0f / sqrtf((float)hd), false, err));
  DIT_TRY(dit_op_linear(be, &r, &o, &b->o, &b->ob, DIT_ACT_NONE, err));
  dit_tensor x3 = dit_tensor_make(DIT_F32, u->x, 3, (int64_t[]){1, M, D}), r3 = x3, h3 = x3;
  r3.data = u->r, h3.data = u->hn;
  x3.device = r3.device = h3.device = dit_backend_device(be);
  DIT_TRY(dit_op_residual_rms_mod(be, &x3, &r3, &b->s1, &h3, &b->norm2, NULL, NULL, c->eps, err));
  dit_tensor fa = f2(v, u->fa, M, F), fb = f2(v, u->fb, M, F);
  DIT_TRY(dit_op_linear(be, &fa, &hn, &b->ff_gate, &b->ff_gate_b, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &fb, &hn, &b->ff_val, &b->ff_val_b, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_swiglu(be, &fa, &fa, &fb, err));
  DIT_TRY(dit_op_linear(be, &r, &fa, &b->ff_down, &b->ff_down_b, DIT_ACT_NONE, err));
  return dit_op_gated_add(be, &x3, &r3, &b->s2, false, err);
}

/* The tokens: post_quant_conv and proj_in per voxel, then the register tokens and one zero token. */
static dit_status tokens(dit_h3_vae *v, int64_t N, const float *z, const h3v_bufs *u, dit_error *err) {
  dit_backend *be = v->be;
  const dit_h3_vae_config *c = &v->cfg;
  const int64_t C = c->latent_channels, D = (int64_t)c->heads * c->head_dim, R = c->registers;
  float *zt = malloc((size_t)(N * C > D ? N * C : D) * sizeof *zt);
  if (!zt) return dit_errorf(err, DIT_ERR_NOMEM, "h3 vae: out of memory");
  for (int64_t n = 0; n < N; n++)
    for (int64_t ch = 0; ch < C; ch++) zt[n * C + ch] = z[ch * N + n]; /* [C, N] -> [N, C] */
  dit_status s = be->ops->upload(be, u->zt, zt, (size_t)(N * C) * sizeof *zt, err);
  memset(zt, 0, (size_t)D * sizeof *zt);
  if (s == DIT_OK) s = be->ops->upload(be, u->x + (N + R) * D, zt, (size_t)D * sizeof *zt, err); /* the zero token */
  free(zt);
  DIT_TRY(s);
  dit_tensor in = f2(v, u->zt, N, C), t1 = f2(v, u->t1, N, C), x = f2(v, u->x, N, D);
  DIT_TRY(dit_op_linear(be, &t1, &in, &v->pq2, &v->pq_b, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &x, &t1, &v->proj_in_w, &v->proj_in_b, DIT_ACT_NONE, err));
  if (!R) return DIT_OK;
  dit_tensor reg = dit_tensor_make(v->reg.dtype, v->reg.data, 2, (int64_t[]){R, D}), xr = f2(v, u->x + N * D, R, D);
  reg.device = v->reg.device;
  return dit_op_copy(be, &xr, &reg, err);
}

dit_status dit_h3_vae_decode_clip(dit_h3_vae *v, int T, int h, int w, const float *z, float *out, dit_error *err) {
  if (!v || !z || !out || T < 1 || h < 1 || w < 1 || (int64_t)T * h * w > MAX_TOKENS)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "h3 vae decode: bad arguments (%d x %d x %d latents)", T, h, w);
  const dit_h3_vae_config *c = &v->cfg;
  const int64_t N = (int64_t)T * h * w, M = N + c->registers + 1, D = (int64_t)c->heads * c->head_dim;
  const int pt = c->patch_t, p = c->patch, oc = c->out_channels;
  const int64_t P = (int64_t)oc * pt * p * p;
  h3v_bufs u = {0};
  DIT_TRY(bufs_alloc(v, N, M, &u, err));
  dit_status s = upload_rope(v, T, h, w, M, &u, err);
  if (s == DIT_OK) s = tokens(v, N, z, &u, err);
  for (int i = 0; s == DIT_OK && i < c->layers; i++) {
    s = vit_block(v, &v->blocks[i], M, &u, err);
    if (s != DIT_OK) dit_error_prefix(err, "h3 vae block %d", i);
  }
  dit_tensor x = f2(v, u.x, M, D), hn = f2(v, u.hn, M, D), hv = f2(v, u.hn, N, D), po = f2(v, u.po, N, P);
  if (s == DIT_OK) s = dit_op_layer_norm(v->be, &hn, &x, &v->norm_out_w, &v->norm_out_b, c->eps, err);
  if (s == DIT_OK) s = dit_op_linear(v->be, &po, &hv, &v->proj_out_w, &v->proj_out_b, DIT_ACT_NONE, err);
  float *host = s == DIT_OK ? malloc((size_t)(N * P) * sizeof *host) : NULL;
  if (s == DIT_OK && !host) s = dit_errorf(err, DIT_ERR_NOMEM, "h3 vae: out of memory for the pixels");
  if (s == DIT_OK) s = v->be->ops->download(v->be, host, u.po, (size_t)(N * P) * sizeof *host, err);
  if (s == DIT_OK) { /* token (t, y, x)'s [oc, pt, p, p] block into [oc, T pt, h p, w p] */
    const int64_t OT = (int64_t)T * pt, OH = (int64_t)h * p, OW = (int64_t)w * p;
    for (int64_t n = 0; n < N; n++) {
      const int64_t t = n / ((int64_t)h * w), y = (n / w) % h, xx = n % w;
      for (int ch = 0; ch < oc; ch++)
        for (int a = 0; a < pt; a++)
          for (int by = 0; by < p; by++)
            for (int bx = 0; bx < p; bx++)
              out[((ch * OT + t * pt + a) * OH + y * p + by) * OW + xx * p + bx] =
                  host[n * P + ((ch * pt + a) * p + by) * p + bx];
    }
  }
  free(host);
  v->be->ops->free(v->be, u.block);
  return s;
}

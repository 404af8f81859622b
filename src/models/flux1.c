/* FLUX.1 transformer (see flux1.h): config from a diffusers config.json or from a single
 * file's tensor shapes, the weight tables of both layouts, load and random weights. The
 * forward is the FLUX MMDiT's (flux2_forward.c, variant DIT_FLUX_1). */
#include "models/flux1.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/json.h"
#include "models/flux2_internal.h"
#include "models/lora.h"

#define CFG_MAX_BYTES (16u << 20)
#define MAX_DIM 65536
#define MAX_LAYERS 1024
#define MAX_CHANNELS 65536
#define BFL_HEAD_DIM 128 /* FLUX.1's head size, whose RoPE axes a single file implies */

/* The fields FLUX.1 fixes (FluxTransformer2DModel's constructor hard-codes them). */
static void fixed_fields(dit_flux2_config *c) {
  c->variant = DIT_FLUX_1;
  c->n_axes = DIT_FLUX1_N_AXES;
  c->patch_size = 1;
  c->t_channels = 256;
  c->mlp_ratio = 4.0;
  c->rope_theta = 10000.0;
  c->eps = 1e-6f;
}

void dit_flux1_config(dit_flux2_config *c, bool dev) {
  memset(c, 0, sizeof *c);
  fixed_fields(c);
  c->in_channels = 64;
  c->n_layers = 19;
  c->n_single_layers = 38;
  c->head_dim = 128;
  c->n_heads = 24;
  c->joint_attention_dim = 4096;
  c->pooled_dim = 768;
  c->guidance_embeds = dev;
  c->axes_dims[0] = 16;
  c->axes_dims[1] = c->axes_dims[2] = 56;
}

static dit_status opt_int(const json_t *j, const char *key, int64_t min, int64_t max, int *out, const char *what,
                          dit_error *err) {
  int64_t v = *out;
  DIT_TRY(dit_json_int_opt(j, key, min, max, &v, what, err));
  *out = (int)v;
  return DIT_OK;
}

/* config.json's fields over the published defaults (diffusers' constructor defaults). */
static dit_status read_fields(const json_t *j, dit_flux2_config *c, const char *what, dit_error *err) {
  DIT_TRY(dit_json_class_check(j, "FluxTransformer2DModel", what, err));
  dit_flux1_config(c, false);
  DIT_TRY(opt_int(j, "patch_size", 1, 64, &c->patch_size, what, err));
  DIT_TRY(opt_int(j, "in_channels", 1, MAX_CHANNELS, &c->in_channels, what, err));
  DIT_TRY(opt_int(j, "out_channels", 1, MAX_CHANNELS, &c->out_channels, what, err));
  DIT_TRY(opt_int(j, "num_layers", 0, MAX_LAYERS, &c->n_layers, what, err));
  DIT_TRY(opt_int(j, "num_single_layers", 0, MAX_LAYERS, &c->n_single_layers, what, err));
  DIT_TRY(opt_int(j, "attention_head_dim", 2, DIT_FLUX2_MAX_HEAD_DIM, &c->head_dim, what, err));
  DIT_TRY(opt_int(j, "num_attention_heads", 1, MAX_DIM, &c->n_heads, what, err));
  DIT_TRY(opt_int(j, "joint_attention_dim", 1, MAX_DIM, &c->joint_attention_dim, what, err));
  DIT_TRY(opt_int(j, "pooled_projection_dim", 1, MAX_DIM, &c->pooled_dim, what, err));
  DIT_TRY(dit_json_bool_opt(j, "guidance_embeds", &c->guidance_embeds, what, err));
  if (json_object_get(j, "axes_dims_rope") && !json_is_null(json_object_get(j, "axes_dims_rope")))
    DIT_TRY(dit_json_ints_exact(j, "axes_dims_rope", 0, DIT_FLUX2_MAX_HEAD_DIM, c->axes_dims, DIT_FLUX1_N_AXES, what,
                                err));
  return DIT_OK;
}

static dit_status parse_config(const char *path, dit_flux2_config *c, dit_error *err) {
  json_t *j = NULL;
  DIT_TRY(dit_json_load_file(path, CFG_MAX_BYTES, &j, err));
  dit_status s = read_fields(j, c, path, err);
  json_decref(j);
  if (s == DIT_OK) s = flux2_check_config(c, path, err);
  return s;
}

/* ---- weight tables ---------------------------------------------------------------- */

static void add_lin(dit_wtable *t, flux_lin *l, int64_t n, int64_t k, const char *name) {
  dit_wtable_add(t, &l->w, false, 2, (int64_t[]){n, k}, "%s.weight", name);
  dit_wtable_add(t, &l->b, false, 1, (int64_t[]){n}, "%s.bias", name);
}

static void add_vec(dit_wtable *t, dit_tensor *d, int64_t n, const char *name) {
  dit_wtable_add(t, d, false, 1, (int64_t[]){n}, "%s", name);
}

/* Name "<a>.<i>.<b>" into buf (sized DIT_WNAME_MAX; longer names are cut and then fail to bind). */
static const char *nm(char *buf, const char *a, int i, const char *b) {
  snprintf(buf, DIT_WNAME_MAX, "%s.%d.%s", a, i, b);
  return buf;
}

static void top_diffusers(dit_wtable *t, const dit_flux2_config *c, flux2_weights *w) {
  const int64_t D = c->dim, Tc = c->t_channels;
  add_lin(t, &w->t_linear_1, D, Tc, "time_text_embed.timestep_embedder.linear_1");
  add_lin(t, &w->t_linear_2, D, D, "time_text_embed.timestep_embedder.linear_2");
  if (c->guidance_embeds) {
    add_lin(t, &w->g_linear_1, D, Tc, "time_text_embed.guidance_embedder.linear_1");
    add_lin(t, &w->g_linear_2, D, D, "time_text_embed.guidance_embedder.linear_2");
  }
  add_lin(t, &w->p_linear_1, D, c->pooled_dim, "time_text_embed.text_embedder.linear_1");
  add_lin(t, &w->p_linear_2, D, D, "time_text_embed.text_embedder.linear_2");
  add_lin(t, &w->context_embedder, D, c->joint_attention_dim, "context_embedder");
  add_lin(t, &w->x_embedder, D, c->in_channels, "x_embedder");
  add_lin(t, &w->norm_out, 2 * D, D, "norm_out.linear");
  add_lin(t, &w->proj_out, c->out_channels, D, "proj_out");
}

static void double_diffusers(dit_wtable *t, const dit_flux2_config *c, flux2_double_w *b, int i) {
  const int64_t D = c->dim, F = c->mlp_hidden, hd = c->head_dim;
  const char *p = "transformer_blocks";
  char n[DIT_WNAME_MAX];
  add_lin(t, &b->mod_img, 6 * D, D, nm(n, p, i, "norm1.linear"));
  add_lin(t, &b->mod_txt, 6 * D, D, nm(n, p, i, "norm1_context.linear"));
  add_lin(t, &b->to_q, D, D, nm(n, p, i, "attn.to_q"));
  add_lin(t, &b->to_k, D, D, nm(n, p, i, "attn.to_k"));
  add_lin(t, &b->to_v, D, D, nm(n, p, i, "attn.to_v"));
  add_lin(t, &b->add_q_proj, D, D, nm(n, p, i, "attn.add_q_proj"));
  add_lin(t, &b->add_k_proj, D, D, nm(n, p, i, "attn.add_k_proj"));
  add_lin(t, &b->add_v_proj, D, D, nm(n, p, i, "attn.add_v_proj"));
  add_vec(t, &b->norm_q, hd, nm(n, p, i, "attn.norm_q.weight"));
  add_vec(t, &b->norm_k, hd, nm(n, p, i, "attn.norm_k.weight"));
  add_vec(t, &b->norm_added_q, hd, nm(n, p, i, "attn.norm_added_q.weight"));
  add_vec(t, &b->norm_added_k, hd, nm(n, p, i, "attn.norm_added_k.weight"));
  add_lin(t, &b->to_out_0, D, D, nm(n, p, i, "attn.to_out.0"));
  add_lin(t, &b->to_add_out, D, D, nm(n, p, i, "attn.to_add_out"));
  add_lin(t, &b->ff_in, F, D, nm(n, p, i, "ff.net.0.proj"));
  add_lin(t, &b->ff_out, D, F, nm(n, p, i, "ff.net.2"));
  add_lin(t, &b->ffc_in, F, D, nm(n, p, i, "ff_context.net.0.proj"));
  add_lin(t, &b->ffc_out, D, F, nm(n, p, i, "ff_context.net.2"));
}

static void single_diffusers(dit_wtable *t, const dit_flux2_config *c, flux2_single_w *b, int i) {
  const int64_t D = c->dim, F = c->mlp_hidden, hd = c->head_dim;
  const char *p = "single_transformer_blocks";
  char n[DIT_WNAME_MAX];
  add_lin(t, &b->mod, 3 * D, D, nm(n, p, i, "norm.linear"));
  /* q, k, v weights, then their biases, one after the other: a device backend places them
   * side by side, so they run as one GEMM (fuse_qkv) */
  flux_lin *qkv[3] = {&b->to_q, &b->to_k, &b->to_v};
  static const char *const qn[3] = {"attn.to_q.weight", "attn.to_k.weight", "attn.to_v.weight"};
  static const char *const bn[3] = {"attn.to_q.bias", "attn.to_k.bias", "attn.to_v.bias"};
  for (int j = 0; j < 3; j++) dit_wtable_add(t, &qkv[j]->w, false, 2, (int64_t[]){D, D}, "%s", nm(n, p, i, qn[j]));
  for (int j = 0; j < 3; j++) add_vec(t, &qkv[j]->b, D, nm(n, p, i, bn[j]));
  add_vec(t, &b->norm_q, hd, nm(n, p, i, "attn.norm_q.weight"));
  add_vec(t, &b->norm_k, hd, nm(n, p, i, "attn.norm_k.weight"));
  add_lin(t, &b->proj_mlp, F, D, nm(n, p, i, "proj_mlp"));
  add_lin(t, &b->to_out, D, D + F, nm(n, p, i, "proj_out"));
}

static void top_bfl(dit_wtable *t, const dit_flux2_config *c, flux2_weights *w) {
  const int64_t D = c->dim, Tc = c->t_channels;
  add_lin(t, &w->t_linear_1, D, Tc, "time_in.in_layer");
  add_lin(t, &w->t_linear_2, D, D, "time_in.out_layer");
  if (c->guidance_embeds) {
    add_lin(t, &w->g_linear_1, D, Tc, "guidance_in.in_layer");
    add_lin(t, &w->g_linear_2, D, D, "guidance_in.out_layer");
  }
  add_lin(t, &w->p_linear_1, D, c->pooled_dim, "vector_in.in_layer");
  add_lin(t, &w->p_linear_2, D, D, "vector_in.out_layer");
  add_lin(t, &w->context_embedder, D, c->joint_attention_dim, "txt_in");
  add_lin(t, &w->x_embedder, D, c->in_channels, "img_in");
  add_lin(t, &w->norm_out, 2 * D, D, "final_layer.adaLN_modulation.1");
  add_lin(t, &w->proj_out, c->out_channels, D, "final_layer.linear");
  w->norm_out_shift_first = true;
}

static void double_bfl(dit_wtable *t, const dit_flux2_config *c, flux2_double_w *b, int i) {
  const int64_t D = c->dim, F = c->mlp_hidden, hd = c->head_dim;
  const char *p = "double_blocks";
  char n[DIT_WNAME_MAX];
  add_lin(t, &b->mod_img, 6 * D, D, nm(n, p, i, "img_mod.lin"));
  add_lin(t, &b->mod_txt, 6 * D, D, nm(n, p, i, "txt_mod.lin"));
  add_lin(t, &b->img_qkv, 3 * D, D, nm(n, p, i, "img_attn.qkv"));
  add_lin(t, &b->txt_qkv, 3 * D, D, nm(n, p, i, "txt_attn.qkv"));
  add_vec(t, &b->norm_q, hd, nm(n, p, i, "img_attn.norm.query_norm.scale"));
  add_vec(t, &b->norm_k, hd, nm(n, p, i, "img_attn.norm.key_norm.scale"));
  add_vec(t, &b->norm_added_q, hd, nm(n, p, i, "txt_attn.norm.query_norm.scale"));
  add_vec(t, &b->norm_added_k, hd, nm(n, p, i, "txt_attn.norm.key_norm.scale"));
  add_lin(t, &b->to_out_0, D, D, nm(n, p, i, "img_attn.proj"));
  add_lin(t, &b->to_add_out, D, D, nm(n, p, i, "txt_attn.proj"));
  add_lin(t, &b->ff_in, F, D, nm(n, p, i, "img_mlp.0"));
  add_lin(t, &b->ff_out, D, F, nm(n, p, i, "img_mlp.2"));
  add_lin(t, &b->ffc_in, F, D, nm(n, p, i, "txt_mlp.0"));
  add_lin(t, &b->ffc_out, D, F, nm(n, p, i, "txt_mlp.2"));
}

static void single_bfl(dit_wtable *t, const dit_flux2_config *c, flux2_single_w *b, int i) {
  const int64_t D = c->dim, F = c->mlp_hidden, hd = c->head_dim;
  const char *p = "single_blocks";
  char n[DIT_WNAME_MAX];
  add_lin(t, &b->mod, 3 * D, D, nm(n, p, i, "modulation.lin"));
  add_lin(t, &b->linear1, 3 * D + F, D, nm(n, p, i, "linear1"));
  add_vec(t, &b->norm_q, hd, nm(n, p, i, "norm.query_norm.scale"));
  add_vec(t, &b->norm_k, hd, nm(n, p, i, "norm.key_norm.scale"));
  add_lin(t, &b->to_out, D, D + F, nm(n, p, i, "linear2"));
}

/* Lists the allocated blocks' tensors under the names m was loaded with (diffusers', or a
 * single file's BFL names). */
static void list_table(dit_flux2 *m, dit_wtable *t) {
  if (m->bfl_names) top_bfl(t, &m->cfg, &m->w);
  else top_diffusers(t, &m->cfg, &m->w);
  for (int i = 0; i < m->cfg.n_layers; i++)
    if (m->bfl_names) double_bfl(t, &m->cfg, &m->w.blocks[i], i);
    else double_diffusers(t, &m->cfg, &m->w.blocks[i], i);
  for (int i = 0; i < m->cfg.n_single_layers; i++)
    if (m->bfl_names) single_bfl(t, &m->cfg, &m->w.single[i], i);
    else single_diffusers(t, &m->cfg, &m->w.single[i], i);
}

static dit_status build_table(void *model, dit_wtable *t, dit_error *err) {
  dit_flux2 *m = model;
  dit_wtable_init(t);
  DIT_TRY(flux2_alloc_blocks(m, err));
  list_table(m, t);
  return DIT_OK;
}

/* Rows [r0, r0 + n) of a bound linear (weight rows and bias entries), as a view; where the
 * weight has a low-rank term, the view's is *lr (a, and b's rows r0 .. r0 + n). */
static flux_lin lin_rows(const flux_lin *l, int64_t r0, int64_t n, dit_lowrank *lr) {
  flux_lin v = {dit_tensor_rows(&l->w, r0, n), dit_tensor_rows(&l->b, r0, n)};
  if (l->w.lowrank) {
    *lr = (dit_lowrank){l->w.lowrank->a, dit_tensor_rows(&l->w.lowrank->b, r0, n)};
    v.w.lowrank = lr;
  }
  return v;
}

/* A single file's fused tensors as the forward's per-projection views (their low-rank terms,
 * under LoRAs on quantized weights, in m->view_terms: 6 per double block, 2 per single). */
static dit_status bfl_views(dit_flux2 *m, dit_error *err) {
  const int64_t D = m->cfg.dim, F = m->cfg.mlp_hidden;
  if (!m->view_terms) m->view_terms = calloc((size_t)(6 * m->cfg.n_layers + 2 * m->cfg.n_single_layers) + 1,
                                             sizeof *m->view_terms);
  if (!m->view_terms) return dit_errorf(err, DIT_ERR_NOMEM, "flux1: out of memory");
  dit_lowrank *lr = m->view_terms;
  for (int i = 0; i < m->cfg.n_layers; i++, lr += 6) {
    flux2_double_w *b = &m->w.blocks[i];
    b->to_q = lin_rows(&b->img_qkv, 0, D, &lr[0]);
    b->to_k = lin_rows(&b->img_qkv, D, D, &lr[1]);
    b->to_v = lin_rows(&b->img_qkv, 2 * D, D, &lr[2]);
    b->add_q_proj = lin_rows(&b->txt_qkv, 0, D, &lr[3]);
    b->add_k_proj = lin_rows(&b->txt_qkv, D, D, &lr[4]);
    b->add_v_proj = lin_rows(&b->txt_qkv, 2 * D, D, &lr[5]);
  }
  for (int i = 0; i < m->cfg.n_single_layers; i++, lr += 2) {
    flux2_single_w *b = &m->w.single[i];
    b->qkv = lin_rows(&b->linear1, 0, 3 * D, &lr[0]);
    b->proj_mlp = lin_rows(&b->linear1, 3 * D, F, &lr[1]);
  }
  return DIT_OK;
}

/* True when tensor b starts right where a ends (same dtype). */
static bool follows(const dit_tensor *a, const dit_tensor *b) {
  return a->data && b->data && a->dtype == b->dtype && (const char *)a->data + dit_tensor_nbytes(a) == b->data &&
         !a->lowrank && !b->lowrank; /* a run-time low-rank term belongs to its own GEMM */
}

/* The single blocks' q, k, v as one [3D, D] GEMM where their weights and biases lie side by
 * side (a device backend's block), else left as three. */
static void fuse_qkv(dit_flux2 *m) {
  for (int i = 0; i < m->cfg.n_single_layers; i++) {
    flux2_single_w *b = &m->w.single[i];
    memset(&b->qkv, 0, sizeof b->qkv);
    if (!follows(&b->to_q.w, &b->to_k.w) || !follows(&b->to_k.w, &b->to_v.w) || !follows(&b->to_q.b, &b->to_k.b) ||
        !follows(&b->to_k.b, &b->to_v.b))
      continue;
    b->qkv = b->to_q;
    b->qkv.w.shape[0] = b->qkv.b.shape[0] = 3 * (int64_t)m->cfg.dim;
  }
}

/* ---- a single file's config from its shapes ---------------------------------------- */

/* Tensor pfx + name, or NULL. */
static const dit_st_tensor *find(const dit_weights *w, const char *pfx, const char *name) {
  char full[2 * DIT_WNAME_MAX];
  snprintf(full, sizeof full, "%s%s", pfx, name);
  return dit_weights_find(w, full);
}

static const dit_st_tensor *need(const dit_weights *w, const char *pfx, const char *name, int ndim, const char *path,
                                 dit_error *err) {
  const dit_st_tensor *t = find(w, pfx, name);
  if (!t) dit_errorf(err, DIT_ERR_FORMAT, "%s: no tensor %s%s (not a FLUX.1 single file?)", path, pfx, name);
  else if (t->ndim != ndim) {
    dit_errorf(err, DIT_ERR_FORMAT, "%s: tensor %s%s has %d dims, expected %d", path, pfx, name, t->ndim, ndim);
    t = NULL;
  }
  return t;
}

/* Blocks "<pfx><prefix>.N." present: the largest N + 1. */
static int count_blocks(const dit_weights *w, const char *pfx, const char *prefix) {
  size_t pl = strlen(prefix), fl = strlen(pfx);
  int n = 0;
  for (size_t i = 0; i < w->n_tensors; i++) {
    const char *nmv = w->tensors[i]->name;
    if (strncmp(nmv, pfx, fl) != 0) continue;
    nmv += fl;
    if (strncmp(nmv, prefix, pl) != 0 || nmv[pl] != '.') continue;
    long v = strtol(nmv + pl + 1, NULL, 10);
    if (v >= 0 && v < MAX_LAYERS && v + 1 > n) n = (int)v + 1;
  }
  return n;
}

/* The config a single file's shapes imply; *pfx is the names' prefix ("" or ComfyUI's). */
static dit_status infer_config(const dit_weights *w, const char *path, dit_flux2_config *c, const char **pfx,
                               dit_error *err) {
  const char *p = !find(w, "", "img_in.weight") && find(w, FLUX_COMFY_PREFIX, "img_in.weight") ? FLUX_COMFY_PREFIX : "";
  *pfx = p;
  const dit_st_tensor *img = need(w, p, "img_in.weight", 2, path, err), *txt, *vec, *tin, *fin;
  if (!img) return DIT_ERR_FORMAT;
  dit_flux1_config(c, false);
  c->n_layers = count_blocks(w, p, "double_blocks");
  c->n_single_layers = count_blocks(w, p, "single_blocks");
  const char *qn = c->n_layers ? "double_blocks.0.img_attn.norm.query_norm.scale" : "single_blocks.0.norm.query_norm.scale";
  const dit_st_tensor *q = need(w, p, qn, 1, path, err);
  if (!q || !(txt = need(w, p, "txt_in.weight", 2, path, err)) ||
      !(vec = need(w, p, "vector_in.in_layer.weight", 2, path, err)) ||
      !(tin = need(w, p, "time_in.in_layer.weight", 2, path, err)) ||
      !(fin = need(w, p, "final_layer.linear.weight", 2, path, err)))
    return DIT_ERR_FORMAT;
  const int64_t D = img->shape[0], hd = q->shape[0];
  if (hd < 2 || D % hd != 0 || D > MAX_DIM)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: width %lld is not a multiple of the head size %lld", path,
                      (long long)D, (long long)hd);
  c->in_channels = (int)img->shape[1];
  c->head_dim = (int)hd;
  c->n_heads = (int)(D / hd);
  c->joint_attention_dim = (int)txt->shape[1];
  c->pooled_dim = (int)vec->shape[1];
  c->t_channels = (int)tin->shape[1];
  c->out_channels = (int)fin->shape[0];
  c->guidance_embeds = find(w, p, "guidance_in.in_layer.weight") != NULL;
  const dit_st_tensor *mlp = c->n_layers ? need(w, p, "double_blocks.0.img_mlp.0.weight", 2, path, err)
                                         : need(w, p, "single_blocks.0.linear1.weight", 2, path, err);
  if (!mlp) return DIT_ERR_FORMAT;
  int64_t F = c->n_layers ? mlp->shape[0] : mlp->shape[0] - 3 * D;
  if (F < 1 || F > 64 * D) return dit_errorf(err, DIT_ERR_FORMAT, "%s: MLP width %lld out of range", path, (long long)F);
  c->mlp_ratio = (double)F / (double)D;
  c->mlp_hidden = (int)F;
  return DIT_OK;
}

/* The RoPE axes a single file implies (or cfg_json's), then the usual checks. */
static dit_status single_file_config(const char *path, const char *cfg_json, dit_flux2_config *c, const char **pfx,
                                     dit_error *err) {
  dit_weights *w = NULL;
  DIT_TRY(dit_weights_open(path, NULL, &w, err));
  dit_status s = infer_config(w, path, c, pfx, err);
  dit_weights_close(w);
  DIT_TRY(s);
  if (cfg_json) {
    dit_flux2_config j;
    DIT_TRY(parse_config(cfg_json, &j, err));
    static const char *const what[] = {"attention_head_dim", "num_attention_heads", "num_layers", "num_single_layers",
                                       "guidance_embeds", "in_channels", "joint_attention_dim", "pooled_projection_dim"};
    const int got[] = {c->head_dim, c->n_heads, c->n_layers, c->n_single_layers, c->guidance_embeds, c->in_channels,
                       c->joint_attention_dim, c->pooled_dim};
    const int want[] = {j.head_dim, j.n_heads, j.n_layers, j.n_single_layers, j.guidance_embeds, j.in_channels,
                        j.joint_attention_dim, j.pooled_dim};
    for (size_t i = 0; i < sizeof got / sizeof *got; i++)
      if (got[i] != want[i])
        return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s is %d in the tensors, %d in %s", path, what[i], got[i], want[i],
                          cfg_json);
    memcpy(c->axes_dims, j.axes_dims, sizeof c->axes_dims);
  } else if (c->head_dim != BFL_HEAD_DIM) {
    return dit_errorf(err, DIT_ERR_UNSUPPORTED,
                      "%s: head size %d has no published RoPE axes; give the transformer's config.json", path,
                      c->head_dim);
  }
  const int F = c->mlp_hidden;
  DIT_TRY(flux2_check_config(c, path, err));
  c->mlp_hidden = F; /* the stored width, whatever the ratio's rounding */
  return DIT_OK;
}

dit_status dit_flux1_load(dit_backend *be, const char *path, const char *cfg_json, dit_flux2 **out, dit_error *err) {
  *out = NULL;
  if (!be || !path) return dit_errorf(err, DIT_ERR_INVALID_ARG, "flux1: no backend or path given");
  struct stat st;
  if (stat(path, &st) != 0) return dit_errorf(err, DIT_ERR_IO, "flux1: cannot open %s", path);
  const bool dir = S_ISDIR(st.st_mode);
  dit_flux2 *m = flux2_new_model(be);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "flux1: out of memory");
  dit_status s;
  if (dir) {
    char cp[4096];
    s = dit_model_config_path("flux1", path, cp, sizeof cp, err);
    if (s == DIT_OK) s = parse_config(cfg_json ? cfg_json : cp, &m->cfg, err);
    if (s == DIT_OK) s = dit_model_weights_load(be, &m->mw, "flux1", path, build_table, m, true, err);
    if (s == DIT_OK) fuse_qkv(m);
  } else {
    m->bfl_names = true;
    s = single_file_config(path, cfg_json, &m->cfg, &m->mw.prefix, err);
    if (s == DIT_OK) s = dit_model_weights_load(be, &m->mw, "flux1", path, build_table, m, true, err);
    if (s == DIT_OK) s = bfl_views(m, err);
  }
  DIT_HAND_OVER(s, m, out, dit_flux2_free);
}

dit_status dit_flux1_create_random(dit_backend *be, const dit_flux2_config *c, dit_dtype wdt, uint64_t seed,
                                   dit_flux2 **out, dit_error *err) {
  *out = NULL;
  if (!be || !c) return dit_errorf(err, DIT_ERR_INVALID_ARG, "flux1: no backend or config given");
  dit_flux2 *m = flux2_new_model(be);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "flux1: out of memory");
  m->cfg = *c;
  fixed_fields(&m->cfg);
  dit_status s = flux2_check_sizes(&m->cfg, "flux1 random config", err);
  if (s == DIT_OK) s = flux2_check_config(&m->cfg, "flux1 random config", err);
  if (s == DIT_OK) s = dit_model_weights_random(be, &m->mw, "flux1", build_table, m, wdt, seed, err);
  if (s == DIT_OK) fuse_qkv(m);
  DIT_HAND_OVER(s, m, out, dit_flux2_free);
}

/* FLUX.1's original (BFL) module names as diffusers names, as diffusers' LoRA converter maps
 * them (_convert_kohya_flux_lora_to_diffusers): for LoRAs trained on the original checkpoint
 * (kohya's lora_unet_double_blocks_0_img_attn_qkv, AI-Toolkit). Order matters both ways (a
 * kohya name is matched against a table name with these applied backwards in reverse order):
 * "final_layer.linear." before ".linear2.". The final layer's modulation has its row halves in
 * the other order in the two layouts (FLUX_BFL_SWAPPED: a LoRA's B is exchanged, lora.c). */
static const dit_wrename flux1_bfl_renames[] = {
    FLUX_BFL_BLOCK_RENAMES,
    {".img_mod.lin.", ".norm1.linear.", NULL},
    {".txt_mod.lin.", ".norm1_context.linear.", NULL},
    {".img_attn.qkv.", ".attn.img_qkv.", NULL},
    {".txt_attn.qkv.", ".attn.txt_qkv.", NULL},
    {".img_attn.proj.", ".attn.to_out.0.", NULL},
    {".txt_attn.proj.", ".attn.to_add_out.", NULL},
    {".img_mlp.0.", ".ff.net.0.proj.", NULL},
    {".img_mlp.2.", ".ff.net.2.", NULL},
    {".txt_mlp.0.", ".ff_context.net.0.proj.", NULL},
    {".txt_mlp.2.", ".ff_context.net.2.", NULL},
    {".modulation.lin.", ".norm.linear.", NULL},
    {".linear1.", ".attn.to_qkv_mlp.", NULL},
    {"final_layer.linear.", "proj_out.", NULL},
    {"final_layer.adaLN_modulation.1.", "norm_out.linear.", NULL},
    {".linear2.", ".proj_out.", NULL},
    {"img_in.", "x_embedder.", NULL},
    {"txt_in.", "context_embedder.", NULL},
    {"time_in.in_layer.", "time_text_embed.timestep_embedder.linear_1.", NULL},
    {"time_in.out_layer.", "time_text_embed.timestep_embedder.linear_2.", NULL},
    {"guidance_in.in_layer.", "time_text_embed.guidance_embedder.linear_1.", NULL},
    {"guidance_in.out_layer.", "time_text_embed.guidance_embedder.linear_2.", NULL},
    {"vector_in.in_layer.", "time_text_embed.text_embedder.linear_1.", NULL},
    {"vector_in.out_layer.", "time_text_embed.text_embedder.linear_2.", NULL},
};
/* linear1 holds q, k, v and the MLP input: rows D, D, D and F (lora.c splits by the targets' rows;
 * `ditrun quantize` concatenates them); the biases are fused like their weights. */
#define QKV(x) {".attn.to_q." x, ".attn.to_k." x, ".attn.to_v." x}
#define ADD_QKV(x) {".attn.add_q_proj." x, ".attn.add_k_proj." x, ".attn.add_v_proj." x}
#define QKV_MLP(x) {".attn.to_q." x, ".attn.to_k." x, ".attn.to_v." x, ".proj_mlp." x}
static const dit_wsplit flux1_bfl_splits[] = {
    {".attn.img_qkv.weight", 3, QKV("weight"), "transformer_blocks.", 0},
    {".attn.txt_qkv.weight", 3, ADD_QKV("weight"), "transformer_blocks.", 0},
    {".attn.to_qkv_mlp.weight", 4, QKV_MLP("weight"), "single_transformer_blocks.", 0},
    {".attn.img_qkv.bias", 3, QKV("bias"), "transformer_blocks.", 0},
    {".attn.txt_qkv.bias", 3, ADD_QKV("bias"), "transformer_blocks.", 0},
    {".attn.to_qkv_mlp.bias", 4, QKV_MLP("bias"), "single_transformer_blocks.", 0},
};
#undef QKV
#undef ADD_QKV
#undef QKV_MLP

/* Writing (`ditrun quantize`): BFL's names, as flux1-dev.safetensors, ComfyUI, city96's GGUF
 * files and stable-diffusion.cpp have them; the final modulation with shift before scale. */
static const dit_wrename flux1_swap[] = {
    {"norm_out.linear.weight", "final_layer.adaLN_modulation.1.weight", NULL},
    {"norm_out.linear.bias", "final_layer.adaLN_modulation.1.bias", NULL},
};
const dit_wexport dit_flux1_export = {"flux",
                                      NULL,
                                      flux1_bfl_renames,
                                      sizeof flux1_bfl_renames / sizeof *flux1_bfl_renames,
                                      true,
                                      flux1_bfl_splits,
                                      sizeof flux1_bfl_splits / sizeof *flux1_bfl_splits,
                                      NULL,
                                      flux1_swap,
                                      2};

dit_status dit_flux1_apply_loras(dit_flux2 *m, const dit_lora *l, int n, dit_error *err) {
  static const char *const swapped[] = FLUX_BFL_SWAPPED;
  const dit_wremap bfl = {NULL,    flux1_bfl_renames, sizeof flux1_bfl_renames / sizeof *flux1_bfl_renames,
                          flux1_bfl_splits, sizeof flux1_bfl_splits / sizeof *flux1_bfl_splits, NULL, swapped};
  dit_status s = flux2_set_loras(m, list_table, m->bfl_names ? NULL : &bfl, l, n, err);
  if (s == DIT_OK && m->bfl_names) s = bfl_views(m, err); /* the fused tensors: new memory or terms (allocated
                                                             at load: no failure here) */
  else if (s == DIT_OK) fuse_qkv(m);                       /* q, k, v may no longer lie side by side */
  return s;
}

/* FLUX.2 transformer: reading and validating config.json (diffusers' defaults for absent
 * fields, as Flux2Transformer2DModel's constructor has them), binding the checkpoint's
 * tensors to the weights struct, load and free. The forward pass is in flux2_forward.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/json.h"
#include "models/lora.h"
#include "models/flux2_internal.h"

#define CFG_MAX_BYTES (16u << 20)
#define MAX_DIM 65536
#define MAX_LAYERS 1024
#define MAX_HEADS 1024
#define MAX_HEAD_DIM DIT_FLUX2_MAX_HEAD_DIM
#define MAX_CHANNELS 65536

static dit_status opt_int(const json_t *j, const char *key, int64_t min, int64_t max, int def, int *out,
                          const char *what, dit_error *err) {
  int64_t v = def;
  DIT_TRY(dit_json_int_opt(j, key, min, max, &v, what, err));
  *out = (int)v;
  return DIT_OK;
}

static dit_status read_axes(const json_t *j, dit_flux2_config *c, const char *what, dit_error *err) {
  c->n_axes = DIT_FLUX2_N_AXES;
  for (int i = 0; i < DIT_FLUX2_N_AXES; i++) c->axes_dims[i] = 32;
  const json_t *a = json_object_get(j, "axes_dims_rope");
  if (!a || json_is_null(a)) return DIT_OK;
  return dit_json_ints_exact(j, "axes_dims_rope", 0, MAX_HEAD_DIM, c->axes_dims, DIT_FLUX2_N_AXES, what, err);
}

static dit_status read_fields(const json_t *j, dit_flux2_config *c, const char *what, dit_error *err) {
  DIT_TRY(dit_json_class_check(j, "Flux2Transformer2DModel", what, err));
  DIT_TRY(opt_int(j, "patch_size", 1, 64, 1, &c->patch_size, what, err));
  DIT_TRY(opt_int(j, "in_channels", 1, MAX_CHANNELS, 128, &c->in_channels, what, err));
  c->out_channels = 0;
  DIT_TRY(opt_int(j, "out_channels", 1, MAX_CHANNELS, 0, &c->out_channels, what, err));
  DIT_TRY(opt_int(j, "num_layers", 0, MAX_LAYERS, 8, &c->n_layers, what, err));
  DIT_TRY(opt_int(j, "num_single_layers", 0, MAX_LAYERS, 48, &c->n_single_layers, what, err));
  DIT_TRY(opt_int(j, "attention_head_dim", 2, MAX_HEAD_DIM, 128, &c->head_dim, what, err));
  DIT_TRY(opt_int(j, "num_attention_heads", 1, MAX_HEADS, 48, &c->n_heads, what, err));
  DIT_TRY(opt_int(j, "joint_attention_dim", 1, MAX_DIM, 15360, &c->joint_attention_dim, what, err));
  DIT_TRY(opt_int(j, "timestep_guidance_channels", 2, MAX_DIM, 256, &c->t_channels, what, err));
  c->mlp_ratio = 3.0;
  DIT_TRY(dit_json_double_opt(j, "mlp_ratio", &c->mlp_ratio, what, err));
  DIT_TRY(read_axes(j, c, what, err));
  c->rope_theta = 2000.0;
  DIT_TRY(dit_json_double_opt(j, "rope_theta", &c->rope_theta, what, err));
  double eps = 1e-6;
  DIT_TRY(dit_json_double_opt(j, "eps", &eps, what, err));
  c->eps = (float)eps;
  c->guidance_embeds = true;
  DIT_TRY(dit_json_bool_opt(j, "guidance_embeds", &c->guidance_embeds, what, err));
  return DIT_OK;
}

/* Consistency of the sizes with each other and with what this implementation runs. */
dit_status flux2_check_config(dit_flux2_config *c, const char *what, dit_error *err) {
  if (c->patch_size != 1)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: field \"patch_size\" = %d: only 1 is supported", what,
                      c->patch_size);
  if (c->out_channels == 0) c->out_channels = c->in_channels;
  if (c->head_dim % 2 != 0 || c->head_dim < 2 || c->head_dim > MAX_HEAD_DIM)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"attention_head_dim\" = %d must be even, in [2, %d]", what,
                      c->head_dim, MAX_HEAD_DIM);
  if ((int64_t)c->n_heads * c->head_dim > MAX_DIM)
    return dit_errorf(err, DIT_ERR_FORMAT,
                      "%s: fields \"num_attention_heads\" x \"attention_head_dim\" = %lld exceed %d", what,
                      (long long)c->n_heads * c->head_dim, MAX_DIM);
  c->dim = c->n_heads * c->head_dim;
  int sum = 0;
  if (c->n_axes < 1 || c->n_axes > DIT_FLUX2_N_AXES)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: %d RoPE axes (1 to %d supported)", what, c->n_axes, DIT_FLUX2_N_AXES);
  for (int i = 0; i < c->n_axes; i++) {
    if (c->axes_dims[i] % 2 != 0 || c->axes_dims[i] < 0)
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"axes_dims_rope\"[%d] = %d must be even and >= 0", what, i,
                        c->axes_dims[i]);
    sum += c->axes_dims[i];
  }
  if (sum != c->head_dim)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"axes_dims_rope\" sums to %d, expected attention_head_dim %d",
                      what, sum, c->head_dim);
  if (!(c->rope_theta > 0) || c->rope_theta > 1e12)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"rope_theta\" = %g must be in (0, 1e12]", what, c->rope_theta);
  if (!(c->eps > 0) || c->eps > 1.0f)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"eps\" = %g must be in (0, 1]", what, (double)c->eps);
  if (c->t_channels % 2 != 0)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"timestep_guidance_channels\" = %d must be even", what,
                      c->t_channels);
  if (!(c->mlp_ratio > 0) || c->mlp_ratio > 64)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"mlp_ratio\" = %g must be in (0, 64]", what, c->mlp_ratio);
  c->mlp_hidden = (int)((double)c->dim * c->mlp_ratio);
  if (c->mlp_hidden < 1)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"mlp_ratio\" = %g gives an empty MLP", what, c->mlp_ratio);
  return DIT_OK;
}

dit_status flux2_parse_config(const char *path, dit_flux2_config *c, dit_error *err) {
  memset(c, 0, sizeof *c);
  json_t *j = NULL;
  DIT_TRY(dit_json_load_file(path, CFG_MAX_BYTES, &j, err));
  dit_status s = read_fields(j, c, path, err);
  if (s == DIT_OK) s = flux2_check_config(c, path, err);
  json_decref(j);
  return s;
}

static void add_double(dit_wtable *t, const dit_flux2_config *c, flux2_double_w *b, int i) {
  const int64_t D = c->dim, hd = c->head_dim, F = c->mlp_hidden;
  const int64_t dd[2] = {D, D}, h1[1] = {hd}, fin[2] = {2 * F, D}, fout[2] = {D, F};
  const char *p = "transformer_blocks";
  dit_wtable_add(t, &b->to_q.w, false, 2, dd, "%s.%d.attn.to_q.weight", p, i);
  dit_wtable_add(t, &b->to_k.w, false, 2, dd, "%s.%d.attn.to_k.weight", p, i);
  dit_wtable_add(t, &b->to_v.w, false, 2, dd, "%s.%d.attn.to_v.weight", p, i);
  dit_wtable_add(t, &b->norm_q, false, 1, h1, "%s.%d.attn.norm_q.weight", p, i);
  dit_wtable_add(t, &b->norm_k, false, 1, h1, "%s.%d.attn.norm_k.weight", p, i);
  dit_wtable_add(t, &b->add_q_proj.w, false, 2, dd, "%s.%d.attn.add_q_proj.weight", p, i);
  dit_wtable_add(t, &b->add_k_proj.w, false, 2, dd, "%s.%d.attn.add_k_proj.weight", p, i);
  dit_wtable_add(t, &b->add_v_proj.w, false, 2, dd, "%s.%d.attn.add_v_proj.weight", p, i);
  dit_wtable_add(t, &b->norm_added_q, false, 1, h1, "%s.%d.attn.norm_added_q.weight", p, i);
  dit_wtable_add(t, &b->norm_added_k, false, 1, h1, "%s.%d.attn.norm_added_k.weight", p, i);
  dit_wtable_add(t, &b->to_out_0.w, false, 2, dd, "%s.%d.attn.to_out.0.weight", p, i);
  dit_wtable_add(t, &b->to_add_out.w, false, 2, dd, "%s.%d.attn.to_add_out.weight", p, i);
  dit_wtable_add(t, &b->ff_in.w, false, 2, fin, "%s.%d.ff.linear_in.weight", p, i);
  dit_wtable_add(t, &b->ff_out.w, false, 2, fout, "%s.%d.ff.linear_out.weight", p, i);
  dit_wtable_add(t, &b->ffc_in.w, false, 2, fin, "%s.%d.ff_context.linear_in.weight", p, i);
  dit_wtable_add(t, &b->ffc_out.w, false, 2, fout, "%s.%d.ff_context.linear_out.weight", p, i);
}

static void add_single(dit_wtable *t, const dit_flux2_config *c, flux2_single_w *b, int i) {
  const int64_t D = c->dim, hd = c->head_dim, F = c->mlp_hidden;
  const int64_t h1[1] = {hd}, pin[2] = {3 * D + 2 * F, D}, pout[2] = {D, D + F};
  const char *p = "single_transformer_blocks";
  dit_wtable_add(t, &b->to_qkv_mlp_proj, false, 2, pin, "%s.%d.attn.to_qkv_mlp_proj.weight", p, i);
  dit_wtable_add(t, &b->norm_q, false, 1, h1, "%s.%d.attn.norm_q.weight", p, i);
  dit_wtable_add(t, &b->norm_k, false, 1, h1, "%s.%d.attn.norm_k.weight", p, i);
  dit_wtable_add(t, &b->to_out.w, false, 2, pout, "%s.%d.attn.to_out.weight", p, i);
}

static void add_top(dit_wtable *t, const dit_flux2_config *c, flux2_weights *w) {
  const int64_t D = c->dim, Tc = c->t_channels;
  const char *te = "time_guidance_embed";
  dit_wtable_add(t, &w->t_linear_1.w, false, 2, (int64_t[]){D, Tc}, "%s.timestep_embedder.linear_1.weight", te);
  dit_wtable_add(t, &w->t_linear_2.w, false, 2, (int64_t[]){D, D}, "%s.timestep_embedder.linear_2.weight", te);
  if (c->guidance_embeds) {
    dit_wtable_add(t, &w->g_linear_1.w, false, 2, (int64_t[]){D, Tc}, "%s.guidance_embedder.linear_1.weight", te);
    dit_wtable_add(t, &w->g_linear_2.w, false, 2, (int64_t[]){D, D}, "%s.guidance_embedder.linear_2.weight", te);
  }
  dit_wtable_add(t, &w->mod_img, false, 2, (int64_t[]){6 * D, D}, "double_stream_modulation_img.linear.weight");
  dit_wtable_add(t, &w->mod_txt, false, 2, (int64_t[]){6 * D, D}, "double_stream_modulation_txt.linear.weight");
  dit_wtable_add(t, &w->mod_single, false, 2, (int64_t[]){3 * D, D}, "single_stream_modulation.linear.weight");
  dit_wtable_add(t, &w->x_embedder.w, false, 2, (int64_t[]){D, c->in_channels}, "x_embedder.weight");
  dit_wtable_add(t, &w->context_embedder.w, false, 2, (int64_t[]){D, c->joint_attention_dim},
                 "context_embedder.weight");
  dit_wtable_add(t, &w->norm_out.w, false, 2, (int64_t[]){2 * D, D}, "norm_out.linear.weight");
  if (w->norm_out_shift_first && t->n && t->entries[t->n - 1].dst == &w->norm_out.w)
    t->entries[t->n - 1].halves_swapped = true; /* a BFL file's, under diffusers' name */
  dit_wtable_add(t, &w->proj_out.w, false, 2, (int64_t[]){c->out_channels, D}, "proj_out.weight");
}

dit_status flux2_alloc_blocks(dit_flux2 *m, dit_error *err) {
  const dit_flux2_config *c = &m->cfg;
  flux2_weights *w = &m->w;
  free(w->blocks);
  free(w->single);
  w->blocks = calloc(c->n_layers ? (size_t)c->n_layers : 1, sizeof *w->blocks);
  w->single = calloc(c->n_single_layers ? (size_t)c->n_single_layers : 1, sizeof *w->single);
  if (!w->blocks || !w->single)
    return dit_errorf(err, DIT_ERR_NOMEM, "out of memory for %d + %d blocks", c->n_layers, c->n_single_layers);
  return DIT_OK;
}

/* Lists every tensor of the allocated blocks in t. */
static void list_table(dit_flux2 *m, dit_wtable *t) {
  const dit_flux2_config *c = &m->cfg;
  flux2_weights *w = &m->w;
  add_top(t, c, w);
  for (int i = 0; i < c->n_layers; i++) add_double(t, c, &w->blocks[i], i);
  for (int i = 0; i < c->n_single_layers; i++) add_single(t, c, &w->single[i], i);
}

/* Allocates the block arrays and lists every tensor in t (the caller frees t). */
static dit_status build_table(void *model, dit_wtable *t, dit_error *err) {
  dit_wtable_init(t);
  DIT_TRY(flux2_alloc_blocks(model, err));
  list_table(model, t);
  return DIT_OK;
}

/* FLUX.2's original (BFL) module names as diffusers names, as diffusers' LoRA converter maps
 * them (_convert_non_diffusers_flux2_lora_to_diffusers): for LoRAs trained on the original
 * checkpoint (AI-Toolkit, kohya's lora_unet_double_blocks_0_img_attn_qkv). The order matters
 * both ways: a LoRA's kohya name is matched against a table name with these applied backwards
 * in reverse order (".attn.to_out.0." before ".attn.to_out."). */
static const dit_wrename flux2_bfl_renames[] = {
    FLUX_BFL_BLOCK_RENAMES,
    {".linear1.", ".attn.to_qkv_mlp_proj.", NULL},
    {".linear2.", ".attn.to_out.", NULL},
    {".img_attn.proj.", ".attn.to_out.0.", NULL},
    {".txt_attn.proj.", ".attn.to_add_out.", NULL},
    {".img_attn.qkv.", ".attn.img_qkv.", NULL},
    {".txt_attn.qkv.", ".attn.txt_qkv.", NULL},
    {".img_mlp.0.", ".ff.linear_in.", NULL},
    {".img_mlp.2.", ".ff.linear_out.", NULL},
    {".txt_mlp.0.", ".ff_context.linear_in.", NULL},
    {".txt_mlp.2.", ".ff_context.linear_out.", NULL},
    {"img_in.", "x_embedder.", NULL},
    {"txt_in.", "context_embedder.", NULL},
    {"time_in.in_layer.", "time_guidance_embed.timestep_embedder.linear_1.", NULL},
    {"time_in.out_layer.", "time_guidance_embed.timestep_embedder.linear_2.", NULL},
    {"guidance_in.in_layer.", "time_guidance_embed.guidance_embedder.linear_1.", NULL},
    {"guidance_in.out_layer.", "time_guidance_embed.guidance_embedder.linear_2.", NULL},
    {"final_layer.linear.", "proj_out.", NULL},
    {"final_layer.adaLN_modulation.1.", "norm_out.linear.", NULL},
    {"single_stream_modulation.lin.", "single_stream_modulation.linear.", NULL},
    {"double_stream_modulation_img.lin.", "double_stream_modulation_img.linear.", NULL},
    {"double_stream_modulation_txt.lin.", "double_stream_modulation_txt.linear.", NULL},
};
static const dit_wsplit flux2_bfl_splits[] = {
    {".attn.img_qkv.weight", 3, {".attn.to_q.weight", ".attn.to_k.weight", ".attn.to_v.weight"}, NULL, 0},
    {".attn.txt_qkv.weight", 3, {".attn.add_q_proj.weight", ".attn.add_k_proj.weight", ".attn.add_v_proj.weight"},
     NULL, 0},
};
#define N_BFL_RENAMES (sizeof flux2_bfl_renames / sizeof *flux2_bfl_renames)
#define N_BFL_SPLITS (sizeof flux2_bfl_splits / sizeof *flux2_bfl_splits)

/* Writing (`ditrun quantize`): BFL's names, as BFL's single files, ComfyUI, city96's GGUF
 * files and stable-diffusion.cpp have them (general.architecture "flux" for both FLUX
 * generations, as ComfyUI-GGUF names them); the final modulation with shift before scale. */
static const dit_wrename flux2_swap[] = {{"norm_out.linear.weight", "final_layer.adaLN_modulation.1.weight", NULL}};
const dit_wexport dit_flux2_export = {"flux", NULL, flux2_bfl_renames, N_BFL_RENAMES, true,
                                      flux2_bfl_splits, N_BFL_SPLITS, NULL, flux2_swap, 1};

/* True when w holds BFL's names (with ComfyUI's prefix when *pfx says so). */
static bool bfl_names(const dit_weights *w, const char **pfx) {
  static const char *const prefixes[] = {"", FLUX_COMFY_PREFIX};
  for (int i = 0; i < 2; i++) {
    char probe[96];
    snprintf(probe, sizeof probe, "%sdouble_stream_modulation_img.lin.weight", prefixes[i]);
    if (dit_weights_find(w, probe)) return *pfx = prefixes[i], true;
  }
  return false;
}

/* A single file's names as diffusers': BFL's (BFL's release, ComfyUI's, GGUF files made from
 * them, stored fused or in sd.cpp's ".weight.1" parts) renamed and split; diffusers' names
 * lose ComfyUI's prefix. */
static dit_status rename_file(dit_weights *w, dit_error *err) {
  const char *pfx = NULL;
  if (bfl_names(w, &pfx)) {
    const dit_wremap r = {pfx, flux2_bfl_renames, N_BFL_RENAMES, flux2_bfl_splits, N_BFL_SPLITS, NULL, NULL};
    return dit_weights_remap(w, &r, err);
  }
  if (!dit_weights_find(w, FLUX_COMFY_PREFIX "double_stream_modulation_img.linear.weight")) return DIT_OK;
  const dit_wremap r = {FLUX_COMFY_PREFIX, NULL, 0, NULL, 0, NULL, NULL};
  return dit_weights_remap(w, &r, err);
}

static dit_status need2(const dit_weights *w, const char *name, const char *path, const dit_st_tensor **t,
                        dit_error *err) {
  *t = dit_weights_find(w, name);
  if (!*t || (*t)->ndim != 2)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s %s (not a FLUX.2 transformer?)", path,
                      *t ? "2-D tensor expected:" : "no tensor", name);
  return DIT_OK;
}

static int count_blocks(const dit_weights *w, const char *fmt) {
  int n = 0;
  char name[DIT_WNAME_MAX];
  while (n < MAX_LAYERS && snprintf(name, sizeof name, fmt, n) < (int)sizeof name && dit_weights_find(w, name)) n++;
  return n;
}

/* The config a single file's shapes imply (names already diffusers'): FLUX.2's published
 * RoPE (four axes of 32, theta 2000) for its head size 128; another head size needs the
 * transformer's config.json. */
static dit_status config_from_shapes(const dit_weights *w, const char *path, dit_flux2_config *c, dit_error *err) {
  memset(c, 0, sizeof *c);
  const dit_st_tensor *x, *tx, *t1, *ms, *po;
  DIT_TRY(need2(w, "x_embedder.weight", path, &x, err));
  DIT_TRY(need2(w, "context_embedder.weight", path, &tx, err));
  DIT_TRY(need2(w, "time_guidance_embed.timestep_embedder.linear_1.weight", path, &t1, err));
  DIT_TRY(need2(w, "single_stream_modulation.linear.weight", path, &ms, err));
  DIT_TRY(need2(w, "proj_out.weight", path, &po, err));
  c->n_layers = count_blocks(w, "transformer_blocks.%d.attn.norm_q.weight");
  c->n_single_layers = count_blocks(w, "single_transformer_blocks.%d.attn.norm_q.weight");
  const dit_st_tensor *nq = dit_weights_find(w, c->n_layers ? "transformer_blocks.0.attn.norm_q.weight"
                                                            : "single_transformer_blocks.0.attn.norm_q.weight");
  const dit_st_tensor *ff = dit_weights_find(w, c->n_layers ? "transformer_blocks.0.ff.linear_in.weight"
                                                            : "single_transformer_blocks.0.attn.to_out.weight");
  if (!nq || nq->ndim != 1 || !ff || ff->ndim != 2)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: no blocks with q/k norms and an MLP (not a FLUX.2 transformer?)", path);
  const int64_t D = x->shape[0], hd = nq->shape[0], F = c->n_layers ? ff->shape[0] / 2 : ff->shape[1] - D;
  if (hd != 128)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED,
                      "%s: head size %lld has no published RoPE axes; give the transformer's config.json", path,
                      (long long)hd);
  if (D % hd || D / hd > MAX_HEADS || F < 1 || x->shape[1] > MAX_CHANNELS || tx->shape[1] > MAX_DIM ||
      t1->shape[1] > MAX_DIM || po->shape[0] > MAX_CHANNELS)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: inconsistent sizes (hidden %lld, head %lld, MLP %lld)", path,
                      (long long)D, (long long)hd, (long long)F);
  c->patch_size = 1;
  c->in_channels = (int)x->shape[1];
  c->out_channels = (int)po->shape[0];
  c->head_dim = (int)hd;
  c->n_heads = (int)(D / hd);
  c->joint_attention_dim = (int)tx->shape[1];
  c->t_channels = (int)t1->shape[1];
  c->mlp_ratio = (double)F / (double)D;
  c->n_axes = DIT_FLUX2_N_AXES;
  for (int i = 0; i < DIT_FLUX2_N_AXES; i++) c->axes_dims[i] = 32;
  c->rope_theta = 2000.0;
  c->eps = 1e-6f;
  c->guidance_embeds = dit_weights_find(w, "time_guidance_embed.guidance_embedder.linear_1.weight") != NULL;
  DIT_TRY(flux2_check_config(c, path, err));
  c->mlp_hidden = (int)F; /* the stored width, whatever the ratio's rounding */
  return DIT_OK;
}

/* Whether path holds BFL's names, and its config (cfg_json's, else its shapes'). */
static dit_status probe_file(const char *path, const char *cfg_json, dit_flux2_config *c, bool *bfl, dit_error *err) {
  dit_weights *w = NULL;
  DIT_TRY(dit_weights_open(path, NULL, &w, err));
  const char *pfx;
  *bfl = bfl_names(w, &pfx);
  dit_status s = cfg_json ? flux2_parse_config(cfg_json, c, err) : rename_file(w, err);
  if (s == DIT_OK && !cfg_json) s = config_from_shapes(w, path, c, err);
  dit_weights_close(w);
  return s;
}

dit_status dit_flux2_load_file(dit_backend *be, const char *path, const char *cfg_json, dit_flux2 **out,
                               dit_error *err) {
  *out = NULL;
  if (!be || !path) return dit_errorf(err, DIT_ERR_INVALID_ARG, "flux2: no backend or file given");
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return dit_flux2_load(be, path, out, err);
  dit_flux2 *m = flux2_new_model(be);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "flux2: out of memory");
  bool bfl = false;
  m->mw.rename = rename_file;
  dit_status s = probe_file(path, cfg_json, &m->cfg, &bfl, err);
  if (s == DIT_OK) s = dit_model_weights_load(be, &m->mw, "flux2", path, build_table, m, true, err);
  m->w.norm_out_shift_first = bfl;
  DIT_HAND_OVER(s, m, out, dit_flux2_free);
}

dit_status flux2_set_loras(dit_flux2 *m, void (*list)(dit_flux2 *, dit_wtable *), const dit_wremap *orig,
                           const dit_lora *l, int n, dit_error *err) {
  if (dit_lora_nothing_to_do(&m->mw, n)) return DIT_OK;
  dit_wtable t;
  dit_wtable_init(&t);
  list(m, &t);
  const bool had_terms = m->mw.n_lowrank_mem > 0;
  dit_status s = t.status != DIT_OK ? dit_errorf(err, t.status, "%s", t.err.msg)
                                    : dit_lora_apply(m->be, &t, l, n, orig, &m->mw, err);
  dit_wtable_free(&t);
  if (s == DIT_OK && (had_terms || m->mw.n_lowrank_mem)) dit_replay_clear(&m->replay, m->be); /* new term memory */
  return s;
}

dit_status dit_flux2_apply_loras(dit_flux2 *m, const dit_lora *l, int n, dit_error *err) {
  static const char *const swapped[] = FLUX_BFL_SWAPPED;
  const dit_wremap bfl = {NULL, flux2_bfl_renames, N_BFL_RENAMES, flux2_bfl_splits, N_BFL_SPLITS, NULL, swapped};
  return flux2_set_loras(m, list_table, m->cfg.variant == DIT_FLUX_2 ? &bfl : NULL, l, n, err);
}

dit_flux2 *flux2_new_model(dit_backend *be) {
  dit_flux2 *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->be = be;
  m->mw.upload = DIT_UPLOAD_F32_MATRICES_AS_BF16 | DIT_UPLOAD_FP8_COMPUTE; /* an fp32 checkpoint on a GPU; fp8 compute */
  dit_act_space_init(&m->as, be);
  return m;
}

dit_status dit_flux2_load(dit_backend *be, const char *component_dir, dit_flux2 **out, dit_error *err) {
  *out = NULL;
  if (!be || !component_dir) return dit_errorf(err, DIT_ERR_INVALID_ARG, "flux2: no backend or folder given");
  char path[4096];
  DIT_TRY(dit_model_config_path("flux2", component_dir, path, sizeof path, err));
  dit_flux2 *m = flux2_new_model(be);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "flux2: out of memory");
  dit_status s = flux2_parse_config(path, &m->cfg, err);
  if (s == DIT_OK) s = dit_model_weights_load(be, &m->mw, "flux2", component_dir, build_table, m, true, err);
  DIT_HAND_OVER(s, m, out, dit_flux2_free);
}

/* FLUX.2 [klein] 4B / 9B transformer configs (the published config.json values). */
void dit_flux2_config_klein(dit_flux2_config *c, bool nine_b) {
  memset(c, 0, sizeof *c);
  c->patch_size = 1;
  c->in_channels = 128;
  c->n_layers = nine_b ? 8 : 5;
  c->n_single_layers = nine_b ? 24 : 20;
  c->head_dim = 128;
  c->n_heads = nine_b ? 32 : 24;
  c->joint_attention_dim = nine_b ? 12288 : 7680;
  c->t_channels = 256;
  c->mlp_ratio = 3.0;
  c->n_axes = DIT_FLUX2_N_AXES;
  for (int i = 0; i < DIT_FLUX2_N_AXES; i++) c->axes_dims[i] = 32;
  c->rope_theta = 2000.0;
  c->eps = 1e-6f;
  c->guidance_embeds = false;
}

dit_status dit_flux2_create_random(dit_backend *be, const dit_flux2_config *c, dit_dtype wdt, uint64_t seed,
                                   dit_flux2 **out, dit_error *err) {
  *out = NULL;
  if (!be || !c) return dit_errorf(err, DIT_ERR_INVALID_ARG, "flux2: no backend or config given");
  dit_flux2 *m = flux2_new_model(be);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "flux2: out of memory");
  m->cfg = *c;
  dit_status s = flux2_check_sizes(c, "flux2 random config", err);
  if (s == DIT_OK) s = flux2_check_config(&m->cfg, "flux2 random config", err);
  if (s == DIT_OK) s = dit_model_weights_random(be, &m->mw, "flux2", build_table, m, wdt, seed, err);
  DIT_HAND_OVER(s, m, out, dit_flux2_free);
}

dit_status flux2_check_sizes(const dit_flux2_config *c, const char *who, dit_error *err) {
  if (c->in_channels < 1 || c->in_channels > MAX_CHANNELS || c->out_channels < 0 || c->out_channels > MAX_CHANNELS ||
      c->n_layers < 0 || c->n_layers > MAX_LAYERS || c->n_single_layers < 0 || c->n_single_layers > MAX_LAYERS ||
      c->head_dim < 2 || c->head_dim > MAX_HEAD_DIM || c->n_heads < 1 || c->n_heads > MAX_HEADS ||
      c->joint_attention_dim < 1 || c->joint_attention_dim > MAX_DIM || c->t_channels < 2 || c->t_channels > MAX_DIM ||
      c->pooled_dim < 0 || c->pooled_dim > MAX_DIM)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: a size is out of range", who);
  return DIT_OK;
}

size_t dit_flux2_weight_bytes(const dit_flux2 *m) { return m ? m->mw.wbytes : 0; }
uint64_t dit_flux2_weight_params(const dit_flux2 *m) { return m ? m->mw.wparams : 0; }

dit_status dit_flux2_set_act_dtype(dit_flux2 *m, dit_dtype dt, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "flux2: no model");
  bool changed = false;
  DIT_TRY(dit_act_space_set_dtype(&m->as, m->be, dt, "flux2", &changed, err));
  if (changed) m->rope_ok = false;
  return DIT_OK;
}

void dit_flux2_free(dit_flux2 *m) {
  if (!m) return;
  dit_replay_clear(&m->replay, m->be);
  dit_act_space_release(&m->as, m->be);
  dit_model_weights_release(m->be, &m->mw);
  free(m->rope_ids);
  free(m->view_terms);
  free(m->w.blocks);
  free(m->w.single);
  free(m);
}

void dit_flux2_graph_counts(const dit_flux2 *m, long *captures, long *launches) {
  *captures = m ? m->replay.captures : 0;
  *launches = m ? m->replay.launches : 0;
}

const dit_flux2_config *dit_flux2_get_config(const dit_flux2 *m) { return m ? &m->cfg : NULL; }

/* Z-Image transformer: reading and validating config.json, binding the checkpoint's
 * tensors to the weights struct, load and free. The forward pass is in
 * zimage_forward.c, positions and RoPE tables in zimage_rope.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/json.h"
#include "models/lora.h"
#include "models/zimage_internal.h"

#define CFG_MAX_BYTES (16u << 20)
#define MAX_DIM 65536
#define MAX_LAYERS 1024
#define MAX_HEADS 1024
#define MAX_HEAD_DIM 512
#define MAX_CHANNELS 4096
#define MAX_AXIS_LEN (1 << 20)
#define ADALN_EMBED_DIM 256
#define T_MID_DIM 1024
#define T_FREQ_DIM 256

static dit_status get_int(const json_t *j, const char *key, int64_t min, int64_t max, int *out, const char *what,
                          dit_error *err) {
  int64_t v = 0;
  DIT_TRY(dit_json_int(j, key, min, max, &v, what, err));
  *out = (int)v;
  return DIT_OK;
}

static dit_status read_fields(const json_t *j, dit_zimage_config *c, const char *what, dit_error *err) {
  DIT_TRY(dit_json_class_check(j, "ZImageTransformer2DModel", what, err));
  DIT_TRY(get_int(j, "dim", 1, MAX_DIM, &c->dim, what, err));
  DIT_TRY(get_int(j, "n_layers", 1, MAX_LAYERS, &c->n_layers, what, err));
  DIT_TRY(get_int(j, "n_refiner_layers", 0, MAX_LAYERS, &c->n_refiner_layers, what, err));
  DIT_TRY(get_int(j, "n_heads", 1, MAX_HEADS, &c->n_heads, what, err));
  DIT_TRY(get_int(j, "n_kv_heads", 1, MAX_HEADS, &c->n_kv_heads, what, err));
  DIT_TRY(get_int(j, "cap_feat_dim", 1, MAX_DIM, &c->cap_feat_dim, what, err));
  DIT_TRY(get_int(j, "in_channels", 1, MAX_CHANNELS, &c->in_channels, what, err));
  DIT_TRY(dit_json_ints_exact(j, "axes_dims", 1, MAX_HEAD_DIM, c->axes_dims, DIT_ZIMAGE_N_AXES, what, err));
  DIT_TRY(dit_json_ints_exact(j, "axes_lens", 1, MAX_AXIS_LEN, c->axes_lens, DIT_ZIMAGE_N_AXES, what, err));
  int ps[1], fps[1];
  DIT_TRY(dit_json_ints_exact(j, "all_patch_size", 1, 64, ps, 1, what, err));
  DIT_TRY(dit_json_ints_exact(j, "all_f_patch_size", 1, 64, fps, 1, what, err));
  c->patch_size = ps[0];
  c->f_patch_size = fps[0];
  double eps = 0;
  DIT_TRY(dit_json_double(j, "rope_theta", &c->rope_theta, what, err));
  DIT_TRY(dit_json_double(j, "t_scale", &c->t_scale, what, err));
  DIT_TRY(dit_json_double(j, "norm_eps", &eps, what, err));
  c->norm_eps = (float)eps;
  c->qk_norm = true;
  const json_t *q = json_object_get(j, "qk_norm");
  if (!q) return dit_errorf(err, DIT_ERR_FORMAT, "%s: missing field \"qk_norm\"", what);
  DIT_TRY(dit_json_bool_opt(j, "qk_norm", &c->qk_norm, what, err));
  const json_t *sig = json_object_get(j, "siglip_feat_dim");
  if (sig && !json_is_null(sig))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED,
                      "%s: field \"siglip_feat_dim\" is set (Z-Image Omni): only the basic model is supported", what);
  return DIT_OK;
}

/* Consistency of the sizes with each other and with what this implementation runs. */
dit_status zimage_check_config(dit_zimage_config *c, const char *what, dit_error *err) {
  if (c->patch_size != 2)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: field \"all_patch_size\" = [%d]: only [2] is supported", what,
                      c->patch_size);
  if (c->f_patch_size != 1)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: field \"all_f_patch_size\" = [%d]: only [1] is supported",
                      what, c->f_patch_size);
  if (c->dim % c->n_heads != 0)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"dim\" = %d is not divisible by \"n_heads\" = %d", what,
                      c->dim, c->n_heads);
  c->head_dim = c->dim / c->n_heads;
  if (c->head_dim > MAX_HEAD_DIM || c->head_dim % 2 != 0)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: head dim \"dim\" / \"n_heads\" = %d must be even and <= %d", what,
                      c->head_dim, MAX_HEAD_DIM);
  if (c->n_kv_heads > c->n_heads || c->n_heads % c->n_kv_heads != 0)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"n_kv_heads\" = %d must divide \"n_heads\" = %d", what,
                      c->n_kv_heads, c->n_heads);
  int sum = 0;
  for (int i = 0; i < DIT_ZIMAGE_N_AXES; i++) {
    if (c->axes_dims[i] % 2 != 0)
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"axes_dims\"[%d] = %d must be even", what, i,
                        c->axes_dims[i]);
    sum += c->axes_dims[i];
  }
  if (sum != c->head_dim)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"axes_dims\" sums to %d, expected the head dim %d (dim / n_heads)",
                      what, sum, c->head_dim);
  if (!(c->rope_theta > 0) || c->rope_theta > 1e12)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"rope_theta\" = %g must be in (0, 1e12]", what, c->rope_theta);
  if (!(c->t_scale > 0) || c->t_scale > 1e9)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"t_scale\" = %g must be in (0, 1e9]", what, c->t_scale);
  if (!(c->norm_eps > 0) || c->norm_eps > 1.0f)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"norm_eps\" = %g must be in (0, 1]", what, (double)c->norm_eps);
  c->ffn_dim = (int)((double)c->dim / 3.0 * 8.0);
  c->adaln_dim = c->dim < ADALN_EMBED_DIM ? c->dim : ADALN_EMBED_DIM;
  c->t_mid_dim = T_MID_DIM;
  c->t_freq_dim = T_FREQ_DIM;
  c->patch_dim = c->f_patch_size * c->patch_size * c->patch_size * c->in_channels;
  return DIT_OK;
}

dit_status zimage_parse_config(const char *path, dit_zimage_config *c, dit_error *err) {
  memset(c, 0, sizeof *c);
  json_t *j = NULL;
  DIT_TRY(dit_json_load_file(path, CFG_MAX_BYTES, &j, err));
  dit_status s = read_fields(j, c, path, err);
  if (s == DIT_OK) s = zimage_check_config(c, path, err);
  json_decref(j);
  return s;
}

static void add_block(dit_wtable *t, const dit_zimage_config *c, zimage_block_w *b, const char *group, int i) {
  const int64_t D = c->dim, hd = c->head_dim, Fd = c->ffn_dim;
  const int64_t dd[2] = {D, D}, d1[1] = {D}, h1[1] = {hd}, fd[2] = {Fd, D}, df[2] = {D, Fd};
  dit_wtable_add(t, &b->attention_to_q, false, 2, dd, "%s.%d.attention.to_q.weight", group, i);
  dit_wtable_share_scale_with_next(t); /* q, k, v run as one stacked GEMM (stack_weights) */
  dit_wtable_add(t, &b->attention_to_k, false, 2, dd, "%s.%d.attention.to_k.weight", group, i);
  dit_wtable_share_scale_with_next(t);
  dit_wtable_add(t, &b->attention_to_v, false, 2, dd, "%s.%d.attention.to_v.weight", group, i);
  dit_wtable_add(t, &b->attention_to_out_0, false, 2, dd, "%s.%d.attention.to_out.0.weight", group, i);
  if (c->qk_norm) {
    dit_wtable_add(t, &b->attention_norm_q, false, 1, h1, "%s.%d.attention.norm_q.weight", group, i);
    dit_wtable_add(t, &b->attention_norm_k, false, 1, h1, "%s.%d.attention.norm_k.weight", group, i);
  }
  dit_wtable_add(t, &b->attention_norm1, false, 1, d1, "%s.%d.attention_norm1.weight", group, i);
  dit_wtable_add(t, &b->attention_norm2, false, 1, d1, "%s.%d.attention_norm2.weight", group, i);
  dit_wtable_add(t, &b->ffn_norm1, false, 1, d1, "%s.%d.ffn_norm1.weight", group, i);
  dit_wtable_add(t, &b->ffn_norm2, false, 1, d1, "%s.%d.ffn_norm2.weight", group, i);
  dit_wtable_add(t, &b->feed_forward_w1, false, 2, fd, "%s.%d.feed_forward.w1.weight", group, i);
  dit_wtable_add(t, &b->feed_forward_w2, false, 2, df, "%s.%d.feed_forward.w2.weight", group, i);
  dit_wtable_add(t, &b->feed_forward_w3, false, 2, fd, "%s.%d.feed_forward.w3.weight", group, i);
  if (b->modulation) {
    const int64_t mw[2] = {4 * D, c->adaln_dim}, mb[1] = {4 * D};
    dit_wtable_add(t, &b->adaLN_modulation_0_w, false, 2, mw, "%s.%d.adaLN_modulation.0.weight", group, i);
    dit_wtable_add(t, &b->adaLN_modulation_0_b, false, 1, mb, "%s.%d.adaLN_modulation.0.bias", group, i);
  }
}

static void add_top(dit_wtable *t, const dit_zimage_config *c, zimage_weights *w) {
  const int64_t D = c->dim, A = c->adaln_dim, P = c->patch_dim, M = c->t_mid_dim, Fq = c->t_freq_dim;
  const int64_t cf = c->cap_feat_dim;
  char pk[32];
  snprintf(pk, sizeof pk, "%d-%d", c->patch_size, c->f_patch_size);
  dit_wtable_add(t, &w->t_embedder_mlp_0_w, false, 2, (int64_t[]){M, Fq}, "t_embedder.mlp.0.weight");
  dit_wtable_add(t, &w->t_embedder_mlp_0_b, false, 1, (int64_t[]){M}, "t_embedder.mlp.0.bias");
  dit_wtable_add(t, &w->t_embedder_mlp_2_w, false, 2, (int64_t[]){A, M}, "t_embedder.mlp.2.weight");
  dit_wtable_add(t, &w->t_embedder_mlp_2_b, false, 1, (int64_t[]){A}, "t_embedder.mlp.2.bias");
  dit_wtable_add(t, &w->x_embedder_w, false, 2, (int64_t[]){D, P}, "all_x_embedder.%s.weight", pk);
  dit_wtable_add(t, &w->x_embedder_b, false, 1, (int64_t[]){D}, "all_x_embedder.%s.bias", pk);
  dit_wtable_add(t, &w->cap_embedder_0_w, false, 1, (int64_t[]){cf}, "cap_embedder.0.weight");
  dit_wtable_add(t, &w->cap_embedder_1_w, false, 2, (int64_t[]){D, cf}, "cap_embedder.1.weight");
  dit_wtable_add(t, &w->cap_embedder_1_b, false, 1, (int64_t[]){D}, "cap_embedder.1.bias");
  dit_wtable_add(t, &w->x_pad_token, false, 2, (int64_t[]){1, D}, "x_pad_token");
  dit_wtable_add(t, &w->cap_pad_token, false, 2, (int64_t[]){1, D}, "cap_pad_token");
  dit_wtable_add(t, &w->final_adaLN_modulation_1_w, false, 2, (int64_t[]){D, A},
                 "all_final_layer.%s.adaLN_modulation.1.weight", pk);
  dit_wtable_add(t, &w->final_adaLN_modulation_1_b, false, 1, (int64_t[]){D},
                 "all_final_layer.%s.adaLN_modulation.1.bias", pk);
  dit_wtable_add(t, &w->final_linear_w, false, 2, (int64_t[]){P, D}, "all_final_layer.%s.linear.weight", pk);
  dit_wtable_add(t, &w->final_linear_b, false, 1, (int64_t[]){P}, "all_final_layer.%s.linear.bias", pk);
}

/* Finds the blocks whose q/k/v weights lie back to back (see attention_qkv). */
static void stack_weights(dit_zimage *m) {
  const dit_zimage_config *c = &m->cfg;
  zimage_weights *w = &m->w;
  const int nr = c->n_refiner_layers, nl = c->n_layers;
  for (int i = 0; i < 2 * nr + nl; i++) {
    zimage_block_w *b = i < nr ? &w->noise_refiner[i] : i < 2 * nr ? &w->context_refiner[i - nr] : &w->layers[i - 2 * nr];
    const dit_tensor *qkv[3] = {&b->attention_to_q, &b->attention_to_k, &b->attention_to_v};
    memset(&b->attention_qkv, 0, sizeof b->attention_qkv);
    dit_tensor_stack_rows(qkv, 3, &b->attention_qkv);
  }
}

void dit_zimage_set_stacked_qkv(dit_zimage *m, bool on) {
  if (m) m->stack_qkv = on;
}

/* Allocates the block arrays and lists every tensor in t (the caller frees t). */
static dit_status build_table(void *model, dit_wtable *t, dit_error *err) {
  dit_zimage *m = model;
  const dit_zimage_config *c = &m->cfg;
  zimage_weights *w = &m->w;
  size_t nr = (size_t)c->n_refiner_layers, nl = (size_t)c->n_layers;
  if (!w->layers) { /* a second call (dit_zimage_apply_loras) lists the bound blocks again */
    w->noise_refiner = calloc(nr ? nr : 1, sizeof *w->noise_refiner);
    w->context_refiner = calloc(nr ? nr : 1, sizeof *w->context_refiner);
    w->layers = calloc(nl, sizeof *w->layers);
  }
  dit_wtable_init(t);
  if (!w->noise_refiner || !w->context_refiner || !w->layers)
    return dit_errorf(err, DIT_ERR_NOMEM, "out of memory for %zu layers", 2 * nr + nl);
  add_top(t, c, w);
  for (int i = 0; i < c->n_refiner_layers; i++) {
    w->noise_refiner[i].modulation = true;
    add_block(t, c, &w->noise_refiner[i], "noise_refiner", i);
    w->context_refiner[i].modulation = false;
    add_block(t, c, &w->context_refiner[i], "context_refiner", i);
  }
  for (int i = 0; i < c->n_layers; i++) {
    w->layers[i].modulation = true;
    add_block(t, c, &w->layers[i], "layers", i);
  }
  return DIT_OK;
}

static dit_zimage *new_model(dit_backend *be) {
  dit_zimage *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->stack_qkv = true; /* dit_zimage_set_stacked_qkv turns it off (run option zimage_stack_qkv) */
  m->be = be;
  m->mw.upload = DIT_UPLOAD_F32_MATRICES_AS_BF16 | DIT_UPLOAD_FP8_COMPUTE; /* an fp32 checkpoint on a GPU; fp8 compute */
  dit_act_space_init(&m->as, be);
  return m;
}

/* The original checkpoint's names (Z-Image's own release, ComfyUI's single files and the
 * GGUF files made from them) as diffusers names, as diffusers' single-file converter maps
 * them: q, k and v fused in one tensor, a few modules renamed, an unused final norm. */
static const dit_wrename orig_renames[] = {
    {"final_layer.", "all_final_layer.2-1.", NULL},         {"x_embedder.", "all_x_embedder.2-1.", NULL},
    {".attention.out.", ".attention.to_out.0.", NULL},       {".attention.k_norm.", ".attention.norm_k.", NULL},
    {".attention.q_norm.", ".attention.norm_q.", NULL},
};
static const dit_wsplit orig_splits[] = {
    {".attention.qkv.weight", 3, {".attention.to_q.weight", ".attention.to_k.weight", ".attention.to_v.weight"},
     NULL, 0},
};
static const char *const orig_drop[] = {"norm_final.weight", NULL};

/* Writing: the same tables backwards. */
const dit_wexport dit_zimage_export = {"lumina2", NULL, orig_renames, sizeof orig_renames / sizeof *orig_renames,
                                       true, orig_splits, 1, NULL, NULL, 0};

static dit_status rename_original(dit_weights *w, dit_error *err) {
  static const char *const prefixes[] = {"", "model.diffusion_model."};
  for (int i = 0; i < 2; i++) {
    char probe[96];
    snprintf(probe, sizeof probe, "%slayers.0.attention.qkv.weight", prefixes[i]);
    if (!dit_weights_find(w, probe)) continue;
    dit_wremap r = {prefixes[i], orig_renames, sizeof orig_renames / sizeof *orig_renames, orig_splits, 1, orig_drop,
                    NULL};
    return dit_weights_remap(w, &r, err);
  }
  /* diffusers' names, perhaps with the prefix */
  if (dit_weights_find(w, "model.diffusion_model.layers.0.attention.to_q.weight")) {
    dit_wremap r = {"model.diffusion_model.", NULL, 0, NULL, 0, NULL, NULL};
    return dit_weights_remap(w, &r, err);
  }
  return DIT_OK;
}

dit_status dit_zimage_load_from(dit_backend *be, const char *weights, const char *config_json, dit_zimage **out,
                                dit_error *err) {
  *out = NULL;
  if (!be || !weights || !config_json)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "zimage: no backend, weights or config given");
  dit_zimage *m = new_model(be);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "zimage: out of memory");
  m->mw.rename = rename_original;
  dit_status s = zimage_parse_config(config_json, &m->cfg, err);
  if (s == DIT_OK) s = dit_model_weights_load(be, &m->mw, "zimage", weights, build_table, m, false, err);
  if (s == DIT_OK) stack_weights(m);
  DIT_HAND_OVER(s, m, out, dit_zimage_free);
}

dit_status dit_zimage_apply_loras(dit_zimage *m, const dit_lora *l, int n, dit_error *err) {
  if (dit_lora_nothing_to_do(&m->mw, n)) return DIT_OK;
  dit_wtable t;
  dit_status s = build_table(m, &t, err);
  const dit_wremap orig = {NULL, orig_renames, sizeof orig_renames / sizeof *orig_renames, orig_splits, 1, NULL,
                           NULL};
  if (s == DIT_OK && t.status != DIT_OK) s = dit_errorf(err, t.status, "%s", t.err.msg);
  const bool had_terms = m->mw.n_lowrank_mem > 0;
  if (s == DIT_OK) s = dit_lora_apply(m->be, &t, l, n, &orig, &m->mw, err);
  dit_wtable_free(&t);
  if (s == DIT_OK) stack_weights(m); /* q, k, v may no longer lie back to back */
  if (s == DIT_OK && (had_terms || m->mw.n_lowrank_mem)) dit_replay_clear(&m->replay, m->be); /* new term memory */
  return s;
}

dit_status dit_zimage_load(dit_backend *be, const char *component_dir, dit_zimage **out, dit_error *err) {
  *out = NULL;
  if (!be || !component_dir) return dit_errorf(err, DIT_ERR_INVALID_ARG, "zimage: no backend or folder given");
  char path[4096];
  DIT_TRY(dit_model_config_path("zimage", component_dir, path, sizeof path, err));
  return dit_zimage_load_from(be, component_dir, path, out, err);
}

dit_status dit_zimage_load_file(dit_backend *be, const char *path, const char *cfg_json, dit_zimage **out,
                                dit_error *err) {
  struct stat st;
  if (path && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return dit_zimage_load(be, path, out, err);
  *out = NULL;
  if (path && !cfg_json)
    return dit_errorf(err, DIT_ERR_INVALID_ARG,
                      "%s: a single Z-Image transformer file needs the model folder's transformer/config.json", path);
  return dit_zimage_load_from(be, path, cfg_json, out, err);
}

void dit_zimage_config_turbo(dit_zimage_config *c) {
  memset(c, 0, sizeof *c);
  c->dim = 3840;
  c->n_layers = 30;
  c->n_refiner_layers = 2;
  c->n_heads = 30;
  c->n_kv_heads = 30;
  c->cap_feat_dim = 2560;
  c->in_channels = 16;
  c->axes_dims[0] = 32, c->axes_dims[1] = 48, c->axes_dims[2] = 48;
  c->axes_lens[0] = 1536, c->axes_lens[1] = 512, c->axes_lens[2] = 512;
  c->rope_theta = 256.0;
  c->t_scale = 1000.0;
  c->norm_eps = 1e-5f;
  c->qk_norm = true;
  c->patch_size = 2;
  c->f_patch_size = 1;
}

dit_status dit_zimage_create_random(dit_backend *be, const dit_zimage_config *c, dit_dtype wdt, uint64_t seed,
                                    dit_zimage **out, dit_error *err) {
  *out = NULL;
  if (!be || !c) return dit_errorf(err, DIT_ERR_INVALID_ARG, "zimage: no backend or config given");
  dit_zimage *m = new_model(be);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "zimage: out of memory");
  m->cfg = *c;
  dit_status s = DIT_OK;
  if (c->dim < 1 || c->dim > MAX_DIM || c->n_layers < 1 || c->n_layers > MAX_LAYERS || c->n_refiner_layers < 0 ||
      c->n_refiner_layers > MAX_LAYERS || c->n_heads < 1 || c->n_heads > MAX_HEADS || c->n_kv_heads < 1 ||
      c->cap_feat_dim < 1 || c->cap_feat_dim > MAX_DIM || c->in_channels < 1 || c->in_channels > MAX_CHANNELS)
    s = dit_errorf(err, DIT_ERR_INVALID_ARG, "zimage random config: a size is out of range");
  for (int i = 0; s == DIT_OK && i < DIT_ZIMAGE_N_AXES; i++)
    if (c->axes_dims[i] < 1 || c->axes_lens[i] < 1 || c->axes_lens[i] > MAX_AXIS_LEN)
      s = dit_errorf(err, DIT_ERR_INVALID_ARG, "zimage random config: axis %d dims/lens out of range", i);
  if (s == DIT_OK) s = zimage_check_config(&m->cfg, "zimage random config", err);
  if (s == DIT_OK) s = dit_model_weights_random(be, &m->mw, "zimage", build_table, m, wdt, seed, err);
  if (s == DIT_OK) stack_weights(m);
  DIT_HAND_OVER(s, m, out, dit_zimage_free);
}

dit_status dit_zimage_set_act_dtype(dit_zimage *m, dit_dtype dt, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "zimage: no model");
  bool changed = false;
  DIT_TRY(dit_act_space_set_dtype(&m->as, m->be, dt, "zimage", &changed, err));
  if (changed) m->tables_ok = false;
  return DIT_OK;
}

size_t dit_zimage_weight_bytes(const dit_zimage *m) { return m ? m->mw.wbytes : 0; }
uint64_t dit_zimage_weight_params(const dit_zimage *m) { return m ? m->mw.wparams : 0; }

void dit_zimage_free(dit_zimage *m) {
  if (!m) return;
  dit_replay_clear(&m->replay, m->be);
  dit_act_space_release(&m->as, m->be);
  dit_model_weights_release(m->be, &m->mw);
  free(m->tab_items);
  free(m->w.noise_refiner);
  free(m->w.context_refiner);
  free(m->w.layers);
  free(m);
}

const dit_zimage_config *dit_zimage_get_config(const dit_zimage *m) { return m ? &m->cfg : NULL; }

void dit_zimage_graph_counts(const dit_zimage *m, long *captures, long *launches) {
  *captures = m ? m->replay.captures : 0;
  *launches = m ? m->replay.launches : 0;
}

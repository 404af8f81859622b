/* Krea 2 transformer: config.json, the weight table, load and free (see krea2.h). The forward
 * is in krea2_forward.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/dtype.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "models/krea2_internal.h"

#define CFG_MAX_BYTES (16u << 20)
#define MAX_DIM 65536
#define MAX_LAYERS 1024
#define MAX_HEADS 1024
#define MAX_HEAD_DIM 512

static dit_status read_fields(const json_t *j, dit_krea2_config *c, const char *what, dit_error *err) {
  DIT_TRY(dit_json_class_check(j, "Krea2Transformer2DModel", what, err));
  const dit_json_int_field f[] = {
      {"in_channels", 1, MAX_DIM, 64, &c->in_channels, NULL},
      {"num_layers", 1, MAX_LAYERS, 28, &c->n_layers, NULL},
      {"attention_head_dim", 2, MAX_HEAD_DIM, 128, &c->head_dim, NULL},
      {"num_attention_heads", 1, MAX_HEADS, 48, &c->n_heads, NULL},
      {"num_key_value_heads", 1, MAX_HEADS, 12, &c->n_kv_heads, NULL},
      {"intermediate_size", 1, 1 << 20, 16384, &c->ffn_dim, NULL},
      {"timestep_embed_dim", 2, MAX_DIM, 256, &c->t_embed_dim, NULL},
      {"text_hidden_dim", 1, MAX_DIM, 2560, &c->text_dim, NULL},
      {"num_text_layers", 1, 1024, 12, &c->n_taps, NULL},
      {"text_num_attention_heads", 1, MAX_HEADS, 20, &c->text_heads, NULL},
      {"text_num_key_value_heads", 1, MAX_HEADS, 20, &c->text_kv_heads, NULL},
      {"text_intermediate_size", 1, 1 << 20, 6912, &c->text_ffn_dim, NULL},
      {"num_layerwise_text_blocks", 0, MAX_LAYERS, 2, &c->n_layerwise, NULL},
      {"num_refiner_text_blocks", 0, MAX_LAYERS, 2, &c->n_refiner, NULL},
  };
  DIT_TRY(dit_json_int_fields(j, f, sizeof f / sizeof *f, what, err));
  const int def_axes[DIT_KREA2_N_AXES] = {32, 48, 48};
  memcpy(c->axes_dims, def_axes, sizeof def_axes);
  const json_t *a = json_object_get(j, "axes_dims_rope");
  if (a && !json_is_null(a))
    DIT_TRY(dit_json_ints_exact(j, "axes_dims_rope", 0, MAX_HEAD_DIM, c->axes_dims, DIT_KREA2_N_AXES, what, err));
  c->rope_theta = 1000.0;
  DIT_TRY(dit_json_double_opt(j, "rope_theta", &c->rope_theta, what, err));
  double eps = 1e-5;
  DIT_TRY(dit_json_double_opt(j, "norm_eps", &eps, what, err));
  c->eps = (float)eps;
  return DIT_OK;
}

/* Consistency of the sizes (errors name the fields) and the derived ones. */
static dit_status check_config(dit_krea2_config *c, const char *what, dit_error *err) {
  if (c->n_heads % c->n_kv_heads != 0)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: num_attention_heads = %d is not divisible by num_key_value_heads = %d",
                      what, c->n_heads, c->n_kv_heads);
  if (c->text_heads % c->text_kv_heads != 0)
    return dit_errorf(err, DIT_ERR_FORMAT,
                      "%s: text_num_attention_heads = %d is not divisible by text_num_key_value_heads = %d", what,
                      c->text_heads, c->text_kv_heads);
  if (c->text_dim % c->text_heads != 0)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: text_hidden_dim = %d is not divisible by text_num_attention_heads = %d",
                      what, c->text_dim, c->text_heads);
  if (c->head_dim % 2 != 0)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: attention_head_dim = %d must be even", what, c->head_dim);
  if (c->t_embed_dim % 2 != 0)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: timestep_embed_dim = %d must be even", what, c->t_embed_dim);
  int sum = 0;
  for (int i = 0; i < DIT_KREA2_N_AXES; i++) {
    if (c->axes_dims[i] % 2 != 0)
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: axes_dims_rope[%d] = %d must be even", what, i, c->axes_dims[i]);
    sum += c->axes_dims[i];
  }
  if (sum != c->head_dim)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: axes_dims_rope sums to %d, expected attention_head_dim = %d", what, sum,
                      c->head_dim);
  if ((int64_t)c->n_heads * c->head_dim > MAX_DIM)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: num_attention_heads x attention_head_dim = %lld is too large", what,
                      (long long)c->n_heads * c->head_dim);
  if (!(c->rope_theta > 0) || c->rope_theta > 1e12)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: rope_theta = %g must be in (0, 1e12]", what, c->rope_theta);
  if (!(c->eps > 0) || c->eps > 0.1f)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: norm_eps = %g must be in (0, 0.1]", what, (double)c->eps);
  c->dim = c->n_heads * c->head_dim;
  c->text_head_dim = c->text_dim / c->text_heads;
  return DIT_OK;
}

static dit_status parse_config(const char *path, dit_krea2_config *c, dit_error *err) {
  memset(c, 0, sizeof *c);
  json_t *j = NULL;
  DIT_TRY(dit_json_load_file(path, CFG_MAX_BYTES, &j, err));
  dit_status s = read_fields(j, c, path, err);
  if (s == DIT_OK) s = check_config(c, path, err);
  json_decref(j);
  return s;
}

/* A block of width D, hd per head, Hq / Hkv heads, MLP width F under prefix "<group>.<i>.". */
static void add_block(dit_wtable *t, krea2_block_w *b, int64_t D, int64_t hd, int64_t Hq, int64_t Hkv, int64_t F,
                      bool table, const char *group, int i) {
  const int64_t d1[1] = {D}, h1[1] = {hd};
  dit_wtable_add(t, &b->norm1, false, 1, d1, "%s.%d.norm1.weight", group, i);
  dit_wtable_add(t, &b->norm2, false, 1, d1, "%s.%d.norm2.weight", group, i);
  dit_wtable_add(t, &b->attn.to_q, false, 2, (int64_t[]){Hq * hd, D}, "%s.%d.attn.to_q.weight", group, i);
  dit_wtable_add(t, &b->attn.to_k, false, 2, (int64_t[]){Hkv * hd, D}, "%s.%d.attn.to_k.weight", group, i);
  dit_wtable_add(t, &b->attn.to_v, false, 2, (int64_t[]){Hkv * hd, D}, "%s.%d.attn.to_v.weight", group, i);
  dit_wtable_add(t, &b->attn.to_gate, false, 2, (int64_t[]){D, D}, "%s.%d.attn.to_gate.weight", group, i);
  dit_wtable_add(t, &b->attn.to_out, false, 2, (int64_t[]){D, D}, "%s.%d.attn.to_out.0.weight", group, i);
  dit_wtable_add(t, &b->attn.norm_q, false, 1, h1, "%s.%d.attn.norm_q.weight", group, i);
  dit_wtable_add(t, &b->attn.norm_k, false, 1, h1, "%s.%d.attn.norm_k.weight", group, i);
  dit_wtable_add(t, &b->ff_gate, false, 2, (int64_t[]){F, D}, "%s.%d.ff.gate.weight", group, i);
  dit_wtable_add(t, &b->ff_up, false, 2, (int64_t[]){F, D}, "%s.%d.ff.up.weight", group, i);
  dit_wtable_add(t, &b->ff_down, false, 2, (int64_t[]){D, F}, "%s.%d.ff.down.weight", group, i);
  if (table) dit_wtable_add(t, &b->table, false, 2, (int64_t[]){6, D}, "%s.%d.scale_shift_table", group, i);
}

static void add_top(dit_wtable *t, const dit_krea2_config *c, krea2_weights *w) {
  const int64_t D = c->dim, C = c->in_channels, E = c->t_embed_dim, td = c->text_dim;
  dit_wtable_add(t, &w->img_in_w, false, 2, (int64_t[]){D, C}, "img_in.weight");
  dit_wtable_add(t, &w->img_in_b, false, 1, (int64_t[]){D}, "img_in.bias");
  dit_wtable_add(t, &w->time_1_w, false, 2, (int64_t[]){D, E}, "time_embed.linear_1.weight");
  dit_wtable_add(t, &w->time_1_b, false, 1, (int64_t[]){D}, "time_embed.linear_1.bias");
  dit_wtable_add(t, &w->time_2_w, false, 2, (int64_t[]){D, D}, "time_embed.linear_2.weight");
  dit_wtable_add(t, &w->time_2_b, false, 1, (int64_t[]){D}, "time_embed.linear_2.bias");
  dit_wtable_add(t, &w->mod_w, false, 2, (int64_t[]){6 * D, D}, "time_mod_proj.weight");
  dit_wtable_add(t, &w->mod_b, false, 1, (int64_t[]){6 * D}, "time_mod_proj.bias");
  dit_wtable_add(t, &w->projector, false, 2, (int64_t[]){1, c->n_taps}, "text_fusion.projector.weight");
  dit_wtable_add(t, &w->txt_norm, false, 1, (int64_t[]){td}, "txt_in.norm.weight");
  dit_wtable_add(t, &w->txt_1_w, false, 2, (int64_t[]){D, td}, "txt_in.linear_1.weight");
  dit_wtable_add(t, &w->txt_1_b, false, 1, (int64_t[]){D}, "txt_in.linear_1.bias");
  dit_wtable_add(t, &w->txt_2_w, false, 2, (int64_t[]){D, D}, "txt_in.linear_2.weight");
  dit_wtable_add(t, &w->txt_2_b, false, 1, (int64_t[]){D}, "txt_in.linear_2.bias");
  dit_wtable_add(t, &w->final_table, false, 2, (int64_t[]){2, D}, "final_layer.scale_shift_table");
  dit_wtable_add(t, &w->final_norm, false, 1, (int64_t[]){D}, "final_layer.norm.weight");
  dit_wtable_add(t, &w->final_w, false, 2, (int64_t[]){C, D}, "final_layer.linear.weight");
  dit_wtable_add(t, &w->final_b, false, 1, (int64_t[]){C}, "final_layer.linear.bias");
}

static dit_status build_table(void *model, dit_wtable *t, dit_error *err) {
  dit_krea2 *m = model;
  const dit_krea2_config *c = &m->cfg;
  krea2_weights *w = &m->w;
  dit_wtable_init(t);
  if (!w->blocks) {
    w->layerwise = calloc((size_t)c->n_layerwise + 1, sizeof *w->layerwise);
    w->refiner = calloc((size_t)c->n_refiner + 1, sizeof *w->refiner);
    w->blocks = calloc((size_t)c->n_layers, sizeof *w->blocks);
  }
  if (!w->layerwise || !w->refiner || !w->blocks)
    return dit_errorf(err, DIT_ERR_NOMEM, "out of memory for %d blocks", c->n_layers);
  add_top(t, c, w);
  const int64_t td = c->text_dim, thd = c->text_head_dim;
  for (int i = 0; i < c->n_layerwise; i++)
    add_block(t, &w->layerwise[i], td, thd, c->text_heads, c->text_kv_heads, c->text_ffn_dim, false,
              "text_fusion.layerwise_blocks", i);
  for (int i = 0; i < c->n_refiner; i++)
    add_block(t, &w->refiner[i], td, thd, c->text_heads, c->text_kv_heads, c->text_ffn_dim, false,
              "text_fusion.refiner_blocks", i);
  for (int i = 0; i < c->n_layers; i++)
    add_block(t, &w->blocks[i], c->dim, c->head_dim, c->n_heads, c->n_kv_heads, c->ffn_dim, true,
              "transformer_blocks", i);
  return DIT_OK;
}

/* Every Krea2RMSNorm weight of the model, n of them into list (NULL: count only). */
static size_t list_norms(dit_krea2 *m, dit_tensor **list) {
  const dit_krea2_config *c = &m->cfg;
  krea2_weights *w = &m->w;
  size_t n = 0;
#define NORM(t)             \
  do {                      \
    if (list) list[n] = &t; \
    n++;                    \
  } while (0)
  NORM(w->txt_norm);
  NORM(w->final_norm);
  for (int g = 0; g < 3; g++) {
    krea2_block_w *b = g == 0 ? w->layerwise : g == 1 ? w->refiner : w->blocks;
    const int nb = g == 0 ? c->n_layerwise : g == 1 ? c->n_refiner : c->n_layers;
    for (int i = 0; i < nb; i++) {
      NORM(b[i].norm1);
      NORM(b[i].norm2);
      NORM(b[i].attn.norm_q);
      NORM(b[i].attn.norm_k);
    }
  }
#undef NORM
  return n;
}

/* Krea2RMSNorm scales by 1 + weight (computed in float32 by the reference): each norm's
 * 1 + weight is written once, F32, into one backend block, and its tensor points there. */
static dit_status make_norms(dit_krea2 *m, dit_error *err) {
  dit_backend *be = m->be;
  const size_t n = list_norms(m, NULL);
  dit_tensor **list = calloc(n, sizeof *list);
  if (!list) return dit_errorf(err, DIT_ERR_NOMEM, "krea2: out of memory");
  list_norms(m, list);
  size_t total = 0, most = 0;
  for (size_t i = 0; i < n; i++) {
    const size_t e = (size_t)dit_tensor_numel(list[i]);
    total += (e + 15) / 16 * 16;
    if (e > most) most = e;
  }
  float *host = malloc(most * (sizeof(float) + 8));
  dit_status s = host ? be->ops->alloc(be, total * sizeof(float), &m->norms, err)
                      : dit_errorf(err, DIT_ERR_NOMEM, "krea2: out of memory");
  size_t off = 0;
  for (size_t i = 0; s == DIT_OK && i < n; i++) {
    dit_tensor *t = list[i];
    const size_t e = (size_t)dit_tensor_numel(t);
    if (t->dtype != DIT_F32 && t->dtype != DIT_BF16 && t->dtype != DIT_F16) {
      s = dit_errorf(err, DIT_ERR_UNSUPPORTED, "krea2: norm weight %zu is not F32, BF16 or F16", i);
      break;
    }
    void *raw = (char *)host + most * sizeof(float); /* room for e elements of up to 8 bytes */
    s = be->ops->download(be, raw, t->data, dit_tensor_nbytes(t), err);
    if (s != DIT_OK) break;
    dit_convert_to_f32(host, raw, t->dtype, e);
    for (size_t k = 0; k < e; k++) host[k] += 1.0f;
    void *dst = (char *)m->norms + off * sizeof(float);
    s = be->ops->upload(be, dst, host, e * sizeof(float), err);
    dit_tensor nt = dit_tensor_make(DIT_F32, dst, t->ndim, t->shape);
    nt.device = dit_backend_device(be);
    *t = nt;
    off += (e + 15) / 16 * 16;
  }
  if (s == DIT_OK) s = be->ops->sync(be, err);
  free(host);
  free(list);
  return s;
}

void dit_krea2_config_default(dit_krea2_config *c) {
  json_t *empty = json_object();
  dit_error e = {0};
  memset(c, 0, sizeof *c);
  if (empty && read_fields(empty, c, "krea2 defaults", &e) == DIT_OK) check_config(c, "krea2 defaults", &e);
  json_decref(empty);
}

dit_status dit_krea2_create_random(dit_backend *be, const dit_krea2_config *c, dit_dtype wdt, uint64_t seed,
                                   dit_krea2 **out, dit_error *err) {
  *out = NULL;
  if (!be || !c) return dit_errorf(err, DIT_ERR_INVALID_ARG, "krea2: no backend or config given");
  dit_krea2 *m = calloc(1, sizeof *m);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "krea2: out of memory");
  m->be = be;
  m->cfg = *c;
  dit_act_space_init(&m->as, be);
  dit_status s = DIT_OK;
  if (c->in_channels < 1 || c->n_layers < 1 || c->n_layers > MAX_LAYERS || c->head_dim < 2 ||
      c->head_dim > MAX_HEAD_DIM || c->n_heads < 1 || c->n_kv_heads < 1 || c->ffn_dim < 1 || c->t_embed_dim < 2 ||
      c->text_dim < 1 || c->n_taps < 1 || c->text_heads < 1 || c->text_kv_heads < 1 || c->text_ffn_dim < 1 ||
      c->n_layerwise < 0 || c->n_refiner < 0)
    s = dit_errorf(err, DIT_ERR_INVALID_ARG, "krea2 random config: a size is out of range");
  if (s == DIT_OK) s = check_config(&m->cfg, "krea2 random config", err);
  if (s == DIT_OK) s = dit_model_weights_random(be, &m->mw, "krea2", build_table, m, wdt, seed, err);
  if (s == DIT_OK) s = make_norms(m, err);
  DIT_HAND_OVER(s, m, out, dit_krea2_free);
}

/* config_json NULL: the defaults (the released model's geometry). */
static dit_status load_with(dit_backend *be, const char *weights, const char *config_json, dit_krea2 **out,
                            dit_error *err) {
  *out = NULL;
  if (!be || !weights) return dit_errorf(err, DIT_ERR_INVALID_ARG, "krea2: no backend or weights given");
  dit_krea2 *m = calloc(1, sizeof *m);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "krea2: out of memory");
  m->be = be;
  m->mw.upload = DIT_UPLOAD_F32_MATRICES_AS_BF16;
  dit_act_space_init(&m->as, be);
  dit_status s = DIT_OK;
  if (config_json) {
    s = parse_config(config_json, &m->cfg, err);
  } else {
    json_t *empty = json_object();
    s = empty ? read_fields(empty, &m->cfg, "krea2 defaults", err) : dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
    if (s == DIT_OK) s = check_config(&m->cfg, "krea2 defaults", err);
    json_decref(empty);
  }
  if (s == DIT_OK) s = dit_model_weights_load(be, &m->mw, "krea2", weights, build_table, m, true, err);
  if (s == DIT_OK) s = make_norms(m, err);
  DIT_HAND_OVER(s, m, out, dit_krea2_free);
}

dit_status dit_krea2_load_from(dit_backend *be, const char *weights, const char *config_json, dit_krea2 **out,
                               dit_error *err) {
  *out = NULL;
  if (!config_json) return dit_errorf(err, DIT_ERR_INVALID_ARG, "krea2: no config given");
  return load_with(be, weights, config_json, out, err);
}

dit_status dit_krea2_load_file(dit_backend *be, const char *path, const char *cfg_json, dit_krea2 **out,
                               dit_error *err) {
  struct stat st;
  if (path && !cfg_json && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return dit_krea2_load(be, path, out, err);
  return load_with(be, path, cfg_json, out, err);
}

dit_status dit_krea2_load(dit_backend *be, const char *component_dir, dit_krea2 **out, dit_error *err) {
  *out = NULL;
  if (!be || !component_dir) return dit_errorf(err, DIT_ERR_INVALID_ARG, "krea2: no backend or folder given");
  char path[4096];
  DIT_TRY(dit_model_config_path("krea2", component_dir, path, sizeof path, err));
  return dit_krea2_load_from(be, component_dir, path, out, err);
}

void dit_krea2_free(dit_krea2 *m) {
  if (!m) return;
  dit_replay_clear(&m->replay, m->be);
  free(m->rope_key);
  dit_act_space_release(&m->as, m->be);
  if (m->norms) m->be->ops->free(m->be, m->norms);
  dit_model_weights_release(m->be, &m->mw);
  free(m->w.layerwise);
  free(m->w.refiner);
  free(m->w.blocks);
  free(m);
}

const dit_krea2_config *dit_krea2_get_config(const dit_krea2 *m) { return m ? &m->cfg : NULL; }
size_t dit_krea2_weight_bytes(const dit_krea2 *m) { return m ? m->mw.wbytes : 0; }
uint64_t dit_krea2_weight_params(const dit_krea2 *m) { return m ? m->mw.wparams : 0; }

void dit_krea2_graph_counts(const dit_krea2 *m, long *captures, long *launches) {
  *captures = m ? m->replay.captures : 0;
  *launches = m ? m->replay.launches : 0;
}

/* MiniMax-H3 transformer: config.json, the weight table, load and free (see minimax_h3.h). The
 * forward is in minimax_h3_forward.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/splitmix.h"
#include "io/json.h"
#include "models/minimax_h3_internal.h"

#define CFG_MAX_BYTES (16u << 20)
#define MAX_DIM 65536
#define MAX_LAYERS 1024

/* The sizes read_config (or a random model's caller) gave that the forward cannot take, then the derived fields. */
static dit_status check_config(dit_h3_config *c, const char *what, dit_error *err) {
  if (6 * c->rope_freq_dim > c->head_dim)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: rope_freq_dim %d rotates %d channels, more than attention_head_dim %d",
                      what, c->rope_freq_dim, 6 * c->rope_freq_dim, c->head_dim);
  if (c->freq_dim % 2)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: freq_dim %d is odd", what, c->freq_dim);
  if (!(c->rope_theta > 1.0))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: rope_theta %g is not above 1", what, c->rope_theta);
  c->patch_dim = c->in_channels * c->patch[0] * c->patch[1] * c->patch[2];
  return DIT_OK;
}

/* The fields with diffusers' defaults (the released geometry), under diffusers' names or the release's
 * (both present: they must agree), then the derived ones. */
static dit_status read_config(const json_t *j, dit_h3_config *c, const char *what, dit_error *err) {
  DIT_TRY(dit_json_class_check(j, "MiniMaxH3Transformer3DModel", what, err));
  const dit_json_int_field f[] = {
      {"num_attention_heads", 1, 1024, 56, &c->heads, NULL},
      {"attention_head_dim", 2, 512, 128, &c->head_dim, NULL},
      {"hidden_size", 1, MAX_DIM, 5376, &c->hidden, NULL},
      {"num_layers", 1, MAX_LAYERS, 50, &c->layers, NULL},
      {"num_refiner_layers", 0, MAX_LAYERS, 2, &c->refiner_layers, "token_refiner_num_layers"},
      {"ffn_dim", 1, 1 << 20, 14336, &c->ffn, "ffn_hidden_size"},
      {"in_channels", 1, 4096, 24, &c->in_channels, "latents_dim"},
      {"audio_in_channels", 1, 4096, 32, &c->audio_channels, "audio_latents_dim"},
      {"text_dim", 1, MAX_DIM, 5120, &c->text_dim, NULL},
      {"freq_dim", 2, 8192, 256, &c->freq_dim, "timestep_input_dim"},
      {"time_embed_hidden_dim", 1, MAX_DIM, 5376, &c->time_hidden, "time_embed_hidden_size"},
      {"time_embed_dim", 1, MAX_DIM, 2688, &c->time_dim, NULL},
      {"rope_freq_dim", 1, 256, 16, &c->rope_freq_dim, "rope_inv_freq_len"},
  };
  DIT_TRY(dit_json_int_fields(j, f, sizeof f / sizeof *f, what, err));
  c->patch[0] = 1, c->patch[1] = c->patch[2] = 2;
  const json_t *p = json_object_get(j, "patch_size");
  if (p && !json_is_null(p)) DIT_TRY(dit_json_ints_exact(j, "patch_size", 1, 16, c->patch, 3, what, err));
  c->rope_theta = 10000.0;
  DIT_TRY(dit_json_double_opt(j, "rope_theta", &c->rope_theta, what, err));
  double e[3] = {1e-5, 1e-5, 1e-5};
  DIT_TRY(dit_json_double_opt(j, "norm_eps", &e[0], what, err));
  DIT_TRY(dit_json_double_opt(j, "qk_norm_eps", &e[1], what, err));
  DIT_TRY(dit_json_double_opt(j, "final_norm_eps", &e[2], what, err));
  c->norm_eps = (float)e[0], c->qk_norm_eps = (float)e[1], c->final_norm_eps = (float)e[2];
  return check_config(c, what, err);
}

static void add_block(dit_wtable *t, h3_block_w *b, const dit_h3_config *c, bool swapped_ff, const char *group, int i) {
  const int64_t H = c->hidden, I = (int64_t)c->heads * c->head_dim, F = c->ffn;
  dit_wtable_add(t, &b->norm1, false, 1, (int64_t[]){H}, "%s.%d.norm1.weight", group, i);
  dit_wtable_add(t, &b->norm2, false, 1, (int64_t[]){H}, "%s.%d.norm2.weight", group, i);
  dit_wtable_add(t, &b->attn.to_q, false, 2, (int64_t[]){I, H}, "%s.%d.attn.to_q.weight", group, i);
  dit_wtable_add(t, &b->attn.to_k, false, 2, (int64_t[]){I, H}, "%s.%d.attn.to_k.weight", group, i);
  dit_wtable_add(t, &b->attn.to_v, false, 2, (int64_t[]){I, H}, "%s.%d.attn.to_v.weight", group, i);
  dit_wtable_add(t, &b->attn.to_out, false, 2, (int64_t[]){H, I}, "%s.%d.attn.to_out.0.weight", group, i);
  dit_wtable_add(t, &b->attn.norm_q, false, 1, (int64_t[]){c->head_dim}, "%s.%d.attn.norm_q.weight", group, i);
  dit_wtable_add(t, &b->attn.norm_k, false, 1, (int64_t[]){c->head_dim}, "%s.%d.attn.norm_k.weight", group, i);
  dit_wtable_add(t, &b->ff_in, false, 2, (int64_t[]){2 * F, H}, "%s.%d.ff.net.0.proj.weight", group, i);
  if (swapped_ff && t->n && t->entries[t->n - 1].dst == &b->ff_in)
    t->entries[t->n - 1].halves_swapped = true; /* the release's [gate; value] under diffusers' name */
  dit_wtable_add(t, &b->ff_down, false, 2, (int64_t[]){H, F}, "%s.%d.ff.net.2.weight", group, i);
}

static void add_linear(dit_wtable *t, dit_tensor *w, dit_tensor *b, int64_t n, int64_t k, const char *name) {
  dit_wtable_add(t, w, false, 2, (int64_t[]){n, k}, "%s.weight", name);
  dit_wtable_add(t, b, false, 1, (int64_t[]){n}, "%s.bias", name);
}

static dit_status build_table(void *model, dit_wtable *t, dit_error *err) {
  dit_h3 *m = model;
  const dit_h3_config *c = &m->cfg;
  h3_weights *w = &m->w;
  dit_wtable_init(t);
  if (!w->blocks) {
    w->refiner = calloc((size_t)c->refiner_layers + 1, sizeof *w->refiner);
    w->blocks = calloc((size_t)c->layers, sizeof *w->blocks);
  }
  if (!w->refiner || !w->blocks) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory for %d blocks", c->layers);
  const int64_t H = c->hidden;
  add_linear(t, &w->proj_in_w, &w->proj_in_b, H, c->patch_dim, "proj_in");
  add_linear(t, &w->aproj_in_w, &w->aproj_in_b, H, c->audio_channels, "audio_proj_in");
  add_linear(t, &w->ctx_w, &w->ctx_b, H, c->text_dim, "context_embedder");
  add_linear(t, &w->t1_w, &w->t1_b, c->time_hidden, c->freq_dim, "time_embedder.linear_1");
  add_linear(t, &w->t2_w, &w->t2_b, c->time_dim, c->time_hidden, "time_embedder.linear_2");
  dit_wtable_add(t, &w->refiner_norm, false, 1, (int64_t[]){H}, "token_refiner.final_norm.weight");
  dit_wtable_add(t, &w->out_norm, false, 1, (int64_t[]){H}, "norm_out.norm.weight");
  add_linear(t, &w->out_w, &w->out_b, 2 * H, c->time_dim, "norm_out.linear");
  add_linear(t, &w->proj_out_w, &w->proj_out_b, c->patch_dim, H, "proj_out");
  add_linear(t, &w->aproj_out_w, &w->aproj_out_b, c->audio_channels, H, "audio_proj_out");
  const bool sw = m->release_names;
  for (int i = 0; i < c->refiner_layers; i++) add_block(t, &w->refiner[i], c, sw, "token_refiner.refiner_blocks", i);
  for (int i = 0; i < c->layers; i++) add_block(t, &w->blocks[i], c, sw, "transformer_blocks", i);
  return DIT_OK;
}

/* MiniMax's release checkpoint under diffusers' names, as diffusers' convert_minimax_h3_to_diffusers.py maps
 * it: modules renamed; each block's fused qkv_proj, whose rows are per head [q; k; v], gathered into to_q, to_k
 * and to_v; mlp.fc1 kept whole under ff.net.0.proj ([gate; value] where diffusers stores [value; gate]: the
 * table marks it, split_ff takes its halves the other way round); rope.inv_freq (recomputed) left out. */
static const dit_wrename release_renames[] = {
    {"^blocks.", "^transformer_blocks.", NULL},
    {"^token_refiner.blocks.", "^token_refiner.refiner_blocks.", NULL},
    {"^time_embedder.proj_in.", "^time_embedder.linear_1.", NULL},
    {"^time_embedder.proj_out.", "^time_embedder.linear_2.", NULL},
    {"^video_patch_proj.", "^proj_in.", NULL},
    {"^audio_patch_proj.", "^audio_proj_in.", NULL},
    {"^condition_proj.", "^context_embedder.", NULL},
    {"^final_layer.norm.", "^norm_out.norm.", NULL},
    {"^final_layer.adaln_proj.linear.", "^norm_out.linear.", NULL},
    {"^final_layer.video_out.", "^proj_out.", NULL},
    {"^final_layer.audio_out.", "^audio_proj_out.", NULL},
    {".attn.q_norm.", ".attn.norm_q.", NULL},
    {".attn.k_norm.", ".attn.norm_k.", NULL},
    {".attn.out_proj.", ".attn.to_out.0.", NULL},
    {".mlp.fc1.", ".ff.net.0.proj.", NULL},
    {".mlp.fc2.", ".ff.net.2.", NULL},
};
#define RELEASE_QKV "blocks.0.attn.qkv_proj.weight"
#define RELEASE_QNORM "blocks.0.attn.q_norm.weight"

/* The rename hook for the release (dit_model_weights.rename, and the modulation's own mapping): the
 * interleave's group is one head, whose size the q norm's weight gives. */
static dit_status rename_release(dit_weights *w, dit_error *err) {
  const dit_st_tensor *qn = dit_weights_find(w, RELEASE_QNORM);
  if (!qn || qn->ndim != 1 || qn->shape[0] < 1)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s is missing or not a vector: the heads' size is unknown", RELEASE_QNORM);
  const dit_wsplit split = {".attn.qkv_proj.weight", 3, {".attn.to_q.weight", ".attn.to_k.weight", ".attn.to_v.weight"},
                            NULL, qn->shape[0]};
  static const char *const drop[] = {"rope.inv_freq", NULL};
  const dit_wremap r = {NULL, release_renames, sizeof release_renames / sizeof *release_renames, &split, 1, drop, NULL};
  return dit_weights_remap(w, &r, err);
}

/* Which names dir's checkpoint uses (*release: MiniMax's own), refusing a QKV layout that is neither. */
static dit_status probe_names(const char *dir, const dit_h3_config *c, bool *release, dit_error *err) {
  dit_weights *w = NULL;
  DIT_TRY(dit_weights_open(dir, NULL, &w, err));
  const dit_st_tensor *qkv = dit_weights_find(w, RELEASE_QKV), *qn = dit_weights_find(w, RELEASE_QNORM);
  const int64_t I = (int64_t)c->heads * c->head_dim;
  dit_status s = DIT_OK;
  *release = !dit_weights_find(w, "transformer_blocks.0.attn.to_q.weight") && qkv;
  if (*release && (qkv->ndim != 2 || qkv->shape[0] != 3 * I || qkv->shape[1] != c->hidden || !qn ||
                   qn->ndim != 1 || qn->shape[0] != c->head_dim))
    s = dit_errorf(err, DIT_ERR_FORMAT,
                   "minimax-h3: %s: %s is %lld x %lld with a q norm of %lld: not %d heads of %d rows of q, k and v "
                   "each over %d inputs (3 x %lld rows): the QKV layout is not recognized",
                   dir, RELEASE_QKV, (long long)qkv->shape[0], qkv->ndim > 1 ? (long long)qkv->shape[1] : 0LL,
                   qn && qn->ndim == 1 ? (long long)qn->shape[0] : 0LL, c->heads, c->head_dim, c->hidden,
                   (long long)I);
  else if (!*release && !dit_weights_find(w, "transformer_blocks.0.attn.to_q.weight"))
    s = dit_errorf(err, DIT_ERR_FORMAT,
                   "minimax-h3: %s: neither diffusers' transformer_blocks.0.attn.to_q/to_k/to_v nor the release's "
                   "fused %s: the QKV layout is not recognized",
                   dir, RELEASE_QKV);
  dit_weights_close(w);
  return s;
}

/* "transformer_blocks.<i>.adaln_proj." for every block, NULL-ended, in one allocation (free() it). */
static char **ada_prefixes(int layers) {
  char **p = malloc((size_t)(layers + 1) * (sizeof *p + 48));
  if (!p) return NULL;
  char *text = (char *)(p + layers + 1);
  for (int i = 0; i < layers; i++, text += 48) {
    snprintf(text, 48, "transformer_blocks.%d.adaln_proj.", i);
    p[i] = text;
  }
  p[layers] = NULL;
  return p;
}

/* Every block's adaln_proj.linear (a dit_wtable_build_fn over the blocks build_table allocated). */
static dit_status ada_table(void *model, dit_wtable *t, dit_error *err) {
  (void)err;
  dit_h3 *m = model;
  dit_wtable_init(t);
  const int64_t A = (int64_t)DIT_H3_MODALITIES * 6 * m->cfg.hidden;
  for (int i = 0; i < m->cfg.layers; i++) {
    h3_block_w *b = &m->w.blocks[i];
    dit_wtable_add(t, &b->ada_w, false, 2, (int64_t[]){A, m->cfg.time_dim},
                   "transformer_blocks.%d.adaln_proj.linear.weight", i);
    dit_wtable_add(t, &b->ada_b, false, 1, (int64_t[]){A}, "transformer_blocks.%d.adaln_proj.linear.bias", i);
  }
  return DIT_OK;
}

/* ada_bytes and ada_block_bytes of the bound projections. */
static void ada_sizes(dit_h3 *m) {
  m->ada_bytes = m->ada_block_bytes = 0;
  for (int i = 0; i < m->cfg.layers; i++) {
    const h3_block_w *b = &m->w.blocks[i];
    const size_t wb = (dit_tensor_nbytes(&b->ada_w) + 255) / 256 * 256, bb = dit_tensor_nbytes(&b->ada_b);
    m->ada_bytes += dit_tensor_nbytes(&b->ada_w) + bb;
    if (wb + bb > m->ada_block_bytes) m->ada_block_bytes = wb + bb;
  }
}

/* The modulation projections bound to their own mapping of the checkpoint (see minimax_h3_internal.h). */
static dit_status bind_ada(dit_h3 *m, const char *dir, dit_error *err) {
  DIT_TRY(dit_weights_open(dir, NULL, &m->ada_files, err));
  if (m->release_names) {
    dit_status s = rename_release(m->ada_files, err);
    if (s != DIT_OK) {
      dit_error_prefix(err, "minimax-h3: %s", dir);
      return s;
    }
  }
  dit_wtable t;
  ada_table(m, &t, err);
  static const char *const others[] = {"", NULL}; /* the rest is bound by the main table */
  dit_status s = dit_wtable_bind(&t, m->ada_files, "", others, err);
  if (s == DIT_OK) s = dit_wtable_check_weights(&t, false, true, err);
  dit_wtable_free(&t);
  if (s != DIT_OK) {
    dit_error_prefix(err, "minimax-h3: %s", dir);
    return s;
  }
  ada_sizes(m);
  return DIT_OK;
}

/* The SwiGLU projection's halves as views of the stored [2 F, H] tensor: value rows first (gate first in
 * the release's). */
static void split_ff(h3_block_w *b, int64_t F, int64_t H, bool gate_first) {
  const size_t half = dit_tensor_nbytes(&b->ff_in) / 2; /* F rows (whole blocks of a quantized type) */
  char *first = b->ff_in.data, *second = (char *)b->ff_in.data + half;
  b->ff_value = dit_tensor_make(b->ff_in.dtype, gate_first ? second : first, 2, (int64_t[]){F, H});
  b->ff_gate = dit_tensor_make(b->ff_in.dtype, gate_first ? first : second, 2, (int64_t[]){F, H});
  b->ff_value.device = b->ff_gate.device = b->ff_in.device;
  b->ff_value.scale = b->ff_gate.scale = b->ff_in.scale; /* a scaled fp8 file's one scale */
}

/* Every block's SwiGLU halves (the release's the other way round). */
static void split_all_ff(dit_h3 *m) {
  const bool gf = m->release_names;
  for (int i = 0; i < m->cfg.refiner_layers; i++) split_ff(&m->w.refiner[i], m->cfg.ffn, m->cfg.hidden, gf);
  for (int i = 0; i < m->cfg.layers; i++) split_ff(&m->w.blocks[i], m->cfg.ffn, m->cfg.hidden, gf);
}

/* The config.json at path. */
static dit_status config_at(const char *path, dit_h3_config *c, dit_error *err) {
  json_t *j = NULL;
  DIT_TRY(dit_json_load_file(path, CFG_MAX_BYTES, &j, err));
  dit_status s = read_config(j, c, path, err);
  json_decref(j);
  return s;
}

dit_status dit_h3_read_config(const char *component_dir, dit_h3_config *c, dit_error *err) {
  char path[4096];
  DIT_TRY(dit_model_config_path("minimax-h3", component_dir, path, sizeof path, err));
  return config_at(path, c, err);
}

/* The weights at `weights` (a folder or one file) with the config.json at cfg_path. */
static dit_status load_from(dit_backend *be, const char *weights, const char *cfg_path, dit_h3 **out,
                            dit_error *err) {
  dit_h3 *m = calloc(1, sizeof *m);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "minimax-h3: out of memory");
  m->be = be;
  dit_act_space_init(&m->as, be);
  const char *component_dir = weights;
  dit_status s = config_at(cfg_path, &m->cfg, err);
  if (s == DIT_OK) s = probe_names(component_dir, &m->cfg, &m->release_names, err);
  if (s == DIT_OK && m->release_names) m->mw.rename = rename_release;
  char **ada = s == DIT_OK ? ada_prefixes(m->cfg.layers) : NULL;
  if (s == DIT_OK && !ada) s = dit_errorf(err, DIT_ERR_NOMEM, "minimax-h3: out of memory");
  m->mw.ignore = (const char *const *)ada;
  if (s == DIT_OK) s = dit_model_weights_load(be, &m->mw, "minimax-h3", component_dir, build_table, m, false, err);
  m->mw.ignore = NULL;
  free(ada);
  if (s == DIT_OK) s = bind_ada(m, component_dir, err);
  if (s == DIT_OK) split_all_ff(m);
  DIT_HAND_OVER(s, m, out, dit_h3_free);
}

dit_status dit_h3_load(dit_backend *be, const char *component_dir, dit_h3 **out, dit_error *err) {
  *out = NULL;
  if (!be || !component_dir) return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3: no backend or folder given");
  char path[4096];
  DIT_TRY(dit_model_config_path("minimax-h3", component_dir, path, sizeof path, err));
  return load_from(be, component_dir, path, out, err);
}

dit_status dit_h3_load_file(dit_backend *be, const char *path, const char *cfg_json, dit_h3 **out, dit_error *err) {
  *out = NULL;
  struct stat st;
  if (path && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return dit_h3_load(be, path, out, err);
  if (!be || !path || !cfg_json)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: a single MiniMax-H3 transformer file needs the model folder's "
                      "transformer/config.json", path ? path : "minimax-h3");
  return load_from(be, path, cfg_json, out, err);
}

dit_status dit_h3_config_default(dit_h3_config *c, dit_error *err) {
  json_t *empty = json_object(); /* every field at diffusers' default: the released config */
  if (!empty) return dit_errorf(err, DIT_ERR_NOMEM, "minimax-h3: out of memory");
  dit_status s = read_config(empty, c, "minimax-h3 default config", err);
  json_decref(empty);
  return s;
}

/* The sizes a random model's config must have (read_config's ranges), then check_config's. */
static dit_status check_random_config(dit_h3_config *c, dit_error *err) {
  const char *what = "minimax-h3 random config";
  if (c->heads < 1 || c->heads > 1024 || c->head_dim < 2 || c->head_dim > 512 || c->hidden < 1 ||
      c->hidden > MAX_DIM || c->layers < 1 || c->layers > MAX_LAYERS || c->refiner_layers < 0 ||
      c->refiner_layers > MAX_LAYERS || c->ffn < 1 || c->in_channels < 1 || c->audio_channels < 1 ||
      c->text_dim < 1 || c->text_dim > MAX_DIM || c->freq_dim < 2 || c->time_hidden < 1 || c->time_dim < 1 ||
      c->rope_freq_dim < 1 || c->patch[0] < 1 || c->patch[1] < 1 || c->patch[2] < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: a size is out of range", what);
  dit_status s = check_config(c, what, err);
  return s == DIT_ERR_FORMAT ? DIT_ERR_INVALID_ARG : s;
}

/* The modulation projections' random values in host memory (the mapping a checkpoint would give them): be's own
 * on the CPU, else a CPU backend's kept with the model; a seed of their own (the table's keys restart at 0). */
static dit_status random_ada(dit_h3 *m, dit_dtype wdt, uint64_t seed, dit_error *err) {
  if (!dit_backend_is_host(m->be)) DIT_TRY(dit_backend_cpu_create(m->be->n_threads, &m->ada_host, err));
  dit_wtable t;
  ada_table(m, &t, err);
  dit_status s = dit_backend_random_wtable(m->ada_host ? m->ada_host : m->be, &t, wdt, 0,
                                           dit_splitmix64(seed ^ 0xADA0ADA0ADA0ADA0ull), &m->ada_block, err);
  dit_wtable_free(&t);
  if (s != DIT_OK) {
    dit_error_prefix(err, "minimax-h3 random modulation");
    return s;
  }
  ada_sizes(m);
  return DIT_OK;
}

dit_status dit_h3_create_random(dit_backend *be, const dit_h3_config *c, dit_dtype wdt, uint64_t seed, dit_h3 **out,
                                dit_error *err) {
  *out = NULL;
  if (!be || !c) return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3: no backend or config given");
  dit_h3 *m = calloc(1, sizeof *m);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "minimax-h3: out of memory");
  m->be = be;
  m->cfg = *c;
  dit_act_space_init(&m->as, be);
  dit_status s = check_random_config(&m->cfg, err);
  if (s == DIT_OK) s = dit_model_weights_random(be, &m->mw, "minimax-h3", build_table, m, wdt, seed, err);
  if (s == DIT_OK) s = random_ada(m, wdt, seed, err);
  if (s == DIT_OK) split_all_ff(m);
  DIT_HAND_OVER(s, m, out, dit_h3_free);
}

void dit_h3_free(dit_h3 *m) {
  if (!m) return;
  dit_h3_unfold(m);
  if (m->ada_scratch) m->be->ops->free(m->be, m->ada_scratch);
  if (m->ada_files) dit_weights_close(m->ada_files);
  dit_backend *host = m->ada_host ? m->ada_host : m->be;
  if (m->ada_block) host->ops->free(host, m->ada_block);
  dit_backend_free(m->ada_host);
  dit_act_space_release(&m->as, m->be);
  dit_model_weights_release(m->be, &m->mw);
  free(m->w.refiner);
  free(m->w.blocks);
  free(m);
}

const dit_h3_config *dit_h3_get_config(const dit_h3 *m) { return m ? &m->cfg : NULL; }
size_t dit_h3_weight_bytes(const dit_h3 *m) { return m ? m->mw.wbytes : 0; }
size_t dit_h3_modulation_bytes(const dit_h3 *m) { return m ? m->ada_bytes : 0; }

uint64_t dit_h3_weight_params(const dit_h3 *m) {
  if (!m) return 0;
  const uint64_t A = (uint64_t)DIT_H3_MODALITIES * 6 * (uint64_t)m->cfg.hidden;
  return m->mw.wparams + (uint64_t)m->cfg.layers * A * ((uint64_t)m->cfg.time_dim + 1);
}

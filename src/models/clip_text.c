/* CLIP text encoder (see clip_text.h): config from config.json or inferred from a single
 * file's shapes, weight table, and a forward pass that reads like transformers'
 * CLIPTextTransformer, calling backend ops in order. */
#include "models/clip_text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/arena.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "models/model_weights.h"

#define CLIP_CONFIG_MAX_BYTES (16u << 20)
#define CLIP_HEAD_DIM 64 /* head width of every published CLIP text tower */
#define CLIP_MAX_LAYERS 256
#define CLIP_QUICK_GELU_K 1.702f

typedef struct clip_layer {
  dit_tensor ln1_w, ln1_b;   /* layer_norm1 [H] */
  dit_tensor q_w, q_b;       /* self_attn.q_proj [H, H], [H] */
  dit_tensor k_w, k_b;       /* self_attn.k_proj */
  dit_tensor v_w, v_b;       /* self_attn.v_proj */
  dit_tensor o_w, o_b;       /* self_attn.out_proj */
  dit_tensor ln2_w, ln2_b;   /* layer_norm2 [H] */
  dit_tensor fc1_w, fc1_b;   /* mlp.fc1 [I, H], [I] */
  dit_tensor fc2_w, fc2_b;   /* mlp.fc2 [H, I], [H] */
} clip_layer;

struct dit_clip_text {
  dit_backend *be;
  dit_clip_text_config cfg;
  dit_model_weights mw;
  const char *prefix;     /* "text_model." or "" (a static string) */
  dit_tensor tok_emb;     /* embeddings.token_embedding [V, H] */
  dit_tensor pos_emb;     /* embeddings.position_embedding [P, H] */
  dit_tensor final_w, final_b; /* final_layer_norm [H] */
  clip_layer *layers;     /* [L] */
};

void dit_clip_text_config_l(dit_clip_text_config *c) {
  *c = (dit_clip_text_config){.hidden_size = 768,
                              .num_layers = 12,
                              .num_heads = 12,
                              .intermediate_size = 3072,
                              .vocab_size = 49408,
                              .max_position_embeddings = 77,
                              .layer_norm_eps = 1e-5f,
                              .hidden_act = DIT_CLIP_QUICK_GELU,
                              .eos_token_id = 2};
}

/* ---- config ---------------------------------------------------------------------- */

/* Integer member `key` of j into *out; absent keeps *out when optional. */
static dit_status read_int(const json_t *j, const char *key, int64_t lo, int64_t hi, bool optional, int *out,
                           const char *what, dit_error *err) {
  int64_t v = *out;
  DIT_TRY(optional ? dit_json_int_opt(j, key, lo, hi, &v, what, err) : dit_json_int(j, key, lo, hi, &v, what, err));
  *out = (int)v;
  return DIT_OK;
}

/* The sizes and settings every config must satisfy (from config.json, shapes, or a caller). */
static dit_status check_config(const dit_clip_text_config *c, const char *what, dit_error *err) {
  if (c->hidden_size < 1 || c->hidden_size > 65536 || c->num_layers < 1 || c->num_layers > CLIP_MAX_LAYERS ||
      c->intermediate_size < 1 || c->intermediate_size > (1 << 20) || c->vocab_size < 1 ||
      c->vocab_size > (1 << 24) || c->max_position_embeddings < 1 || c->max_position_embeddings > (1 << 20))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: a size of the config is out of range", what);
  if (c->num_heads < 1 || c->hidden_size % c->num_heads != 0)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: num_attention_heads = %d does not divide hidden_size = %d", what,
                      c->num_heads, c->hidden_size);
  if (!(c->layer_norm_eps > 0.0f) || c->layer_norm_eps > 0.1f)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: layer_norm_eps = %g must be in (0, 0.1]", what,
                      (double)c->layer_norm_eps);
  if (c->hidden_act != DIT_CLIP_QUICK_GELU && c->hidden_act != DIT_CLIP_GELU)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: hidden_act %d is not a dit_clip_act", what, (int)c->hidden_act);
  if (c->eos_token_id < 0) return dit_errorf(err, DIT_ERR_FORMAT, "%s: eos_token_id = %d is negative", what,
                                             c->eos_token_id);
  return DIT_OK;
}

/* A CLIPTextConfig object (config.json, or a CLIPModel config's text_config). */
static dit_status read_text_config(const json_t *j, dit_clip_text_config *c, const char *what, dit_error *err) {
  memset(c, 0, sizeof *c);
  DIT_TRY(read_int(j, "hidden_size", 1, 65536, false, &c->hidden_size, what, err));
  DIT_TRY(read_int(j, "num_hidden_layers", 1, CLIP_MAX_LAYERS, false, &c->num_layers, what, err));
  DIT_TRY(read_int(j, "num_attention_heads", 1, 65536, false, &c->num_heads, what, err));
  DIT_TRY(read_int(j, "intermediate_size", 1, 1 << 20, false, &c->intermediate_size, what, err));
  DIT_TRY(read_int(j, "vocab_size", 1, 1 << 24, false, &c->vocab_size, what, err));
  c->max_position_embeddings = 77;
  DIT_TRY(read_int(j, "max_position_embeddings", 1, 1 << 20, true, &c->max_position_embeddings, what, err));
  c->eos_token_id = 2;
  DIT_TRY(read_int(j, "eos_token_id", 0, 1 << 30, true, &c->eos_token_id, what, err));
  double eps = 1e-5;
  DIT_TRY(dit_json_double_opt(j, "layer_norm_eps", &eps, what, err));
  if (!(eps > 0.0) || eps > 0.1)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: layer_norm_eps = %g must be in (0, 0.1]", what, eps);
  c->layer_norm_eps = (float)eps;
  const char *act = "quick_gelu";
  DIT_TRY(dit_json_string_opt(j, "hidden_act", &act, what, err));
  if (!strcmp(act, "quick_gelu"))
    c->hidden_act = DIT_CLIP_QUICK_GELU;
  else if (!strcmp(act, "gelu"))
    c->hidden_act = DIT_CLIP_GELU;
  else
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: hidden_act \"%s\" is not supported (quick_gelu or gelu)", what,
                      act);
  return check_config(c, what, err);
}

/* dir/config.json: a "clip_text_model" config, or a "clip" one (read its text_config). */
static dit_status parse_config_file(const char *dir, dit_clip_text_config *c, dit_error *err) {
  char path[4096];
  DIT_TRY(dit_model_config_path("clip_text", dir, path, sizeof path, err));
  return dit_clip_text_read_config(path, c, err);
}

dit_status dit_clip_text_read_config(const char *path, dit_clip_text_config *c, dit_error *err) {
  json_t *root = NULL;
  DIT_TRY(dit_json_load_file(path, CLIP_CONFIG_MAX_BYTES, &root, err));
  const char *type = NULL;
  const json_t *j = root;
  dit_status s = dit_json_string_opt(root, "model_type", &type, path, err);
  if (s == DIT_OK && type && !strcmp(type, "clip")) {
    j = json_object_get(root, "text_config");
    if (!json_is_object(j))
      s = dit_errorf(err, DIT_ERR_FORMAT, "%s: model_type \"clip\" without a \"text_config\" object", path);
  } else if (s == DIT_OK && type && strcmp(type, "clip_text_model") != 0) {
    s = dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: model_type \"%s\" is not \"clip_text_model\" (or \"clip\")", path,
                   type);
  }
  if (s == DIT_OK) s = read_text_config(j, c, path, err);
  json_decref(root);
  return s;
}

/* Stored tensor prefix + name, or NULL. */
static const dit_st_tensor *find_named(const dit_weights *w, const char *prefix, const char *name) {
  char full[DIT_WNAME_MAX + 16];
  snprintf(full, sizeof full, "%s%s", prefix, name);
  return dit_weights_find(w, full);
}

/* A 2-D tensor the inference reads a size from; its absence or rank is an error naming it. */
static dit_status shape_of(const dit_weights *w, const char *prefix, const char *name, int64_t *rows, int64_t *cols,
                           const char *what, dit_error *err) {
  const dit_st_tensor *t = find_named(w, prefix, name);
  if (!t) return dit_errorf(err, DIT_ERR_FORMAT, "%s: missing tensor \"%s%s\"", what, prefix, name);
  if (t->ndim != 2)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: tensor \"%s%s\" has %d dimensions (2 expected)", what, prefix, name,
                      t->ndim);
  *rows = t->shape[0];
  *cols = t->shape[1];
  return DIT_OK;
}

/* 1 + the largest N of the stored names prefix + "encoder.layers.N." (capped past the
 * largest model), so a tensor missing from any layer is reported as missing. */
static int count_layers(const dit_weights *w, const char *prefix) {
  char head[64];
  int n = snprintf(head, sizeof head, "%sencoder.layers.", prefix), L = 0;
  for (size_t i = 0; i < w->n_tensors; i++) {
    const char *name = w->tensors[i]->name;
    if (strncmp(name, head, (size_t)n) != 0) continue;
    char *end = NULL;
    long k = strtol(name + n, &end, 10);
    if (end != name + n && *end == '.' && k >= 0 && k < CLIP_MAX_LAYERS + 1 && k + 1 > L) L = (int)k + 1;
  }
  return L;
}

/* The config of a single file from its shapes (see dit_clip_text_load), the settings
 * shapes cannot tell from `settings` (NULL: the published ones). */
static dit_status infer_config(const dit_weights *w, const char *prefix, const dit_clip_text_config *settings,
                               dit_clip_text_config *c, const char *what, dit_error *err) {
  int64_t V, H, P, PH, I, IH;
  DIT_TRY(shape_of(w, prefix, "embeddings.token_embedding.weight", &V, &H, what, err));
  DIT_TRY(shape_of(w, prefix, "embeddings.position_embedding.weight", &P, &PH, what, err));
  DIT_TRY(shape_of(w, prefix, "encoder.layers.0.mlp.fc1.weight", &I, &IH, what, err));
  int L = count_layers(w, prefix);
  if (H < 1 || H > 65536 || V > (1 << 24) || P > (1 << 20) || I > (1 << 20) || L > CLIP_MAX_LAYERS)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: sizes out of range (hidden %lld, vocabulary %lld, positions %lld, "
                      "MLP %lld, %d layers)", what, (long long)H, (long long)V, (long long)P, (long long)I, L);
  if (settings) {
    *c = *settings;
  } else {
    dit_clip_text_config_l(c);
    if (H % CLIP_HEAD_DIM != 0)
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: hidden size %lld (token_embedding) is not a multiple of %d: the "
                        "head count (num_attention_heads) cannot be inferred", what, (long long)H, CLIP_HEAD_DIM);
    c->num_heads = (int)(H / CLIP_HEAD_DIM);
  }
  c->hidden_size = (int)H;
  c->vocab_size = (int)V;
  c->max_position_embeddings = (int)P;
  c->intermediate_size = (int)I;
  c->num_layers = L;
  return check_config(c, what, err);
}

/* ---- weights --------------------------------------------------------------------- */

static void add_affine(dit_wtable *t, dit_tensor *w, dit_tensor *b, int64_t n, int64_t k, const char *name) {
  if (k)
    dit_wtable_add(t, w, false, 2, (int64_t[]){n, k}, "%s.weight", name);
  else
    dit_wtable_add(t, w, false, 1, (int64_t[]){n}, "%s.weight", name);
  dit_wtable_add(t, b, false, 1, (int64_t[]){n}, "%s.bias", name);
}

static void add_layer(dit_wtable *t, const dit_clip_text_config *c, clip_layer *l, int i) {
  int64_t H = c->hidden_size, I = c->intermediate_size;
  static const char *const part[8] = {"layer_norm1", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                      "self_attn.out_proj", "layer_norm2", "mlp.fc1", "mlp.fc2"};
  dit_tensor *dst[8][2] = {{&l->ln1_w, &l->ln1_b}, {&l->q_w, &l->q_b},     {&l->k_w, &l->k_b},
                           {&l->v_w, &l->v_b},     {&l->o_w, &l->o_b},     {&l->ln2_w, &l->ln2_b},
                           {&l->fc1_w, &l->fc1_b}, {&l->fc2_w, &l->fc2_b}};
  const int64_t rows[8] = {H, H, H, H, H, H, I, H}, cols[8] = {0, H, H, H, H, 0, H, I};
  char name[DIT_WNAME_MAX];
  for (int p = 0; p < 8; p++) {
    snprintf(name, sizeof name, "encoder.layers.%d.%s", i, part[p]);
    add_affine(t, dst[p][0], dst[p][1], rows[p], cols[p], name);
  }
}

static dit_status build_table(void *model, dit_wtable *t, dit_error *err) {
  (void)err;
  dit_clip_text *m = model;
  const dit_clip_text_config *c = &m->cfg;
  int64_t H = c->hidden_size;
  dit_wtable_init(t);
  dit_wtable_add(t, &m->tok_emb, false, 2, (int64_t[]){c->vocab_size, H}, "embeddings.token_embedding.weight");
  dit_wtable_add(t, &m->pos_emb, false, 2, (int64_t[]){c->max_position_embeddings, H},
                 "embeddings.position_embedding.weight");
  for (int i = 0; i < c->num_layers; i++) add_layer(t, c, &m->layers[i], i);
  add_affine(t, &m->final_w, &m->final_b, H, 0, "final_layer_norm");
  return DIT_OK;
}

/* transformers 5 saves CLIPTextModel without the "text_model." prefix, earlier versions
 * (and CLIPModel, ComfyUI's files) with it. */
static const char *detect_prefix(const dit_weights *w) {
  if (find_named(w, "text_model.", "embeddings.token_embedding.weight")) return "text_model.";
  if (find_named(w, "", "embeddings.token_embedding.weight")) return "";
  for (size_t i = 0; i < w->n_tensors; i++)
    if (!strncmp(w->tensors[i]->name, "text_model.encoder.", 19)) return "text_model.";
  return "";
}

/* Binds the table from the open files (names after m->prefix; the stored tensors this
 * model does not use are ignored), checks the dtypes, and on a device backend copies
 * the weights into one block and closes the files. */
static dit_status bind_weights(dit_clip_text *m, const char *path, dit_error *err) {
  static const char *const unused[] = {"text_projection.", "logit_scale", "vision_model.", "visual_projection.",
                                       "embeddings.position_ids", "text_model.embeddings.position_ids", NULL};
  dit_wtable t;
  dit_status s = build_table(m, &t, err);
  if (s == DIT_OK) s = dit_wtable_bind(&t, m->mw.files, m->prefix, unused, err);
  if (s == DIT_OK) s = dit_wtable_check_float(&t, err);
  for (size_t i = 0; s == DIT_OK && i < t.n; i++) m->mw.wbytes += dit_tensor_nbytes(t.entries[i].dst);
  if (s == DIT_OK && !dit_backend_is_host(m->be)) {
    s = dit_backend_upload_wtable(m->be, &t, &m->mw.wblock, err);
    if (s == DIT_OK) {
      dit_weights_close(m->mw.files);
      m->mw.files = NULL;
    }
  }
  if (s != DIT_OK) dit_error_prefix(err, "clip_text: %s (names %s)", path, *m->prefix ? "\"text_model.\"-prefixed" :
                                    "without prefix");
  dit_wtable_free(&t);
  return s;
}

static dit_clip_text *new_model(dit_backend *be) {
  dit_clip_text *m = calloc(1, sizeof *m);
  if (m) {
    m->be = be;
    m->prefix = "";
  }
  return m;
}

static dit_status alloc_layers(dit_clip_text *m, dit_error *err) {
  m->layers = calloc((size_t)m->cfg.num_layers, sizeof *m->layers);
  return m->layers ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "clip_text: out of memory for %d layers", m->cfg.num_layers);
}

/* A folder (config.json) or, with is_file, a single file (config inferred). */
static dit_status load_path(dit_backend *be, const char *path, bool is_file, const dit_clip_text_config *settings,
                            dit_clip_text **out, dit_error *err) {
  *out = NULL;
  if (!be || !path) return dit_errorf(err, DIT_ERR_INVALID_ARG, "clip_text: no backend or path given");
  dit_clip_text *m = new_model(be);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "clip_text: out of memory");
  dit_status s = is_file ? DIT_OK : parse_config_file(path, &m->cfg, err);
  if (s == DIT_OK) s = dit_weights_open(path, NULL, &m->mw.files, err);
  if (s == DIT_OK) m->prefix = detect_prefix(m->mw.files);
  if (s == DIT_OK && is_file) {
    char what[4200];
    snprintf(what, sizeof what, "clip_text: %s (config inferred from the shapes)", path);
    s = infer_config(m->mw.files, m->prefix, settings, &m->cfg, what, err);
  }
  if (s == DIT_OK) s = alloc_layers(m, err);
  if (s == DIT_OK) s = bind_weights(m, path, err);
  DIT_HAND_OVER(s, m, out, dit_clip_text_free);
}

dit_status dit_clip_text_load(dit_backend *be, const char *path, dit_clip_text **out, dit_error *err) {
  *out = NULL;
  struct stat st;
  if (path && stat(path, &st) != 0)
    return dit_errorf(err, DIT_ERR_IO, "clip_text: %s: no such file or folder", path);
  return load_path(be, path, path && S_ISREG(st.st_mode), NULL, out, err);
}

dit_status dit_clip_text_load_file(dit_backend *be, const char *file, const dit_clip_text_config *settings,
                                   dit_clip_text **out, dit_error *err) {
  return load_path(be, file, true, settings, out, err);
}

dit_status dit_clip_text_create_random(dit_backend *be, const dit_clip_text_config *c, dit_dtype wdt, uint64_t seed,
                                       dit_clip_text **out, dit_error *err) {
  *out = NULL;
  if (!be || !c) return dit_errorf(err, DIT_ERR_INVALID_ARG, "clip_text random: no backend or config given");
  DIT_TRY(check_config(c, "clip_text random config", err));
  dit_clip_text *m = new_model(be);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "clip_text: out of memory");
  m->cfg = *c;
  dit_status s = alloc_layers(m, err);
  if (s == DIT_OK) s = dit_model_weights_random(be, &m->mw, "clip_text", build_table, m, wdt, seed, err);
  DIT_HAND_OVER(s, m, out, dit_clip_text_free);
}

void dit_clip_text_free(dit_clip_text *m) {
  if (!m) return;
  dit_model_weights_release(m->be, &m->mw);
  free(m->layers);
  free(m);
}

const dit_clip_text_config *dit_clip_text_get_config(const dit_clip_text *m) { return m ? &m->cfg : NULL; }

dit_backend *dit_clip_text_backend(const dit_clip_text *m) { return m ? m->be : NULL; }

size_t dit_clip_text_weight_bytes(const dit_clip_text *m) { return m ? m->mw.wbytes : 0; }

int dit_clip_text_pooled_index(const dit_clip_text_config *c, int S, const int32_t *ids) {
  int best = 0;
  for (int i = 0; i < S; i++) {
    if (c->eos_token_id == 2) {
      if (ids[i] > ids[best]) best = i;
    } else if (ids[i] == c->eos_token_id) {
      return i;
    }
  }
  return best;
}

/* ---- forward --------------------------------------------------------------------- */

/* Activations of one encode call, in one backend buffer. */
typedef struct clip_run {
  int S;
  float *x;          /* [S, H] residual stream */
  float *h;          /* [S, H] normed input / projection output / final norm */
  float *q, *k, *v;  /* [S, H] each */
  float *att;        /* [S, H] attention output */
  float *f;          /* [S, I] MLP hidden */
  int32_t *ids, *pos; /* [S] token ids, positions 0..S-1 */
} clip_run;

/* Places r's buffers in a (measuring or real) arena; false when a real one is full. */
static bool place(dit_arena *a, int64_t H, int64_t I, clip_run *r, dit_error *err) {
  size_t SH = (size_t)r->S * (size_t)H;
  float **rows[6] = {&r->x, &r->h, &r->q, &r->k, &r->v, &r->att};
  bool ok = true;
  for (int i = 0; i < 6; i++) ok = (*rows[i] = dit_arena_floats(a, SH, err)) != NULL && ok;
  ok = (r->f = dit_arena_floats(a, (size_t)r->S * (size_t)I, err)) != NULL && ok;
  ok = (r->ids = dit_arena_alloc(a, (size_t)r->S * sizeof(int32_t), err)) != NULL && ok;
  ok = (r->pos = dit_arena_alloc(a, (size_t)r->S * sizeof(int32_t), err)) != NULL && ok;
  return ok;
}

/* A [rows, cols] F32 view of activation memory, tagged with the backend's device. */
static dit_tensor act2(const dit_clip_text *m, float *p, int64_t rows, int64_t cols) {
  dit_tensor t = dit_tensor_2d(DIT_F32, p, rows, cols);
  t.device = dit_backend_device(m->be);
  return t;
}

static dit_tensor heads4(const dit_clip_text *m, float *p, int64_t S) {
  const dit_clip_text_config *c = &m->cfg;
  dit_tensor t = dit_tensor_4d(DIT_F32, p, 1, S, c->num_heads, c->hidden_size / c->num_heads);
  t.device = dit_backend_device(m->be);
  return t;
}

/* h = mlp(h) through r->f: fc2(act(fc1(h))). quick_gelu(x) = x * sigmoid(1.702 x) has no
 * op of its own: it is silu(1.702 x) / 1.702. */
static dit_status mlp_forward(dit_clip_text *m, const clip_layer *l, const clip_run *r, dit_tensor *h,
                              dit_error *err) {
  dit_backend *be = m->be;
  dit_tensor f = act2(m, r->f, r->S, m->cfg.intermediate_size);
  bool quick = m->cfg.hidden_act == DIT_CLIP_QUICK_GELU;
  DIT_TRY(dit_op_linear(be, &f, h, &l->fc1_w, &l->fc1_b, quick ? DIT_ACT_NONE : DIT_ACT_GELU, err));
  if (quick) {
    DIT_TRY(dit_op_scale(be, &f, &f, CLIP_QUICK_GELU_K, err));
    DIT_TRY(dit_op_activation(be, &f, &f, DIT_ACT_SILU, err));
    DIT_TRY(dit_op_scale(be, &f, &f, 1.0f / CLIP_QUICK_GELU_K, err));
  }
  return dit_op_linear(be, h, &f, &l->fc2_w, &l->fc2_b, DIT_ACT_NONE, err);
}

/* One encoder layer on r->x, in place:
 *   x += out_proj(attn(q_proj(n), k_proj(n), v_proj(n)))   n = layer_norm1(x), causal
 *   x += fc2(act(fc1(n)))                                  n = layer_norm2(x) */
static dit_status layer_forward(dit_clip_text *m, const clip_layer *l, const clip_run *r, dit_error *err) {
  dit_backend *be = m->be;
  const dit_clip_text_config *c = &m->cfg;
  int64_t S = r->S, H = c->hidden_size;
  float eps = c->layer_norm_eps;
  dit_tensor x = act2(m, r->x, S, H), h = act2(m, r->h, S, H), att = act2(m, r->att, S, H);
  dit_tensor q = act2(m, r->q, S, H), k = act2(m, r->k, S, H), v = act2(m, r->v, S, H);
  DIT_TRY(dit_op_layer_norm(be, &h, &x, &l->ln1_w, &l->ln1_b, eps, err));
  DIT_TRY(dit_op_linear(be, &q, &h, &l->q_w, &l->q_b, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &k, &h, &l->k_w, &l->k_b, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &v, &h, &l->v_w, &l->v_b, DIT_ACT_NONE, err));
  dit_tensor q4 = heads4(m, r->q, S), k4 = heads4(m, r->k, S), v4 = heads4(m, r->v, S), a4 = heads4(m, r->att, S);
  float scale = 1.0f / sqrtf((float)(H / c->num_heads));
  DIT_TRY(dit_op_attention(be, &a4, &q4, &k4, &v4, NULL, scale, true, err));
  DIT_TRY(dit_op_linear(be, &h, &att, &l->o_w, &l->o_b, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_add(be, &x, &x, &h, err));
  DIT_TRY(dit_op_layer_norm(be, &h, &x, &l->ln2_w, &l->ln2_b, eps, err));
  DIT_TRY(mlp_forward(m, l, r, &h, err));
  return dit_op_add(be, &x, &x, &h, err);
}

/* What one encode call computes: hidden_states indices resolved to 0..L. */
typedef struct clip_ask {
  int n;
  const int *idx;      /* [n], 0..L */
  float *const *hidden; /* [n] */
  float *last, *pooled;
  int deepest;         /* last layer to run */
} clip_ask;

/* Copies the residual stream (hidden_states[k]) into every output that asked for k. */
static dit_status emit(dit_clip_text *m, const clip_run *r, const clip_ask *ask, int k, dit_error *err) {
  int64_t H = m->cfg.hidden_size;
  dit_tensor src = act2(m, r->x, r->S, H);
  for (int j = 0; j < ask->n; j++) {
    if (ask->idx[j] != k) continue;
    dit_tensor dst = act2(m, ask->hidden[j], r->S, H);
    DIT_TRY(dit_op_copy(m->be, &dst, &src, err));
  }
  return DIT_OK;
}

/* final_layer_norm into last (or r->h), and the pooled row out of it. */
static dit_status finish(dit_clip_text *m, const clip_run *r, const clip_ask *ask, int pooled_at, dit_error *err) {
  int64_t H = m->cfg.hidden_size;
  float *normed = ask->last ? ask->last : r->h;
  dit_tensor x = act2(m, r->x, r->S, H), y = act2(m, normed, r->S, H);
  DIT_TRY(dit_op_layer_norm(m->be, &y, &x, &m->final_w, &m->final_b, m->cfg.layer_norm_eps, err));
  if (!ask->pooled) return DIT_OK;
  dit_tensor row = act2(m, normed + (size_t)pooled_at * (size_t)H, 1, H), dst = act2(m, ask->pooled, 1, H);
  return dit_op_copy(m->be, &dst, &row, err);
}

/* Embeddings, then layers 1..deepest, then (when asked) the final norm and pooling. */
static dit_status run(dit_clip_text *m, const clip_run *r, const clip_ask *ask, int pooled_at, dit_error *err) {
  int64_t S = r->S, H = m->cfg.hidden_size;
  dit_tensor x = act2(m, r->x, S, H), pe = act2(m, r->h, S, H);
  dit_tensor ids = dit_tensor_1d(DIT_I32, r->ids, S), pos = dit_tensor_1d(DIT_I32, r->pos, S);
  ids.device = pos.device = dit_backend_device(m->be);
  DIT_TRY(dit_op_embedding(m->be, &x, &m->tok_emb, &ids, err));
  DIT_TRY(dit_op_embedding(m->be, &pe, &m->pos_emb, &pos, err));
  DIT_TRY(dit_op_add(m->be, &x, &x, &pe, err));
  DIT_TRY(emit(m, r, ask, 0, err));
  for (int i = 0; i < ask->deepest; i++) {
    dit_status s = layer_forward(m, &m->layers[i], r, err);
    if (s != DIT_OK) {
      dit_error_prefix(err, "clip_text layer %d", i);
      return s;
    }
    DIT_TRY(emit(m, r, ask, i + 1, err));
  }
  if (ask->last || ask->pooled) DIT_TRY(finish(m, r, ask, pooled_at, err));
  return DIT_OK;
}

/* Validates the arguments of encode and fills ask (idx: caller storage for n_layers). */
static dit_status check_args(const dit_clip_text *m, int S, const int32_t *ids, int n_layers, const int *layers,
                             float *const *hidden, int *idx, clip_ask *ask, dit_error *err) {
  const dit_clip_text_config *c = &m->cfg;
  if (S < 1 || S > c->max_position_embeddings)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "clip_text encode: %d tokens is outside [1, %d] "
                      "(max_position_embeddings)", S, c->max_position_embeddings);
  if (!ids || n_layers < 0 || (n_layers > 0 && (!layers || !hidden)))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "clip_text encode: no ids, or no layers / outputs for %d layers",
                      n_layers);
  if (n_layers == 0 && !ask->last && !ask->pooled)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "clip_text encode: no output asked for");
  ask->deepest = (ask->last || ask->pooled) ? c->num_layers : 0;
  for (int j = 0; j < n_layers; j++) {
    int k = layers[j] < 0 ? c->num_layers + 1 + layers[j] : layers[j];
    if (k < 0 || k > c->num_layers)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "clip_text encode: layers[%d] = %d is outside [-%d, %d]", j,
                        layers[j], c->num_layers + 1, c->num_layers);
    if (!hidden[j]) return dit_errorf(err, DIT_ERR_INVALID_ARG, "clip_text encode: hidden[%d] is NULL", j);
    idx[j] = k;
    if (k > ask->deepest) ask->deepest = k;
  }
  for (int i = 0; i < S; i++)
    if (ids[i] < 0 || ids[i] >= c->vocab_size)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "clip_text encode: token id %d at position %d is outside the "
                        "vocabulary [0, %d)", ids[i], i, c->vocab_size);
  ask->n = n_layers;
  ask->idx = idx;
  ask->hidden = hidden;
  return DIT_OK;
}

/* Uploads the ids and the positions 0..S-1. */
static dit_status upload_inputs(dit_clip_text *m, const clip_run *r, const int32_t *ids, dit_error *err) {
  int32_t *pos = malloc((size_t)r->S * sizeof *pos);
  if (!pos) return dit_errorf(err, DIT_ERR_NOMEM, "clip_text encode: out of memory");
  for (int i = 0; i < r->S; i++) pos[i] = i;
  dit_status s = m->be->ops->upload(m->be, r->ids, ids, (size_t)r->S * sizeof *ids, err);
  if (s == DIT_OK) s = m->be->ops->upload(m->be, r->pos, pos, (size_t)r->S * sizeof *pos, err);
  free(pos);
  return s;
}

dit_status dit_clip_text_cost(const dit_clip_text *m, int S, dit_cost *out, dit_error *err) {
  if (!m || !out || S < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "clip_text cost: bad arguments");
  const dit_clip_text_config *c = &m->cfg;
  clip_run r = {.S = S};
  dit_arena a;
  dit_arena_init_measure(&a);
  place(&a, c->hidden_size, c->intermediate_size, &r, err);
  const double H = c->hidden_size, I = c->intermediate_size, n = S;
  /* per layer: q, k, v, out and the MLP per token; QK^T and PV */
  out->flops = c->num_layers * (2.0 * n * (4.0 * H * H + 2.0 * H * I) + 4.0 * n * n * H);
  out->act_bytes = a.peak + (size_t)S * sizeof(int32_t); /* + upload_inputs' positions */
  return DIT_OK;
}

dit_status dit_clip_text_encode_hidden(dit_clip_text *m, int S, const int32_t *ids, int n_layers, const int *layers,
                                       float *const *hidden, float *last_hidden, float *pooled, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "clip_text encode: no model");
  int *idx = malloc((size_t)(n_layers > 0 ? n_layers : 1) * sizeof *idx);
  if (!idx) return dit_errorf(err, DIT_ERR_NOMEM, "clip_text encode: out of memory");
  clip_ask ask = {.last = last_hidden, .pooled = pooled};
  dit_status s = check_args(m, S, ids, n_layers, layers, hidden, idx, &ask, err);
  clip_run r = {.S = S};
  dit_arena a;
  dit_arena_init_measure(&a);
  void *buf = NULL;
  if (s == DIT_OK) {
    place(&a, m->cfg.hidden_size, m->cfg.intermediate_size, &r, err);
    s = m->be->ops->alloc(m->be, a.peak, &buf, err);
  }
  if (s == DIT_OK) {
    a = (dit_arena){.base = buf, .cap = a.peak};
    if (!place(&a, m->cfg.hidden_size, m->cfg.intermediate_size, &r, err)) s = DIT_ERR_INTERNAL;
  }
  if (s == DIT_OK) s = upload_inputs(m, &r, ids, err);
  if (s == DIT_OK) s = run(m, &r, &ask, pooled ? dit_clip_text_pooled_index(&m->cfg, S, ids) : 0, err);
  if (s == DIT_OK) s = m->be->ops->sync(m->be, err);
  if (buf) m->be->ops->free(m->be, buf);
  free(idx);
  return s;
}

dit_status dit_clip_text_encode(dit_clip_text *m, int S, const int32_t *ids, float *last_hidden, float *pooled,
                                dit_error *err) {
  return dit_clip_text_encode_hidden(m, S, ids, 0, NULL, NULL, last_hidden, pooled, err);
}

/* T5 text encoder (see t5.h): config from config.json or from the tensors of a single
 * file, weight table, and a forward pass that reads like transformers' T5Stack (encoder),
 * calling backend ops in order. The attention op has no additive bias, so attention is
 * built per head from linear (scores = q_h k_h^T, probabilities @ v_h) around one add of
 * the position bias and one softmax over all heads. */
#include "models/t5.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/json.h"
#include "io/safetensors.h"
#include "models/act_space.h"
#include "models/model_weights.h"

#define T5_CONFIG_MAX_BYTES (16u << 20)
#define T5_MAX_DIM 65536
#define T5_MAX_LAYERS 1024
#define T5_MAX_HEADS 1024
#define T5_MAX_FF (1 << 20)
#define T5_MAX_VOCAB (1 << 24)
#define T5_MAX_BUCKETS 4096
#define T5_MAX_DISTANCE (1 << 20)

#define T5_EMBED "shared.weight"
#define T5_EMBED_ALT "encoder.embed_tokens.weight"
#define T5_REL_BIAS "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
#define T5_BLOCK "encoder.block.%d.layer.%d."

typedef struct t5_block {
  dit_tensor ln_attn;       /* layer.0.layer_norm [Dm] */
  dit_tensor q, k, v;       /* [I, Dm] each, I = heads * d_kv */
  dit_tensor o;             /* [Dm, I] */
  dit_tensor ln_ff;         /* layer.1.layer_norm [Dm] */
  dit_tensor wi_0, wi_1;    /* [F, Dm] (wi_0 is wi when not gated; wi_1 then unused) */
  dit_tensor wo;            /* [Dm, F] */
} t5_block;

struct dit_t5 {
  dit_backend *be;
  dit_t5_config cfg;
  dit_model_weights mw;
  dit_act_space as;
  bool from_files;          /* the table lists both embedding names, each optional */
  dit_tensor shared;        /* [V, Dm] shared.weight */
  dit_tensor embed_alt;     /* [V, Dm] encoder.embed_tokens.weight */
  const dit_tensor *embed;  /* the one bound */
  dit_tensor rel_bias;      /* [num_buckets, heads] */
  dit_tensor final_ln;      /* [Dm] */
  t5_block *blocks;         /* [L] */
};

/* ---- config ---------------------------------------------------------------------- */

/* One "field = value out of range" check. */
static dit_status in_range(const char *what, const char *field, int64_t v, int64_t lo, int64_t hi, dit_error *err) {
  if (v >= lo && v <= hi) return DIT_OK;
  return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s = %lld is outside [%lld, %lld]", what, field, (long long)v,
                    (long long)lo, (long long)hi);
}

/* Every size of c in its range, and the bucket geometry usable (at least one exact and one
 * log-spaced bucket per sign, max_distance beyond the exact ones). */
static dit_status check_config(const dit_t5_config *c, const char *what, dit_error *err) {
  DIT_TRY(in_range(what, "d_model", c->d_model, 1, T5_MAX_DIM, err));
  DIT_TRY(in_range(what, "num_layers", c->num_layers, 1, T5_MAX_LAYERS, err));
  DIT_TRY(in_range(what, "num_heads", c->num_heads, 1, T5_MAX_HEADS, err));
  DIT_TRY(in_range(what, "d_kv", c->d_kv, 1, T5_MAX_DIM, err));
  DIT_TRY(in_range(what, "num_heads * d_kv", (int64_t)c->num_heads * c->d_kv, 1, T5_MAX_DIM, err));
  DIT_TRY(in_range(what, "d_ff", c->d_ff, 1, T5_MAX_FF, err));
  DIT_TRY(in_range(what, "vocab_size", c->vocab_size, 1, T5_MAX_VOCAB, err));
  DIT_TRY(in_range(what, "relative_attention_num_buckets", c->num_buckets, 4, T5_MAX_BUCKETS, err));
  DIT_TRY(in_range(what, "relative_attention_max_distance", c->max_distance, c->num_buckets / 4 + 1,
                   T5_MAX_DISTANCE, err));
  if (!(c->layer_norm_epsilon > 0.0f) || c->layer_norm_epsilon > 0.1f)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: layer_norm_epsilon = %g must be in (0, 0.1]", what,
                      (double)c->layer_norm_epsilon);
  if (c->act != DIT_ACT_NONE && c->act != DIT_ACT_SILU && c->act != DIT_ACT_GELU && c->act != DIT_ACT_GELU_TANH)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: unknown feed-forward activation %d", what, (int)c->act);
  return DIT_OK;
}

/* transformers' ACT2FN names the ops have (field: where the name came from). */
static dit_status act_from_name(const char *name, const char *field, dit_act *act, const char *what,
                                dit_error *err) {
  if (!strcmp(name, "gelu_new") || !strcmp(name, "gelu_pytorch_tanh"))
    *act = DIT_ACT_GELU_TANH;
  else if (!strcmp(name, "gelu"))
    *act = DIT_ACT_GELU;
  else if (!strcmp(name, "silu") || !strcmp(name, "swish"))
    *act = DIT_ACT_SILU;
  else
    return dit_errorf(err, DIT_ERR_UNSUPPORTED,
                      "%s: %s: feed-forward activation \"%s\" is not supported (gelu_new, gelu, silu)", what,
                      field, name);
  return DIT_OK;
}

/* feed_forward_proj "[gated-]ACT" as T5Config reads it ("gated-gelu" means gelu_new), then
 * dense_act_fn and is_gated_act when the file has them (they override, as in transformers). */
static dit_status parse_ffn(const json_t *j, dit_t5_config *c, const char *what, dit_error *err) {
  const char *proj = "relu";
  DIT_TRY(dit_json_string_opt(j, "feed_forward_proj", &proj, what, err));
  const char *dash = strchr(proj, '-');
  c->gated = dash && (size_t)(dash - proj) == 5 && !strncmp(proj, "gated", 5);
  if (dash && (!c->gated || strchr(dash + 1, '-')))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: feed_forward_proj \"%s\" is not \"ACT\" or \"gated-ACT\"", what, proj);
  const char *act = dash ? dash + 1 : proj;
  if (c->gated && !strcmp(act, "gelu")) act = "gelu_new";
  const char *field = "feed_forward_proj", *dense = NULL;
  DIT_TRY(dit_json_string_opt(j, "dense_act_fn", &dense, what, err));
  if (dense) act = dense, field = "dense_act_fn";
  DIT_TRY(dit_json_bool_opt(j, "is_gated_act", &c->gated, what, err));
  return act_from_name(act, field, &c->act, what, err);
}

static dit_status get_int(const json_t *j, const char *key, int64_t max, int *out, bool optional, const char *what,
                          dit_error *err) {
  int64_t v = *out;
  if (optional)
    DIT_TRY(dit_json_int_opt(j, key, 1, max, &v, what, err));
  else
    DIT_TRY(dit_json_int(j, key, 1, max, &v, what, err));
  *out = (int)v;
  return DIT_OK;
}

static dit_status parse_config(const json_t *j, dit_t5_config *c, const char *what, dit_error *err) {
  memset(c, 0, sizeof *c);
  const char *type = NULL;
  DIT_TRY(dit_json_string_opt(j, "model_type", &type, what, err));
  if (type && strcmp(type, "t5") != 0)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: model_type \"%s\" is not \"t5\"", what, type);
  DIT_TRY(get_int(j, "d_model", T5_MAX_DIM, &c->d_model, false, what, err));
  DIT_TRY(get_int(j, "num_layers", T5_MAX_LAYERS, &c->num_layers, false, what, err));
  DIT_TRY(get_int(j, "num_heads", T5_MAX_HEADS, &c->num_heads, false, what, err));
  DIT_TRY(get_int(j, "d_kv", T5_MAX_DIM, &c->d_kv, false, what, err));
  DIT_TRY(get_int(j, "d_ff", T5_MAX_FF, &c->d_ff, false, what, err));
  DIT_TRY(get_int(j, "vocab_size", T5_MAX_VOCAB, &c->vocab_size, false, what, err));
  c->num_buckets = 32;
  c->max_distance = 128;
  DIT_TRY(get_int(j, "relative_attention_num_buckets", T5_MAX_BUCKETS, &c->num_buckets, true, what, err));
  DIT_TRY(get_int(j, "relative_attention_max_distance", T5_MAX_DISTANCE, &c->max_distance, true, what, err));
  double eps = 1e-6;
  DIT_TRY(dit_json_double_opt(j, "layer_norm_epsilon", &eps, what, err));
  if (!(eps > 0.0) || eps > 0.1)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: layer_norm_epsilon = %g must be in (0, 0.1]", what, eps);
  c->layer_norm_epsilon = (float)eps;
  DIT_TRY(parse_ffn(j, c, what, err));
  return check_config(c, what, err);
}

static dit_status read_config_file(const char *path, dit_t5_config *c, dit_error *err) {
  json_t *j = NULL;
  DIT_TRY(dit_json_load_file(path, T5_CONFIG_MAX_BYTES, &j, err));
  dit_status s = parse_config(j, c, path, err);
  json_decref(j);
  if (s != DIT_OK) dit_error_prefix(err, "t5");
  return s;
}

/* A 2-D tensor of w that inference needs. */
static dit_status need_2d(const dit_weights *w, const char *name, const char *what, const dit_st_tensor **out,
                          dit_error *err) {
  *out = dit_weights_find(w, name);
  if (!*out)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: no tensor %s (needed to read the T5 geometry off the weights)",
                      what, name);
  if ((*out)->ndim != 2)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: tensor %s has %d dims, expected 2", what, name, (*out)->ndim);
  return DIT_OK;
}

/* Blocks: one past the highest encoder.block.<i>. index among the tensor names. */
static int count_blocks(const dit_weights *w) {
  int n = 0;
  for (size_t i = 0; i < w->n_tensors; i++) {
    const char *nm = w->tensors[i]->name;
    if (strncmp(nm, "encoder.block.", 14) != 0) continue;
    char *end = NULL;
    long b = strtol(nm + 14, &end, 10);
    if (end != nm + 14 && *end == '.' && b >= 0 && b < T5_MAX_LAYERS && b + 1 > n) n = (int)b + 1;
  }
  return n;
}

/* The config of a checkpoint without config.json (see t5.h for the fixed settings). */
static dit_status infer_from(const dit_weights *w, dit_t5_config *c, const char *what, dit_error *err) {
  memset(c, 0, sizeof *c);
  const dit_st_tensor *emb, *rel, *q, *wi;
  if (!dit_weights_find(w, T5_EMBED) && !dit_weights_find(w, T5_EMBED_ALT))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: no tensor %s (or %s)", what, T5_EMBED, T5_EMBED_ALT);
  DIT_TRY(need_2d(w, dit_weights_find(w, T5_EMBED) ? T5_EMBED : T5_EMBED_ALT, what, &emb, err));
  DIT_TRY(need_2d(w, T5_REL_BIAS, what, &rel, err));
  DIT_TRY(need_2d(w, "encoder.block.0.layer.0.SelfAttention.q.weight", what, &q, err));
  if (!dit_weights_find(w, "encoder.block.0.layer.1.DenseReluDense.wi_0.weight") &&
      dit_weights_find(w, "encoder.block.0.layer.1.DenseReluDense.wi.weight"))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: a non-gated feed-forward (DenseReluDense.wi, T5 v1.0's ReLU) "
                      "without config.json is not supported", what);
  DIT_TRY(need_2d(w, "encoder.block.0.layer.1.DenseReluDense.wi_0.weight", what, &wi, err));
  c->vocab_size = (int)(emb->shape[0] < T5_MAX_VOCAB ? emb->shape[0] : T5_MAX_VOCAB + 1);
  c->d_model = (int)(emb->shape[1] < T5_MAX_DIM ? emb->shape[1] : T5_MAX_DIM + 1);
  c->num_buckets = (int)(rel->shape[0] < T5_MAX_BUCKETS ? rel->shape[0] : T5_MAX_BUCKETS + 1);
  c->num_heads = (int)(rel->shape[1] < T5_MAX_HEADS ? rel->shape[1] : T5_MAX_HEADS + 1);
  if (q->shape[0] % c->num_heads != 0)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: encoder.block.0.layer.0.SelfAttention.q.weight has %lld rows, not "
                      "a multiple of the %d heads of %s", what, (long long)q->shape[0], c->num_heads, T5_REL_BIAS);
  c->d_kv = (int)(q->shape[0] / c->num_heads < T5_MAX_DIM ? q->shape[0] / c->num_heads : T5_MAX_DIM + 1);
  c->d_ff = (int)(wi->shape[0] < T5_MAX_FF ? wi->shape[0] : T5_MAX_FF + 1);
  c->num_layers = count_blocks(w);
  c->max_distance = 128;
  c->layer_norm_epsilon = 1e-6f;
  c->gated = true;
  c->act = DIT_ACT_GELU_TANH;
  return check_config(c, what, err);
}

static dit_status infer_config(const char *path, dit_t5_config *c, dit_error *err) {
  dit_weights *w = NULL;
  DIT_TRY(dit_weights_open(path, NULL, &w, err));
  dit_status s = infer_from(w, c, path, err);
  dit_weights_close(w);
  if (s != DIT_OK) dit_error_prefix(err, "t5");
  return s;
}

void dit_t5_config_xxl(dit_t5_config *c) {
  memset(c, 0, sizeof *c);
  c->d_model = 4096;
  c->num_layers = 24;
  c->num_heads = 64;
  c->d_kv = 64;
  c->d_ff = 10240;
  c->vocab_size = 32128;
  c->num_buckets = 32;
  c->max_distance = 128;
  c->layer_norm_epsilon = 1e-6f;
  c->gated = true;
  c->act = DIT_ACT_GELU_TANH;
}

/* ---- weights --------------------------------------------------------------------- */

static void add_2d(dit_wtable *t, dit_tensor *dst, int64_t n, int64_t k, int i, int sub, const char *leaf) {
  dit_wtable_add(t, dst, false, 2, (int64_t[]){n, k}, T5_BLOCK "%s.weight", i, sub, leaf);
}

/* Lists every tensor (allocating the block array first). */
static dit_status build_table(void *model, dit_wtable *t, dit_error *err) {
  dit_t5 *m = model;
  const dit_t5_config *c = &m->cfg;
  int64_t Dm = c->d_model, I = (int64_t)c->num_heads * c->d_kv, F = c->d_ff;
  dit_wtable_init(t);
  m->blocks = calloc((size_t)c->num_layers, sizeof *m->blocks);
  if (!m->blocks) return dit_errorf(err, DIT_ERR_NOMEM, "t5: out of memory for %d blocks", c->num_layers);
  dit_wtable_add(t, &m->shared, m->from_files, 2, (int64_t[]){c->vocab_size, Dm}, T5_EMBED);
  if (m->from_files) dit_wtable_add(t, &m->embed_alt, true, 2, (int64_t[]){c->vocab_size, Dm}, T5_EMBED_ALT);
  dit_wtable_add(t, &m->rel_bias, false, 2, (int64_t[]){c->num_buckets, c->num_heads}, T5_REL_BIAS);
  dit_wtable_add(t, &m->final_ln, false, 1, (int64_t[]){Dm}, "encoder.final_layer_norm.weight");
  for (int i = 0; i < c->num_layers; i++) {
    t5_block *b = &m->blocks[i];
    dit_wtable_add(t, &b->ln_attn, false, 1, (int64_t[]){Dm}, T5_BLOCK "layer_norm.weight", i, 0);
    add_2d(t, &b->q, I, Dm, i, 0, "SelfAttention.q");
    add_2d(t, &b->k, I, Dm, i, 0, "SelfAttention.k");
    add_2d(t, &b->v, I, Dm, i, 0, "SelfAttention.v");
    add_2d(t, &b->o, Dm, I, i, 0, "SelfAttention.o");
    dit_wtable_add(t, &b->ln_ff, false, 1, (int64_t[]){Dm}, T5_BLOCK "layer_norm.weight", i, 1);
    add_2d(t, &b->wi_0, F, Dm, i, 1, c->gated ? "DenseReluDense.wi_0" : "DenseReluDense.wi");
    if (c->gated) add_2d(t, &b->wi_1, F, Dm, i, 1, "DenseReluDense.wi_1");
    add_2d(t, &b->wo, Dm, F, i, 1, "DenseReluDense.wo");
  }
  return DIT_OK;
}

static dit_t5 *new_model(dit_backend *be, bool from_files) {
  dit_t5 *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->be = be;
  m->from_files = from_files;
  dit_act_space_init(&m->as, be);
  return m;
}

/* The embedding table bound from the files: shared.weight, else encoder.embed_tokens.weight. */
static dit_status pick_embedding(dit_t5 *m, const char *path, dit_error *err) {
  m->embed = m->shared.data ? &m->shared : m->embed_alt.data ? &m->embed_alt : NULL;
  if (!m->embed)
    return dit_errorf(err, DIT_ERR_FORMAT, "t5: %s: missing tensor %s (or %s)", path, T5_EMBED, T5_EMBED_ALT);
  return DIT_OK;
}

dit_status dit_t5_load(dit_backend *be, const char *path, dit_t5 **out, dit_error *err) {
  *out = NULL;
  if (!be || !path) return dit_errorf(err, DIT_ERR_INVALID_ARG, "t5: no backend or path given");
  struct stat st;
  if (stat(path, &st) != 0) return dit_errorf(err, DIT_ERR_IO, "t5: cannot read %s", path);
  char cfg_path[4096] = "";
  struct stat cs;
  if (S_ISDIR(st.st_mode)) {
    DIT_TRY(dit_model_config_path("t5", path, cfg_path, sizeof cfg_path, err));
    if (stat(cfg_path, &cs) != 0) cfg_path[0] = '\0';
  }
  dit_t5 *m = new_model(be, true);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "t5: out of memory");
  dit_status s = cfg_path[0] ? read_config_file(cfg_path, &m->cfg, err) : infer_config(path, &m->cfg, err);
  /* T5's activations overflow fp16 (diffusers keeps its wo in fp32): a device GEMM converts
   * its input to the weights' dtype, so fp16 weights (t5xxl_fp16) go to the device as bf16 */
  m->mw.upload = DIT_UPLOAD_F16_AS_BF16;
  if (s == DIT_OK) s = dit_model_weights_load(be, &m->mw, "t5", path, build_table, m, true, err);
  if (s == DIT_OK) s = pick_embedding(m, path, err);
  DIT_HAND_OVER(s, m, out, dit_t5_free);
}

dit_status dit_t5_create_random(dit_backend *be, const dit_t5_config *c, dit_dtype wdt, uint64_t seed, dit_t5 **out,
                                dit_error *err) {
  *out = NULL;
  if (!be || !c) return dit_errorf(err, DIT_ERR_INVALID_ARG, "t5 random: no backend or config given");
  DIT_TRY(check_config(c, "t5 random config", err));
  dit_t5 *m = new_model(be, false);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "t5: out of memory");
  m->cfg = *c;
  m->embed = &m->shared;
  dit_status s = dit_model_weights_random(be, &m->mw, "t5", build_table, m, wdt, seed, err);
  DIT_HAND_OVER(s, m, out, dit_t5_free);
}

void dit_t5_free(dit_t5 *m) {
  if (!m) return;
  dit_act_space_release(&m->as, m->be);
  dit_model_weights_release(m->be, &m->mw);
  free(m->blocks);
  free(m);
}

const dit_t5_config *dit_t5_get_config(const dit_t5 *m) { return m ? &m->cfg : NULL; }

dit_backend *dit_t5_backend(const dit_t5 *m) { return m ? m->be : NULL; }

size_t dit_t5_weight_bytes(const dit_t5 *m) { return m ? m->mw.wbytes : 0; }

/* ---- forward --------------------------------------------------------------------- */

/* Activations of one encode call (S tokens, I = heads * d_kv, H heads), carved from the
 * model's activation buffer. */
typedef struct t5_run {
  int S;
  float *x;          /* [S, Dm] residual stream */
  float *h;          /* [S, Dm] normed input / sublayer output */
  float *q, *k, *v;  /* [S, I] */
  float *kh;         /* [H, S, d_kv] keys by head */
  float *vt;         /* [H, d_kv, S] values by head, transposed */
  float *att;        /* [S, I] attention output */
  float *ff_a;       /* [S, F] activated wi_0 (or wi) */
  float *ff_b;       /* [S, F] wi_1 */
  float *sc;         /* [H, S, S] scores, then probabilities */
  float *bias;       /* [H, S, S] position bias (+ key mask) */
  int32_t *ids;      /* [S] */
  int32_t *buckets;  /* [S, S] bucket of (query, key) */
} t5_run;

/* Carves r out of a measuring or real arena. */
static dit_status plan(dit_arena *ar, const dit_t5_config *c, int S, t5_run *r, dit_error *err) {
  const bool real = ar->base != NULL;
  const size_t n = (size_t)S, Dm = (size_t)c->d_model, I = (size_t)c->num_heads * (size_t)c->d_kv;
  const size_t F = (size_t)c->d_ff, HSS = (size_t)c->num_heads * n * n, f = sizeof(float);
  memset(r, 0, sizeof *r);
  r->S = S;
  DIT_ACT_TAKE(ar, real, r->x, n * Dm * f);
  DIT_ACT_TAKE(ar, real, r->h, n * Dm * f);
  DIT_ACT_TAKE(ar, real, r->q, n * I * f);
  DIT_ACT_TAKE(ar, real, r->k, n * I * f);
  DIT_ACT_TAKE(ar, real, r->v, n * I * f);
  DIT_ACT_TAKE(ar, real, r->kh, n * I * f);
  DIT_ACT_TAKE(ar, real, r->vt, n * I * f);
  DIT_ACT_TAKE(ar, real, r->att, n * I * f);
  DIT_ACT_TAKE(ar, real, r->ff_a, n * F * f);
  if (c->gated) DIT_ACT_TAKE(ar, real, r->ff_b, n * F * f);
  DIT_ACT_TAKE(ar, real, r->sc, HSS * f);
  DIT_ACT_TAKE(ar, real, r->bias, HSS * f);
  DIT_ACT_TAKE(ar, real, r->ids, n * sizeof(int32_t));
  DIT_ACT_TAKE(ar, real, r->buckets, n * n * sizeof(int32_t));
  return DIT_OK;
}

/* A view over the model's backend memory (shape and strides in elements). */
static dit_tensor view(const dit_t5 *m, dit_dtype dt, void *p, int nd, const int64_t *shape, const int64_t *stride) {
  dit_tensor t = dit_act_mk(&m->as, dt, p, nd, shape);
  if (stride)
    for (int i = 0; i < nd; i++) t.stride[i] = stride[i];
  return t;
}

static dit_tensor act2(const dit_t5 *m, float *p, int64_t a, int64_t b) { return dit_act_2d(&m->as, p, a, b); }

/* (t5.h) In fp32 as the tensor math runs: float32 log, quotient and product, the divisor
 * log(max_distance / max_exact) a double rounded to fp32; then truncation. */
int dit_t5_relative_bucket(int rel, int num_buckets, int max_distance) {
  const int half = num_buckets / 2, max_exact = half / 2;
  int base = rel > 0 ? half : 0;
  int n = rel < 0 ? -rel : rel;
  if (n < max_exact) return base + n;
  const float ratio = (float)log((double)max_distance / (double)max_exact);
  float f = logf((float)n / (float)max_exact);
  f = f / ratio;
  f = f * (float)(half - max_exact);
  int large = max_exact + (int)f;
  return base + (large < half - 1 ? large : half - 1);
}

/* bias [H, S, S] = relative_attention_bias[bucket(key - query)] per head, plus -FLT_MAX
 * (torch.finfo(float32).min, as transformers' extended mask) at masked keys. The buckets
 * are made on the host and looked up with the embedding op into sc ([S*S, H]), which a copy
 * transposes into bias. */
static dit_status build_bias(dit_t5 *m, const t5_run *r, const uint8_t *mask, dit_error *err) {
  dit_backend *be = m->be;
  const dit_t5_config *c = &m->cfg;
  const int64_t S = r->S, SS = S * S, H = c->num_heads;
  int32_t *bk = m->as.host;
  for (int64_t i = 0; i < S; i++)
    for (int64_t j = 0; j < S; j++) bk[i * S + j] = dit_t5_relative_bucket((int)(j - i), c->num_buckets, c->max_distance);
  DIT_TRY(be->ops->upload(be, r->buckets, bk, (size_t)SS * sizeof *bk, err));
  dit_tensor ids = view(m, DIT_I32, r->buckets, 1, (int64_t[]){SS}, NULL);
  dit_tensor rows = act2(m, r->sc, SS, H);
  DIT_TRY(dit_op_embedding(be, &rows, &m->rel_bias, &ids, err));
  dit_tensor src = view(m, DIT_F32, r->sc, 2, (int64_t[]){H, SS}, (int64_t[]){1, H});
  dit_tensor bias = act2(m, r->bias, H, SS);
  DIT_TRY(dit_op_copy(be, &bias, &src, err));
  if (!mask) return DIT_OK;
  float *add = m->as.host;
  for (int64_t i = 0; i < S; i++)
    for (int64_t j = 0; j < S; j++) add[i * S + j] = mask[j] ? 0.0f : -FLT_MAX;
  DIT_TRY(be->ops->upload(be, r->sc, add, (size_t)SS * sizeof *add, err));
  dit_tensor madd = act2(m, r->sc, S, S);
  for (int64_t h = 0; h < H; h++) {
    dit_tensor bh = act2(m, r->bias + h * SS, S, S);
    DIT_TRY(dit_op_add(be, &bh, &bh, &madd, err));
  }
  return DIT_OK;
}

/* att = softmax(q k^T + bias) v per head, from r->q, r->k, r->v ([S, I]). Keys go to
 * [H, S, D] and values to [H, D, S] (contiguous copies), so that each head's q.k^T and
 * probabilities @ v are one linear with that head's block as the weight; q and att are read
 * and written as column slices. */
static dit_status attention(dit_t5 *m, const t5_run *r, dit_error *err) {
  dit_backend *be = m->be;
  const dit_t5_config *c = &m->cfg;
  const int64_t S = r->S, SS = S * S, H = c->num_heads, D = c->d_kv, I = H * D;
  dit_tensor ks = view(m, DIT_F32, r->k, 3, (int64_t[]){H, S, D}, (int64_t[]){D, I, 1});
  dit_tensor kh = dit_act_3d(&m->as, r->kh, H, S, D);
  DIT_TRY(dit_op_copy(be, &kh, &ks, err));
  dit_tensor vs = view(m, DIT_F32, r->v, 3, (int64_t[]){H, D, S}, (int64_t[]){D, 1, I});
  dit_tensor vt = dit_act_3d(&m->as, r->vt, H, D, S);
  DIT_TRY(dit_op_copy(be, &vt, &vs, err));
  for (int64_t h = 0; h < H; h++) {
    dit_tensor qh = view(m, DIT_F32, r->q + h * D, 2, (int64_t[]){S, D}, (int64_t[]){I, 1});
    dit_tensor kw = act2(m, r->kh + h * S * D, S, D);
    dit_tensor sh = act2(m, r->sc + h * SS, S, S);
    DIT_TRY(dit_op_linear(be, &sh, &qh, &kw, NULL, DIT_ACT_NONE, err));
  }
  dit_tensor sc = act2(m, r->sc, H * S, S), bias = act2(m, r->bias, H * S, S);
  DIT_TRY(dit_op_add(be, &sc, &sc, &bias, err));
  DIT_TRY(dit_op_softmax(be, &sc, &sc, err));
  for (int64_t h = 0; h < H; h++) {
    dit_tensor ph = act2(m, r->sc + h * SS, S, S);
    dit_tensor vw = act2(m, r->vt + h * D * S, D, S);
    dit_tensor ah = view(m, DIT_F32, r->att + h * D, 2, (int64_t[]){S, D}, (int64_t[]){I, 1});
    DIT_TRY(dit_op_linear(be, &ah, &ph, &vw, NULL, DIT_ACT_NONE, err));
  }
  return DIT_OK;
}

/* One block on r->x, in place:
 *   x += o(attention(q(n), k(n), v(n)))   n = rms_norm(x) * layer.0.layer_norm
 *   x += wo(act(wi_0(n)) * wi_1(n))       n = rms_norm(x) * layer.1.layer_norm
 * (not gated: x += wo(act(wi(n)))). */
static dit_status block_forward(dit_t5 *m, const t5_block *b, const t5_run *r, dit_error *err) {
  dit_backend *be = m->be;
  const dit_t5_config *c = &m->cfg;
  const int64_t S = r->S, Dm = c->d_model, I = (int64_t)c->num_heads * c->d_kv, F = c->d_ff;
  const float eps = c->layer_norm_epsilon;
  dit_tensor x = act2(m, r->x, S, Dm), h = act2(m, r->h, S, Dm);
  dit_tensor q = act2(m, r->q, S, I), k = act2(m, r->k, S, I), v = act2(m, r->v, S, I), att = act2(m, r->att, S, I);

  DIT_TRY(dit_op_rms_norm(be, &h, &x, &b->ln_attn, eps, err));
  DIT_TRY(dit_op_linear(be, &q, &h, &b->q, NULL, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &k, &h, &b->k, NULL, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &v, &h, &b->v, NULL, DIT_ACT_NONE, err));
  DIT_TRY(attention(m, r, err));
  DIT_TRY(dit_op_linear(be, &h, &att, &b->o, NULL, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_add(be, &x, &x, &h, err));

  dit_tensor fa = act2(m, r->ff_a, S, F), fb = act2(m, r->ff_b, S, F);
  DIT_TRY(dit_op_rms_norm(be, &h, &x, &b->ln_ff, eps, err));
  DIT_TRY(dit_op_linear(be, &fa, &h, &b->wi_0, NULL, c->act, err));
  if (c->gated) {
    DIT_TRY(dit_op_linear(be, &fb, &h, &b->wi_1, NULL, DIT_ACT_NONE, err));
    DIT_TRY(dit_op_mul(be, &fa, &fa, &fb, err));
  }
  DIT_TRY(dit_op_linear(be, &h, &fa, &b->wo, NULL, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_add(be, &x, &x, &h, err));
  return DIT_OK;
}

/* Copies hidden state src (index k) into every out[j] that asked for index k. */
static dit_status emit(dit_t5 *m, const t5_run *r, float *src, int k, int n_layers, const int *idx, float *const *out,
                       dit_error *err) {
  const int64_t S = r->S, Dm = m->cfg.d_model;
  dit_tensor s = act2(m, src, S, Dm);
  for (int j = 0; j < n_layers; j++) {
    if (idx[j] != k) continue;
    dit_tensor d = act2(m, out[j], S, Dm);
    DIT_TRY(dit_op_copy(m->be, &d, &s, err));
  }
  return DIT_OK;
}

/* Embedding, blocks 1..deepest, and the final norm when index L is asked for, writing
 * each requested hidden state as soon as it exists. */
static dit_status run_blocks(dit_t5 *m, const t5_run *r, int deepest, int n_layers, const int *idx, float *const *out,
                             dit_error *err) {
  const dit_t5_config *c = &m->cfg;
  dit_tensor x = act2(m, r->x, r->S, c->d_model), h = act2(m, r->h, r->S, c->d_model);
  dit_tensor ids = view(m, DIT_I32, r->ids, 1, (int64_t[]){r->S}, NULL);
  DIT_TRY(dit_op_embedding(m->be, &x, m->embed, &ids, err));
  DIT_TRY(emit(m, r, r->x, 0, n_layers, idx, out, err));
  const int last = deepest < c->num_layers ? deepest : c->num_layers;
  for (int i = 0; i < last; i++) {
    dit_status s = block_forward(m, &m->blocks[i], r, err);
    if (s != DIT_OK) {
      dit_error_prefix(err, "t5 encoder.block.%d", i);
      return s;
    }
    if (i + 1 < c->num_layers) DIT_TRY(emit(m, r, r->x, i + 1, n_layers, idx, out, err));
  }
  if (deepest < c->num_layers) return DIT_OK;
  DIT_TRY(dit_op_rms_norm(m->be, &h, &x, &m->final_ln, c->layer_norm_epsilon, err));
  return emit(m, r, r->h, c->num_layers, n_layers, idx, out, err);
}

/* Checks encode's arguments; resolves layer indices into idx (0..L), the deepest into
 * *deepest, and whether the mask hides any key into *masked. */
static dit_status check_args(const dit_t5 *m, int S, const int32_t *ids, const uint8_t *mask, int n_layers,
                             const int *layers, float *const *out, int *idx, int *deepest, bool *masked,
                             dit_error *err) {
  const dit_t5_config *c = &m->cfg;
  if (S < 1 || S > DIT_T5_MAX_TOKENS)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "t5 encode: %d tokens is outside [1, %d]", S, DIT_T5_MAX_TOKENS);
  if (!ids || !layers || !out || n_layers < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "t5 encode: no ids, no layers or no outputs");
  *deepest = 0;
  for (int j = 0; j < n_layers; j++) {
    int k = layers[j] < 0 ? c->num_layers + 1 + layers[j] : layers[j];
    if (k < 0 || k > c->num_layers)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "t5 encode: layers[%d] = %d is outside [-%d, %d]", j, layers[j],
                        c->num_layers + 1, c->num_layers);
    if (!out[j]) return dit_errorf(err, DIT_ERR_INVALID_ARG, "t5 encode: out[%d] is NULL", j);
    idx[j] = k;
    if (k > *deepest) *deepest = k;
  }
  *masked = false;
  for (int i = 0; i < S; i++) {
    if (ids[i] < 0 || ids[i] >= c->vocab_size)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "t5 encode: token id %d at %d is outside the vocabulary [0, %d)",
                        ids[i], i, c->vocab_size);
    if (mask && !mask[i]) *masked = true;
  }
  return DIT_OK;
}

dit_status dit_t5_cost(const dit_t5 *m, int S, dit_cost *out, dit_error *err) {
  if (!m || !out || S < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "t5 cost: bad arguments");
  const dit_t5_config *c = &m->cfg;
  t5_run r;
  dit_arena ar;
  dit_arena_init_measure(&ar);
  DIT_TRY(plan(&ar, c, S, &r, err));
  const double D = c->d_model, I = (double)c->num_heads * c->d_kv, F = c->d_ff, n = S;
  /* per block: q, k, v, o; the feed-forward (two input matrices when gated); QK^T and PV */
  out->flops = c->num_layers * (2.0 * n * (4.0 * D * I + (c->gated ? 3.0 : 2.0) * D * F) + 4.0 * n * n * I);
  out->act_bytes = ar.peak + ((size_t)S * (size_t)S * sizeof(float) + 63) / 64 * 64; /* + the bias table */
  return DIT_OK;
}

dit_status dit_t5_encode_hidden(dit_t5 *m, int S, const int32_t *ids, const uint8_t *mask, int n_layers,
                                const int *layers, float *const *out, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "t5 encode: no model");
  int *idx = malloc((size_t)(n_layers > 0 ? n_layers : 1) * sizeof *idx);
  if (!idx) return dit_errorf(err, DIT_ERR_NOMEM, "t5 encode: out of memory");
  int deepest = 0;
  bool masked = false;
  dit_status s = check_args(m, S, ids, mask, n_layers, layers, out, idx, &deepest, &masked, err);
  t5_run r;
  dit_arena ar;
  dit_arena_init_measure(&ar);
  bool grew = false;
  if (s == DIT_OK) s = plan(&ar, &m->cfg, S, &r, err);
  if (s == DIT_OK) s = dit_act_space_fit(&m->as, m->be, &ar, (size_t)S * (size_t)S * sizeof(float), &grew, err);
  if (s == DIT_OK) s = plan(&ar, &m->cfg, S, &r, err);
  if (s == DIT_OK) s = m->be->ops->upload(m->be, r.ids, ids, (size_t)S * sizeof *ids, err);
  if (s == DIT_OK) s = build_bias(m, &r, masked ? mask : NULL, err);
  if (s == DIT_OK) s = run_blocks(m, &r, deepest, n_layers, idx, out, err);
  if (s == DIT_OK) s = m->be->ops->sync(m->be, err);
  free(idx);
  return s;
}

dit_status dit_t5_encode(dit_t5 *m, int S, const int32_t *ids, float *last_hidden, dit_error *err) {
  const int last[1] = {-1};
  return dit_t5_encode_hidden(m, S, ids, NULL, 1, last, &last_hidden, err);
}

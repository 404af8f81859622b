/* Gemma 3 text encoder (see gemma3.h): config from config.json, weight table, and a forward
 * pass that reads like transformers' Gemma3TextModel, calling backend ops in order. */
#include "models/gemma3.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/dtype.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "models/model_weights.h"

#define GEMMA3_CONFIG_MAX_BYTES (16u << 20)

typedef struct gemma3_layer {
  dit_tensor input_layernorm, post_attention_layernorm;      /* [H]: (1 + w) after load */
  dit_tensor pre_feedforward_layernorm, post_feedforward_layernorm;
  dit_tensor q_proj, k_proj, v_proj, o_proj;                 /* [Hq*D, H], [Hkv*D, H] x2, [H, Hq*D] */
  dit_tensor q_norm, k_norm;                                 /* [D]: (1 + w) after load */
  dit_tensor gate_proj, up_proj, down_proj;                  /* [I, H] x2, [H, I] */
} gemma3_layer;

struct dit_gemma3 {
  dit_backend *be;
  dit_gemma3_config cfg;
  dit_weights *weights;
  void *wblock;            /* the files' weights in one allocation on a GPU */
  void *normblock;         /* every norm's (1 + w) in F32, in the backend's memory */
  dit_tensor embed_tokens; /* [V, H] */
  dit_tensor norm;         /* [H]: (1 + w) after load */
  float embed_scale;       /* sqrt(H), rounded to the table's dtype when that is bf16 / fp16 */
  gemma3_layer *layers;    /* [L] */
};

/* ---- config ---------------------------------------------------------------------- */

static dit_status get_int(const json_t *cfg, const char *key, int64_t min, int64_t max, int *v, bool optional,
                          const char *what, dit_error *err) {
  int64_t x = *v;
  DIT_TRY(optional ? dit_json_int_opt(cfg, key, min, max, &x, what, err)
                   : dit_json_int(cfg, key, min, max, &x, what, err));
  *v = (int)x;
  return DIT_OK;
}

/* One RoPE description: {rope_type: default | linear, rope_theta, factor}. */
static dit_status parse_rope_entry(const json_t *rp, const char *key, double *theta, double *factor, const char *what,
                                   dit_error *err) {
  if (!json_is_object(rp)) return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s must be an object", what, key);
  const char *type = "default";
  DIT_TRY(dit_json_string_opt(rp, "rope_type", &type, what, err));
  if (!json_object_get(rp, "rope_type")) DIT_TRY(dit_json_string_opt(rp, "type", &type, what, err));
  if (json_object_get(rp, "rope_theta")) DIT_TRY(dit_json_double(rp, "rope_theta", theta, what, err));
  if (strcmp(type, "linear") == 0) {
    DIT_TRY(dit_json_double(rp, "factor", factor, what, err));
    if (!(*factor >= 1.0) || *factor > 1e6)
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s.factor = %g must be in [1, 1e6]", what, key, *factor);
  } else if (strcmp(type, "default") != 0) {
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: %s.rope_type \"%s\" is not supported (default, linear)", what,
                      key, type);
  }
  return DIT_OK;
}

/* Layer kinds: layer_types, or every sliding_window_pattern-th layer global (the older
 * configs). RoPE: rope_parameters per layer kind, or rope_theta / rope_local_base_freq /
 * rope_scaling (which applies to the global layers). */
static dit_status parse_layers_and_rope(const json_t *cfg, dit_gemma3_config *c, const char *what, dit_error *err) {
  const json_t *lt = json_object_get(cfg, "layer_types");
  if (lt && !json_is_null(lt)) {
    if (!json_is_array(lt) || json_array_size(lt) != (size_t)c->num_layers)
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"layer_types\" must be an array of num_hidden_layers (%d)",
                        what, c->num_layers);
    for (int i = 0; i < c->num_layers; i++) {
      const char *t = json_string_value(json_array_get(lt, (size_t)i));
      if (t && !strcmp(t, "sliding_attention"))
        c->sliding[i] = true;
      else if (!t || strcmp(t, "full_attention"))
        return dit_errorf(err, DIT_ERR_FORMAT, "%s: layer_types[%d] = \"%s\" (sliding_attention or full_attention)",
                          what, i, t ? t : "(not a string)");
    }
  } else {
    int pattern = 6;
    DIT_TRY(get_int(cfg, "sliding_window_pattern", 1, 1024, &pattern, true, what, err));
    DIT_TRY(get_int(cfg, "_sliding_window_pattern", 1, 1024, &pattern, true, what, err));
    for (int i = 0; i < c->num_layers; i++) c->sliding[i] = (i + 1) % pattern != 0;
  }
  c->rope_global_theta = 1000000.0;
  c->rope_local_theta = 10000.0;
  c->rope_global_factor = 1.0;
  const json_t *rp = json_object_get(cfg, "rope_parameters");
  if (rp && !json_is_null(rp) && json_object_get(rp, "full_attention")) {
    double unused = 1.0;
    DIT_TRY(parse_rope_entry(json_object_get(rp, "full_attention"), "rope_parameters.full_attention",
                             &c->rope_global_theta, &c->rope_global_factor, what, err));
    const json_t *sl = json_object_get(rp, "sliding_attention");
    if (sl) DIT_TRY(parse_rope_entry(sl, "rope_parameters.sliding_attention", &c->rope_local_theta, &unused, what, err));
    if (unused != 1.0)
      return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: scaled RoPE on the sliding layers is not supported", what);
  } else {
    DIT_TRY(dit_json_double_opt(cfg, "rope_theta", &c->rope_global_theta, what, err));
    DIT_TRY(dit_json_double_opt(cfg, "rope_local_base_freq", &c->rope_local_theta, what, err));
    const json_t *rs = json_object_get(cfg, "rope_scaling");
    double theta = c->rope_global_theta;
    if (rs && !json_is_null(rs))
      DIT_TRY(parse_rope_entry(rs, "rope_scaling", &theta, &c->rope_global_factor, what, err));
  }
  if (!(c->rope_global_theta > 1.0) || c->rope_global_theta > 1e12 || !(c->rope_local_theta > 1.0) ||
      c->rope_local_theta > 1e12)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: RoPE bases %g (global) and %g (local) must be in (1, 1e12]", what,
                      c->rope_global_theta, c->rope_local_theta);
  return DIT_OK;
}

/* Features this implementation does not have must be absent or off. */
static dit_status check_unsupported(const json_t *cfg, const char *what, dit_error *err) {
  const char *s = NULL;
  DIT_TRY(dit_json_string_opt(cfg, "model_type", &s, what, err));
  if (s && strcmp(s, "gemma3_text") != 0 && strcmp(s, "gemma3") != 0)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: model_type \"%s\" is not Gemma 3's text model (gemma3_text)", what,
                      s);
  s = "gelu_pytorch_tanh";
  DIT_TRY(dit_json_string_opt(cfg, "hidden_activation", &s, what, err));
  if (strcmp(s, "gelu_pytorch_tanh") != 0)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: hidden_activation \"%s\" is not supported (gelu_pytorch_tanh)",
                      what, s);
  const json_t *cap = json_object_get(cfg, "attn_logit_softcapping");
  if (cap && !json_is_null(cap))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: attn_logit_softcapping is not supported (Gemma 3 has none)", what);
  bool b = false;
  DIT_TRY(dit_json_bool_opt(cfg, "use_bidirectional_attention", &b, what, err));
  if (b) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: use_bidirectional_attention = true is not supported", what);
  b = false;
  DIT_TRY(dit_json_bool_opt(cfg, "attention_bias", &b, what, err));
  if (b) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: attention_bias = true is not supported", what);
  return DIT_OK;
}

/* transformers' Gemma3TextConfig defaults fill what a sparse config leaves out. */
static dit_status parse_config(const json_t *cfg, dit_gemma3_config *c, const char *what, dit_error *err) {
  memset(c, 0, sizeof *c);
  const json_t *tc = json_object_get(cfg, "text_config");
  if (tc && !json_is_null(tc)) {
    if (!json_is_object(tc)) return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"text_config\" must be an object", what);
    cfg = tc;
  }
  c->hidden_size = 2304;
  c->num_layers = 26;
  c->num_heads = 8;
  c->num_kv_heads = 4;
  c->head_dim = 256;
  c->intermediate_size = 9216;
  c->vocab_size = 262208;
  c->max_position_embeddings = 131072;
  c->sliding_window = 4096;
  DIT_TRY(get_int(cfg, "hidden_size", 1, 65536, &c->hidden_size, true, what, err));
  DIT_TRY(get_int(cfg, "num_hidden_layers", 1, DIT_GEMMA3_MAX_LAYERS, &c->num_layers, true, what, err));
  DIT_TRY(get_int(cfg, "num_attention_heads", 1, 1024, &c->num_heads, true, what, err));
  DIT_TRY(get_int(cfg, "num_key_value_heads", 1, 1024, &c->num_kv_heads, true, what, err));
  DIT_TRY(get_int(cfg, "head_dim", 2, 1024, &c->head_dim, true, what, err));
  DIT_TRY(get_int(cfg, "intermediate_size", 1, 1 << 20, &c->intermediate_size, true, what, err));
  DIT_TRY(get_int(cfg, "vocab_size", 1, 1 << 24, &c->vocab_size, true, what, err));
  DIT_TRY(get_int(cfg, "max_position_embeddings", 1, 1 << 24, &c->max_position_embeddings, true, what, err));
  DIT_TRY(get_int(cfg, "sliding_window", 1, 1 << 24, &c->sliding_window, true, what, err));
  if (c->num_heads % c->num_kv_heads != 0)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: num_key_value_heads (%d) must divide num_attention_heads (%d)", what,
                      c->num_kv_heads, c->num_heads);
  if (c->head_dim % 2 != 0)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: head_dim = %d must be even (RoPE rotates pairs)", what, c->head_dim);
  if ((int64_t)c->num_heads * c->head_dim > 65536)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: num_attention_heads * head_dim is too large", what);
  double eps = 1e-6;
  DIT_TRY(dit_json_double_opt(cfg, "rms_norm_eps", &eps, what, err));
  if (!(eps > 0.0) || eps > 0.1)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: rms_norm_eps = %g must be in (0, 0.1]", what, eps);
  c->rms_norm_eps = (float)eps;
  c->query_pre_attn_scalar = 256.0;
  DIT_TRY(dit_json_double_opt(cfg, "query_pre_attn_scalar", &c->query_pre_attn_scalar, what, err));
  if (!(c->query_pre_attn_scalar > 0.0) || c->query_pre_attn_scalar > 1e9)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: query_pre_attn_scalar = %g must be positive", what,
                      c->query_pre_attn_scalar);
  DIT_TRY(parse_layers_and_rope(cfg, c, what, err));
  return check_unsupported(cfg, what, err);
}

/* ---- weights --------------------------------------------------------------------- */

/* A descriptor over the model's backend memory (device tag of its backend). */
static dit_tensor on_backend(const dit_gemma3 *m, dit_tensor t) {
  t.device = dit_backend_device(m->be);
  return t;
}

static void build_table(dit_gemma3 *m, dit_wtable *t) {
  const dit_gemma3_config *c = &m->cfg;
  int64_t H = c->hidden_size, D = c->head_dim, I = c->intermediate_size;
  int64_t QD = (int64_t)c->num_heads * D, KD = (int64_t)c->num_kv_heads * D;
  dit_wtable_add(t, &m->embed_tokens, false, 2, (int64_t[]){c->vocab_size, H}, "embed_tokens.weight");
  dit_wtable_add(t, &m->norm, false, 1, (int64_t[]){H}, "norm.weight");
  for (int i = 0; i < c->num_layers; i++) {
    gemma3_layer *l = &m->layers[i];
    struct { dit_tensor *dst; int nd; int64_t s0, s1; const char *name; } e[] = {
        {&l->input_layernorm, 1, H, 0, "input_layernorm"},
        {&l->post_attention_layernorm, 1, H, 0, "post_attention_layernorm"},
        {&l->pre_feedforward_layernorm, 1, H, 0, "pre_feedforward_layernorm"},
        {&l->post_feedforward_layernorm, 1, H, 0, "post_feedforward_layernorm"},
        {&l->q_proj, 2, QD, H, "self_attn.q_proj"},
        {&l->k_proj, 2, KD, H, "self_attn.k_proj"},
        {&l->v_proj, 2, KD, H, "self_attn.v_proj"},
        {&l->o_proj, 2, H, QD, "self_attn.o_proj"},
        {&l->q_norm, 1, D, 0, "self_attn.q_norm"},
        {&l->k_norm, 1, D, 0, "self_attn.k_norm"},
        {&l->gate_proj, 2, I, H, "mlp.gate_proj"},
        {&l->up_proj, 2, I, H, "mlp.up_proj"},
        {&l->down_proj, 2, H, I, "mlp.down_proj"},
    };
    for (size_t j = 0; j < sizeof e / sizeof *e; j++)
      dit_wtable_add(t, e[j].dst, false, e[j].nd, (int64_t[]){e[j].s0, e[j].s1}, "layers.%d.%s.weight", i, e[j].name);
  }
}

static const char *detect_prefix(const dit_weights *w) {
  static const char *const prefixes[] = {"model.language_model.", "language_model.model.", "model.", ""};
  for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
    char name[256];
    snprintf(name, sizeof name, "%sembed_tokens.weight", prefixes[i]);
    if (dit_weights_find(w, name)) return prefixes[i];
  }
  return "";
}

/* Every norm of the model, in one list (the final norm first). */
static int norm_list(dit_gemma3 *m, dit_tensor **out) {
  int n = 0;
  out[n++] = &m->norm;
  for (int i = 0; i < m->cfg.num_layers; i++) {
    gemma3_layer *l = &m->layers[i];
    dit_tensor *ls[] = {&l->input_layernorm, &l->post_attention_layernorm, &l->pre_feedforward_layernorm,
                        &l->post_feedforward_layernorm, &l->q_norm, &l->k_norm};
    for (size_t j = 0; j < sizeof ls / sizeof *ls; j++) out[n++] = ls[j];
  }
  return n;
}

/* Gemma's RMSNorm multiplies by (1 + w) in fp32: every norm weight becomes that F32 vector
 * once. fold_norms reads the files' host copies into *host and leaves the norms without data
 * (so a GPU upload of the table skips them); place_norms puts *host in one allocation of
 * the backend's memory and points the norms there. */
static dit_status fold_norms(dit_gemma3 *m, float **host, size_t *total, dit_error *err) {
  dit_tensor **norms = malloc((size_t)(1 + 6 * m->cfg.num_layers) * sizeof *norms);
  if (!norms) return dit_errorf(err, DIT_ERR_NOMEM, "gemma3: out of memory");
  int n = norm_list(m, norms);
  *total = 0;
  for (int i = 0; i < n; i++) *total += (size_t)dit_tensor_numel(norms[i]);
  float *h = *host = malloc(*total * sizeof *h);
  dit_status s = h ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "gemma3: out of memory for the norms");
  for (int i = 0, off = 0; i < n && s == DIT_OK; i++) {
    size_t k = (size_t)dit_tensor_numel(norms[i]);
    if (!dit_dtype_is_float(norms[i]->dtype)) {
      s = dit_errorf(err, DIT_ERR_FORMAT, "gemma3: a norm weight is stored as %s", dit_dtype_name(norms[i]->dtype));
      break;
    }
    dit_convert_to_f32(h + off, norms[i]->data, norms[i]->dtype, k);
    for (size_t j = 0; j < k; j++) h[off + j] = 1.0f + h[off + j];
    off += (int)k;
    norms[i]->data = NULL;
  }
  free(norms);
  return s;
}

static dit_status place_norms(dit_gemma3 *m, const float *host, size_t total, dit_error *err) {
  DIT_TRY(m->be->ops->alloc(m->be, total * sizeof *host, &m->normblock, err));
  DIT_TRY(m->be->ops->upload(m->be, m->normblock, host, total * sizeof *host, err));
  dit_tensor **norms = malloc((size_t)(1 + 6 * m->cfg.num_layers) * sizeof *norms);
  if (!norms) return dit_errorf(err, DIT_ERR_NOMEM, "gemma3: out of memory");
  int n = norm_list(m, norms);
  for (int i = 0, off = 0; i < n; i++) {
    dit_tensor *t = norms[i];
    *t = on_backend(m, dit_tensor_1d(DIT_F32, (float *)m->normblock + off, t->shape[0]));
    off += (int)t->shape[0];
  }
  free(norms);
  return DIT_OK;
}

static dit_status bind_weights(dit_gemma3 *m, const char *dir, dit_error *err) {
  DIT_TRY(dit_weights_open(dir, NULL, &m->weights, err));
  dit_wtable t;
  dit_wtable_init(&t);
  build_table(m, &t);
  static const char *const ignore[] = {"lm_head.", "model.vision_tower.", "model.multi_modal_projector.",
                                       "vision_tower.", "multi_modal_projector.", "language_model.lm_head.", NULL};
  const char *prefix = detect_prefix(m->weights);
  dit_status s = dit_wtable_bind(&t, m->weights, prefix, ignore, err);
  if (s == DIT_OK) s = dit_wtable_check_weights(&t, false, true, err);
  if (s != DIT_OK) dit_error_prefix(err, "%s (Gemma 3, names prefixed \"%s\")", dir, prefix);
  dit_dtype et = m->embed_tokens.dtype;
  float scale = sqrtf((float)m->cfg.hidden_size);
  if (et == DIT_BF16) scale = dit_bf16_to_f32(dit_f32_to_bf16(scale)); /* embed_scale.to(weight.dtype) */
  if (et == DIT_F16) scale = dit_f16_to_f32(dit_f32_to_f16(scale));
  m->embed_scale = scale;
  float *norms = NULL;
  size_t n_norm = 0;
  if (s == DIT_OK) s = fold_norms(m, &norms, &n_norm, err);
  if (s == DIT_OK && !dit_backend_is_host(m->be)) { /* a GPU: one upload, then the files are not needed */
    s = dit_backend_upload_wtable(m->be, &t, &m->wblock, err);
    if (s == DIT_OK) {
      dit_weights_close(m->weights);
      m->weights = NULL;
    }
  }
  if (s == DIT_OK) s = place_norms(m, norms, n_norm, err);
  free(norms);
  dit_wtable_free(&t);
  return s;
}

dit_status dit_gemma3_load(dit_backend *be, const char *component_dir, dit_gemma3 **out, dit_error *err) {
  *out = NULL;
  if (!be || !component_dir) return dit_errorf(err, DIT_ERR_INVALID_ARG, "gemma3: NULL backend or folder");
  char path[4096];
  DIT_TRY(dit_model_config_path("gemma3", component_dir, path, sizeof path, err));
  json_t *cfg = NULL;
  DIT_TRY(dit_json_load_file(path, GEMMA3_CONFIG_MAX_BYTES, &cfg, err));
  dit_gemma3 *m = calloc(1, sizeof *m);
  if (!m) {
    json_decref(cfg);
    return dit_errorf(err, DIT_ERR_NOMEM, "gemma3: out of memory");
  }
  m->be = be;
  dit_status s = parse_config(cfg, &m->cfg, path, err);
  json_decref(cfg);
  if (s == DIT_OK) {
    m->layers = calloc((size_t)m->cfg.num_layers, sizeof *m->layers);
    if (!m->layers) s = dit_errorf(err, DIT_ERR_NOMEM, "gemma3: out of memory for %d layers", m->cfg.num_layers);
  }
  if (s == DIT_OK) s = bind_weights(m, component_dir, err);
  DIT_HAND_OVER(s, m, out, dit_gemma3_free);
}

void dit_gemma3_free(dit_gemma3 *m) {
  if (!m) return;
  if (m->normblock) m->be->ops->free(m->be, m->normblock);
  if (m->wblock) m->be->ops->free(m->be, m->wblock);
  if (m->weights) dit_weights_close(m->weights);
  free(m->layers);
  free(m);
}

const dit_gemma3_config *dit_gemma3_get_config(const dit_gemma3 *m) { return m ? &m->cfg : NULL; }

dit_backend *dit_gemma3_backend(const dit_gemma3 *m) { return m ? m->be : NULL; }

/* ---- forward --------------------------------------------------------------------- */

/* Activations of one encode call, carved from one backend buffer. M = B*S rows. */
typedef struct gemma3_run {
  int B, S;
  int64_t M;
  float *x, *h;              /* [M, H] residual stream; normed input / branch output */
  float *q, *k, *v, *att;    /* [M, Hq*D], [M, Hkv*D] x2, [M, Hq*D] */
  float *gate, *up;          /* [M, I] */
  float *cos[2], *sin[2];    /* [S, D/2] for the local (0) and the global (1) RoPE */
  int32_t *ids;              /* [M] */
  uint8_t *mask;             /* [M] or NULL */
} gemma3_run;

static bool carve(dit_arena *a, const dit_gemma3_config *c, gemma3_run *r, bool with_mask, dit_error *err) {
  size_t M = (size_t)r->M, H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
  size_t QD = (size_t)c->num_heads * (size_t)c->head_dim, KD = (size_t)c->num_kv_heads * (size_t)c->head_dim;
  size_t half = (size_t)c->head_dim / 2, S = (size_t)r->S;
  bool measure = a->base == NULL;
#define CARVE(dst, type, n)                                    \
  do {                                                         \
    dst = (type *)dit_arena_alloc(a, (n) * sizeof(type), err); \
    if (!dst && !measure) return false;                        \
  } while (0)
  CARVE(r->x, float, M * H);
  CARVE(r->h, float, M * H);
  CARVE(r->q, float, M * QD);
  CARVE(r->k, float, M * KD);
  CARVE(r->v, float, M * KD);
  CARVE(r->att, float, M * QD);
  CARVE(r->gate, float, M * I);
  CARVE(r->up, float, M * I);
  for (int i = 0; i < 2; i++) {
    CARVE(r->cos[i], float, S * half);
    CARVE(r->sin[i], float, S * half);
  }
  CARVE(r->ids, int32_t, M);
  r->mask = NULL;
  if (with_mask) CARVE(r->mask, uint8_t, M);
#undef CARVE
  return true;
}

/* cos/sin [S, D/2] as transformers' Gemma3RotaryEmbedding: inv_freq = 1 / theta^(2i/D) in
 * fp32 (divided by the linear factor for the global layers), angle = pos * inv_freq in fp32. */
static dit_status upload_rope(dit_gemma3 *m, gemma3_run *r, dit_error *err) {
  int half = m->cfg.head_dim / 2;
  size_t n = (size_t)r->S * (size_t)half;
  float *tab = malloc(2 * n * sizeof *tab);
  if (!tab) return dit_errorf(err, DIT_ERR_NOMEM, "gemma3: out of memory for RoPE tables");
  dit_status s = DIT_OK;
  for (int g = 0; g < 2 && s == DIT_OK; g++) {
    float theta = (float)(g ? m->cfg.rope_global_theta : m->cfg.rope_local_theta), dim = (float)m->cfg.head_dim;
    float factor = g ? (float)m->cfg.rope_global_factor : 1.0f;
    for (int i = 0; i < half; i++) {
      float inv_freq = 1.0f / powf(theta, (float)(2 * i) / dim);
      if (factor != 1.0f) inv_freq /= factor;
      for (int p = 0; p < r->S; p++) {
        float ang = (float)p * inv_freq;
        tab[(size_t)p * half + i] = cosf(ang);
        tab[n + (size_t)p * half + i] = sinf(ang);
      }
    }
    s = m->be->ops->upload(m->be, r->cos[g], tab, n * sizeof *tab, err);
    if (s == DIT_OK) s = m->be->ops->upload(m->be, r->sin[g], tab + n, n * sizeof *tab, err);
  }
  free(tab);
  return s;
}

/* One decoder layer on r->x, in place:
 *   x += post_attention_layernorm(o_proj(attn(rope(q_norm(q_proj(n))), rope(k_norm(k_proj(n))), v_proj(n))))
 *        with n = input_layernorm(x)
 *   x += post_feedforward_layernorm(down_proj(gelu_tanh(gate_proj(n)) * up_proj(n)))
 *        with n = pre_feedforward_layernorm(x) */
static dit_status layer_forward(dit_gemma3 *m, const gemma3_layer *l, bool sliding, gemma3_run *r, dit_error *err) {
  dit_backend *be = m->be;
  const dit_gemma3_config *c = &m->cfg;
  int64_t B = r->B, S = r->S, M = r->M, H = c->hidden_size, D = c->head_dim, I = c->intermediate_size;
  int64_t Hq = c->num_heads, Hkv = c->num_kv_heads;
  float eps = c->rms_norm_eps;
  dit_tensor x = on_backend(m, dit_tensor_2d(DIT_F32, r->x, M, H)), h = on_backend(m, dit_tensor_2d(DIT_F32, r->h, M, H));
  dit_tensor q = on_backend(m, dit_tensor_2d(DIT_F32, r->q, M, Hq * D)), k = on_backend(m, dit_tensor_2d(DIT_F32, r->k, M, Hkv * D));
  dit_tensor v = on_backend(m, dit_tensor_2d(DIT_F32, r->v, M, Hkv * D));

  DIT_TRY(dit_op_rms_norm(be, &h, &x, &l->input_layernorm, eps, err));
  DIT_TRY(dit_op_linear(be, &q, &h, &l->q_proj, NULL, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &k, &h, &l->k_proj, NULL, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &v, &h, &l->v_proj, NULL, DIT_ACT_NONE, err));
  dit_tensor q4 = on_backend(m, dit_tensor_4d(DIT_F32, r->q, B, S, Hq, D)), k4 = on_backend(m, dit_tensor_4d(DIT_F32, r->k, B, S, Hkv, D));
  dit_tensor v4 = on_backend(m, dit_tensor_4d(DIT_F32, r->v, B, S, Hkv, D)), a4 = on_backend(m, dit_tensor_4d(DIT_F32, r->att, B, S, Hq, D));
  int g = sliding ? 0 : 1;
  dit_tensor cs = on_backend(m, dit_tensor_2d(DIT_F32, r->cos[g], S, D / 2)), sn = on_backend(m, dit_tensor_2d(DIT_F32, r->sin[g], S, D / 2));
  DIT_TRY(dit_op_rms_norm_rope(be, &q4, &l->q_norm, eps, &cs, &sn, DIT_ROPE_HALF, err));
  DIT_TRY(dit_op_rms_norm_rope(be, &k4, &l->k_norm, eps, &cs, &sn, DIT_ROPE_HALF, err));
  dit_tensor km = on_backend(m, dit_tensor_2d(DIT_U8, r->mask, B, S));
  float scale = (float)(1.0 / sqrt(c->query_pre_attn_scalar));
  DIT_TRY(dit_op_attention(be, &a4, &q4, &k4, &v4, r->mask ? &km : NULL, scale, true, err));

  dit_tensor att = on_backend(m, dit_tensor_2d(DIT_F32, r->att, M, Hq * D));
  DIT_TRY(dit_op_linear(be, &h, &att, &l->o_proj, NULL, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_rms_norm(be, &h, &h, &l->post_attention_layernorm, eps, err));
  DIT_TRY(dit_op_add(be, &x, &x, &h, err));

  dit_tensor gt = on_backend(m, dit_tensor_2d(DIT_F32, r->gate, M, I)), u = on_backend(m, dit_tensor_2d(DIT_F32, r->up, M, I));
  DIT_TRY(dit_op_rms_norm(be, &h, &x, &l->pre_feedforward_layernorm, eps, err));
  DIT_TRY(dit_op_linear(be, &gt, &h, &l->gate_proj, NULL, DIT_ACT_GELU_TANH, err));
  DIT_TRY(dit_op_linear(be, &u, &h, &l->up_proj, NULL, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_mul(be, &gt, &gt, &u, err));
  DIT_TRY(dit_op_linear(be, &h, &gt, &l->down_proj, NULL, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_rms_norm(be, &h, &h, &l->post_feedforward_layernorm, eps, err));
  DIT_TRY(dit_op_add(be, &x, &x, &h, err));
  return DIT_OK;
}

/* Writes hidden state k (src [M, H]) into out [M, H, L+1] at index k of the last axis. */
static dit_status emit(dit_gemma3 *m, const gemma3_run *r, const float *src, int k, float *out, dit_error *err) {
  int64_t H = m->cfg.hidden_size, K = m->cfg.num_layers + 1;
  dit_tensor s = on_backend(m, dit_tensor_2d(DIT_F32, (void *)src, r->M, H));
  dit_tensor d = on_backend(m, dit_tensor_2d(DIT_F32, out + k, r->M, H));
  d.stride[0] = H * K;
  d.stride[1] = K;
  return dit_op_copy(m->be, &d, &s, err);
}

/* B sequences of S tokens: within the positions and the sliding window. */
static dit_status check_len(const dit_gemma3_config *c, int B, int S, dit_error *err) {
  if (B < 1 || S < 1 || (int64_t)B * S > (1 << 24))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "gemma3 encode: batch %d x %d tokens is out of range", B, S);
  if (S > c->max_position_embeddings)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "gemma3 encode: %d tokens exceed max_position_embeddings (%d)", S,
                      c->max_position_embeddings);
  for (int i = 0; i < c->num_layers; i++)
    if (c->sliding[i] && S > c->sliding_window)
      return dit_errorf(err, DIT_ERR_UNSUPPORTED,
                        "gemma3 encode: %d tokens are more than the sliding window (%d); only prompts within the "
                        "window are supported", S, c->sliding_window);
  return DIT_OK;
}

static dit_status check_args(const dit_gemma3 *m, int B, int S, const int32_t *ids, const uint8_t *mask,
                             const float *out, bool *padded, dit_error *err) {
  const dit_gemma3_config *c = &m->cfg;
  DIT_TRY(check_len(c, B, S, err));
  if (!ids || !out) return dit_errorf(err, DIT_ERR_INVALID_ARG, "gemma3 encode: no ids or no output");
  *padded = false;
  for (int64_t i = 0; i < (int64_t)B * S; i++) {
    if (ids[i] < 0 || ids[i] >= c->vocab_size)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "gemma3 encode: token id %d at [%lld, %lld] is outside the "
                        "vocabulary [0, %d)", ids[i], (long long)(i / S), (long long)(i % S), c->vocab_size);
    if (mask && !mask[i]) *padded = true;
  }
  return DIT_OK;
}

static dit_status run_layers(dit_gemma3 *m, gemma3_run *r, float *out, dit_error *err) {
  const dit_gemma3_config *c = &m->cfg;
  dit_tensor x = on_backend(m, dit_tensor_2d(DIT_F32, r->x, r->M, c->hidden_size));
  dit_tensor ids = on_backend(m, dit_tensor_1d(DIT_I32, r->ids, r->M));
  DIT_TRY(dit_op_embedding(m->be, &x, &m->embed_tokens, &ids, err));
  DIT_TRY(dit_op_scale(m->be, &x, &x, m->embed_scale, err));
  DIT_TRY(emit(m, r, r->x, 0, out, err));
  for (int i = 0; i < c->num_layers; i++) {
    dit_status s = layer_forward(m, &m->layers[i], c->sliding[i], r, err);
    if (s != DIT_OK) {
      dit_error_prefix(err, "gemma3 layer %d", i);
      return s;
    }
    if (i + 1 < c->num_layers) DIT_TRY(emit(m, r, r->x, i + 1, out, err));
  }
  dit_tensor h = on_backend(m, dit_tensor_2d(DIT_F32, r->h, r->M, c->hidden_size));
  DIT_TRY(dit_op_rms_norm(m->be, &h, &x, &m->norm, c->rms_norm_eps, err));
  return emit(m, r, r->h, c->num_layers, out, err);
}

dit_status dit_gemma3_encode_all(dit_gemma3 *m, int B, int S, const int32_t *ids, const uint8_t *mask, float *out,
                                 dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "gemma3 encode: NULL model");
  bool padded = false;
  DIT_TRY(check_args(m, B, S, ids, mask, out, &padded, err));
  gemma3_run r = {.B = B, .S = S, .M = (int64_t)B * S};
  dit_arena a;
  dit_arena_init_measure(&a);
  void *buf = NULL;
  carve(&a, &m->cfg, &r, padded, err);
  dit_status s = m->be->ops->alloc(m->be, a.peak, &buf, err);
  if (s == DIT_OK) {
    size_t need = a.peak;
    memset(&a, 0, sizeof a);
    a.base = buf;
    a.cap = need;
    if (!carve(&a, &m->cfg, &r, padded, err)) s = DIT_ERR_INTERNAL;
  }
  if (s == DIT_OK) s = m->be->ops->upload(m->be, r.ids, ids, (size_t)r.M * sizeof *ids, err);
  if (s == DIT_OK && padded) s = m->be->ops->upload(m->be, r.mask, mask, (size_t)r.M, err);
  if (s == DIT_OK) s = upload_rope(m, &r, err);
  if (s == DIT_OK) s = run_layers(m, &r, out, err);
  if (s == DIT_OK) s = m->be->ops->sync(m->be, err);
  if (buf) m->be->ops->free(m->be, buf);
  return s;
}

dit_status dit_gemma3_cost(const dit_gemma3 *m, int B, int S, dit_cost *out, dit_error *err) {
  if (!m || !out) return dit_errorf(err, DIT_ERR_INVALID_ARG, "gemma3 cost: NULL argument");
  const dit_gemma3_config *c = &m->cfg;
  DIT_TRY(check_len(c, B, S, err));
  gemma3_run r = {.B = B, .S = S, .M = (int64_t)B * S};
  dit_arena a;
  dit_arena_init_measure(&a);
  carve(&a, c, &r, true, err); /* LTX-2's prompts are padded: the mask too */
  const double H = c->hidden_size, I = c->intermediate_size, QD = (double)c->num_heads * c->head_dim;
  const double KD = (double)c->num_kv_heads * c->head_dim, M = (double)r.M;
  out->act_bytes = a.peak + 2 * (size_t)S * (size_t)(c->head_dim / 2) * sizeof(float); /* upload_rope's table */
  out->flops = c->num_layers * (2.0 * M * (2 * H * QD + 2 * H * KD + 3 * H * I) + 4.0 * M * S * QD);
  return DIT_OK;
}

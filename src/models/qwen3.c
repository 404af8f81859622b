/* Qwen3 text encoder (see qwen3.h): config from config.json, weight table, and a
 * forward pass that reads like transformers' Qwen3Model, calling backend ops in order. */
#include "models/qwen3.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/dtype.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "models/model_weights.h"

#define QWEN3_CONFIG_MAX_BYTES (16u << 20)

typedef struct qwen3_layer {
  dit_tensor input_layernorm;          /* [H] */
  dit_tensor q_proj, q_proj_b;         /* [Hq*D, H], [Hq*D] (bias only with attention_bias) */
  dit_tensor k_proj, k_proj_b;         /* [Hkv*D, H], [Hkv*D] */
  dit_tensor v_proj, v_proj_b;         /* [Hkv*D, H], [Hkv*D] */
  dit_tensor o_proj, o_proj_b;         /* [H, Hq*D], [H] */
  dit_tensor q_norm;                   /* [D] */
  dit_tensor k_norm;                   /* [D] */
  dit_tensor post_attention_layernorm; /* [H] */
  dit_tensor gate_proj;                /* [I, H] */
  dit_tensor up_proj;                  /* [I, H] */
  dit_tensor down_proj;                /* [H, I] */
} qwen3_layer;

struct dit_qwen3 {
  dit_backend *be;
  dit_qwen3_config cfg;
  dit_weights *weights;
  void *wblock;            /* weights in one backend allocation: random ones, or the files' on a GPU */
  dit_tensor embed_tokens; /* [V, H] */
  dit_tensor norm;         /* [H] */
  qwen3_layer *layers;     /* [L] */
  bool stream;             /* each layer's mapped weights leave the resident set once it ran (dit_qwen3_set_stream) */
};

/* ---- config ---------------------------------------------------------------------- */

static dit_status get_int(const json_t *cfg, const char *key, int64_t min, int64_t max, int *out, bool optional,
                          const char *what, dit_error *err) {
  int64_t v = *out;
  if (optional)
    DIT_TRY(dit_json_int_opt(cfg, key, min, max, &v, what, err));
  else
    DIT_TRY(dit_json_int(cfg, key, min, max, &v, what, err));
  *out = (int)v;
  return DIT_OK;
}

/* RoPE: rope_parameters {rope_type, rope_theta} (transformers 5) or the legacy top-level
 * rope_theta with rope_scaling absent/null. Only the "default" type is supported. */
static dit_status parse_rope(const json_t *cfg, dit_qwen3_config *c, const char *what, dit_error *err) {
  const json_t *rp = json_object_get(cfg, "rope_parameters");
  bool have = false;
  if (rp && !json_is_null(rp)) {
    if (!json_is_object(rp))
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"rope_parameters\" must be an object", what);
    const char *type = "default";
    DIT_TRY(dit_json_string_opt(rp, "rope_type", &type, what, err));
    if (strcmp(type, "default") != 0)
      return dit_errorf(err, DIT_ERR_UNSUPPORTED,
                        "%s: rope_parameters.rope_type \"%s\" is not supported (only \"default\")", what, type);
    if (json_object_get(rp, "rope_theta")) {
      DIT_TRY(dit_json_double(rp, "rope_theta", &c->rope_theta, what, err));
      have = true;
    }
  }
  const json_t *rs = json_object_get(cfg, "rope_scaling");
  if (rs && !json_is_null(rs)) {
    const char *type = "default";
    if (json_is_object(rs)) {
      DIT_TRY(dit_json_string_opt(rs, "rope_type", &type, what, err));
      if (!json_object_get(rs, "rope_type")) DIT_TRY(dit_json_string_opt(rs, "type", &type, what, err));
    }
    if (!json_is_object(rs) || strcmp(type, "default") != 0)
      return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: field \"rope_scaling\" (type \"%s\") is not supported", what,
                        type);
  }
  if (!have) {
    if (!json_object_get(cfg, "rope_theta"))
      return dit_errorf(err, DIT_ERR_FORMAT,
                        "%s: missing field \"rope_parameters.rope_theta\" (or legacy \"rope_theta\")", what);
    DIT_TRY(dit_json_double(cfg, "rope_theta", &c->rope_theta, what, err));
  }
  /* Qwen3-VL's multimodal RoPE: the rotary pairs are split among (t, h, w) position axes
   * (mrope_section, interleaved or not). A text-only input gives every axis the same
   * position, so every pair rotates by position * inv_freq as plain RoPE does, whatever the
   * split: the sections only have to cover the head's pairs. */
  const json_t *ms = rp && json_is_object(rp) ? json_object_get(rp, "mrope_section") : NULL;
  if (ms && !json_is_null(ms)) {
    int64_t sec[8];
    size_t n = 0;
    DIT_TRY(dit_json_int_array(rp, "mrope_section", 0, 1 << 16, sec, 8, &n, what, err));
    c->mrope_pairs = 0;
    for (size_t i = 0; i < n; i++) c->mrope_pairs += (int)sec[i];
  }
  if (!(c->rope_theta > 1.0) || c->rope_theta > 1e12)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: rope_theta = %g must be in (1, 1e12]", what, c->rope_theta);
  return DIT_OK;
}

/* Features this implementation does not have must be absent or off in the config. */
static dit_status check_unsupported(const json_t *cfg, const dit_qwen3_config *c, const char *what, dit_error *err) {
  const char *s = NULL;
  DIT_TRY(dit_json_string_opt(cfg, "model_type", &s, what, err));
  if (s && strcmp(s, "qwen3") != 0 && strcmp(s, "qwen3_vl_text") != 0)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: model_type \"%s\" is not \"qwen3\" (or Qwen3-VL's \"qwen3_vl_text\")",
                      what, s);
  if (c->mrope_pairs && c->mrope_pairs != c->head_dim / 2)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: rope_parameters.mrope_section sums to %d, expected head_dim / 2 = %d", what,
                      c->mrope_pairs, c->head_dim / 2);
  s = "silu";
  DIT_TRY(dit_json_string_opt(cfg, "hidden_act", &s, what, err));
  if (strcmp(s, "silu") != 0)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: hidden_act \"%s\" is not supported (only \"silu\")", what, s);
  bool sliding = false;
  DIT_TRY(dit_json_bool_opt(cfg, "use_sliding_window", &sliding, what, err));
  if (sliding) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: use_sliding_window = true is not supported", what);
  const json_t *lt = json_object_get(cfg, "layer_types");
  if (lt && !json_is_null(lt)) {
    if (!json_is_array(lt) || json_array_size(lt) != (size_t)c->num_layers)
      return dit_errorf(err, DIT_ERR_FORMAT,
                        "%s: field \"layer_types\" must be an array of num_hidden_layers (%d) strings", what,
                        c->num_layers);
    for (size_t i = 0; i < json_array_size(lt); i++) {
      const char *t = json_string_value(json_array_get(lt, i));
      if (!t || strcmp(t, "full_attention") != 0)
        return dit_errorf(err, DIT_ERR_UNSUPPORTED,
                          "%s: layer_types[%zu] = \"%s\" is not supported (only \"full_attention\")", what, i,
                          t ? t : "(not a string)");
    }
  }
  return DIT_OK;
}

static dit_status parse_config(const json_t *cfg, dit_qwen3_config *c, const char *what, dit_error *err) {
  memset(c, 0, sizeof *c);
  /* Qwen3-VL (Qwen3VLModel, Qwen3VLForConditionalGeneration): the language model's config is
   * its text_config; the vision tower is not run (text-only prompts). */
  const json_t *tc = json_object_get(cfg, "text_config");
  if (tc && !json_is_null(tc)) {
    if (!json_is_object(tc)) return dit_errorf(err, DIT_ERR_FORMAT, "%s: field \"text_config\" must be an object", what);
    cfg = tc;
  }
  DIT_TRY(get_int(cfg, "hidden_size", 1, 65536, &c->hidden_size, false, what, err));
  DIT_TRY(get_int(cfg, "num_hidden_layers", 1, 1024, &c->num_layers, false, what, err));
  DIT_TRY(get_int(cfg, "num_attention_heads", 1, 1024, &c->num_heads, false, what, err));
  c->num_kv_heads = c->num_heads;
  DIT_TRY(get_int(cfg, "num_key_value_heads", 1, 1024, &c->num_kv_heads, true, what, err));
  if (c->num_heads % c->num_kv_heads != 0)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: num_key_value_heads (%d) must divide num_attention_heads (%d)", what,
                      c->num_kv_heads, c->num_heads);
  c->head_dim = 0;
  DIT_TRY(get_int(cfg, "head_dim", 2, 1024, &c->head_dim, true, what, err));
  if (c->head_dim == 0) {
    if (c->hidden_size % c->num_heads != 0)
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: no head_dim, and hidden_size (%d) is not a multiple of "
                        "num_attention_heads (%d)", what, c->hidden_size, c->num_heads);
    c->head_dim = c->hidden_size / c->num_heads;
  }
  if (c->head_dim % 2 != 0)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: head_dim = %d must be even (RoPE rotates pairs)", what, c->head_dim);
  if ((int64_t)c->num_heads * c->head_dim > 65536)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: num_attention_heads * head_dim = %lld is too large", what,
                      (long long)c->num_heads * c->head_dim);
  DIT_TRY(get_int(cfg, "intermediate_size", 1, 1 << 20, &c->intermediate_size, false, what, err));
  DIT_TRY(get_int(cfg, "vocab_size", 1, 1 << 24, &c->vocab_size, false, what, err));
  c->max_position_embeddings = 32768;
  DIT_TRY(get_int(cfg, "max_position_embeddings", 1, 1 << 24, &c->max_position_embeddings, true, what, err));
  double eps = 1e-6;
  DIT_TRY(dit_json_double_opt(cfg, "rms_norm_eps", &eps, what, err));
  if (!(eps > 0.0) || eps > 0.1)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: rms_norm_eps = %g must be in (0, 0.1]", what, eps);
  c->rms_norm_eps = (float)eps;
  DIT_TRY(dit_json_bool_opt(cfg, "attention_bias", &c->attention_bias, what, err));
  c->rope_freq_dtype = DIT_F32;
  DIT_TRY(parse_rope(cfg, c, what, err));
  return check_unsupported(cfg, c, what, err);
}

/* ---- weights --------------------------------------------------------------------- */

static void add_linear(dit_wtable *t, dit_tensor *w, dit_tensor *b, bool bias, int64_t n, int64_t k, const char *fmt,
                       int i) {
  char name[DIT_WNAME_MAX];
  snprintf(name, sizeof name, fmt, i);
  dit_wtable_add(t, w, false, 2, (int64_t[]){n, k}, "%s.weight", name);
  if (bias) dit_wtable_add(t, b, false, 1, (int64_t[]){n}, "%s.bias", name);
}

static void build_table(dit_qwen3 *m, dit_wtable *t) {
  const dit_qwen3_config *c = &m->cfg;
  int64_t H = c->hidden_size, D = c->head_dim, I = c->intermediate_size;
  int64_t QD = (int64_t)c->num_heads * D, KD = (int64_t)c->num_kv_heads * D;
  bool b = c->attention_bias;
  dit_wtable_add(t, &m->embed_tokens, false, 2, (int64_t[]){c->vocab_size, H}, "embed_tokens.weight");
  dit_wtable_add(t, &m->norm, false, 1, (int64_t[]){H}, "norm.weight");
  for (int i = 0; i < c->num_layers; i++) {
    qwen3_layer *l = &m->layers[i];
    dit_wtable_add(t, &l->input_layernorm, false, 1, (int64_t[]){H}, "layers.%d.input_layernorm.weight", i);
    dit_wtable_add(t, &l->post_attention_layernorm, false, 1, (int64_t[]){H},
                   "layers.%d.post_attention_layernorm.weight", i);
    add_linear(t, &l->q_proj, &l->q_proj_b, b, QD, H, "layers.%d.self_attn.q_proj", i);
    add_linear(t, &l->k_proj, &l->k_proj_b, b, KD, H, "layers.%d.self_attn.k_proj", i);
    add_linear(t, &l->v_proj, &l->v_proj_b, b, KD, H, "layers.%d.self_attn.v_proj", i);
    add_linear(t, &l->o_proj, &l->o_proj_b, b, H, QD, "layers.%d.self_attn.o_proj", i);
    dit_wtable_add(t, &l->q_norm, false, 1, (int64_t[]){D}, "layers.%d.self_attn.q_norm.weight", i);
    dit_wtable_add(t, &l->k_norm, false, 1, (int64_t[]){D}, "layers.%d.self_attn.k_norm.weight", i);
    dit_wtable_add(t, &l->gate_proj, false, 2, (int64_t[]){I, H}, "layers.%d.mlp.gate_proj.weight", i);
    dit_wtable_add(t, &l->up_proj, false, 2, (int64_t[]){I, H}, "layers.%d.mlp.up_proj.weight", i);
    dit_wtable_add(t, &l->down_proj, false, 2, (int64_t[]){H, I}, "layers.%d.mlp.down_proj.weight", i);
  }
}

/* Qwen3ForCausalLM stores "model.layers..." (+ lm_head), Qwen3Model bare "layers...";
 * Qwen3-VL's language model is "language_model." (Qwen3VLModel) or "model.language_model."
 * (Qwen3VLForConditionalGeneration), beside its vision tower. */
static const char *detect_prefix(const dit_weights *w) {
  if (dit_weights_find(w, "model.language_model.embed_tokens.weight")) return "model.language_model.";
  if (dit_weights_find(w, "language_model.embed_tokens.weight")) return "language_model.";
  if (dit_weights_find(w, "model.embed_tokens.weight")) return "model.";
  if (dit_weights_find(w, "embed_tokens.weight")) return "";
  for (size_t i = 0; i < w->n_tensors; i++)
    if (!strncmp(w->tensors[i]->name, "model.", 6)) return "model.";
  return "";
}

/* llama.cpp's names (its GGUF files of Qwen3) as transformers' Qwen3Model names. Its
 * converter stores Qwen3's q and k projections unpermuted (only LLaMA's are permuted). */
static const dit_wrename llama_cpp_names[] = {
    {"blk.", "layers.", NULL},
    {"attn_q_norm.", "self_attn.q_norm.", NULL},
    {"attn_k_norm.", "self_attn.k_norm.", NULL},
    {"attn_norm.", "input_layernorm.", NULL},
    {"attn_q.", "self_attn.q_proj.", NULL},
    {"attn_k.", "self_attn.k_proj.", NULL},
    {"attn_v.", "self_attn.v_proj.", NULL},
    {"attn_output.", "self_attn.o_proj.", NULL},
    {"ffn_norm.", "post_attention_layernorm.", NULL},
    {"ffn_gate.", "mlp.gate_proj.", NULL},
    {"ffn_up.", "mlp.up_proj.", NULL},
    {"ffn_down.", "mlp.down_proj.", NULL},
    {"token_embd.", "embed_tokens.", NULL},
    {"output_norm.", "norm.", NULL},
    {"output.", "lm_head.", NULL},
};

static const dit_wrename to_llama_cpp[] = {
    {"^layers.", "blk.", NULL},
    {"self_attn.q_norm.", "attn_q_norm.", NULL},
    {"self_attn.k_norm.", "attn_k_norm.", NULL},
    {"input_layernorm.", "attn_norm.", NULL},
    {"self_attn.q_proj.", "attn_q.", NULL},
    {"self_attn.k_proj.", "attn_k.", NULL},
    {"self_attn.v_proj.", "attn_v.", NULL},
    {"self_attn.o_proj.", "attn_output.", NULL},
    {"post_attention_layernorm.", "ffn_norm.", NULL},
    {"mlp.gate_proj.", "ffn_gate.", NULL},
    {"mlp.up_proj.", "ffn_up.", NULL},
    {"mlp.down_proj.", "ffn_down.", NULL},
    {"^embed_tokens.", "token_embd.", NULL},
    {"^norm.", "output_norm.", NULL},
};
static const char *const export_drop[] = {"lm_head.weight", NULL};
const dit_wexport dit_qwen3_export = {
    "qwen3", "model.", to_llama_cpp, sizeof to_llama_cpp / sizeof *to_llama_cpp, false, NULL, 0, export_drop, NULL, 0};

static dit_status bind_weights(dit_qwen3 *m, const char *dir, dit_error *err) {
  DIT_TRY(dit_weights_open(dir, NULL, &m->weights, err));
  if (dit_weights_find(m->weights, "blk.0.attn_q.weight")) {
    dit_wremap r = {NULL, llama_cpp_names, sizeof llama_cpp_names / sizeof *llama_cpp_names, NULL, 0, NULL, NULL};
    dit_status s = dit_weights_remap(m->weights, &r, err);
    if (s != DIT_OK) {
      dit_error_prefix(err, "%s (Qwen3, llama.cpp names)", dir);
      return s;
    }
  }
  dit_wtable t;
  dit_wtable_init(&t);
  build_table(m, &t);
  static const char *const ignore[] = {"lm_head.", "visual.", "model.visual.", NULL};
  const char *prefix = detect_prefix(m->weights);
  dit_status s = dit_wtable_bind(&t, m->weights, prefix, ignore, err);
  if (s != DIT_OK) {
    dit_error_prefix(err, "%s (Qwen3, names %s%s%s)", dir, *prefix ? "prefixed \"" : "without prefix", prefix,
                     *prefix ? "\"" : "");
  } else {
    s = dit_wtable_check_weights(&t, false, true, err);
    if (s != DIT_OK) dit_error_prefix(err, "%s (Qwen3)", dir);
  }
  if (s == DIT_OK && !dit_backend_is_host(m->be)) { /* a GPU: one upload, then the files are not needed */
    s = dit_backend_upload_wtable(m->be, &t, &m->wblock, err);
    if (s == DIT_OK) {
      dit_weights_close(m->weights);
      m->weights = NULL;
    }
  }
  dit_wtable_free(&t);
  return s;
}

dit_status dit_qwen3_load_from(dit_backend *be, const char *weights, const char *config_json, dit_qwen3 **out,
                               dit_error *err) {
  *out = NULL;
  if (!be || !weights || !config_json)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "qwen3: NULL backend, weights or config");
  json_t *cfg = NULL;
  DIT_TRY(dit_json_load_file(config_json, QWEN3_CONFIG_MAX_BYTES, &cfg, err));
  dit_qwen3 *m = calloc(1, sizeof *m);
  if (!m) {
    json_decref(cfg);
    return dit_errorf(err, DIT_ERR_NOMEM, "qwen3: out of memory");
  }
  m->be = be;
  dit_status s = parse_config(cfg, &m->cfg, config_json, err);
  json_decref(cfg);
  if (s == DIT_OK) {
    m->layers = calloc((size_t)m->cfg.num_layers, sizeof *m->layers);
    if (!m->layers) s = dit_errorf(err, DIT_ERR_NOMEM, "qwen3: out of memory for %d layers", m->cfg.num_layers);
  }
  if (s == DIT_OK) s = bind_weights(m, weights, err);
  DIT_HAND_OVER(s, m, out, dit_qwen3_free);
}

dit_status dit_qwen3_load(dit_backend *be, const char *component_dir, dit_qwen3 **out, dit_error *err) {
  *out = NULL;
  if (!be || !component_dir) return dit_errorf(err, DIT_ERR_INVALID_ARG, "qwen3: NULL backend or folder");
  char path[4096];
  if (snprintf(path, sizeof path, "%s/config.json", component_dir) >= (int)sizeof path)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "qwen3: folder path too long");
  return dit_qwen3_load_from(be, component_dir, path, out, err);
}

dit_status dit_qwen3_create_random(dit_backend *be, const dit_qwen3_config *c, dit_dtype wdt, uint64_t seed,
                                   dit_qwen3 **out, dit_error *err) {
  *out = NULL;
  if (!be || !c) return dit_errorf(err, DIT_ERR_INVALID_ARG, "qwen3 random: NULL backend or config");
  if (c->hidden_size < 1 || c->num_layers < 1 || c->num_layers > 1024 || c->num_heads < 1 || c->num_kv_heads < 1 ||
      c->num_heads % c->num_kv_heads || c->head_dim < 2 || c->head_dim % 2 || c->intermediate_size < 1 ||
      c->vocab_size < 1 || c->max_position_embeddings < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "qwen3 random: a size of the config is out of range");
  dit_qwen3 *m = calloc(1, sizeof *m);
  if (!m) return dit_errorf(err, DIT_ERR_NOMEM, "qwen3: out of memory");
  m->be = be;
  m->cfg = *c;
  m->layers = calloc((size_t)c->num_layers, sizeof *m->layers);
  dit_status s = m->layers ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "qwen3: out of memory for the layers");
  if (s == DIT_OK) {
    dit_wtable t;
    dit_wtable_init(&t);
    build_table(m, &t);
    s = dit_backend_random_wtable(be, &t, wdt, 0, seed, &m->wblock, err);
    dit_wtable_free(&t);
    if (s != DIT_OK) dit_error_prefix(err, "qwen3 random weights");
  }
  DIT_HAND_OVER(s, m, out, dit_qwen3_free);
}

void dit_qwen3_free(dit_qwen3 *m) {
  if (!m) return;
  if (m->wblock) m->be->ops->free(m->be, m->wblock);
  if (m->weights) dit_weights_close(m->weights);
  free(m->layers);
  free(m);
}

const dit_qwen3_config *dit_qwen3_get_config(const dit_qwen3 *m) { return m ? &m->cfg : NULL; }

dit_backend *dit_qwen3_backend(const dit_qwen3 *m) { return m ? m->be : NULL; }

dit_status dit_qwen3_set_rope_freq_dtype(dit_qwen3 *m, dit_dtype dt, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "qwen3: NULL model");
  if (dt != DIT_F32 && dt != DIT_BF16 && dt != DIT_F16)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "qwen3: RoPE frequencies in %s are not supported (F32, BF16, F16)",
                      dit_dtype_name(dt));
  m->cfg.rope_freq_dtype = dt;
  return DIT_OK;
}

/* ---- forward --------------------------------------------------------------------- */

/* Activations of one encode call, carved from one backend buffer. M = B*S rows. */
typedef struct qwen3_run {
  int B, S;
  int64_t M;
  float *x;        /* [M, H] residual stream */
  float *h;        /* [M, H] normed input / o_proj output */
  float *q;        /* [M, Hq*D] */
  float *k;        /* [M, Hkv*D] */
  float *v;        /* [M, Hkv*D] */
  float *att;      /* [M, Hq*D] attention output */
  float *gate;     /* [M, I] */
  float *up;       /* [M, I] */
  float *cos, *sin; /* [B, S, D/2] */
  int32_t *ids;    /* [M] */
  uint8_t *mask;   /* [M] or NULL */
} qwen3_run;

/* Carves r's buffers from a (measuring or real) arena. Returns false when full. */
static bool carve(dit_arena *a, const dit_qwen3_config *c, qwen3_run *r, bool with_mask, dit_error *err) {
  size_t M = (size_t)r->M, H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
  size_t QD = (size_t)c->num_heads * (size_t)c->head_dim, KD = (size_t)c->num_kv_heads * (size_t)c->head_dim;
  size_t half = (size_t)c->head_dim / 2;
  bool measure = a->base == NULL;
#define CARVE(dst, type, n)                                     \
  do {                                                          \
    dst = (type *)dit_arena_alloc(a, (n) * sizeof(type), err);  \
    if (!dst && !measure) return false;                         \
  } while (0)
  CARVE(r->x, float, M * H);
  CARVE(r->h, float, M * H);
  CARVE(r->q, float, M * QD);
  CARVE(r->k, float, M * KD);
  CARVE(r->v, float, M * KD);
  CARVE(r->att, float, M * QD);
  CARVE(r->gate, float, M * I);
  CARVE(r->up, float, M * I);
  CARVE(r->cos, float, M * half);
  CARVE(r->sin, float, M * half);
  CARVE(r->ids, int32_t, M);
  r->mask = NULL;
  if (with_mask) CARVE(r->mask, uint8_t, M);
#undef CARVE
  return true;
}

/* cos/sin tables [B, S, D/2] for positions 0..S-1, inv_freq as transformers' default
 * RoPE computes it in fp32: 1 / theta^(2i/D) (then held in cfg.rope_freq_dtype),
 * angle = pos * inv_freq rounded to fp32. */
static dit_status upload_rope(dit_qwen3 *m, qwen3_run *r, dit_error *err) {
  int half = m->cfg.head_dim / 2;
  size_t n = (size_t)r->M * (size_t)half;
  float *tab = malloc(2 * n * sizeof *tab);
  if (!tab) return dit_errorf(err, DIT_ERR_NOMEM, "qwen3: out of memory for RoPE tables");
  float theta = (float)m->cfg.rope_theta, dim = (float)m->cfg.head_dim;
  for (int i = 0; i < half; i++) {
    float inv_freq = 1.0f / powf(theta, (float)(2 * i) / dim);
    if (m->cfg.rope_freq_dtype == DIT_BF16) inv_freq = dit_bf16_to_f32(dit_f32_to_bf16(inv_freq));
    if (m->cfg.rope_freq_dtype == DIT_F16) inv_freq = dit_f16_to_f32(dit_f32_to_f16(inv_freq));
    for (int s = 0; s < r->S; s++) {
      float ang = (float)s * inv_freq;
      tab[(size_t)s * half + i] = cosf(ang);
      tab[n + (size_t)s * half + i] = sinf(ang);
    }
  }
  size_t row = (size_t)r->S * (size_t)half * sizeof(float);
  dit_status s = DIT_OK;
  for (int b = 0; b < r->B && s == DIT_OK; b++) {
    s = m->be->ops->upload(m->be, (char *)r->cos + b * row, tab, row, err);
    if (s == DIT_OK) s = m->be->ops->upload(m->be, (char *)r->sin + b * row, tab + n, row, err);
  }
  free(tab);
  return s;
}

/* One decoder layer on r->x, in place:
 *   x += o_proj(attn(rope(q_norm(q_proj(n))), rope(k_norm(k_proj(n))), v_proj(n)))  n = input_layernorm(x)
 *   x += down_proj(silu(gate_proj(n)) * up_proj(n))                                 n = post_attention_layernorm(x) */
/* A descriptor over the model's backend memory (device tag of its backend). */
static dit_tensor on(const dit_qwen3 *m, dit_tensor t) {
  t.device = dit_backend_device(m->be);
  return t;
}

static dit_status layer_forward(dit_qwen3 *m, const qwen3_layer *l, qwen3_run *r, dit_error *err) {
  dit_backend *be = m->be;
  const dit_qwen3_config *c = &m->cfg;
  int64_t B = r->B, S = r->S, M = r->M, H = c->hidden_size, D = c->head_dim, I = c->intermediate_size;
  int64_t Hq = c->num_heads, Hkv = c->num_kv_heads;
  float eps = c->rms_norm_eps;
  dit_tensor x = on(m, dit_tensor_2d(DIT_F32, r->x, M, H)), h = on(m, dit_tensor_2d(DIT_F32, r->h, M, H));
  dit_tensor q = on(m, dit_tensor_2d(DIT_F32, r->q, M, Hq * D)), k = on(m, dit_tensor_2d(DIT_F32, r->k, M, Hkv * D));
  dit_tensor v = on(m, dit_tensor_2d(DIT_F32, r->v, M, Hkv * D));
  const dit_tensor *no = NULL;

  DIT_TRY(dit_op_rms_norm(be, &h, &x, &l->input_layernorm, eps, err));
  DIT_TRY(dit_op_linear(be, &q, &h, &l->q_proj, c->attention_bias ? &l->q_proj_b : no, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &k, &h, &l->k_proj, c->attention_bias ? &l->k_proj_b : no, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &v, &h, &l->v_proj, c->attention_bias ? &l->v_proj_b : no, DIT_ACT_NONE, err));

  dit_tensor q_rows = on(m, dit_tensor_2d(DIT_F32, r->q, M * Hq, D)), k_rows = on(m, dit_tensor_2d(DIT_F32, r->k, M * Hkv, D));
  DIT_TRY(dit_op_rms_norm(be, &q_rows, &q_rows, &l->q_norm, eps, err));
  DIT_TRY(dit_op_rms_norm(be, &k_rows, &k_rows, &l->k_norm, eps, err));

  dit_tensor q4 = on(m, dit_tensor_4d(DIT_F32, r->q, B, S, Hq, D)), k4 = on(m, dit_tensor_4d(DIT_F32, r->k, B, S, Hkv, D));
  dit_tensor v4 = on(m, dit_tensor_4d(DIT_F32, r->v, B, S, Hkv, D)), a4 = on(m, dit_tensor_4d(DIT_F32, r->att, B, S, Hq, D));
  dit_tensor cs = on(m, dit_tensor_3d(DIT_F32, r->cos, B, S, D / 2)), sn = on(m, dit_tensor_3d(DIT_F32, r->sin, B, S, D / 2));
  DIT_TRY(dit_op_rope(be, &q4, &cs, &sn, DIT_ROPE_HALF, err));
  DIT_TRY(dit_op_rope(be, &k4, &cs, &sn, DIT_ROPE_HALF, err));
  dit_tensor km = on(m, dit_tensor_2d(DIT_U8, r->mask, B, S));
  DIT_TRY(dit_op_attention(be, &a4, &q4, &k4, &v4, r->mask ? &km : NULL, 1.0f / sqrtf((float)D), true, err));

  dit_tensor att = on(m, dit_tensor_2d(DIT_F32, r->att, M, Hq * D));
  DIT_TRY(dit_op_linear(be, &h, &att, &l->o_proj, c->attention_bias ? &l->o_proj_b : no, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_add(be, &x, &x, &h, err));

  dit_tensor g = on(m, dit_tensor_2d(DIT_F32, r->gate, M, I)), u = on(m, dit_tensor_2d(DIT_F32, r->up, M, I));
  DIT_TRY(dit_op_rms_norm(be, &h, &x, &l->post_attention_layernorm, eps, err));
  DIT_TRY(dit_op_linear(be, &g, &h, &l->gate_proj, no, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &u, &h, &l->up_proj, no, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_swiglu(be, &g, &g, &u, err));
  DIT_TRY(dit_op_linear(be, &h, &g, &l->down_proj, no, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_add(be, &x, &x, &h, err));
  return DIT_OK;
}

/* Copies hidden state `src` (index k) into every out[j] that asked for index k. */
static dit_status emit(dit_qwen3 *m, const qwen3_run *r, const float *src, int k, int n_layers, const int *idx,
                       float *const *out, dit_error *err) {
  int64_t H = m->cfg.hidden_size;
  dit_tensor s = on(m, dit_tensor_2d(DIT_F32, (void *)src, r->M, H));
  for (int j = 0; j < n_layers; j++) {
    if (idx[j] != k) continue;
    dit_tensor d = on(m, dit_tensor_2d(DIT_F32, out[j], r->M, H));
    DIT_TRY(dit_op_copy(m->be, &d, &s, err));
  }
  return DIT_OK;
}

/* Validates the arguments of encode and resolves layer indices into idx (0..L).
 * Returns the deepest index in *deepest and whether any mask entry is 0 in *padded. */
static dit_status check_args(const dit_qwen3 *m, int B, int S, const int32_t *ids, const uint8_t *mask, int n_layers,
                             const int *layers, float *const *out, int *idx, int *deepest, bool *padded,
                             dit_error *err) {
  const dit_qwen3_config *c = &m->cfg;
  if (B < 1 || S < 1 || (int64_t)B * S > (1 << 24))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "qwen3 encode: batch %d x %d tokens is out of range", B, S);
  if (S > c->max_position_embeddings)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "qwen3 encode: %d tokens exceed max_position_embeddings (%d)", S,
                      c->max_position_embeddings);
  if (!ids || !layers || !out || n_layers < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "qwen3 encode: no ids, no layers or no outputs");
  *deepest = 0;
  for (int j = 0; j < n_layers; j++) {
    int k = layers[j] < 0 ? c->num_layers + 1 + layers[j] : layers[j];
    if (k < 0 || k > c->num_layers)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "qwen3 encode: layers[%d] = %d is outside [-%d, %d]", j, layers[j],
                        c->num_layers + 1, c->num_layers);
    if (!out[j]) return dit_errorf(err, DIT_ERR_INVALID_ARG, "qwen3 encode: out[%d] is NULL", j);
    idx[j] = k;
    if (k > *deepest) *deepest = k;
  }
  int64_t M = (int64_t)B * S;
  *padded = false;
  for (int64_t i = 0; i < M; i++) {
    if (ids[i] < 0 || ids[i] >= c->vocab_size)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "qwen3 encode: token id %d at [%lld, %lld] is outside the vocabulary "
                        "[0, %d)", ids[i], (long long)(i / S), (long long)(i % S), c->vocab_size);
    if (mask && !mask[i]) *padded = true;
  }
  return DIT_OK;
}

#define LAYER_TENSORS 15

/* Every tensor of layer l into t (unused biases have no data). */
static void layer_tensors(const qwen3_layer *l, const dit_tensor *t[LAYER_TENSORS]) {
  const dit_tensor *all[LAYER_TENSORS] = {&l->input_layernorm, &l->q_proj, &l->q_proj_b, &l->k_proj, &l->k_proj_b,
                                          &l->v_proj, &l->v_proj_b, &l->o_proj, &l->o_proj_b, &l->q_norm,
                                          &l->k_norm, &l->post_attention_layernorm, &l->gate_proj, &l->up_proj,
                                          &l->down_proj};
  memcpy(t, all, sizeof all);
}

/* The pages of layer l's weights out of the process's resident set (they stay mapped: dit_qwen3_set_stream). */
static void release_layer(const dit_qwen3 *m, const qwen3_layer *l) {
  const dit_tensor *t[LAYER_TENSORS];
  layer_tensors(l, t);
  for (size_t i = 0; i < LAYER_TENSORS; i++)
    if (t[i]->data) dit_weights_release_pages(m->weights, t[i]->data, dit_tensor_nbytes(t[i]));
}

void dit_qwen3_set_stream(dit_qwen3 *m, bool on) {
  if (m) m->stream = on;
}

size_t dit_qwen3_stream_bytes(const dit_qwen3 *m) {
  if (!m) return 0;
  size_t most = 0;
  for (int i = 0; i < m->cfg.num_layers; i++) {
    const dit_tensor *t[LAYER_TENSORS];
    layer_tensors(&m->layers[i], t);
    size_t n = 0;
    for (size_t k = 0; k < LAYER_TENSORS; k++) n += t[k]->data ? dit_tensor_nbytes(t[k]) : 0;
    most = n > most ? n : most;
  }
  return most + dit_tensor_nbytes(&m->embed_tokens) + dit_tensor_nbytes(&m->norm);
}

/* Runs embedding, layers 1..deepest (and the final norm if index L is wanted), writing
 * each requested hidden state as soon as it exists. */
static dit_status run_layers(dit_qwen3 *m, qwen3_run *r, int deepest, int n_layers, const int *idx,
                             float *const *out, dit_error *err) {
  const dit_qwen3_config *c = &m->cfg;
  dit_tensor x = on(m, dit_tensor_2d(DIT_F32, r->x, r->M, c->hidden_size));
  dit_tensor ids = on(m, dit_tensor_1d(DIT_I32, r->ids, r->M));
  DIT_TRY(dit_op_embedding(m->be, &x, &m->embed_tokens, &ids, err));
  DIT_TRY(emit(m, r, r->x, 0, n_layers, idx, out, err));
  int last = deepest < c->num_layers ? deepest : c->num_layers;
  for (int i = 0; i < last; i++) {
    dit_status s = layer_forward(m, &m->layers[i], r, err);
    if (s != DIT_OK) {
      dit_error_prefix(err, "qwen3 layer %d", i);
      return s;
    }
    if (m->stream && m->weights && dit_backend_is_host(m->be)) {
      DIT_TRY(m->be->ops->sync(m->be, err)); /* the layer's ops are done with its weights */
      release_layer(m, &m->layers[i]);
    }
    if (i + 1 < c->num_layers) DIT_TRY(emit(m, r, r->x, i + 1, n_layers, idx, out, err));
  }
  if (deepest == c->num_layers) {
    dit_tensor h = on(m, dit_tensor_2d(DIT_F32, r->h, r->M, c->hidden_size));
    DIT_TRY(dit_op_rms_norm(m->be, &h, &x, &m->norm, c->rms_norm_eps, err));
    DIT_TRY(emit(m, r, r->h, c->num_layers, n_layers, idx, out, err));
  }
  return DIT_OK;
}

dit_status dit_qwen3_cost(const dit_qwen3 *m, int B, int S, int deepest, bool masked, dit_cost *out,
                          dit_error *err) {
  if (!m || !out || B < 1 || S < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "qwen3 cost: bad arguments");
  const dit_qwen3_config *c = &m->cfg;
  const int k = deepest < 0 ? c->num_layers + 1 + deepest : deepest;
  if (k < 0 || k > c->num_layers)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "qwen3 cost: layer %d is outside [-%d, %d]", deepest,
                      c->num_layers + 1, c->num_layers);
  qwen3_run r = {.B = B, .S = S, .M = (int64_t)B * S};
  dit_arena a;
  dit_arena_init_measure(&a);
  carve(&a, c, &r, masked, err);
  const double M = (double)r.M, H = c->hidden_size, I = c->intermediate_size;
  const double QD = (double)c->num_heads * c->head_dim, KD = (double)c->num_kv_heads * c->head_dim;
  const int layers = k < c->num_layers ? k : c->num_layers;
  /* per layer: q, k, v, o and the gated MLP per token; QK^T and PV over all S keys per head */
  out->flops = layers * (2.0 * M * (H * (QD + 2 * KD) + QD * H + 3 * H * I) + 4.0 * M * (double)S * QD);
  out->act_bytes = a.peak + 2 * (size_t)r.M * (size_t)(c->head_dim / 2) * sizeof(float); /* + upload_rope's tables */
  return DIT_OK;
}

dit_status dit_qwen3_encode(dit_qwen3 *m, int B, int S, const int32_t *ids, const uint8_t *mask, int n_layers,
                            const int *layers, float *const *out, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "qwen3 encode: NULL model");
  int *idx = malloc((size_t)(n_layers > 0 ? n_layers : 1) * sizeof *idx);
  if (!idx) return dit_errorf(err, DIT_ERR_NOMEM, "qwen3 encode: out of memory");
  int deepest = 0;
  bool padded = false;
  dit_status s = check_args(m, B, S, ids, mask, n_layers, layers, out, idx, &deepest, &padded, err);
  qwen3_run r = {.B = B, .S = S, .M = (int64_t)B * S};
  dit_arena a;
  dit_arena_init_measure(&a);
  void *buf = NULL;
  if (s == DIT_OK) {
    carve(&a, &m->cfg, &r, padded, err);
    s = m->be->ops->alloc(m->be, a.peak, &buf, err);
  }
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
  if (s == DIT_OK) s = run_layers(m, &r, deepest, n_layers, idx, out, err);
  if (s == DIT_OK) s = m->be->ops->sync(m->be, err);
  if (buf) m->be->ops->free(m->be, buf);
  free(idx);
  return s;
}

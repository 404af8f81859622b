/* Qwen3 text encoder against the transformers float32 reference of the zimage-tiny
 * fixture (hidden_states -2, 9, 18, 27 of a right-padded 64-token input), plus the
 * load-time checks (bad config fields, missing and mis-shaped tensors) on a synthetic
 * tiny checkpoint written to the scratch folder. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/backend.h"
#include "fixture.h"
#include "models/qwen3.h"
#include "testing.h"

#define TOL 1e-4

static dit_backend *g_be; /* created in main, one per process */

/* Max relative error over the rows of [rows, H] where keep[row] (all rows if NULL). */
static double rows_err(const float *a, const float *b, int rows, int H, const int32_t *keep) {
  float *x = malloc((size_t)rows * H * sizeof *x), *y = malloc((size_t)rows * H * sizeof *y);
  size_t n = 0;
  for (int r = 0; r < rows; r++) {
    if (keep && !keep[r]) continue;
    memcpy(x + n, a + (size_t)r * H, (size_t)H * sizeof *x);
    memcpy(y + n, b + (size_t)r * H, (size_t)H * sizeof *y);
    n += (size_t)H;
  }
  double e = dt_rel_err(x, y, n);
  free(x);
  free(y);
  return e;
}

static void test_fixture(const char *fixture) {
  char dir[4096], comp[4096];
  /* Only the Z-Image fixtures hold te_* cases (FLUX.2 klein's text encoder is checked
   * through its prompt_embeds by test_qwen3_prompt). */
  json_t *idx = json_load_file(dt_path(dir, sizeof dir, fixture, "model_index.json"), 0, NULL);
  const char *cls = idx ? json_string_value(json_object_get(idx, "_class_name")) : NULL;
  bool zimage = cls && !strcmp(cls, "ZImagePipeline");
  if (cls && !zimage) printf("%s: %s has no te_* component cases, skipped\n", fixture, cls);
  CHECK_MSG(cls != NULL, "%s: no model_index.json class", fixture);
  json_decref(idx);
  if (!zimage) return;
  dt_path(dir, sizeof dir, fixture, "text_encoder");
  dt_path(comp, sizeof comp, fixture, "components.safetensors");
  dit_error err = {0};
  dit_qwen3 *m = NULL;
  dit_status s = dit_qwen3_load(g_be, dir, &m, &err);
  CHECK_MSG(s == DIT_OK, "load: %s", err.msg);
  if (s != DIT_OK) return;
  const dit_qwen3_config *c = dit_qwen3_get_config(m);
  int H = c->hidden_size;
  /* The fixture generator rounded every buffer of the model to bf16, RoPE inv_freq
   * included (transformers' from_pretrained keeps it fp32, our default). */
  CHECK(c->rope_freq_dtype == DIT_F32);
  CHECK(dit_qwen3_set_rope_freq_dtype(m, DIT_I32, &err) == DIT_ERR_INVALID_ARG);
  CHECK(dit_qwen3_set_rope_freq_dtype(m, DIT_BF16, &err) == DIT_OK);
  int32_t *ids = NULL, *mask32 = NULL;
  int64_t shape[8];
  int nd = 0;
  if (dt_load_i32(comp, "te_input_ids", &ids, shape, &nd) ||
      dt_load_i32(comp, "te_attention_mask", &mask32, shape, &nd)) {
    CHECK(0);
    dit_qwen3_free(m);
    return;
  }
  int B = (int)shape[0], S = (int)shape[1], valid = 0;
  uint8_t *mask = malloc((size_t)B * S);
  for (int i = 0; i < B * S; i++) {
    mask[i] = (uint8_t)(mask32[i] != 0);
    valid += mask[i];
  }
  static const char *names[4] = {"te_hidden_last_but_one", "te_hidden_9", "te_hidden_18", "te_hidden_27"};
  const int layers[4] = {-2, 9, 18, 27};
  float *ref[4] = {0}, *out[4];
  for (int j = 0; j < 4; j++) {
    CHECK(dt_load_f32(comp, names[j], &ref[j], shape, &nd) == 0);
    out[j] = calloc((size_t)B * S * H, sizeof(float));
  }
  s = dit_qwen3_encode(m, B, S, ids, mask, 4, layers, out, &err);
  CHECK_MSG(s == DIT_OK, "encode: %s", err.msg);
  for (int j = 0; s == DIT_OK && j < 4 && ref[j]; j++) {
    /* Padded query rows attend to the real keys before them (causal + key mask), so the
     * reference holds meaningful values there too: all 64 rows are compared. */
    double e_all = rows_err(out[j], ref[j], B * S, H, NULL);
    double e_real = rows_err(out[j], ref[j], B * S, H, mask32);
    printf("hidden %-24s rel err all %d rows %.3g, %d real rows %.3g\n", names[j], B * S, e_all, valid, e_real);
    CHECK_MSG(e_all <= TOL, "%s: rel err %g", names[j], e_all);
  }
  CHECK(s != DIT_OK || memcmp(out[0], out[3], (size_t)B * S * H * sizeof(float)) == 0); /* -2 == 27 of 28 */

  /* Only the real prefix, no mask: the same values at the real positions (causal
   * attention never sees the padded keys that follow them). */
  if (s == DIT_OK && B == 1 && valid < S) {
    float *pre[4];
    for (int j = 0; j < 4; j++) pre[j] = calloc((size_t)valid * H, sizeof(float));
    s = dit_qwen3_encode(m, 1, valid, ids, NULL, 4, layers, pre, &err);
    CHECK_MSG(s == DIT_OK, "prefix encode: %s", err.msg);
    for (int j = 0; s == DIT_OK && j < 4; j++) {
      double e_ref = rows_err(pre[j], ref[j], valid, H, NULL);
      double e_full = rows_err(pre[j], out[j], valid, H, NULL);
      printf("prefix-only %-24s rel err vs ref %.3g, vs padded run %.3g\n", names[j], e_ref, e_full);
      CHECK_MSG(e_ref <= TOL, "%s prefix: rel err %g", names[j], e_ref);
      CHECK_MSG(e_full <= 1e-6, "%s prefix vs padded: %g", names[j], e_full);
    }
    for (int j = 0; j < 4; j++) free(pre[j]);
  }

  /* Batch of two: the fixture row, and the same tokens cut to 20 real + padding. Row 0
   * must still match the reference; row 1 must match a single run of its prefix. */
  if (s == DIT_OK && B == 1) {
    int32_t *ids2 = malloc(2 * (size_t)S * sizeof *ids2);
    uint8_t *mask2 = malloc(2 * (size_t)S);
    memcpy(ids2, ids, (size_t)S * sizeof *ids2);
    memcpy(mask2, mask, (size_t)S);
    for (int i = 0; i < S; i++) {
      ids2[S + i] = i < 20 ? ids[i] : 151643;
      mask2[S + i] = i < 20;
    }
    float *o2 = calloc(2 * (size_t)S * H, sizeof(float)), *o1 = calloc(20 * (size_t)H, sizeof(float));
    const int l9[1] = {9};
    s = dit_qwen3_encode(m, 2, S, ids2, mask2, 1, l9, &o2, &err);
    CHECK_MSG(s == DIT_OK, "batch encode: %s", err.msg);
    if (s == DIT_OK) s = dit_qwen3_encode(m, 1, 20, ids, NULL, 1, l9, &o1, &err);
    if (s == DIT_OK) {
      double e0 = rows_err(o2, ref[1], S, H, NULL), e1 = rows_err(o2 + (size_t)S * H, o1, 20, H, NULL);
      printf("batch of 2: row 0 vs ref %.3g, row 1 (20 real) vs single run %.3g\n", e0, e1);
      CHECK(e0 <= TOL);
      CHECK(e1 <= 1e-6);
    }
    free(ids2);
    free(mask2);
    free(o2);
    free(o1);
  }

  /* Bad arguments are rejected before anything runs. */
  const int bad_layer[1] = {c->num_layers + 1};
  CHECK(dit_qwen3_encode(m, B, S, ids, mask, 1, bad_layer, out, &err) == DIT_ERR_INVALID_ARG);
  CHECK(strstr(err.msg, "layers[0]") != NULL);
  int32_t saved = ids[3];
  ids[3] = c->vocab_size;
  CHECK(dit_qwen3_encode(m, B, S, ids, mask, 1, layers, out, &err) == DIT_ERR_INVALID_ARG);
  CHECK_MSG(strstr(err.msg, "vocabulary") != NULL, "%s", err.msg);
  ids[3] = saved;
  CHECK(dit_qwen3_encode(m, 1, c->max_position_embeddings + 1, ids, NULL, 1, layers, out, &err) ==
        DIT_ERR_INVALID_ARG);

  for (int j = 0; j < 4; j++) {
    free(ref[j]);
    free(out[j]);
  }
  free(ids);
  free(mask32);
  free(mask);
  dit_qwen3_free(m);
}

/* ---- synthetic tiny checkpoints for the error cases ------------------------------- */

enum { T_H = 8, T_L = 2, T_HQ = 2, T_HKV = 1, T_D = 4, T_I = 12, T_V = 32 };

/* A synthetic checkpoint's geometry: width, layers, query / kv heads, head size, MLP width, vocabulary. */
typedef struct tgeom {
  int H, L, HQ, HKV, D, I, V;
} tgeom;
static const tgeom k_tiny = {T_H, T_L, T_HQ, T_HKV, T_D, T_I, T_V};

typedef struct tspec {
  char name[128];
  int ndim;
  int64_t shape[2];
} tspec;

/* The tensors of geometry g (3 + 11 L of them at most) into t. */
static int tiny_specs(tspec *t, const char *prefix, bool lm_head, const tgeom *g) {
  int n = 0;
#define T1(nm, a) (snprintf(t[n].name, 128, "%s%s", prefix, nm), t[n].ndim = 1, t[n].shape[0] = a, n++)
#define T2(nm, a, b) \
  (snprintf(t[n].name, 128, "%s%s", prefix, nm), t[n].ndim = 2, t[n].shape[0] = a, t[n].shape[1] = b, n++)
  T2("embed_tokens.weight", g->V, g->H);
  T1("norm.weight", g->H);
  for (int l = 0; l < g->L; l++) {
    char b[96];
#define NM(s) (snprintf(b, sizeof b, "layers.%d.%s", l, s), b)
    T1(NM("input_layernorm.weight"), g->H);
    T1(NM("post_attention_layernorm.weight"), g->H);
    T2(NM("self_attn.q_proj.weight"), g->HQ * g->D, g->H);
    T2(NM("self_attn.k_proj.weight"), g->HKV * g->D, g->H);
    T2(NM("self_attn.v_proj.weight"), g->HKV * g->D, g->H);
    T2(NM("self_attn.o_proj.weight"), g->H, g->HQ * g->D);
    T1(NM("self_attn.q_norm.weight"), g->D);
    T1(NM("self_attn.k_norm.weight"), g->D);
    T2(NM("mlp.gate_proj.weight"), g->I, g->H);
    T2(NM("mlp.up_proj.weight"), g->I, g->H);
    T2(NM("mlp.down_proj.weight"), g->H, g->I);
#undef NM
  }
  if (lm_head) {
    snprintf(t[n].name, 128, "lm_head.weight");
    t[n].ndim = 2, t[n].shape[0] = g->V, t[n].shape[1] = g->H, n++;
  }
#undef T1
#undef T2
  return n;
}

/* Writes dir/model.safetensors (BF16, deterministic values; the same tensor name body
 * gets the same values whatever the prefix) with tensor `drop` left out, tensor
 * `reshape` given a wrong first dimension and tensor `nan_tensor` all NaN. */
static void write_weights(const char *dir, const char *prefix, bool lm_head, const char *drop, const char *reshape,
                          const char *nan_tensor, const tgeom *g) {
  tspec *t = calloc(3 + 11 * (size_t)g->L, sizeof *t);
  if (!t) return;
  int n = tiny_specs(t, prefix, lm_head, g);
  json_t *hdr = json_object();
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    if (drop && !strcmp(t[i].name, drop)) continue;
    if (reshape && !strcmp(t[i].name, reshape)) t[i].shape[0] += 1;
    size_t numel = (size_t)t[i].shape[0] * (t[i].ndim == 2 ? (size_t)t[i].shape[1] : 1);
    json_t *sh = json_array();
    for (int k = 0; k < t[i].ndim; k++) json_array_append_new(sh, json_integer(t[i].shape[k]));
    json_object_set_new(hdr, t[i].name,
                        json_pack("{s:s, s:o, s:[I,I]}", "dtype", "BF16", "shape", sh, "data_offsets",
                                  (json_int_t)off, (json_int_t)(off + 2 * numel)));
    off += 2 * numel;
  }
  char *h = json_dumps(hdr, JSON_COMPACT | JSON_SORT_KEYS);
  size_t hl = strlen(h), padded = (hl + 7) / 8 * 8;
  char path[4096];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  FILE *f = fopen(path, "wb");
  uint64_t n64 = padded;
  fwrite(&n64, 8, 1, f);
  fwrite(h, 1, hl, f);
  for (size_t i = hl; i < padded; i++) fputc(' ', f);
  /* Values: norms near 1, other weights small, from a seed per name body. */
  const char *kk;
  json_t *v;
  uint16_t *data = calloc(off / 2 + 1, 2);
  json_object_foreach(hdr, kk, v) {
    json_t *dofs = json_object_get(v, "data_offsets");
    size_t b = (size_t)json_integer_value(json_array_get(dofs, 0));
    size_t e = (size_t)json_integer_value(json_array_get(dofs, 1));
    const char *body = strncmp(kk, prefix, strlen(prefix)) ? kk : kk + strlen(prefix);
    uint64_t seed = 1469598103934665603ull;
    for (const char *p = body; *p; p++) seed = (seed ^ (unsigned char)*p) * 1099511628211ull;
    size_t cnt = (e - b) / 2;
    float *tmp = malloc(cnt * sizeof *tmp);
    dt_fill_random(tmp, cnt, seed | 1);
    bool is_norm = strstr(body, "norm") != NULL, is_nan = nan_tensor && !strcmp(kk, nan_tensor);
    for (size_t i = 0; i < cnt; i++) {
      float x = is_nan ? NAN : is_norm ? 1.0f + 0.2f * tmp[i] : 0.5f * tmp[i];
      uint32_t u;
      memcpy(&u, &x, 4);
      data[b / 2 + i] = (uint16_t)(u >> 16);
    }
    free(tmp);
  }
  fwrite(data, 2, off / 2, f);
  fclose(f);
  free(data);
  free(h);
  free(t);
  json_decref(hdr);
}

static void write_tiny_weights(const char *dir, const char *prefix, bool lm_head, const char *drop,
                               const char *reshape, const char *nan_tensor) {
  write_weights(dir, prefix, lm_head, drop, reshape, nan_tensor, &k_tiny);
}

static const char *tiny_config_text(void) {
  return "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", \"hidden_size\": 8,"
         " \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 4,"
         " \"intermediate_size\": 12, \"vocab_size\": 32, \"rms_norm_eps\": 1e-06, \"hidden_act\": \"silu\","
         " \"attention_bias\": false, \"max_position_embeddings\": 128, \"layer_types\": [\"full_attention\","
         " \"full_attention\"], \"rope_parameters\": {\"rope_theta\": 10000.0, \"rope_type\": \"default\"}}";
}

/* Writes dir/config.json: the tiny config with member `key` set to `json_value` (NULL:
 * removed). */
static void write_tiny_config(const char *dir, const char *key, const char *json_value) {
  json_t *c = json_loads(tiny_config_text(), 0, NULL);
  if (key && json_value)
    json_object_set_new(c, key, json_loads(json_value, JSON_DECODE_ANY, NULL));
  else if (key)
    json_object_del(c, key);
  char path[4096];
  snprintf(path, sizeof path, "%s/config.json", dir);
  json_dump_file(c, path, JSON_INDENT(1));
  json_decref(c);
}

static dit_status try_load(const char *dir, dit_error *err) {
  dit_qwen3 *m = NULL;
  dit_status s = dit_qwen3_load(g_be, dir, &m, err);
  dit_qwen3_free(m);
  return s;
}

static void run_tiny(const char *dir, float *out) {
  dit_error err = {0};
  dit_qwen3 *m = NULL;
  dit_status s = dit_qwen3_load(g_be, dir, &m, &err);
  CHECK_MSG(s == DIT_OK, "tiny load %s: %s", dir, err.msg);
  if (s != DIT_OK) return;
  const int32_t ids[6] = {1, 5, 31, 0, 7, 7};
  const int layers[1] = {-1};
  s = dit_qwen3_encode(m, 1, 6, ids, NULL, 1, layers, &out, &err);
  CHECK_MSG(s == DIT_OK, "tiny encode: %s", err.msg);
  dit_qwen3_free(m);
}

static void expect_fail(const char *dir, const char *needle, const char *what) {
  dit_error err = {0};
  dit_status s = try_load(dir, &err);
  CHECK_MSG(s != DIT_OK && strstr(err.msg, needle), "%s: status %d, message \"%s\" should name %s", what, (int)s,
            err.msg, needle);
}

static void test_errors(const char *tmp) {
  char a[4096], b[4096];
  dt_path(a, sizeof a, tmp, "prefixed");
  dt_path(b, sizeof b, tmp, "bare");
  char cmd[8300];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s'", a, b);
  CHECK(dt_run(cmd, NULL) == 0);

  /* Both naming schemes load (lm_head ignored) and compute the same thing. */
  write_tiny_config(a, NULL, NULL);
  write_tiny_weights(a, "model.", true, NULL, NULL, NULL);
  write_tiny_config(b, NULL, NULL);
  write_tiny_weights(b, "", false, NULL, NULL, NULL);
  float oa[6 * T_H] = {0}, ob[6 * T_H] = {0};
  run_tiny(a, oa);
  run_tiny(b, ob);
  CHECK(memcmp(oa, ob, sizeof oa) == 0);
  /* llama.cpp's names (GGUF files of Qwen3) load as the same model */
  char c3[4096], src[4200], dst[4200];
  dt_path(c3, sizeof c3, tmp, "llama_cpp");
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", c3);
  CHECK(dt_run(cmd, NULL) == 0);
  write_tiny_config(c3, NULL, NULL);
  snprintf(src, sizeof src, "%s/model.safetensors", a);
  snprintf(dst, sizeof dst, "%s/model.safetensors", c3);
  CHECK(dt_st_rename(src, dst, dt_qwen3_to_llama_cpp, NULL) == 0);
  float oc[6 * T_H] = {0};
  run_tiny(c3, oc);
  CHECK_MSG(memcmp(oa, oc, sizeof oa) == 0, "llama.cpp names: output differs");
  bool finite = true;
  for (int i = 0; i < 6 * T_H; i++) finite = finite && isfinite(oa[i]) && oa[i] != 0.0f;
  CHECK(finite);

  /* Legacy top-level rope_theta. */
  write_tiny_config(b, "rope_parameters", NULL);
  expect_fail(b, "rope_theta", "no rope theta");
  json_t *c = json_loads(tiny_config_text(), 0, NULL);
  json_object_del(c, "rope_parameters");
  json_object_set_new(c, "rope_theta", json_real(10000.0));
  char path[4200];
  snprintf(path, sizeof path, "%s/config.json", b);
  json_dump_file(c, path, 0);
  json_decref(c);
  float ol[6 * T_H] = {0};
  run_tiny(b, ol);
  CHECK(memcmp(oa, ol, sizeof oa) == 0);

  /* Bad config values, each named. */
  static const struct {
    const char *key, *value, *needle;
  } bad[] = {
      {"hidden_size", NULL, "hidden_size"},
      {"hidden_size", "0", "hidden_size"},
      {"num_hidden_layers", "-1", "num_hidden_layers"},
      {"num_key_value_heads", "3", "num_key_value_heads"},
      {"head_dim", "5", "head_dim"},
      {"intermediate_size", "\"12\"", "intermediate_size"},
      {"vocab_size", "0", "vocab_size"},
      {"rms_norm_eps", "-1e-6", "rms_norm_eps"},
      {"hidden_act", "\"gelu\"", "hidden_act"},
      {"rope_parameters", "{\"rope_theta\": 10000.0, \"rope_type\": \"yarn\"}", "rope_type"},
      {"rope_parameters", "{\"rope_theta\": -5, \"rope_type\": \"default\"}", "rope_theta"},
      {"layer_types", "[\"full_attention\", \"sliding_attention\"]", "layer_types"},
      {"layer_types", "[\"full_attention\"]", "layer_types"},
      {"use_sliding_window", "true", "use_sliding_window"},
      {"model_type", "\"llama\"", "model_type"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    write_tiny_config(a, bad[i].key, bad[i].value);
    expect_fail(a, bad[i].needle, bad[i].key);
  }
  write_tiny_config(a, NULL, NULL);

  /* Vocabulary/hidden size in the config disagree with the tensors. */
  write_tiny_config(a, "vocab_size", "33");
  expect_fail(a, "model.embed_tokens.weight", "vocab mismatch");
  write_tiny_config(a, NULL, NULL);

  /* Missing and mis-shaped tensors, named. */
  write_tiny_weights(a, "model.", true, "model.layers.1.mlp.up_proj.weight", NULL, NULL);
  expect_fail(a, "model.layers.1.mlp.up_proj.weight", "missing tensor");
  write_tiny_weights(a, "model.", true, NULL, "model.layers.0.self_attn.k_proj.weight", NULL);
  expect_fail(a, "model.layers.0.self_attn.k_proj.weight", "mis-shaped tensor");
  write_tiny_weights(b, "", false, "layers.0.self_attn.q_norm.weight", NULL, NULL);
  write_tiny_config(b, NULL, NULL);
  expect_fail(b, "layers.0.self_attn.q_norm.weight", "missing bare tensor");
  /* attention_bias=true requires the biases. */
  write_tiny_weights(a, "model.", true, NULL, NULL, NULL);
  write_tiny_config(a, "attention_bias", "true");
  expect_fail(a, "q_proj.bias", "missing bias");

  /* Layers past the deepest requested index are not run: with NaN weights in the last
   * layer, hidden_states[1] stays finite and [-1] does not. */
  write_tiny_config(a, NULL, NULL);
  write_tiny_weights(a, "model.", true, NULL, NULL, "model.layers.1.mlp.down_proj.weight");
  dit_error err = {0};
  dit_qwen3 *m = NULL;
  CHECK(dit_qwen3_load(g_be, a, &m, &err) == DIT_OK);
  if (m) {
    const int32_t ids[3] = {3, 4, 5};
    float o1[3 * T_H], o2[3 * T_H], *p1 = o1, *p2 = o2;
    const int l1[1] = {1}, l2[1] = {-1};
    CHECK(dit_qwen3_encode(m, 1, 3, ids, NULL, 1, l1, &p1, &err) == DIT_OK);
    CHECK(dit_qwen3_encode(m, 1, 3, ids, NULL, 1, l2, &p2, &err) == DIT_OK);
    bool f1 = true, f2 = true;
    for (int i = 0; i < 3 * T_H; i++) f1 = f1 && isfinite(o1[i]), f2 = f2 && isfinite(o2[i]);
    CHECK(f1 && !f2);
    dit_qwen3_free(m);
  }
}

/* Streaming (dit_qwen3_set_stream) on a 47 MB checkpoint of 6 layers: the same hidden states, and the
 * mapping's resident pages after an encode about one layer's instead of every layer's. */
static void test_stream(const char *tmp) {
  const tgeom g = {512, 6, 8, 4, 64, 2048, 256};
  char dir[4096], path[4200];
  snprintf(dir, sizeof dir, "%s/qwen3_stream", tmp);
  mkdir(dir, 0755);
  write_weights(dir, "", false, NULL, NULL, NULL, &g);
  json_t *c = json_loads(tiny_config_text(), 0, NULL);
  json_object_set_new(c, "hidden_size", json_integer(g.H));
  json_object_set_new(c, "num_hidden_layers", json_integer(g.L));
  json_object_set_new(c, "num_attention_heads", json_integer(g.HQ));
  json_object_set_new(c, "num_key_value_heads", json_integer(g.HKV));
  json_object_set_new(c, "head_dim", json_integer(g.D));
  json_object_set_new(c, "intermediate_size", json_integer(g.I));
  json_object_set_new(c, "vocab_size", json_integer(g.V));
  json_t *types = json_array();
  for (int i = 0; i < g.L; i++) json_array_append_new(types, json_string("full_attention"));
  json_object_set_new(c, "layer_types", types);
  snprintf(path, sizeof path, "%s/config.json", dir);
  json_dump_file(c, path, JSON_INDENT(1));
  json_decref(c);
  const size_t layer = (size_t)2 * ((size_t)(2 * g.HQ + 2 * g.HKV) * g.D * g.H + 3 * (size_t)g.I * g.H);
  const int32_t ids[6] = {1, 5, 31, 0, 7, 7};
  const int layers[1] = {-1};
  float *out[2] = {calloc(6 * (size_t)g.H, sizeof(float)), calloc(6 * (size_t)g.H, sizeof(float))};
  long rss[2] = {-1, -1};
  for (int k = 0; k < 2 && out[0] && out[1]; k++) { /* each load maps the file afresh: nothing resident yet */
    dit_error err = {0};
    dit_qwen3 *m = NULL;
    CHECK_MSG(dit_qwen3_load(g_be, dir, &m, &err) == DIT_OK, "%s", err.msg);
    if (!m) break;
    dit_qwen3_set_stream(m, k == 1);
    CHECK_MSG(dit_qwen3_encode(m, 1, 6, ids, NULL, 1, layers, &out[k], &err) == DIT_OK, "%s", err.msg);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    rss[k] = dt_file_rss_kb(path);
    dit_qwen3_free(m);
  }
  CHECK(out[0] && out[1] && !memcmp(out[0], out[1], 6 * (size_t)g.H * sizeof(float)));
  printf("streamed: the checkpoint's resident pages after an encode %ld kB (whole: %ld kB; a layer %zu kB)\n",
         rss[1], rss[0], layer / 1024);
  if (rss[0] >= 0 && rss[1] >= 0)
    CHECK_MSG(rss[0] >= (long)(g.L * layer / 1024) - 64 && rss[1] <= (long)(layer / 1024) + 512,
              "resident %ld kB streamed, %ld kB whole", rss[1], rss[0]);
  free(out[0]), free(out[1]);
}

int main(int argc, char **argv) {
  dt_args args;
  dt_init(argc, argv, &args);
  char fixture[4096];
  if (args.fixture)
    snprintf(fixture, sizeof fixture, "%s", args.fixture);
  else
    snprintf(fixture, sizeof fixture, "%s/models/zimage-tiny", args.data);
  dit_error err = {0};
  if (dit_backend_cpu_create(2, &g_be, &err) != DIT_OK) {
    fprintf(stderr, "cpu backend: %s\n", err.msg);
    return 1;
  }
  test_fixture(fixture);
  test_errors(args.tmp);
  test_stream(args.tmp);
  dit_backend_free(g_be);
  return dt_finish();
}

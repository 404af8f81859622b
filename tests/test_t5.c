/* T5 encoder against the transformers float32 references of the FLUX.1 tiny fixtures:
 * components.safetensors' t5_* case (hidden_states[1] and the last hidden state of 40
 * tokens) and reference.safetensors' prompt_embeds of both pipelines (512 and 256 tokens,
 * every relative distance up to 511). The folder and the single-file loading paths must
 * agree exactly; a key mask must act as a cut sequence does; broken copies of the
 * checkpoint (missing, mis-shaped, renamed tensors, fp32 wo, bad config fields) written to
 * the scratch folder load or fail with messages that name what was wrong. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "fixture.h"
#include "io/safetensors.h"
#include "models/t5.h"
#include "testing.h"

#define TOL 1e-4

static dit_backend *g_be;           /* created in main, one per process */
static char g_dir[4096];            /* flux1-dev-tiny/text_encoder_2 */
static char g_file[4096];           /* its model.safetensors */

/* Runs m on ids and returns hidden_states[layer] (malloc'd [S, d_model]) or NULL. */
static float *encode(dit_t5 *m, int S, const int32_t *ids, const uint8_t *mask, int layer) {
  const dit_t5_config *c = dit_t5_get_config(m);
  float *out = calloc((size_t)S * c->d_model, sizeof *out);
  dit_error err = {0};
  dit_status s = dit_t5_encode_hidden(m, S, ids, mask, 1, &layer, &out, &err);
  CHECK_MSG(s == DIT_OK, "encode S=%d layer %d: %s", S, layer, err.msg);
  if (s != DIT_OK) {
    free(out);
    return NULL;
  }
  return out;
}

static dit_t5 *load(const char *path) {
  dit_t5 *m = NULL;
  dit_error err = {0};
  dit_status s = dit_t5_load(g_be, path, &m, &err);
  CHECK_MSG(s == DIT_OK && m, "load %s: %s", path, err.msg);
  return m;
}

/* Compares hidden_states[layer] of ids with tensor `name` of file; prints the error. */
static double check_ref(dit_t5 *m, const char *file, const char *ids_name, const char *name, int layer) {
  int32_t *ids = NULL;
  float *ref = NULL;
  int64_t is[8], rs[8];
  int ni = 0, nr = 0;
  if (dt_load_i32(file, ids_name, &ids, is, &ni) || dt_load_f32(file, name, &ref, rs, &nr)) {
    CHECK_MSG(0, "%s: cannot read %s / %s", file, ids_name, name);
    free(ids);
    return -1;
  }
  int S = (int)is[0], D = dit_t5_get_config(m)->d_model;
  CHECK(ni == 1 && nr == 2 && rs[0] == S && rs[1] == D);
  double e = -1;
  float *out = ni == 1 && rs[0] == S && rs[1] == D ? encode(m, S, ids, NULL, layer) : NULL;
  if (out) {
    e = dt_rel_err(out, ref, (size_t)S * D);
    printf("%-16s %3d tokens, hidden_states[%d]: rel err %.3g\n", name, S, layer, e);
    CHECK_MSG(e <= TOL, "%s: rel err %g", name, e);
  }
  free(out);
  free(ids);
  free(ref);
  return e;
}

static void test_config(dit_t5 *m) {
  const dit_t5_config *c = dit_t5_get_config(m);
  CHECK(c->d_model == 8 && c->num_layers == 2 && c->num_heads == 2 && c->d_kv == 8 && c->d_ff == 16);
  CHECK(c->vocab_size == 32128 && c->num_buckets == 32 && c->max_distance == 128);
  CHECK(c->gated && c->act == DIT_ACT_GELU_TANH && c->layer_norm_epsilon == 1e-6f);
  CHECK(dit_t5_backend(m) == g_be);
  CHECK(dit_t5_weight_bytes(m) == 0); /* mapped from the file on the CPU */
}

/* Both loading paths on the fixture: the same config and bit-identical outputs, each within
 * TOL of the references. */
static void test_fixture(const char *fixture) {
  char comp[4096], ref[4096], other[4096];
  dt_path(comp, sizeof comp, fixture, "components.safetensors");
  dt_path(ref, sizeof ref, fixture, "reference.safetensors");
  dit_t5 *m = load(g_dir), *f = load(g_file);
  if (!m || !f) {
    dit_t5_free(m);
    dit_t5_free(f);
    return;
  }
  test_config(m);
  CHECK(memcmp(dit_t5_get_config(m), dit_t5_get_config(f), sizeof(dit_t5_config)) == 0);
  check_ref(m, comp, "t5_ids", "t5_hidden_1", 1);
  check_ref(m, comp, "t5_ids", "t5_last_hidden", -1);
  check_ref(m, comp, "t5_ids", "t5_last_hidden", 2);
  check_ref(f, comp, "t5_ids", "t5_last_hidden", -1);
  check_ref(m, ref, "t5_ids", "prompt_embeds", -1);
  check_ref(f, ref, "t5_ids", "prompt_embeds", -1);
  snprintf(other, sizeof other, "%s/../flux1-schnell-tiny/reference.safetensors", fixture);
  check_ref(m, other, "t5_ids", "prompt_embeds", -1);

  /* Several indices in one call, dit_t5_encode, and the file-loaded model: all the same. */
  int32_t *ids = NULL;
  int64_t sh[8];
  int nd = 0;
  if (dt_load_i32(comp, "t5_ids", &ids, sh, &nd) == 0) {
    int S = (int)sh[0], D = 8;
    float *a = encode(m, S, ids, NULL, -1), *b = encode(f, S, ids, NULL, -1);
    float *l1 = encode(m, S, ids, NULL, 1), *e0 = encode(m, S, ids, NULL, 0);
    float *o[3] = {calloc((size_t)S * D, 4), calloc((size_t)S * D, 4), calloc((size_t)S * D, 4)};
    const int layers[3] = {-1, 0, 1};
    dit_error err = {0};
    CHECK(dit_t5_encode_hidden(m, S, ids, NULL, 3, layers, o, &err) == DIT_OK);
    float *last = calloc((size_t)S * D, 4);
    CHECK(dit_t5_encode(f, S, ids, last, &err) == DIT_OK);
    size_t n = (size_t)S * D * sizeof(float);
    CHECK(a && b && l1 && e0 && memcmp(a, b, n) == 0 && memcmp(a, last, n) == 0);
    CHECK(a && l1 && e0 && memcmp(o[0], a, n) == 0 && memcmp(o[1], e0, n) == 0 && memcmp(o[2], l1, n) == 0);
    free(a), free(b), free(l1), free(e0), free(last);
    for (int j = 0; j < 3; j++) free(o[j]);
    free(ids);
  }
  dit_t5_free(m);
  dit_t5_free(f);
}

/* A key mask that hides the pads acts on the real rows as the cut sequence does (T5's bias
 * depends on key - query only); an all-ones mask is no mask. */
static void test_mask(const char *fixture) {
  char ref[4096];
  dt_path(ref, sizeof ref, fixture, "reference.safetensors");
  int32_t *ids = NULL;
  int64_t sh[8];
  int nd = 0;
  dit_t5 *m = load(g_dir);
  if (!m || dt_load_i32(ref, "t5_ids", &ids, sh, &nd) != 0) {
    CHECK(0);
    dit_t5_free(m);
    return;
  }
  int S = 64, real = 0, D = 8;
  while (real < S && ids[real] != 0) real++; /* T5's pad id is 0 */
  CHECK(real > 3 && real < S);
  uint8_t mask[64], ones[64];
  for (int i = 0; i < S; i++) mask[i] = i < real, ones[i] = 1;
  float *full = encode(m, S, ids, NULL, -1), *all = encode(m, S, ids, ones, -1);
  float *masked = encode(m, S, ids, mask, -1), *cut = encode(m, real, ids, NULL, -1);
  if (full && all && masked && cut) {
    CHECK(memcmp(full, all, (size_t)S * D * sizeof(float)) == 0);
    double e = dt_rel_err(masked, cut, (size_t)real * D), d = dt_rel_err(full, cut, (size_t)real * D);
    printf("mask: %d real of %d, masked vs cut %.3g (unmasked vs cut %.3g)\n", real, S, e, d);
    CHECK_MSG(e <= 1e-6, "masked vs cut: %g", e);
    CHECK_MSG(d > 1e-3, "the pads should change the unmasked rows: %g", d);
  }
  free(full), free(all), free(masked), free(cut);

  /* Bad arguments, each named, before anything runs. */
  dit_error err = {0};
  float *o = calloc((size_t)S * D, sizeof *o);
  int bad = 3;
  CHECK(dit_t5_encode_hidden(m, S, ids, NULL, 1, &bad, &o, &err) == DIT_ERR_INVALID_ARG);
  CHECK_MSG(strstr(err.msg, "layers[0]") != NULL, "%s", err.msg);
  bad = -4;
  CHECK(dit_t5_encode_hidden(m, S, ids, NULL, 1, &bad, &o, &err) == DIT_ERR_INVALID_ARG);
  int32_t saved = ids[5];
  ids[5] = 32128;
  CHECK(dit_t5_encode(m, S, ids, o, &err) == DIT_ERR_INVALID_ARG);
  CHECK_MSG(strstr(err.msg, "vocabulary") != NULL, "%s", err.msg);
  ids[5] = saved;
  CHECK(dit_t5_encode(m, 0, ids, o, &err) == DIT_ERR_INVALID_ARG);
  CHECK(dit_t5_encode(m, DIT_T5_MAX_TOKENS + 1, ids, o, &err) == DIT_ERR_INVALID_ARG);
  CHECK(dit_t5_encode(NULL, S, ids, o, &err) == DIT_ERR_INVALID_ARG);
  free(o);
  free(ids);
  dit_t5_free(m);
}

/* ---- broken copies of the checkpoint ---------------------------------------------- */

/* What rewrite does to the tensor called `name`. */
typedef struct edit {
  const char *name;
  const char *rename;  /* new name, or NULL */
  bool drop;
  int64_t shape0;      /* > 0: shape becomes [shape0, numel / shape0] */
  bool to_f32;         /* store as F32 (exact from BF16) */
} edit;

/* Writes dst: the tensors of src with edits applied (each edit names one tensor; a name may
 * end in '*' to match every tensor with that prefix). Returns 0 or -1. */
static int rewrite(const char *src, const char *dst, const edit *edits, int n_edits) {
  dit_st_file *f = NULL;
  dit_error err = {0};
  if (dit_st_open(src, NULL, &f, &err) != DIT_OK) return -1;
  json_t *hdr = json_object();
  size_t off = 0, cap = 1 << 20, used = 0;
  unsigned char *data = malloc(cap);
  for (size_t i = 0; i < f->n_tensors; i++) {
    const dit_st_tensor *t = &f->tensors[i];
    const edit *e = NULL;
    for (int k = 0; k < n_edits && !e; k++) {
      size_t l = strlen(edits[k].name);
      bool star = l && edits[k].name[l - 1] == '*';
      if (star ? !strncmp(t->name, edits[k].name, l - 1) : !strcmp(t->name, edits[k].name)) e = &edits[k];
    }
    if (e && e->drop) continue;
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
    bool f32 = e && e->to_f32 && t->dtype == DIT_BF16;
    size_t bytes = f32 ? (size_t)numel * 4 : (size_t)(t->end - t->begin);
    while (used + bytes > cap) data = realloc(data, cap *= 2);
    if (f32)
      for (int64_t k = 0; k < numel; k++) {
        uint16_t h;
        memcpy(&h, (const unsigned char *)t->data + 2 * k, 2);
        uint32_t u = (uint32_t)h << 16;
        memcpy(data + used + 4 * k, &u, 4);
      }
    else
      memcpy(data + used, t->data, bytes);
    used += bytes;
    json_t *shape = json_array();
    if (e && e->shape0 > 0) {
      json_array_append_new(shape, json_integer(e->shape0));
      json_array_append_new(shape, json_integer(numel / e->shape0));
    } else {
      for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
    }
    json_object_set_new(hdr, e && e->rename ? e->rename : t->name,
                        json_pack("{s:s, s:o, s:[I,I]}", "dtype", f32 ? "F32" : dit_dtype_name(t->dtype), "shape",
                                  shape, "data_offsets", (json_int_t)off, (json_int_t)(off + bytes)));
    off += bytes;
  }
  dit_st_close(f);
  char *h = json_dumps(hdr, JSON_COMPACT | JSON_SORT_KEYS);
  size_t hl = strlen(h), padded = (hl + 7) / 8 * 8;
  FILE *o = fopen(dst, "wb");
  int rc = -1;
  if (o) {
    uint64_t n64 = padded;
    fwrite(&n64, 8, 1, o);
    fwrite(h, 1, hl, o);
    for (size_t i = hl; i < padded; i++) fputc(' ', o);
    fwrite(data, 1, used, o);
    rc = fclose(o) == 0 ? 0 : -1;
  }
  free(h);
  free(data);
  json_decref(hdr);
  return rc;
}

/* A folder tmp/name with the fixture's config.json (key set to json_value when key is set)
 * and its weights rewritten with edits; the folder's path in dir. Returns 0 or -1. */
static int make_folder(const char *tmp, const char *name, const edit *edits, int n, const char *key,
                       const char *json_value, char *dir, size_t len) {
  char path[4200], cmd[8300];
  snprintf(dir, len, "%s/%s", tmp, name);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  if (dt_run(cmd, NULL) != 0) return -1;
  json_t *c = json_load_file(dt_path(path, sizeof path, g_dir, "config.json"), 0, NULL);
  if (!c) return -1;
  if (key && json_value)
    json_object_set_new(c, key, json_loads(json_value, JSON_DECODE_ANY, NULL));
  else if (key)
    json_object_del(c, key);
  int rc = json_dump_file(c, dt_path(path, sizeof path, dir, "config.json"), JSON_INDENT(1));
  json_decref(c);
  if (rc != 0) return -1;
  return rewrite(g_file, dt_path(path, sizeof path, dir, "model.safetensors"), edits, n);
}

/* Loading path fails with a message naming needle. */
static void expect_fail(const char *path, const char *needle, const char *what) {
  dit_t5 *m = NULL;
  dit_error err = {0};
  dit_status s = dit_t5_load(g_be, path, &m, &err);
  CHECK_MSG(s != DIT_OK && !m && strstr(err.msg, needle), "%s: status %d, message \"%s\" should name %s", what,
            (int)s, err.msg, needle);
  if (s != DIT_OK) printf("%-28s -> %s\n", what, err.msg);
  dit_t5_free(m);
}

/* The last hidden state of path's model on 40 fixed ids equals want (bit for bit). */
static void expect_same(const char *path, const float *want, const char *what) {
  dit_t5 *m = load(path);
  int32_t ids[40];
  for (int i = 0; i < 40; i++) ids[i] = (i * 7919 + 13) % 32128;
  float *out = m ? encode(m, 40, ids, NULL, -1) : NULL;
  CHECK_MSG(out && memcmp(out, want, 40 * 8 * sizeof(float)) == 0, "%s: output differs", what);
  free(out);
  dit_t5_free(m);
}

static void test_broken(const char *tmp) {
  char dir[4096], file[4300];
  const char *k0 = "encoder.block.0.layer.0.SelfAttention.k.weight";
  const char *wi1 = "encoder.block.1.layer.1.DenseReluDense.wi_1.weight";
  const char *q1 = "encoder.block.1.layer.0.SelfAttention.q.weight";
  const edit miss_wi1 = {.name = wi1, .drop = true}, k0_shape = {.name = k0, .shape0 = 4};
  const edit miss_q1 = {.name = q1, .drop = true}, miss_emb = {.name = "shared.weight", .drop = true};
  const edit miss_rel = {.name = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", .drop = true};

  /* Missing and mis-shaped tensors: the folder path ... */
  if (make_folder(tmp, "miss_wi1", &miss_wi1, 1, NULL, NULL, dir, sizeof dir) == 0) expect_fail(dir, wi1, "folder, missing");
  if (make_folder(tmp, "k0_shape", &k0_shape, 1, NULL, NULL, dir, sizeof dir) == 0) expect_fail(dir, k0, "folder, mis-shaped");
  if (make_folder(tmp, "miss_emb", &miss_emb, 1, NULL, NULL, dir, sizeof dir) == 0)
    expect_fail(dir, "shared.weight", "folder, no embedding");
  /* ... and the single-file path (the same copies, passed as a file). */
  snprintf(file, sizeof file, "%s/miss_wi1/model.safetensors", tmp);
  expect_fail(file, wi1, "file, missing");
  snprintf(file, sizeof file, "%s/k0_shape/model.safetensors", tmp);
  expect_fail(file, k0, "file, mis-shaped");
  snprintf(file, sizeof file, "%s/miss_emb/model.safetensors", tmp);
  expect_fail(file, "shared.weight", "file, no embedding");
  if (make_folder(tmp, "miss_q1", &miss_q1, 1, NULL, NULL, dir, sizeof dir) == 0) {
    expect_fail(dir, q1, "folder, missing q");
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    expect_fail(file, q1, "file, missing q");
  }
  if (make_folder(tmp, "miss_rel", &miss_rel, 1, NULL, NULL, dir, sizeof dir) == 0) {
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    expect_fail(file, "relative_attention_bias", "file, no position bias");
  }

  /* Copies that load and compute the same: wo in fp32; the embedding under
   * encoder.embed_tokens; everything in fp32 as a file. */
  dit_t5 *m = load(g_dir);
  int32_t ids[40];
  for (int i = 0; i < 40; i++) ids[i] = (i * 7919 + 13) % 32128;
  float *want = m ? encode(m, 40, ids, NULL, -1) : NULL;
  dit_t5_free(m);
  if (!want) return;
  const edit wo32[2] = {{.name = "encoder.block.0.layer.1.DenseReluDense.wo.weight", .to_f32 = true},
                        {.name = "encoder.block.1.layer.1.DenseReluDense.wo.weight", .to_f32 = true}};
  if (make_folder(tmp, "wo_f32", wo32, 2, NULL, NULL, dir, sizeof dir) == 0) expect_same(dir, want, "fp32 wo");
  const edit alt = {.name = "shared.weight", .rename = "encoder.embed_tokens.weight"};
  if (make_folder(tmp, "embed_alt", &alt, 1, NULL, NULL, dir, sizeof dir) == 0) {
    expect_same(dir, want, "encoder.embed_tokens");
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    expect_same(file, want, "encoder.embed_tokens, file");
  }
  const edit all32 = {.name = "*", .to_f32 = true};
  snprintf(file, sizeof file, "%s/all_f32.safetensors", tmp);
  if (rewrite(g_file, file, &all32, 1) == 0) expect_same(file, want, "all fp32, file");
  free(want);
}

/* Bad config fields, each named. */
static void test_bad_config(const char *tmp) {
  static const struct {
    const char *key, *value, *needle;
  } bad[] = {
      {"d_model", NULL, "d_model"},
      {"d_model", "0", "d_model"},
      {"num_layers", "-1", "num_layers"},
      {"num_heads", "\"2\"", "num_heads"},
      {"d_kv", "0", "d_kv"},
      {"vocab_size", "0", "vocab_size"},
      {"relative_attention_num_buckets", "2", "relative_attention_num_buckets"},
      {"relative_attention_max_distance", "4", "relative_attention_max_distance"},
      {"layer_norm_epsilon", "-1", "layer_norm_epsilon"},
      {"dense_act_fn", "\"relu\"", "dense_act_fn"},
      {"dense_act_fn", "\"gelu_fast\"", "gelu_fast"},
      {"model_type", "\"umt5\"", "model_type"},
      {"vocab_size", "32000", "shared.weight"},
      {"d_ff", "12", "wi_0.weight"},
      {"num_layers", "3", "encoder.block.2"},
      {"is_gated_act", "false", "DenseReluDense.wi.weight"},
  };
  char dir[4096];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char name[64];
    snprintf(name, sizeof name, "cfg%zu", i);
    if (make_folder(tmp, name, NULL, 0, bad[i].key, bad[i].value, dir, sizeof dir) != 0) {
      CHECK_MSG(0, "cannot write config variant %zu", i);
      continue;
    }
    expect_fail(dir, bad[i].needle, bad[i].key);
  }
  /* feed_forward_proj alone (no dense_act_fn / is_gated_act) decides: "gated-gelu" loads. */
  json_t *c = NULL;
  char path[4200];
  if (make_folder(tmp, "ffp", NULL, 0, "dense_act_fn", NULL, dir, sizeof dir) == 0 &&
      (c = json_load_file(dt_path(path, sizeof path, dir, "config.json"), 0, NULL)) != NULL) {
    json_object_del(c, "is_gated_act");
    json_dump_file(c, path, JSON_INDENT(1));
    json_decref(c);
    dit_t5 *m = load(dir);
    CHECK(m && dit_t5_get_config(m)->gated && dit_t5_get_config(m)->act == DIT_ACT_GELU_TANH);
    dit_t5_free(m);
    static const char *const bad_proj[] = {"relu", "gated-silu-x", "dense-gelu"};
    for (int i = 0; i < 3; i++) {
      json_t *c2 = json_load_file(path, 0, NULL);
      json_object_set_new(c2, "feed_forward_proj", json_string(bad_proj[i]));
      json_dump_file(c2, path, JSON_INDENT(1));
      json_decref(c2);
      expect_fail(dir, "feed_forward_proj", bad_proj[i]);
    }
  }
  expect_fail("/no/such/t5/folder", "/no/such/t5/folder", "no such path");
}

/* Buckets of T5 v1.1's 32 / 128 at the edges: exact below 8, log-spaced to 128, the sign
 * in the upper half (values of transformers' _relative_position_bucket). */
static void test_buckets(void) {
  static const int want[][2] = {{0, 0},    {-1, 1},   {1, 17},   {-7, 7},    {7, 23},    {-8, 8},   {8, 24},
                                {-11, 8},  {-12, 9},  {-15, 9},  {-16, 10},  {16, 26},   {-31, 11}, {-32, 12},
                                {-63, 13}, {-64, 14}, {-90, 14}, {-91, 15},  {-127, 15}, {-128, 15}, {128, 31},
                                {511, 31}, {-511, 15}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    int b = dit_t5_relative_bucket(want[i][0], 32, 128);
    CHECK_MSG(b == want[i][1], "bucket(%d) = %d, expected %d", want[i][0], b, want[i][1]);
  }
}

/* Random weights at a small geometry: finite outputs, the same for the same seed; a bad
 * config is refused by field. */
static void test_random(void) {
  dit_t5_config c;
  dit_t5_config_xxl(&c);
  CHECK(c.d_model == 4096 && c.num_layers == 24 && c.num_heads == 64 && c.d_kv == 64 && c.d_ff == 10240);
  c.d_model = 32, c.num_layers = 2, c.num_heads = 4, c.d_kv = 16, c.d_ff = 48, c.vocab_size = 100;
  dit_error err = {0};
  dit_t5 *a = NULL, *b = NULL;
  CHECK_MSG(dit_t5_create_random(g_be, &c, DIT_BF16, 7, &a, &err) == DIT_OK, "%s", err.msg);
  CHECK_MSG(dit_t5_create_random(g_be, &c, DIT_BF16, 7, &b, &err) == DIT_OK, "%s", err.msg);
  if (a && b) {
    CHECK(dit_t5_weight_bytes(a) > 0);
    int32_t ids[20];
    for (int i = 0; i < 20; i++) ids[i] = (i * 37) % 100;
    float *x = calloc(20 * 32, sizeof *x), *y = calloc(20 * 32, sizeof *y);
    CHECK(dit_t5_encode(a, 20, ids, x, &err) == DIT_OK && dit_t5_encode(b, 20, ids, y, &err) == DIT_OK);
    bool finite = true;
    for (int i = 0; i < 20 * 32; i++) finite = finite && isfinite(x[i]) && x[i] != 0.0f;
    CHECK(finite && memcmp(x, y, 20 * 32 * sizeof *x) == 0);
    free(x), free(y);
  }
  dit_t5_free(a);
  dit_t5_free(b);
  c.num_buckets = 3;
  dit_t5 *bad = NULL;
  CHECK(dit_t5_create_random(g_be, &c, DIT_BF16, 7, &bad, &err) != DIT_OK && !bad);
  CHECK_MSG(strstr(err.msg, "relative_attention_num_buckets") != NULL, "%s", err.msg);
}

#ifdef DIT_HAVE_CUDA
#include "core/timer.h"

/* hidden_states[-1] of ids on m (on any backend) into host memory; NULL on failure. */
static float *encode_host(dit_t5 *m, int S, const int32_t *ids) {
  dit_backend *be = dit_t5_backend(m);
  size_t n = (size_t)S * dit_t5_get_config(m)->d_model;
  float *host = calloc(n, sizeof *host);
  void *dev = NULL;
  dit_error err = {0};
  dit_status s = be->ops->alloc(be, n * sizeof(float), &dev, &err);
  if (s == DIT_OK) s = dit_t5_encode(m, S, ids, dev, &err);
  if (s == DIT_OK) s = be->ops->download(be, host, dev, n * sizeof(float), &err);
  if (dev) be->ops->free(be, dev);
  CHECK_MSG(s == DIT_OK, "%s encode of %d tokens: %s", be->ops->name, S, err.msg);
  if (s != DIT_OK) free(host), host = NULL;
  return host;
}

/* On the GPU (F32 activations; the ops round GEMM inputs to the weights' bf16): the
 * fixture's prompt_embeds, and a random model at T5-XXL width (2 of its 24 blocks) against
 * the same model on the CPU, timed. Normalized MSE bounds as the other GPU tests. */
static void test_gpu(const char *fixture) {
  dit_backend *gpu = NULL;
  dit_error err = {0};
  if (dit_backend_cuda_create(0, DIT_GPU_PRECISION_BF16, NULL, &gpu, &err) != DIT_OK) {
    printf("SKIP gpu: no usable GPU (%s)\n", err.msg);
    return;
  }
  char ref[4096];
  dt_path(ref, sizeof ref, fixture, "reference.safetensors");
  int32_t *ids = NULL;
  float *want = NULL;
  int64_t sh[8], rs[8];
  int nd = 0, nr = 0;
  dit_t5 *m = NULL;
  CHECK_MSG(dit_t5_load(gpu, g_dir, &m, &err) == DIT_OK, "gpu load: %s", err.msg);
  if (m && dt_load_i32(ref, "t5_ids", &ids, sh, &nd) == 0 && dt_load_f32(ref, "prompt_embeds", &want, rs, &nr) == 0) {
    CHECK(dit_t5_weight_bytes(m) > 0);
    float *got = encode_host(m, (int)sh[0], ids);
    long bad = 0;
    double e = got ? dt_nmse(got, want, (size_t)(rs[0] * rs[1]), &bad) : 1;
    printf("gpu prompt_embeds %lld tokens: nmse %.3g, non-finite %ld\n", (long long)sh[0], e, bad);
    CHECK_MSG(e <= 1e-4 && bad == 0, "gpu prompt_embeds: nmse %g", e);
    free(got);
  }
  free(ids), free(want);
  dit_t5_free(m);

  dit_t5_config c;
  dit_t5_config_xxl(&c);
  c.num_layers = 2;
  dit_t5 *mc = NULL, *mg = NULL;
  CHECK_MSG(dit_t5_create_random(g_be, &c, DIT_BF16, 5, &mc, &err) == DIT_OK, "%s", err.msg);
  CHECK_MSG(dit_t5_create_random(gpu, &c, DIT_BF16, 5, &mg, &err) == DIT_OK, "%s", err.msg);
  const int S = 512;
  int32_t *tok = malloc(S * sizeof *tok);
  for (int i = 0; i < S; i++) tok[i] = (i * 7919 + 3) % c.vocab_size;
  if (mc && mg) {
    float *a = encode_host(mc, S, tok), *b = encode_host(mg, S, tok);
    long bad = 0;
    double e = a && b ? dt_nmse(b, a, (size_t)S * c.d_model, &bad) : 1;
    printf("gpu T5-XXL width, 2 blocks, %d tokens vs cpu: nmse %.3g, non-finite %ld\n", S, e, bad);
    CHECK_MSG(e <= 1e-4 && bad == 0, "xxl width: nmse %g", e);
    double t0 = dit_time_now();
    for (int i = 0; i < 3; i++) free(encode_host(mg, S, tok));
    printf("gpu T5-XXL width: %.2f ms per block at %d tokens\n", (dit_time_now() - t0) / 3 / 2 * 1e3, S);
    free(a), free(b);
  }
  free(tok);
  dit_t5_free(mc);
  dit_t5_free(mg);
  dit_backend_free(gpu);
}
#endif

int main(int argc, char **argv) {
  dt_args args;
  dt_init(argc, argv, &args);
  char fixture[4096];
  dt_model_dir(&args, args.data, "flux1-dev-tiny", fixture, sizeof fixture);
  dt_path(g_dir, sizeof g_dir, fixture, "text_encoder_2");
  dt_path(g_file, sizeof g_file, g_dir, "model.safetensors");
  dit_error err = {0};
  if (dit_backend_cpu_create(2, &g_be, &err) != DIT_OK) {
    fprintf(stderr, "cpu backend: %s\n", err.msg);
    return 1;
  }
  test_buckets();
  test_fixture(fixture);
  test_mask(fixture);
  test_broken(args.tmp);
  test_bad_config(args.tmp);
  test_random();
#ifdef DIT_HAVE_CUDA
  test_gpu(fixture);
#endif
  dit_backend_free(g_be);
  return dt_finish();
}

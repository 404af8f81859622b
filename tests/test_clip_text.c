/* CLIP text encoder against the transformers float32 references of the flux1-dev-tiny
 * fixture (components.safetensors: last hidden state, pooled output and hidden_states[1]
 * of a 77-token input; reference.safetensors: FluxPipeline's pooled_prompt_embeds), the
 * two loading paths (folder with config.json, single .safetensors with the config
 * inferred) giving identical outputs, and the load-time and encode-time errors. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/dtype.h"
#include "fixture.h"
#include "models/clip_text.h"
#include "testing.h"

#define TOL 1e-4

static dit_backend *new_backend(void) {
  dit_backend *be = NULL;
  dit_error err = {0};
  CHECK_MSG(dit_backend_cpu_create(2, &be, &err) == DIT_OK, "cpu backend: %s", err.msg);
  return be;
}

/* Runs m on ids[0..S) into fresh buffers: last [S*H], pooled [H], hidden_states[1] [S*H]. */
typedef struct clip_out {
  float *last, *pooled, *h1;
} clip_out;

static dit_status encode_all(dit_clip_text *m, int S, const int32_t *ids, clip_out *o, dit_error *err) {
  int H = dit_clip_text_get_config(m)->hidden_size;
  o->last = calloc((size_t)S * H, sizeof(float));
  o->pooled = calloc((size_t)H, sizeof(float));
  o->h1 = calloc((size_t)S * H, sizeof(float));
  const int one[1] = {1};
  return dit_clip_text_encode_hidden(m, S, ids, 1, one, &o->h1, o->last, o->pooled, err);
}

static void out_free(clip_out *o) {
  free(o->last);
  free(o->pooled);
  free(o->h1);
}

static bool same_out(const clip_out *a, const clip_out *b, int S, int H) {
  return !memcmp(a->last, b->last, (size_t)S * H * sizeof(float)) &&
         !memcmp(a->pooled, b->pooled, (size_t)H * sizeof(float)) &&
         !memcmp(a->h1, b->h1, (size_t)S * H * sizeof(float));
}

static void check_ref(const char *file, const char *name, const float *got, size_t n, const char *what) {
  float *ref = NULL;
  int64_t shape[8];
  int nd = 0;
  if (dt_load_f32(file, name, &ref, shape, &nd)) {
    CHECK_MSG(0, "%s: no tensor %s", file, name);
    return;
  }
  size_t numel = 1;
  for (int i = 0; i < nd; i++) numel *= (size_t)shape[i];
  CHECK_MSG(numel == n, "%s: %s has %zu values, %zu expected", what, name, numel, n);
  double e = numel == n ? dt_rel_err(got, ref, n) : 1.0;
  printf("%-40s %-22s rel err %.3g\n", what, name, e);
  CHECK_MSG(e <= TOL, "%s %s: rel err %g", what, name, e);
  free(ref);
}

/* The fixture's clip_* cases, the pooled output of the pipelines' prompts, and the
 * single-file path on the same weights. */
static void test_fixture(const dt_args *a) {
  char fix[4096], dir[4096], comp[4096], file[4200];
  dt_model_dir(a, a->data, "flux1-dev-tiny", fix, sizeof fix);
  dt_path(dir, sizeof dir, fix, "text_encoder");
  dt_path(comp, sizeof comp, fix, "components.safetensors");
  dt_path(file, sizeof file, dir, "model.safetensors");
  dit_backend *be = new_backend();
  dit_error err = {0};
  dit_clip_text *m = NULL;
  dit_status s = dit_clip_text_load(be, dir, &m, &err);
  CHECK_MSG(s == DIT_OK, "load: %s", err.msg);
  if (s != DIT_OK) {
    dit_backend_free(be);
    return;
  }
  const dit_clip_text_config *c = dit_clip_text_get_config(m);
  CHECK(c->hidden_size == 16 && c->num_layers == 2 && c->num_heads == 2 && c->intermediate_size == 32);
  CHECK(c->vocab_size == 49408 && c->max_position_embeddings == 77 && c->eos_token_id == 2);
  CHECK(c->hidden_act == DIT_CLIP_QUICK_GELU && c->layer_norm_eps == 1e-5f);
  int H = c->hidden_size;

  int32_t *ids = NULL;
  int64_t shape[8];
  int nd = 0;
  CHECK(dt_load_i32(comp, "clip_ids", &ids, shape, &nd) == 0);
  int S = ids ? (int)shape[0] : 0;
  clip_out o = {0};
  s = ids ? encode_all(m, S, ids, &o, &err) : DIT_ERR_INVALID_ARG;
  CHECK_MSG(s == DIT_OK, "encode: %s", err.msg);
  if (s == DIT_OK) {
    check_ref(comp, "clip_last_hidden", o.last, (size_t)S * H, "folder");
    check_ref(comp, "clip_pooled", o.pooled, (size_t)H, "folder");
    check_ref(comp, "clip_hidden_1", o.h1, (size_t)S * H, "folder");
    int p = dit_clip_text_pooled_index(c, S, ids);
    CHECK(ids[p] == 49407 && (p == 0 || ids[p - 1] != 49407)); /* the first end-of-text */
    CHECK(!memcmp(o.pooled, o.last + (size_t)p * H, (size_t)H * sizeof(float)));
    /* The plain entry point, and hidden_states[1] alone (layer 2 not run): the same values. */
    float *last = calloc((size_t)S * H, sizeof(float)), *pooled = calloc((size_t)H, sizeof(float));
    float *h1 = calloc((size_t)S * H, sizeof(float));
    const int one[1] = {-2};
    CHECK(dit_clip_text_encode(m, S, ids, last, pooled, &err) == DIT_OK);
    CHECK(dit_clip_text_encode_hidden(m, S, ids, 1, one, &h1, NULL, NULL, &err) == DIT_OK);
    CHECK(!memcmp(last, o.last, (size_t)S * H * sizeof(float)) && !memcmp(pooled, o.pooled, (size_t)H * sizeof(float)));
    CHECK(!memcmp(h1, o.h1, (size_t)S * H * sizeof(float)));
    free(last);
    free(pooled);
    free(h1);
  }

  /* FluxPipeline.encode_prompt's pooled_prompt_embeds, from its clip_ids. */
  static const char *const pipes[2] = {"flux1-dev-tiny", "flux1-schnell-tiny"};
  for (int i = 0; i < 2; i++) {
    char pdir[4096], ref[4096];
    dt_path(pdir, sizeof pdir, a->data, "models");
    dt_path(ref, sizeof ref, pdir, pipes[i]);
    dt_path(pdir, sizeof pdir, ref, "reference.safetensors");
    int32_t *pids = NULL;
    if (dt_load_i32(pdir, "clip_ids", &pids, shape, &nd)) {
      CHECK_MSG(0, "%s: no clip_ids", pdir);
      continue;
    }
    float *pooled = calloc((size_t)H, sizeof(float));
    s = dit_clip_text_encode(m, (int)shape[0], pids, NULL, pooled, &err);
    CHECK_MSG(s == DIT_OK, "pipeline encode: %s", err.msg);
    if (s == DIT_OK) check_ref(pdir, "pooled_prompt_embeds", pooled, (size_t)H, pipes[i]);
    free(pooled);
    free(pids);
  }

  /* The same weights as a single file: its hidden size (8) tells no head count, so the
   * published settings do not apply and the load says so; given the settings, the
   * shapes give the rest of the config and the outputs are bit-identical. */
  dit_clip_text *f = NULL;
  CHECK(dit_clip_text_load(be, file, &f, &err) == DIT_ERR_FORMAT && f == NULL);
  CHECK_MSG(strstr(err.msg, "num_attention_heads") != NULL, "%s", err.msg);
  dit_clip_text_config settings = {.num_heads = 2, .hidden_act = DIT_CLIP_QUICK_GELU, .layer_norm_eps = 1e-5f,
                                   .eos_token_id = 2};
  s = dit_clip_text_load_file(be, file, &settings, &f, &err);
  CHECK_MSG(s == DIT_OK, "load file: %s", err.msg);
  if (s == DIT_OK && ids) {
    CHECK(!memcmp(dit_clip_text_get_config(f), c, sizeof *c));
    CHECK(dit_clip_text_weight_bytes(f) == dit_clip_text_weight_bytes(m) && dit_clip_text_weight_bytes(m) > 0);
    clip_out of = {0};
    CHECK(encode_all(f, S, ids, &of, &err) == DIT_OK);
    CHECK_MSG(same_out(&o, &of, S, H), "single file and folder outputs differ");
    out_free(&of);
  }
  dit_clip_text_free(f);

  /* Bad arguments are rejected before anything runs. */
  if (ids) {
    CHECK(dit_clip_text_encode(m, 78, ids, o.last, NULL, &err) == DIT_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.msg, "max_position_embeddings") != NULL, "%s", err.msg);
    CHECK(dit_clip_text_encode(m, 0, ids, o.last, NULL, &err) == DIT_ERR_INVALID_ARG);
    CHECK(dit_clip_text_encode(m, S, ids, NULL, NULL, &err) == DIT_ERR_INVALID_ARG);
    const int bad[1] = {3};
    CHECK(dit_clip_text_encode_hidden(m, S, ids, 1, bad, &o.h1, NULL, NULL, &err) == DIT_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.msg, "layers[0]") != NULL, "%s", err.msg);
    int32_t saved = ids[5];
    ids[5] = 49408;
    CHECK(dit_clip_text_encode(m, S, ids, o.last, NULL, &err) == DIT_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.msg, "vocabulary") != NULL && strstr(err.msg, "position 5"), "%s", err.msg);
    ids[5] = saved;
  }
  out_free(&o);
  free(ids);
  dit_clip_text_free(m);
  dit_backend_free(be);
}

/* ---- safetensors files written by the test ------------------------------------------ */

typedef struct st_entry {
  char name[128];
  const char *dtype;
  int ndim;
  int64_t shape[2];
  const void *data;
  size_t nbytes;
} st_entry;

static void write_st(const char *path, const st_entry *e, int n) {
  json_t *hdr = json_object();
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    json_t *sh = json_array();
    for (int k = 0; k < e[i].ndim; k++) json_array_append_new(sh, json_integer(e[i].shape[k]));
    json_object_set_new(hdr, e[i].name,
                        json_pack("{s:s, s:o, s:[I,I]}", "dtype", e[i].dtype, "shape", sh, "data_offsets",
                                  (json_int_t)off, (json_int_t)(off + e[i].nbytes)));
    off += e[i].nbytes;
  }
  char *h = json_dumps(hdr, JSON_COMPACT);
  size_t hl = strlen(h), padded = (hl + 7) / 8 * 8;
  FILE *f = fopen(path, "wb");
  CHECK_MSG(f != NULL, "cannot write %s", path);
  if (f) {
    uint64_t n64 = padded;
    fwrite(&n64, 8, 1, f);
    fwrite(h, 1, hl, f);
    for (size_t i = hl; i < padded; i++) fputc(' ', f);
    for (int i = 0; i < n; i++) fwrite(e[i].data, 1, e[i].nbytes, f);
    fclose(f);
  }
  free(h);
  json_decref(hdr);
}

/* Copies the safetensors file src to dst with tensor `drop` left out, tensor `reshape`
 * given shape [a/2, 2b] (same size) and tensor `retype` relabelled I16 (same size). */
static void copy_st(const char *src, const char *dst, const char *drop, const char *reshape, const char *retype) {
  FILE *f = fopen(src, "rb");
  CHECK_MSG(f != NULL, "cannot read %s", src);
  if (!f) return;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = malloc((size_t)len);
  CHECK(fread(buf, 1, (size_t)len, f) == (size_t)len);
  fclose(f);
  uint64_t hl;
  memcpy(&hl, buf, 8);
  json_t *hdr = json_loadb((const char *)buf + 8, (size_t)hl, 0, NULL);
  st_entry e[128];
  int n = 0;
  const char *key;
  json_t *v;
  json_object_foreach(hdr, key, v) {
    if (!strcmp(key, "__metadata__") || (drop && !strcmp(key, drop)) || n == 128) continue;
    st_entry *t = &e[n++];
    snprintf(t->name, sizeof t->name, "%s", key);
    t->dtype = retype && !strcmp(key, retype) ? "I16" : json_string_value(json_object_get(v, "dtype"));
    json_t *sh = json_object_get(v, "shape"), *dof = json_object_get(v, "data_offsets");
    t->ndim = (int)json_array_size(sh);
    for (int k = 0; k < t->ndim && k < 2; k++) t->shape[k] = json_integer_value(json_array_get(sh, (size_t)k));
    if (reshape && !strcmp(key, reshape)) t->shape[0] /= 2, t->shape[1] *= 2;
    size_t b = (size_t)json_integer_value(json_array_get(dof, 0)), end = (size_t)json_integer_value(json_array_get(dof, 1));
    t->data = buf + 8 + hl + b;
    t->nbytes = end - b;
  }
  write_st(dst, e, n);
  json_decref(hdr);
  free(buf);
}

static void expect_fail(dit_backend *be, const char *path, const dit_clip_text_config *settings, const char *needle,
                        const char *what) {
  dit_error err = {0};
  dit_clip_text *m = NULL;
  dit_status s = settings ? dit_clip_text_load_file(be, path, settings, &m, &err) : dit_clip_text_load(be, path, &m, &err);
  printf("%-36s -> %s\n", what, err.msg);
  CHECK_MSG(s != DIT_OK && m == NULL && strstr(err.msg, needle), "%s: status %d, message \"%s\" should name %s", what,
            (int)s, err.msg, needle);
  dit_clip_text_free(m);
}

/* Writes dir/config.json: the fixture's config with member `key` set to the JSON text
 * `value` (NULL: removed). */
static void write_config(const char *src_dir, const char *dir, const char *key, const char *value) {
  char path[4200];
  json_t *c = json_load_file(dt_path(path, sizeof path, src_dir, "config.json"), 0, NULL);
  CHECK(c != NULL);
  if (!c) return;
  if (key && value)
    json_object_set_new(c, key, json_loads(value, JSON_DECODE_ANY, NULL));
  else if (key)
    json_object_del(c, key);
  json_dump_file(c, dt_path(path, sizeof path, dir, "config.json"), JSON_INDENT(1));
  json_decref(c);
}

/* dir = tmp/name, emptied and created. */
static void fresh_dir(const char *tmp, const char *name, char *dir, size_t len) {
  char cmd[8400];
  dt_path(dir, len, tmp, name);
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
  CHECK(dt_run(cmd, NULL) == 0);
}

/* Broken copies of the fixture checkpoint in the scratch folder: each missing,
 * mis-shaped or mistyped tensor and each bad config field is an error naming it. */
static void test_errors(const dt_args *a) {
  char fix[4096], src[4096], srcfile[4200], dir[4096], file[4200];
  dt_model_dir(a, a->data, "flux1-dev-tiny", fix, sizeof fix);
  dt_path(src, sizeof src, fix, "text_encoder");
  dt_path(srcfile, sizeof srcfile, src, "model.safetensors");
  fresh_dir(a->tmp, "broken", dir, sizeof dir);
  dt_path(file, sizeof file, dir, "model.safetensors");
  dit_backend *be = new_backend();
  dit_clip_text_config settings = {.num_heads = 2, .hidden_act = DIT_CLIP_QUICK_GELU, .layer_norm_eps = 1e-5f,
                                   .eos_token_id = 2};

  expect_fail(be, dir, NULL, "config.json", "no config.json");
  expect_fail(be, file, NULL, "no such file", "no file");
  write_config(src, dir, NULL, NULL);
  copy_st(srcfile, file, NULL, NULL, NULL);
  dit_error err = {0};
  dit_clip_text *m = NULL;
  CHECK_MSG(dit_clip_text_load(be, dir, &m, &err) == DIT_OK, "unchanged copy: %s", err.msg);
  dit_clip_text_free(m);

  static const struct {
    const char *drop, *reshape, *retype, *needle;
  } bad_w[] = {
      {"encoder.layers.1.self_attn.v_proj.bias", NULL, NULL, "encoder.layers.1.self_attn.v_proj.bias"},
      {"final_layer_norm.weight", NULL, NULL, "final_layer_norm.weight"},
      {NULL, "encoder.layers.0.self_attn.q_proj.weight", NULL, "encoder.layers.0.self_attn.q_proj.weight"},
      {NULL, "encoder.layers.1.mlp.fc2.weight", NULL, "encoder.layers.1.mlp.fc2.weight"},
      {NULL, NULL, "encoder.layers.0.mlp.fc1.bias", "encoder.layers.0.mlp.fc1.bias"},
      {"embeddings.position_embedding.weight", NULL, NULL, "embeddings.position_embedding.weight"},
  };
  for (size_t i = 0; i < sizeof bad_w / sizeof bad_w[0]; i++) {
    copy_st(srcfile, file, bad_w[i].drop, bad_w[i].reshape, bad_w[i].retype);
    expect_fail(be, dir, NULL, bad_w[i].needle, "folder");
    expect_fail(be, file, &settings, bad_w[i].needle, "single file");
  }
  copy_st(srcfile, file, "embeddings.token_embedding.weight", NULL, NULL);
  expect_fail(be, file, &settings, "embeddings.token_embedding.weight", "single file without token table");
  copy_st(srcfile, file, NULL, NULL, NULL);

  static const struct {
    const char *key, *value, *needle;
  } bad_c[] = {
      {"hidden_size", NULL, "hidden_size"},
      {"hidden_size", "24", "embeddings.token_embedding.weight"},
      {"num_attention_heads", "3", "num_attention_heads"},
      {"num_hidden_layers", "0", "num_hidden_layers"},
      {"intermediate_size", "\"24\"", "intermediate_size"},
      {"vocab_size", "49409", "embeddings.token_embedding.weight"},
      {"max_position_embeddings", "64", "embeddings.position_embedding.weight"},
      {"layer_norm_eps", "0", "layer_norm_eps"},
      {"hidden_act", "\"relu\"", "hidden_act"},
      {"model_type", "\"t5\"", "model_type"},
      {"eos_token_id", "-1", "eos_token_id"},
  };
  for (size_t i = 0; i < sizeof bad_c / sizeof bad_c[0]; i++) {
    write_config(src, dir, bad_c[i].key, bad_c[i].value);
    expect_fail(be, dir, NULL, bad_c[i].needle, bad_c[i].key);
  }
  dit_clip_text_config bad_settings = settings;
  bad_settings.num_heads = 3;
  expect_fail(be, file, &bad_settings, "num_attention_heads", "single file, 3 heads");
  dit_backend_free(be);
}

/* ---- a CLIP-shaped model with 64-wide heads, as published single files are ------------ */

enum { W_H = 64, W_L = 2, W_I = 96, W_V = 50, W_P = 16 };

/* dir/model.safetensors: "text_model."-prefixed names, F32 embeddings, layer 0 in BF16,
 * layer 1 in F16, plus a text_projection and position_ids to be ignored. */
static void write_wide(const char *dir) {
  static const char *const part[8] = {"layer_norm1", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                      "self_attn.out_proj", "layer_norm2", "mlp.fc1", "mlp.fc2"};
  const int64_t rows[8] = {W_H, W_H, W_H, W_H, W_H, W_H, W_I, W_H}, cols[8] = {0, W_H, W_H, W_H, W_H, 0, W_H, W_I};
  st_entry e[64];
  void *bufs[64];
  int n = 0;
#define ADD(nm, dt, r, c)                                                       \
  do {                                                                          \
    snprintf(e[n].name, sizeof e[n].name, "text_model.%s", nm);                 \
    e[n].dtype = dt, e[n].ndim = (c) ? 2 : 1, e[n].shape[0] = r, e[n].shape[1] = c; \
    n++;                                                                        \
  } while (0)
  ADD("embeddings.token_embedding.weight", "F32", W_V, W_H);
  ADD("embeddings.position_embedding.weight", "F32", W_P, W_H);
  char nm[128];
  for (int l = 0; l < W_L; l++)
    for (int p = 0; p < 8; p++) {
      snprintf(nm, sizeof nm, "encoder.layers.%d.%s.weight", l, part[p]);
      ADD(nm, l ? "F16" : "BF16", rows[p], cols[p]);
      snprintf(nm, sizeof nm, "encoder.layers.%d.%s.bias", l, part[p]);
      ADD(nm, l ? "F16" : "BF16", rows[p], 0);
    }
  ADD("final_layer_norm.weight", "F32", W_H, 0);
  ADD("final_layer_norm.bias", "F32", W_H, 0);
#undef ADD
  snprintf(e[n].name, sizeof e[n].name, "text_projection.weight");
  e[n].dtype = "F32", e[n].ndim = 2, e[n].shape[0] = W_H, e[n].shape[1] = W_H, n++;
  for (int i = 0; i < n; i++) {
    size_t cnt = (size_t)e[i].shape[0] * (e[i].ndim == 2 ? (size_t)e[i].shape[1] : 1);
    float *x = malloc(cnt * sizeof *x);
    dt_fill_random(x, cnt, 977u * (uint64_t)(i + 1));
    bool norm_w = strstr(e[i].name, "norm") && strstr(e[i].name, ".weight"), vec = e[i].ndim == 1;
    for (size_t k = 0; k < cnt; k++) x[k] = norm_w ? 1.0f + 0.1f * x[k] : vec ? 0.05f * x[k] : 0.3f * x[k];
    size_t es = !strcmp(e[i].dtype, "F32") ? 4 : 2;
    bufs[i] = malloc(cnt * es);
    for (size_t k = 0; k < cnt; k++) {
      if (es == 4) ((float *)bufs[i])[k] = x[k];
      else ((uint16_t *)bufs[i])[k] = !strcmp(e[i].dtype, "BF16") ? dit_f32_to_bf16(x[k]) : dit_f32_to_f16(x[k]);
    }
    e[i].data = bufs[i];
    e[i].nbytes = cnt * es;
    free(x);
  }
  int64_t pos[W_P];
  for (int i = 0; i < W_P; i++) pos[i] = i;
  snprintf(e[n].name, sizeof e[n].name, "text_model.embeddings.position_ids");
  e[n].dtype = "I64", e[n].ndim = 2, e[n].shape[0] = 1, e[n].shape[1] = W_P, e[n].data = pos, e[n].nbytes = sizeof pos;
  char path[4200];
  write_st(dt_path(path, sizeof path, dir, "model.safetensors"), e, n + 1);
  for (int i = 0; i < n; i++) free(bufs[i]);
}

static void write_text(const char *dir, const char *name, const char *text) {
  char path[4200];
  dt_write_bytes(dt_path(path, sizeof path, dir, name), text, strlen(text));
}

#define WIDE_FIELDS                                                                                  \
  "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 1, \"intermediate_size\": 96," \
  " \"vocab_size\": 50, \"max_position_embeddings\": 16, \"layer_norm_eps\": 1e-05"

/* The input of the wide model: the largest id (49) first at 6, id 30 at 5. */
enum { WIDE_S = 12 };
static const int32_t wide_ids[WIDE_S] = {48, 3, 17, 5, 7, 30, 49, 8, 49, 49, 49, 49};

static bool all_finite(const float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i])) return false;
  return true;
}

/* Loads path (folder or file) and encodes ids into o; false on failure (checked). */
static bool run_wide(dit_backend *be, const char *path, const int32_t *ids, int S, clip_out *o,
                     dit_clip_text_config *cfg) {
  dit_error err = {0};
  dit_clip_text *m = NULL;
  dit_status s = dit_clip_text_load(be, path, &m, &err);
  CHECK_MSG(s == DIT_OK, "load %s: %s", path, err.msg);
  if (s != DIT_OK) return false;
  *cfg = *dit_clip_text_get_config(m);
  s = encode_all(m, S, ids, o, &err);
  CHECK_MSG(s == DIT_OK, "encode %s: %s", path, err.msg);
  dit_clip_text_free(m);
  return s == DIT_OK && all_finite(o->last, (size_t)S * W_H) && all_finite(o->pooled, W_H);
}

static void test_wide(const dt_args *a) {
  char dir[4096], file[4200];
  fresh_dir(a->tmp, "wide", dir, sizeof dir);
  dt_path(file, sizeof file, dir, "model.safetensors");
  write_wide(dir);
  dit_backend *be = new_backend();
  enum { S = WIDE_S };
  const int32_t *ids = wide_ids;
  clip_out of = {0}, od = {0}, on = {0}, og = {0};
  dit_clip_text_config cf, cd, cn, cg;

  /* The file alone: the published settings (heads = 64 wide, quick_gelu, eos rule 2). */
  bool ok = run_wide(be, file, ids, S, &of, &cf);
  CHECK(ok && cf.hidden_size == W_H && cf.num_layers == W_L && cf.num_heads == 1 && cf.intermediate_size == W_I);
  CHECK(cf.vocab_size == W_V && cf.max_position_embeddings == W_P && cf.hidden_act == DIT_CLIP_QUICK_GELU);
  CHECK(cf.eos_token_id == 2 && cf.layer_norm_eps == 1e-5f);
  CHECK(ok && !memcmp(of.pooled, of.last + 6 * W_H, W_H * sizeof(float))); /* first 49 = argmax */

  /* The folder with the same settings written out, and as a CLIPModel config: identical. */
  write_text(dir, "config.json", "{\"model_type\": \"clip_text_model\", " WIDE_FIELDS ", \"hidden_act\": "
             "\"quick_gelu\", \"eos_token_id\": 2}");
  CHECK(run_wide(be, dir, ids, S, &od, &cd) && !memcmp(&cd, &cf, sizeof cd) && same_out(&od, &of, S, W_H));
  write_text(dir, "config.json", "{\"model_type\": \"clip\", \"projection_dim\": 64, \"text_config\": {" WIDE_FIELDS
             "}, \"vision_config\": {}}");
  CHECK(run_wide(be, dir, ids, S, &on, &cn) && !memcmp(&cn, &cf, sizeof cn) && same_out(&on, &of, S, W_H));

  /* Exact GELU and a non-legacy eos id (pooled at the first id 49 == eos): the embeddings
   * and attention are those of quick_gelu, the MLP output is not. */
  write_text(dir, "config.json", "{\"model_type\": \"clip_text_model\", " WIDE_FIELDS ", \"hidden_act\": \"gelu\","
             " \"eos_token_id\": 30}");
  ok = run_wide(be, dir, ids, S, &og, &cg);
  CHECK(ok && cg.hidden_act == DIT_CLIP_GELU && dit_clip_text_pooled_index(&cg, S, ids) == 5);
  CHECK(ok && !memcmp(og.pooled, og.last + 5 * W_H, W_H * sizeof(float)));
  CHECK(ok && memcmp(og.h1, of.h1, S * W_H * sizeof(float)) != 0);
  double d = ok ? dt_rel_err(og.h1, of.h1, S * W_H) : 0.0;
  printf("gelu vs quick_gelu hidden_states[1]: rel diff %.3g\n", d);
  CHECK(d > 1e-4 && d < 0.5);
  int32_t none[3] = {1, 2, 3};
  CHECK(dit_clip_text_pooled_index(&cg, 3, none) == 0);
  out_free(&of);
  out_free(&od);
  out_free(&on);
  out_free(&og);

  /* The published CLIP-L geometry: 64-wide heads, as the single-file inference assumes. */
  dit_clip_text_config l;
  dit_clip_text_config_l(&l);
  CHECK(l.hidden_size == 768 && l.num_heads * 64 == l.hidden_size && l.num_layers == 12 && l.intermediate_size == 3072);
  CHECK(l.vocab_size == 49408 && l.max_position_embeddings == 77 && l.hidden_act == DIT_CLIP_QUICK_GELU);

  /* Random weights at this geometry run and give finite values. */
  dit_error err = {0};
  dit_clip_text *r = NULL;
  CHECK(dit_clip_text_create_random(be, &cf, DIT_BF16, 7, &r, &err) == DIT_OK);
  if (r) {
    float last[S * W_H];
    CHECK(dit_clip_text_encode(r, S, ids, last, NULL, &err) == DIT_OK && all_finite(last, S * W_H));
    CHECK(dit_clip_text_weight_bytes(r) > 0);
    dit_clip_text_free(r);
  }
  dit_clip_text_config bad = cf;
  bad.num_heads = 5;
  CHECK(dit_clip_text_create_random(be, &bad, DIT_BF16, 7, &r, &err) != DIT_OK && r == NULL);
  dit_backend_free(be);
}

/* ---- the CUDA backend ---------------------------------------------------------------- */

#define GPU_NMSE 1e-4 /* F32 activations, GEMM inputs rounded to bf16 on the GPU */

#ifdef DIT_HAVE_CUDA
/* The model at path (folder or single file) on the GPU, device buffers in and out,
 * downloaded into o (host, S*H / H floats). */
static void gpu_run(dit_backend *be, const char *path, const int32_t *ids, int S, clip_out *o) {
  dit_error err = {0};
  dit_clip_text *m = NULL;
  dit_status s = dit_clip_text_load(be, path, &m, &err);
  CHECK_MSG(s == DIT_OK, "gpu load %s: %s", path, err.msg);
  if (s != DIT_OK) return;
  int H = dit_clip_text_get_config(m)->hidden_size;
  size_t n = (size_t)S * H;
  o->last = calloc(n, sizeof(float)), o->pooled = calloc((size_t)H, sizeof(float)), o->h1 = calloc(n, sizeof(float));
  float *dl = dt_to_device(be, o->last, n), *dp = dt_to_device(be, o->pooled, (size_t)H), *dh = dt_to_device(be, o->h1, n);
  const int one[1] = {1};
  s = dl && dp && dh ? dit_clip_text_encode_hidden(m, S, ids, 1, one, &dh, dl, dp, &err) : DIT_ERR_NOMEM;
  if (s == DIT_OK) s = be->ops->download(be, o->last, dl, n * sizeof(float), &err);
  if (s == DIT_OK) s = be->ops->download(be, o->pooled, dp, (size_t)H * sizeof(float), &err);
  if (s == DIT_OK) s = be->ops->download(be, o->h1, dh, n * sizeof(float), &err);
  CHECK_MSG(s == DIT_OK, "gpu encode: %s", err.msg);
  int p = dit_clip_text_pooled_index(dit_clip_text_get_config(m), S, ids);
  CHECK(s == DIT_OK && !memcmp(o->pooled, o->last + (size_t)p * H, (size_t)H * sizeof(float)));
  if (dl) be->ops->free(be, dl);
  if (dp) be->ops->free(be, dp);
  if (dh) be->ops->free(be, dh);
  dit_clip_text_free(m);
}

static void gpu_compare(const float *gpu, const float *cpu, size_t n, const char *what) {
  long bad = 0;
  double v = dt_nmse(gpu, cpu, n, &bad);
  printf("gpu vs cpu %-24s nmse %.3g, non-finite %ld\n", what, v, bad);
  CHECK_MSG(v <= GPU_NMSE && bad == 0, "gpu %s: nmse %g", what, v);
}

/* The CUDA attention takes head widths that are multiples of 8, so the GPU runs the
 * 64-wide-head model of test_wide (the fixture's heads are 4 wide): GPU against CPU, and
 * the folder and single-file paths identical on the GPU. */
static void test_gpu(const dt_args *a) {
  dit_backend *be = NULL, *cpu = NULL;
  dit_error err = {0};
  if (dit_backend_cuda_create(0, DIT_GPU_PRECISION_BF16, NULL, &be, &err) != DIT_OK) {
    printf("SKIP gpu: no usable GPU (%s)\n", err.msg);
    return;
  }
  char dir[4096], file[4200];
  fresh_dir(a->tmp, "wide_gpu", dir, sizeof dir);
  dt_path(file, sizeof file, dir, "model.safetensors");
  write_wide(dir);
  write_text(dir, "config.json", "{\"model_type\": \"clip_text_model\", " WIDE_FIELDS "}");
  enum { S = WIDE_S };
  const int32_t *ids = wide_ids;
  clip_out od = {0}, of = {0}, oc = {0};
  dit_clip_text_config cc;
  gpu_run(be, dir, ids, S, &od);
  gpu_run(be, file, ids, S, &of);
  cpu = new_backend();
  bool ok = cpu && run_wide(cpu, file, ids, S, &oc, &cc);
  if (ok && od.last && of.last) {
    gpu_compare(od.last, oc.last, (size_t)S * W_H, "last_hidden_state");
    gpu_compare(od.pooled, oc.pooled, W_H, "pooled");
    gpu_compare(od.h1, oc.h1, (size_t)S * W_H, "hidden_states[1]");
    CHECK_MSG(same_out(&od, &of, S, W_H), "gpu: single file and folder outputs differ");
  }
  out_free(&od);
  out_free(&of);
  out_free(&oc);
  if (cpu) dit_backend_free(cpu);
  dit_backend_free(be);
}
#else
static void test_gpu(const dt_args *a) {
  (void)a;
  printf("SKIP gpu: built without CUDA\n");
}
#endif

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_fixture, test_errors, test_wide, test_gpu};
  return dt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}

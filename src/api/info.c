/* `ditrun info`: describes a model folder, a component folder or a weights file
 * (pipeline, components, classes, tensor/parameter counts, dtypes, bytes), validating
 * every file it reads through the same loaders the engine uses, so a model that passes
 * `info` has well-formed files. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/ctx.h"
#include "io/gguf.h"
#include "io/json.h"
#include "io/model_dir.h"
#include "io/png.h"
#include "pipeline/family.h"
#include "io/safetensors.h"

typedef struct weights_summary {
  size_t n_files, n_tensors;
  uint64_t params, bytes;
  size_t dtype_tensors[DIT_DTYPE_COUNT];
  uint64_t dtype_params[DIT_DTYPE_COUNT];
} weights_summary;

static void summarize(const dit_weights *w, weights_summary *s) {
  memset(s, 0, sizeof *s);
  s->n_files = w->n_files;
  s->n_tensors = w->n_tensors;
  for (size_t i = 0; i < w->n_tensors; i++) {
    const dit_st_tensor *t = w->tensors[i];
    uint64_t bytes = t->end - t->begin, numel = 1;
    for (int k = 0; k < t->ndim; k++) numel *= (uint64_t)t->shape[k]; /* validated: no overflow */
    s->params += numel;
    s->bytes += bytes;
    s->dtype_tensors[t->dtype]++;
    s->dtype_params[t->dtype] += numel;
  }
}

/* 1234567 -> "1.23 M"; small numbers stay exact. */
static const char *human(uint64_t v, const char *unit, char *buf, size_t len) {
  static const char *const sfx[] = {"", "K", "M", "G", "T"};
  double x = (double)v;
  int k = 0;
  while (x >= 1000.0 && k < 4) x /= 1000.0, k++;
  if (k == 0)
    snprintf(buf, len, "%llu%s%s", (unsigned long long)v, unit[0] ? " " : "", unit);
  else
    snprintf(buf, len, "%.2f %s%s", x, sfx[k], unit);
  return buf;
}

static void print_weights(const dit_weights *w, const char *indent, unsigned flags, FILE *out) {
  weights_summary s;
  summarize(w, &s);
  char hp[32], hb[32];
  fprintf(out, "%stensors: %zu, parameters: %llu%s%s%s, %llu bytes%s%s%s in %zu file%s\n", indent, s.n_tensors,
          (unsigned long long)s.params, s.params >= 1000 ? " (" : "",
          s.params >= 1000 ? human(s.params, "", hp, sizeof hp) : "", s.params >= 1000 ? ")" : "",
          (unsigned long long)s.bytes, s.bytes >= 1000 ? " (" : "",
          s.bytes >= 1000 ? human(s.bytes, "B", hb, sizeof hb) : "", s.bytes >= 1000 ? ")" : "", s.n_files,
          s.n_files == 1 ? "" : "s");
  fprintf(out, "%sdtypes:", indent);
  for (int d = 0; d < DIT_DTYPE_COUNT; d++)
    if (s.dtype_tensors[d])
      fprintf(out, " %s x%zu (%s params)", dit_dtype_name((dit_dtype)d), s.dtype_tensors[d],
              human(s.dtype_params[d], "", hp, sizeof hp));
  fprintf(out, "%s\n", s.n_tensors ? "" : " none");
  if (!(flags & DIT_INFO_TENSORS)) return;
  for (size_t i = 0; i < w->n_tensors; i++) {
    const dit_st_tensor *t = w->tensors[i];
    char shape[160];
    fprintf(out, "%s  %s %s %s %llu bytes\n", indent, t->name, dit_dtype_name(t->dtype),
            dit_shape_str(t->shape, t->ndim, shape, sizeof shape), (unsigned long long)(t->end - t->begin));
  }
}

/* True if the folder holds any .safetensors (or index) file. */
static bool has_weights(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return false;
  bool found = false;
  struct dirent *e;
  while (!found && (e = readdir(d))) {
    size_t n = strlen(e->d_name);
    found = (n > 12 && !strcmp(e->d_name + n - 12, ".safetensors")) ||
            (n > 23 && !strcmp(e->d_name + n - 23, ".safetensors.index.json"));
  }
  closedir(d);
  return found;
}

/* Up to n bytes of s as printable text (other bytes as \xNN), cut with "..." past 60. */
static void print_text(FILE *out, const char *s, uint64_t n) {
  fputc('"', out);
  for (uint64_t i = 0; i < n && i < 60; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 32 && c < 127 && c != '"' && c != '\\') fputc(c, out);
    else if (c >= 128) fputc(c, out); /* UTF-8 bytes as they are */
    else fprintf(out, "\\x%02x", c);
  }
  fprintf(out, "\"%s", n > 60 ? "..." : "");
}

/* Element i of kv as text. */
static void print_elem(FILE *out, const dit_gguf_kv *kv, uint64_t i) {
  const char *s;
  uint64_t n;
  int64_t v;
  double d;
  if (kv->elem == DIT_GGUF_STRING) {
    if (kv->type == DIT_GGUF_ARRAY ? dit_gguf_str_at(kv, i, &s, &n) : dit_gguf_str(kv, &s, &n)) print_text(out, s, n);
  } else if (kv->elem == DIT_GGUF_BOOL) {
    fprintf(out, "%s", dit_gguf_int_at(kv, i, &v) && v ? "true" : "false");
  } else if (kv->elem == DIT_GGUF_F32 || kv->elem == DIT_GGUF_F64) {
    if (dit_gguf_float_at(kv, i, &d)) fprintf(out, "%.9g", d);
  } else if (dit_gguf_int_at(kv, i, &v)) {
    fprintf(out, "%lld", (long long)v);
  } else if (dit_gguf_float_at(kv, i, &d)) {
    fprintf(out, "%.0f", d); /* a u64 above INT64_MAX */
  }
}

/* A GGUF file's header: version, alignment and every key/value (arrays: their first 8). */
static void print_gguf(const dit_st_file *f, FILE *out) {
  const dit_gguf_meta *m = f->gguf;
  fprintf(out, "GGUF version %u, alignment %llu, data at byte %llu, %zu key/values\n", m->version,
          (unsigned long long)m->alignment, (unsigned long long)m->data_offset, m->n_kv);
  for (size_t i = 0; i < m->n_kv; i++) {
    const dit_gguf_kv *kv = &m->kv[i];
    bool arr = kv->type == DIT_GGUF_ARRAY;
    fprintf(out, "  %s: %s", kv->key, dit_gguf_type_name(kv->elem));
    if (arr) fprintf(out, "[%llu]", (unsigned long long)kv->n);
    fprintf(out, " = %s", arr ? "[" : "");
    for (uint64_t k = 0; k < kv->n && k < (arr ? 8 : 1); k++) {
      if (k) fprintf(out, ", ");
      print_elem(out, kv, k);
    }
    fprintf(out, "%s\n", arr ? (kv->n > 8 ? ", ...]" : "]") : "");
  }
}

static dit_status print_weights_at(const char *path, const char *indent, unsigned flags, FILE *out, dit_error *err) {
  dit_weights *w;
  DIT_TRY(dit_weights_open(path, NULL, &w, err));
  for (size_t i = 0; i < w->n_files; i++)
    if (w->files[i]->gguf) print_gguf(w->files[i], out);
  print_weights(w, indent, flags, out);
  dit_weights_close(w);
  return DIT_OK;
}

/* The class a component's config names: diffusers "_class_name" or transformers
 * "architectures"[0], or a tokenizer's "tokenizer_class". Writes "" when none is present. */
static void config_class(const json_t *cfg, char *buf, size_t len) {
  const json_t *c = json_object_get(cfg, "_class_name");
  const json_t *a = json_object_get(cfg, "architectures");
  if (!json_is_string(c) && json_is_array(a)) c = json_array_get(a, 0);
  if (!json_is_string(c)) c = json_object_get(cfg, "tokenizer_class");
  snprintf(buf, len, "%s", json_is_string(c) ? json_string_value(c) : "");
}

static dit_status print_component_folder(const char *dir, unsigned flags, FILE *out, dit_error *err) {
  char file[4352];
  struct stat st;
  static const char *const names[] = {"config.json", "scheduler_config.json", "tokenizer_config.json"};
  for (int i = 0; i < 3; i++) {
    snprintf(file, sizeof file, "%s/%s", dir, names[i]);
    if (stat(file, &st) != 0) continue;
    json_t *cfg;
    DIT_TRY(dit_json_load_file(file, 16u << 20, &cfg, err));
    char cls[256];
    config_class(cfg, cls, sizeof cls);
    json_decref(cfg);
    fprintf(out, "class: %s (from %s)\n", cls[0] ? cls : "(not named)", names[i]);
    break;
  }
  if (!has_weights(dir)) {
    fprintf(out, "no weights\n");
    return DIT_OK;
  }
  return print_weights_at(dir, "", flags, out, err);
}

static dit_status print_model(const char *path, unsigned flags, FILE *out, dit_error *err) {
  dit_model_dir *d;
  DIT_TRY(dit_model_dir_open(path, &d, err));
  dit_status s = DIT_OK;
  uint64_t total_params = 0, total_bytes = 0;
  const dit_family *fam = dit_family_find(d->pipeline);
  fprintf(out, "model: %s\npipeline: %s\nfamily: %s%s%s%s\ncomponents: %zu\n", path, d->pipeline,
          fam ? fam->name : "none (this build cannot generate with it)", fam ? " (" : "", fam ? fam->title : "",
          fam ? ")" : "", d->n_components);
  for (size_t i = 0; i < d->n_components && s == DIT_OK; i++) {
    const dit_component *c = &d->components[i];
    fprintf(out, "  %s: %s (%s)\n", c->name, c->cls, c->library);
    char dir[4096];
    if ((s = dit_model_dir_component_path(d, c->name, dir, sizeof dir, err)) != DIT_OK) break;
    if (!has_weights(dir)) continue;
    dit_weights *w;
    if ((s = dit_weights_open(dir, NULL, &w, err)) != DIT_OK) break;
    print_weights(w, "    ", flags, out);
    weights_summary sm;
    summarize(w, &sm);
    total_params += sm.params;
    total_bytes += sm.bytes;
    dit_weights_close(w);
  }
  if (s == DIT_OK) {
    char hp[32], hb[32];
    fprintf(out, "total: %llu parameters (%s), %llu bytes (%s)\n", (unsigned long long)total_params,
            human(total_params, "", hp, sizeof hp), (unsigned long long)total_bytes,
            human(total_bytes, "B", hb, sizeof hb));
  }
  dit_model_dir_close(d);
  return s;
}

static bool is_png(const char *path) {
  static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  unsigned char b[8];
  FILE *f = fopen(path, "rb");
  bool yes = f && fread(b, 1, 8, f) == 8 && !memcmp(b, sig, 8);
  if (f) fclose(f);
  return yes;
}

/* An image: its size, the generation parameters of its "parameters" chunk (as the web UIs
 * parse them), then its other text chunks. */
static dit_status print_png(const char *path, FILE *out, dit_error *err) {
  dit_png_text t;
  DIT_TRY(dit_png_read_text(path, &t, err));
  fprintf(out, "image: %s (%dx%d PNG)\n", path, t.width, t.height);
  dit_status s = DIT_OK;
  for (int i = 0; i < t.n && s == DIT_OK; i++) {
    if (strcmp(t.keys[i], "parameters")) continue;
    dit_infotext it;
    if (dit_infotext_parse(t.values[i], &it) != DIT_OK) {
      s = dit_errorf(err, DIT_ERR_NOMEM, "out of memory parsing %s", path);
      break;
    }
    fprintf(out, "prompt: %s\n", it.prompt);
    if (it.negative_prompt[0]) fprintf(out, "negative prompt: %s\n", it.negative_prompt);
    for (int k = 0; k < it.n_fields; k++) fprintf(out, "%s: %s\n", it.keys[k], it.values[k]);
    dit_infotext_free(&it);
  }
  for (int i = 0; i < t.n && s == DIT_OK; i++) {
    if (!strcmp(t.keys[i], "parameters") || !strcmp(t.keys[i], "prompt") || !strcmp(t.keys[i], "negative_prompt"))
      continue;
    fprintf(out, "text %s: %s\n", t.keys[i], t.values[i]);
  }
  dit_png_text_free(&t);
  return s;
}

static dit_status info(const char *path, unsigned flags, FILE *out, dit_error *err) {
  struct stat st;
  if (stat(path, &st) != 0) return dit_errorf(err, DIT_ERR_IO, "%s: %s", path, strerror(errno));
  if (S_ISDIR(st.st_mode)) {
    char file[4352];
    snprintf(file, sizeof file, "%s/model_index.json", path);
    if (stat(file, &st) == 0) return print_model(path, flags, out, err);
    fprintf(out, "component: %s\n", path);
    return print_component_folder(path, flags, out, err);
  }
  const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  if (!strcmp(base, "model_index.json")) { /* the folder it describes */
    char dir[4096];
    int n = (int)(base - path) - 1; /* length of the folder part; -1: none, 0: root */
    snprintf(dir, sizeof dir, "%.*s", n > 0 ? n : 1, n > 0 ? path : n == 0 ? "/" : ".");
    return print_model(dir, flags, out, err);
  }
  if (is_png(path)) return print_png(path, out, err);
  fprintf(out, "weights: %s\n", path);
  return print_weights_at(path, "", flags, out, err);
}

dit_status dit_info_print_ex(dit_ctx *ctx, const char *path, unsigned flags, FILE *out) {
  dit_error err = {0};
  if (!path || !out) {
    dit_errorf(&err, DIT_ERR_INVALID_ARG, "dit_info_print: path and output are required");
    return dit_ctx_fail(ctx, &err);
  }
  dit_status s = info(path, flags, out, &err);
  if (s != DIT_OK) return dit_ctx_fail(ctx, &err);
  return DIT_OK;
}

dit_status dit_info_print(dit_ctx *ctx, const char *path, FILE *out) { return dit_info_print_ex(ctx, path, 0, out); }

/* A component's weights as one name space: a single .safetensors file, the shards of a
 * *.safetensors.index.json, or whichever of those a component folder holds. Shard names
 * from an index are untrusted: they must be plain files next to the index, and every
 * tensor must be exactly where the index says it is. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/gguf.h"
#include "io/json.h"
#include "io/safetensors.h"

#define INDEX_MAX_BYTES (64u * 1024u * 1024u)
#define INDEX_SUFFIX ".safetensors.index.json"
#define ST_SUFFIX ".safetensors"

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

static int cmp_tensor_ptr(const void *a, const void *b) {
  const dit_st_tensor *const *x = a, *const *y = b;
  return strcmp((*x)->name, (*y)->name);
}

void dit_weights_close(dit_weights *w) {
  if (!w) return;
  for (size_t i = 0; i < w->n_files; i++) dit_st_close(w->files[i]);
  free(w->files);
  free(w->tensors);
  for (size_t i = 0; i < w->n_owned; i++) free(w->owned[i]);
  free(w->owned);
  for (size_t i = 0; i < w->n_renamed; i++) free(w->renamed[i].name);
  free(w->renamed);
  free(w);
}

static int cmp_name_tensor_ptr(const void *key, const void *elem) {
  return strcmp(key, (*(const dit_st_tensor *const *)elem)->name);
}

const dit_st_tensor *dit_weights_find(const dit_weights *w, const char *name) {
  if (!w || !name || !w->n_tensors) return NULL;
  const dit_st_tensor *const *p =
      bsearch(name, w->tensors, w->n_tensors, sizeof *w->tensors, cmp_name_tensor_ptr);
  return p ? *p : NULL;
}

/* The file of w that holds t. */
static const dit_st_file *file_of(const dit_weights *w, const dit_st_tensor *t) {
  for (size_t i = 0; i < w->n_files; i++) {
    const dit_st_file *f = w->files[i];
    if (t >= f->tensors && t < f->tensors + f->n_tensors) return f;
  }
  return NULL;
}

/* Builds w->tensors from w->files (sorted by name); a name in two files is an error. */
static dit_status merge_tensors(dit_weights *w, dit_error *err) {
  size_t n = 0;
  for (size_t i = 0; i < w->n_files; i++) n += w->files[i]->n_tensors;
  w->tensors = malloc((n ? n : 1) * sizeof *w->tensors);
  if (!w->tensors) return dit_errorf(err, DIT_ERR_NOMEM, "cannot allocate a table of %zu tensors", n);
  for (size_t i = 0; i < w->n_files; i++)
    for (size_t k = 0; k < w->files[i]->n_tensors; k++) w->tensors[w->n_tensors++] = &w->files[i]->tensors[k];
  qsort(w->tensors, w->n_tensors, sizeof *w->tensors, cmp_tensor_ptr);
  for (size_t i = 1; i < w->n_tensors; i++)
    if (!strcmp(w->tensors[i - 1]->name, w->tensors[i]->name))
      return dit_errorf(err, DIT_ERR_FORMAT, "tensor \"%s\" is present in two shards: %s and %s", w->tensors[i]->name,
                        file_of(w, w->tensors[i - 1])->path, file_of(w, w->tensors[i])->path);
  return DIT_OK;
}

/* True when the file at path starts with GGUF's magic. */
static bool file_is_gguf(const char *path) {
  unsigned char m[4] = {0};
  FILE *fp = fopen(path, "rb");
  if (!fp) return false;
  size_t n = fread(m, 1, 4, fp);
  fclose(fp);
  return dit_gguf_is_gguf(m, n);
}

/* Adds one safetensors file (or, when gguf_ok, a GGUF file: told by its magic). */
static dit_status add_file(dit_weights *w, const char *path, const dit_st_options *opt, bool gguf_ok,
                           dit_error *err) {
  dit_st_file **nf = realloc(w->files, (w->n_files + 1) * sizeof *nf);
  if (!nf) return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", path);
  w->files = nf;
  dit_st_file *f;
  bool gguf = file_is_gguf(path);
  if (gguf && !gguf_ok)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: a GGUF file cannot be a shard of a safetensors index", path);
  DIT_TRY(gguf ? dit_gguf_open(path, &f, err) : dit_st_open(path, opt, &f, err));
  w->files[w->n_files++] = f;
  return DIT_OK;
}

/* A shard name must be a plain file name: no separators, not "." or "..". */
static bool plain_name(const char *s) {
  return s[0] && strcmp(s, ".") && strcmp(s, "..") && !strchr(s, '/') && !strchr(s, '\\');
}

/* Checks that dir/name is an existing regular file. */
static dit_status check_shard(const char *index, const char *dir, const char *name, char *path, size_t len,
                              dit_error *err) {
  if (!plain_name(name))
    return dit_errorf(err, DIT_ERR_FORMAT,
                      "%s: shard \"%s\" is not a plain file name in the index's folder (absolute paths, \"..\" "
                      "and \"/\" are not allowed)",
                      index, name);
  if ((size_t)snprintf(path, len, "%s/%s", dir, name) >= len)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: shard path \"%s/%s\" is too long", index, dir, name);
  struct stat st;
  if (stat(path, &st) != 0)
    return dit_errorf(err, errno == ENOENT ? DIT_ERR_FORMAT : DIT_ERR_IO, "%s: shard \"%s\" %s: %s", index, name,
                      errno == ENOENT ? "is missing" : "cannot be read", strerror(errno));
  if (!S_ISREG(st.st_mode))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: shard \"%s\" is not a regular file (%s)", index, name,
                      S_ISDIR(st.st_mode)    ? "a directory"
                      : S_ISFIFO(st.st_mode) ? "a FIFO"
                                             : "a special file");
  return DIT_OK;
}

/* Every tensor must be in the shard the weight map names, and every mapped name present. */
static dit_status check_index_consistency(const dit_weights *w, const json_t *map, const char *index, dit_error *err) {
  for (size_t i = 0; i < w->n_tensors; i++) {
    const dit_st_tensor *t = w->tensors[i];
    const char *fpath = file_of(w, t)->path;
    const char *base = strrchr(fpath, '/') ? strrchr(fpath, '/') + 1 : fpath;
    const json_t *v = json_object_get(map, t->name);
    if (!v)
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: tensor \"%s\" is in shard %s but not in the index's weight_map",
                        index, t->name, base);
    if (strcmp(json_string_value(v), base))
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: tensor \"%s\" is listed for shard %s but found in shard %s", index,
                        t->name, json_string_value(v), base);
  }
  const char *key;
  const json_t *v;
  json_object_foreach((json_t *)map, key, v) {
    if (!dit_weights_find(w, key))
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: tensor \"%s\" is listed for shard %s but not found in it", index, key,
                        json_string_value(v));
  }
  return DIT_OK;
}

static dit_status open_index(dit_weights *w, const char *index, const dit_st_options *opt, dit_error *err) {
  json_t *root;
  DIT_TRY(dit_json_load_file(index, INDEX_MAX_BYTES, &root, err));
  dit_status s = DIT_OK;
  const json_t *map = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
  if (!json_is_object(map)) {
    s = dit_errorf(err, DIT_ERR_FORMAT, "%s: missing or non-object \"weight_map\"", index);
    goto done;
  }
  char dir[4096];
  if ((size_t)snprintf(dir, sizeof dir, "%s", index) >= sizeof dir)
    return json_decref(root), dit_errorf(err, DIT_ERR_FORMAT, "%s: path too long", index);
  char *slash = strrchr(dir, '/');
  if (slash)
    *slash = 0;
  else
    snprintf(dir, sizeof dir, ".");
  /* Open each distinct shard once, in weight-map order of first mention. */
  json_t *seen = json_object();
  if (!seen) {
    s = dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", index);
    goto done;
  }
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)map, key, v) {
    if (!json_is_string(v)) {
      s = dit_errorf(err, DIT_ERR_FORMAT, "%s: weight_map entry \"%s\" is not a string", index, key);
      break;
    }
    const char *shard = json_string_value(v);
    if (json_object_get(seen, shard)) continue;
    char path[4352];
    if ((s = check_shard(index, dir, shard, path, sizeof path, err)) != DIT_OK) break;
    if ((s = add_file(w, path, opt, false, err)) != DIT_OK) break;
    json_object_set_new(seen, shard, json_true());
  }
  json_decref(seen);
  if (s == DIT_OK && w->n_files == 0) s = dit_errorf(err, DIT_ERR_FORMAT, "%s: weight_map is empty", index);
  if (s == DIT_OK && (s = merge_tensors(w, err)) != DIT_OK) dit_error_prefix(err, "%s", index);
  if (s == DIT_OK) s = check_index_consistency(w, map, index, err);
done:
  json_decref(root);
  return s;
}

/* Picks the weights file in a folder: an index (preferred), else one .safetensors file.
 * The standard diffusers/transformers names win over others when several exist. */
static dit_status pick_in_folder(const char *dir, char *out, size_t len, bool *is_index, dit_error *err) {
  static const char *const preferred[] = {"diffusion_pytorch_model" INDEX_SUFFIX, "model" INDEX_SUFFIX,
                                          "diffusion_pytorch_model" ST_SUFFIX, "model" ST_SUFFIX};
  struct stat st;
  for (size_t i = 0; i < sizeof preferred / sizeof *preferred; i++) {
    snprintf(out, len, "%s/%s", dir, preferred[i]);
    if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) {
      *is_index = i < 2;
      return DIT_OK;
    }
  }
  DIR *d = opendir(dir);
  if (!d) return dit_errorf(err, DIT_ERR_IO, "%s: cannot list folder: %s", dir, strerror(errno));
  int n_index = 0, n_st = 0;
  char idx[1024] = "", one[1024] = "";
  struct dirent *e;
  while ((e = readdir(d))) {
    if (ends_with(e->d_name, INDEX_SUFFIX)) {
      if (!n_index++) snprintf(idx, sizeof idx, "%s", e->d_name);
    } else if (ends_with(e->d_name, ST_SUFFIX)) {
      if (!n_st++) snprintf(one, sizeof one, "%s", e->d_name);
    }
  }
  closedir(d);
  if (n_index > 1 || (n_index == 0 && n_st > 1))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: %d %s files and no standard name to choose between them", dir,
                      n_index > 1 ? n_index : n_st, n_index > 1 ? INDEX_SUFFIX : ST_SUFFIX);
  if (n_index == 0 && n_st == 0)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: no .safetensors weights in this folder", dir);
  *is_index = n_index == 1;
  snprintf(out, len, "%s/%s", dir, n_index ? idx : one);
  return DIT_OK;
}

dit_status dit_weights_open(const char *path, const dit_st_options *opt, dit_weights **out, dit_error *err) {
  *out = NULL;
  struct stat st;
  if (stat(path, &st) != 0) return dit_errorf(err, DIT_ERR_IO, "%s: %s", path, strerror(errno));
  char file[4352];
  bool is_index = false;
  if (S_ISDIR(st.st_mode)) {
    DIT_TRY(pick_in_folder(path, file, sizeof file, &is_index, err));
  } else {
    snprintf(file, sizeof file, "%s", path);
    is_index = ends_with(path, ".index.json");
  }
  dit_weights *w = calloc(1, sizeof *w);
  if (!w) return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", path);
  dit_status s = is_index ? open_index(w, file, opt, err) : add_file(w, file, opt, true, err);
  if (s == DIT_OK && !is_index) s = merge_tensors(w, err);
  DIT_HAND_OVER(s, w, out, dit_weights_close);
}

void *dit_weights_alloc(dit_weights *w, size_t bytes) {
  void **no = realloc(w->owned, (w->n_owned + 1) * sizeof *no);
  if (!no) return NULL;
  w->owned = no;
  void *p = aligned_alloc(64, bytes ? (bytes + 63) / 64 * 64 : 64);
  if (p) w->owned[w->n_owned++] = p;
  return p;
}

void dit_weights_release_pages(const dit_weights *w, const void *p, size_t n) {
  const long page = sysconf(_SC_PAGESIZE);
  if (!w || !p || !n || page <= 0) return;
  const uintptr_t a = (uintptr_t)p, b = a + n;
  for (size_t i = 0; i < w->n_files; i++) {
    const dit_st_file *f = w->files[i];
    const uintptr_t m = (uintptr_t)f->map;
    if (!f->mapped || a < m || b > m + f->map_size) continue;
    const uintptr_t lo = (a + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
    const uintptr_t hi = b / (uintptr_t)page * (uintptr_t)page;
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED); /* advice: a failure changes nothing */
    return;
  }
}

dit_status dit_weights_tensor(dit_weights *w, const dit_st_tensor *st, dit_tensor *out, dit_error *err) {
  size_t esz = dit_dtype_size(st->dtype);
  size_t nbytes = (size_t)(st->end - st->begin);
  void *data = (void *)st->data; /* read-only mapping: callers must not write through it */
  if (nbytes && esz > 1 && (uintptr_t)data % esz != 0) {
    void *copy = dit_weights_alloc(w, nbytes);
    if (!copy)
      return dit_errorf(err, DIT_ERR_NOMEM, "tensor \"%s\": cannot allocate %zu bytes for an aligned copy", st->name,
                        nbytes);
    memcpy(copy, st->data, nbytes);
    data = copy;
  }
  *out = dit_tensor_make(st->dtype, data, st->ndim, st->shape);
  return DIT_OK;
}

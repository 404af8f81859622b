/* diffusers model folders (see model_dir.h): model_index.json is untrusted input, so
 * component names are checked to be plain folder names before any path is built from
 * them, and every file read has a size cap. */
#include "io/model_dir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/json.h"

#define INDEX_MAX_BYTES (1u << 20)
#define CONFIG_MAX_BYTES (16u << 20)

/* A component name must be usable as one folder name: not empty, no separators, not a
 * dot entry, no control characters. */
static bool plain_name(const char *s) {
  if (!s[0] || !strcmp(s, ".") || !strcmp(s, "..")) return false;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if (*p == '/' || *p == '\\' || *p < 0x20) return false;
  return strlen(s) < 256;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

void dit_model_dir_close(dit_model_dir *d) {
  if (!d) return;
  for (size_t i = 0; i < d->n_components; i++) {
    free(d->components[i].name);
    free(d->components[i].library);
    free(d->components[i].cls);
  }
  for (size_t i = 0; i < DIT_MAX_COMPONENTS; i++) free(d->files[i]);
  free(d->root);
  free(d->pipeline);
  if (d->index) json_decref(d->index);
  free(d);
}

/* Reads one "name": [library, class] member into the next component slot. Members that
 * are not 2-arrays of strings (versions, flags, [null, null]) are skipped; a 2-array
 * with one string and one non-string is malformed. A modular pipeline's index
 * (modular_model_index.json) gives [library, class, spec]: the spec's subfolder, when it
 * names one, must be the member's own name (the component's folder is always root/name). */
static dit_status add_component(dit_model_dir *d, const char *file, const char *key, const json_t *v, dit_error *err) {
  if (json_is_array(v) && json_array_size(v) == 3 && json_is_object(json_array_get(v, 2))) {
    if (!json_is_string(json_array_get(v, 0)) && !json_is_string(json_array_get(v, 1)))
      return DIT_OK; /* [null, null, spec]: a component this checkout does not hold */
    const json_t *sub = json_object_get(json_array_get(v, 2), "subfolder");
    if (sub && !json_is_null(sub) && (!json_is_string(sub) || strcmp(json_string_value(sub), key) != 0))
      return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: component \"%.64s\" lives in another subfolder (%.64s)", file,
                        key, json_is_string(sub) ? json_string_value(sub) : "not a string");
  } else if (!json_is_array(v) || json_array_size(v) != 2) {
    return DIT_OK;
  }
  const json_t *lib = json_array_get(v, 0), *cls = json_array_get(v, 1);
  if (!json_is_string(lib) && !json_is_string(cls)) return DIT_OK;
  if (!json_is_string(lib) || !json_is_string(cls))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: component \"%s\" must be [library, class] strings", file, key);
  if (!plain_name(key))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: component name \"%.64s\" is not a plain folder name", file, key);
  if (d->n_components == DIT_MAX_COMPONENTS)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: more than %d components", file, DIT_MAX_COMPONENTS);
  dit_component *c = &d->components[d->n_components];
  c->name = strdup(key);
  c->library = strdup(json_string_value(lib));
  c->cls = strdup(json_string_value(cls));
  d->n_components++;
  if (!c->name || !c->library || !c->cls) return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", file);
  return DIT_OK;
}

static dit_status parse_index(dit_model_dir *d, const char *file, dit_error *err) {
  if (!json_is_object(d->index)) return dit_errorf(err, DIT_ERR_FORMAT, "%s: expected a JSON object", file);
  const char *pipeline;
  DIT_TRY(dit_json_string(d->index, "_class_name", &pipeline, file, err));
  d->pipeline = dup_or_null(pipeline);
  if (!d->pipeline) return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", file);
  const char *key;
  json_t *v;
  json_object_foreach(d->index, key, v) {
    if (key[0] == '_' || json_is_null(v)) continue;
    DIT_TRY(add_component(d, file, key, v, err));
  }
  return DIT_OK;
}

dit_status dit_model_dir_open(const char *path, dit_model_dir **out, dit_error *err) {
  *out = NULL;
  struct stat st;
  if (stat(path, &st) != 0) return dit_errorf(err, DIT_ERR_IO, "%s: %s", path, strerror(errno));
  if (!S_ISDIR(st.st_mode)) return dit_errorf(err, DIT_ERR_FORMAT, "%s: not a folder", path);
  char file[4096];
  if ((size_t)snprintf(file, sizeof file, "%s/model_index.json", path) >= sizeof file)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: path too long", path);
  if (stat(file, &st) != 0 && errno == ENOENT) { /* a modular pipeline's folder (ModularPipeline.save_pretrained) */
    snprintf(file, sizeof file, "%s/modular_model_index.json", path);
    if (stat(file, &st) != 0 && errno == ENOENT)
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: no model_index.json (or modular_model_index.json) here (not a "
                        "diffusers model folder)", path);
  }
  dit_model_dir *d = calloc(1, sizeof *d);
  if (!d || !(d->root = strdup(path))) {
    free(d);
    return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", path);
  }
  dit_status s = dit_json_load_file(file, INDEX_MAX_BYTES, &d->index, err);
  if (s == DIT_OK) s = parse_index(d, file, err);
  if (s != DIT_OK) {
    dit_model_dir_close(d);
    return s;
  }
  *out = d;
  return DIT_OK;
}

const dit_component *dit_model_dir_component(const dit_model_dir *d, const char *name) {
  if (!d || !name) return NULL;
  for (size_t i = 0; i < d->n_components; i++)
    if (!strcmp(d->components[i].name, name)) return &d->components[i];
  return NULL;
}

dit_status dit_model_dir_set_file(dit_model_dir *d, const char *name, const char *path, dit_error *err) {
  const dit_component *c = dit_model_dir_component(d, name);
  if (!c) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: model_index.json has no component \"%s\"", d->root, name);
  struct stat st;
  if (!path || stat(path, &st) != 0) /* a file named by the user that is not there is a usage error */
    return dit_errorf(err, !path || errno == ENOENT ? DIT_ERR_INVALID_ARG : DIT_ERR_IO, "%s file %s: %s", name,
                      path ? path : "(none)", path ? strerror(errno) : "no path");
  if (!S_ISREG(st.st_mode)) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s file %s is not a regular file", name, path);
  size_t i = (size_t)(c - d->components);
  char *copy = strdup(path);
  if (!copy) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  free(d->files[i]);
  d->files[i] = copy;
  return DIT_OK;
}

const char *dit_model_dir_component_file(const dit_model_dir *d, const char *name) {
  const dit_component *c = dit_model_dir_component(d, name);
  return c ? d->files[c - d->components] : NULL;
}

const char *dit_model_dir_component_config_path(const dit_model_dir *d, const char *name, char *buf, size_t len) {
  struct stat st;
  if ((size_t)snprintf(buf, len, "%s/%s/config.json", d->root, name) >= len) return NULL;
  return stat(buf, &st) == 0 && S_ISREG(st.st_mode) ? buf : NULL;
}

dit_status dit_model_dir_component_path(const dit_model_dir *d, const char *name, char *buf, size_t len,
                                        dit_error *err) {
  if (len) buf[0] = 0;
  if (!dit_model_dir_component(d, name))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: model_index.json has no component \"%s\"", d->root, name);
  const char *file = dit_model_dir_component_file(d, name);
  if (file) {
    if ((size_t)snprintf(buf, len, "%s", file) >= len) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: path too long", file);
    return DIT_OK;
  }
  if ((size_t)snprintf(buf, len, "%s/%s", d->root, name) >= len)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s/%s: path too long", d->root, name);
  struct stat st;
  if (stat(buf, &st) != 0)
    return dit_errorf(err, errno == ENOENT ? DIT_ERR_FORMAT : DIT_ERR_IO, "%s: component folder %s: %s", buf,
                      errno == ENOENT ? "is missing" : "cannot be read", strerror(errno));
  if (!S_ISDIR(st.st_mode)) return dit_errorf(err, DIT_ERR_FORMAT, "%s: component is not a folder", buf);
  return DIT_OK;
}

static dit_status load_config_named(const char *dir, const char *fname, json_t **out, dit_error *err) {
  *out = NULL;
  char file[4352];
  if ((size_t)snprintf(file, sizeof file, "%s/%s", dir, fname) >= sizeof file)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: path too long", dir);
  struct stat st;
  if (stat(file, &st) != 0)
    return dit_errorf(err, errno == ENOENT ? DIT_ERR_FORMAT : DIT_ERR_IO, "%s: %s: %s", file,
                      errno == ENOENT ? "missing" : "cannot be read", strerror(errno));
  DIT_TRY(dit_json_load_file(file, CONFIG_MAX_BYTES, out, err));
  if (!json_is_object(*out)) {
    json_decref(*out);
    *out = NULL;
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: expected a JSON object", file);
  }
  return DIT_OK;
}

dit_status dit_config_load(const char *component_dir, json_t **out, dit_error *err) {
  return load_config_named(component_dir, "config.json", out, err);
}

dit_status dit_model_dir_component_config(const dit_model_dir *d, const char *name, json_t **out, dit_error *err) {
  *out = NULL;
  char dir[4096];
  if (dit_model_dir_component_file(d, name)) { /* the folder's config, when it has one */
    if ((size_t)snprintf(dir, sizeof dir, "%s/%s", d->root, name) >= sizeof dir)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s/%s: path too long", d->root, name);
  } else {
    DIT_TRY(dit_model_dir_component_path(d, name, dir, sizeof dir, err));
  }
  /* Schedulers keep their settings in scheduler_config.json. */
  char probe[4352];
  snprintf(probe, sizeof probe, "%s/scheduler_config.json", dir);
  struct stat st;
  bool sched = !strcmp(name, "scheduler") || (stat(probe, &st) == 0 && S_ISREG(st.st_mode));
  return load_config_named(dir, sched ? "scheduler_config.json" : "config.json", out, err);
}

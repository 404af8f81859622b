/* The model folder's own generation defaults (ditrun.json; see model_defaults.h). */
#include "pipeline/model_defaults.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "io/json.h"

static dit_status read_prompt(const json_t *j, const char *path, dit_gen_defaults *d, dit_error *err) {
  const char *prompt = NULL;
  DIT_TRY(dit_json_string_opt(j, "prompt", &prompt, path, err));
  if (!prompt) return DIT_OK;
  size_t n = strlen(prompt);
  if (n == 0 || n >= sizeof d->prompt)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: \"prompt\" must be 1..%zu bytes (has %zu)", path,
                      sizeof d->prompt - 1, n);
  memcpy(d->prompt, prompt, n + 1);
  d->from_model_file |= DIT_DEFAULT_PROMPT;
  return DIT_OK;
}

static dit_status check_keys(const json_t *j, const char *path, dit_error *err) {
  static const char *const known[] = {"width", "height", "steps", "guidance", "prompt"};
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)j, key, v) {
    (void)v;
    if (key[0] == '_') continue; /* comments */
    bool ok = false;
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) ok = ok || !strcmp(key, known[i]);
    if (!ok)
      return dit_errorf(err, DIT_ERR_FORMAT,
                        "%s: unknown key \"%s\" (known: width, height, steps, guidance, prompt; keys starting "
                        "with '_' are ignored)", path, key);
  }
  return DIT_OK;
}

static bool has(const json_t *j, const char *key) {
  const json_t *v = json_object_get(j, key);
  return v && !json_is_null(v);
}

dit_status dit_model_defaults_apply(const dit_model_dir *dir, dit_gen_defaults *d, dit_error *err) {
  char path[4096];
  int n = snprintf(path, sizeof path, "%s/%s", dir->root, DIT_MODEL_DEFAULTS_FILE);
  if (n < 0 || (size_t)n >= sizeof path) return dit_errorf(err, DIT_ERR_INVALID_ARG, "model path too long");
  struct stat st;
  if (stat(path, &st) != 0) {
    if (errno == ENOENT) return DIT_OK;
    return dit_errorf(err, DIT_ERR_IO, "%s: %s", path, strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return dit_errorf(err, DIT_ERR_FORMAT, "%s is not a regular file", path);
  json_t *j = NULL;
  DIT_TRY(dit_json_load_file(path, 1u << 20, &j, err));
  dit_status s = json_is_object(j) ? DIT_OK : dit_errorf(err, DIT_ERR_FORMAT, "%s: not a JSON object", path);
  if (s == DIT_OK) s = check_keys(j, path, err);
  int64_t w = d->width, h = d->height, steps = d->steps;
  double g = d->guidance;
  if (s == DIT_OK) s = dit_json_int_opt(j, "width", 1, 16384, &w, path, err);
  if (s == DIT_OK) s = dit_json_int_opt(j, "height", 1, 16384, &h, path, err);
  if (s == DIT_OK) s = dit_json_int_opt(j, "steps", 1, 1000, &steps, path, err);
  if (s == DIT_OK) s = dit_json_double_opt(j, "guidance", &g, path, err);
  if (s == DIT_OK && d->size_multiple > 0 && (w % d->size_multiple || h % d->size_multiple))
    s = dit_errorf(err, DIT_ERR_FORMAT, "%s: width and height must be multiples of %d for this model (got %lldx%lld)",
                   path, d->size_multiple, (long long)w, (long long)h);
  if (s == DIT_OK) s = read_prompt(j, path, d, err);
  if (s == DIT_OK) {
    if (has(j, "width")) d->from_model_file |= DIT_DEFAULT_WIDTH;
    if (has(j, "height")) d->from_model_file |= DIT_DEFAULT_HEIGHT;
    if (has(j, "steps")) d->from_model_file |= DIT_DEFAULT_STEPS;
    if (has(j, "guidance")) d->from_model_file |= DIT_DEFAULT_GUIDANCE;
    d->width = (int)w;
    d->height = (int)h;
    d->steps = (int)steps;
    d->guidance = g;
  }
  json_decref(j);
  return s;
}

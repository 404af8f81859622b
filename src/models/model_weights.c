/* A transformer's weights (see model_weights.h). */
#include "models/model_weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dit_status dit_model_config_path(const char *who, const char *dir, char *path, size_t len, dit_error *err) {
  int n = snprintf(path, len, "%s/config.json", dir);
  if (n < 0 || (size_t)n >= len) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: folder path too long: %s", who, dir);
  return DIT_OK;
}

dit_status dit_wtable_check_weights(const dit_wtable *t, bool any_elements, bool blocks, dit_error *err) {
  for (size_t i = 0; i < t->n; i++) {
    const dit_tensor *d = t->entries[i].dst;
    if (!d->data) continue;
    if (dit_dtype_is_quant(d->dtype)) {
      if (!blocks)
        return dit_errorf(err, DIT_ERR_UNSUPPORTED, "tensor %s is quantized (%s), which this model does not take",
                          t->entries[i].name, dit_dtype_name(d->dtype));
      if (d->ndim != 2)
        return dit_errorf(err, DIT_ERR_UNSUPPORTED, "tensor %s: %s is supported for 2-D weight matrices only",
                          t->entries[i].name, dit_dtype_name(d->dtype));
    } else if (!any_elements && d->dtype != DIT_F32 && d->dtype != DIT_BF16 && d->dtype != DIT_F16) {
      return dit_errorf(err, DIT_ERR_UNSUPPORTED, "tensor %s has dtype %s (expected F32, BF16 or F16)",
                        t->entries[i].name, dit_dtype_name(d->dtype));
    }
  }
  return DIT_OK;
}

dit_status dit_wtable_check_float(const dit_wtable *t, dit_error *err) {
  return dit_wtable_check_weights(t, false, false, err);
}

/* Elements of t's bound tensors. */
static uint64_t table_params(const dit_wtable *t) {
  uint64_t n = 0;
  for (size_t i = 0; i < t->n; i++)
    if (t->entries[i].dst->data) n += (uint64_t)dit_tensor_numel(t->entries[i].dst);
  return n;
}

/* Bytes of t's tensors as one backend block (each piece 256-byte aligned). */
static size_t block_bytes(const dit_wtable *t) {
  size_t n = 0;
  for (size_t i = 0; i < t->n; i++) n += (dit_tensor_nbytes(t->entries[i].dst) + 255) / 256 * 256;
  return n;
}

/* Binds t from w->files, checks the dtypes when asked, then on a device backend uploads. */
static dit_status bind_place(dit_backend *be, dit_model_weights *w, dit_wtable *t, bool check_float, dit_error *err) {
  DIT_TRY(dit_wtable_bind(t, w->files, w->prefix ? w->prefix : "", w->ignore, err));
  DIT_TRY(dit_wtable_check_weights(t, !check_float, true, err));
  w->wparams = table_params(t);
  if (dit_backend_is_host(be)) return DIT_OK;
  DIT_TRY(dit_backend_upload_wtable_as(be, t, w->upload, &w->wblock, err));
  w->wbytes = block_bytes(t);
  dit_weights_close(w->files);
  w->files = NULL;
  return DIT_OK;
}

dit_status dit_model_weights_load(dit_backend *be, dit_model_weights *w, const char *who, const char *dir,
                                  dit_wtable_build_fn build, void *model, bool check_float, dit_error *err) {
  dit_wtable t;
  dit_status s = build(model, &t, err);
  if (s == DIT_OK && !(w->source = strdup(dir))) s = dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", who);
  if (s == DIT_OK) s = dit_weights_open(dir, NULL, &w->files, err);
  if (s == DIT_OK && w->rename) {
    s = w->rename(w->files, err);
    if (s != DIT_OK) dit_error_prefix(err, "%s: %s", who, dir);
  }
  if (s == DIT_OK) {
    s = bind_place(be, w, &t, check_float, err);
    if (s != DIT_OK) dit_error_prefix(err, "%s: %s", who, dir);
  }
  dit_wtable_free(&t);
  return s;
}

dit_status dit_model_weights_random(dit_backend *be, dit_model_weights *w, const char *who, dit_wtable_build_fn build,
                                    void *model, dit_dtype wdt, uint64_t seed, dit_error *err) {
  dit_wtable t;
  dit_status s = build(model, &t, err);
  if (s == DIT_OK) s = dit_backend_random_wtable(be, &t, wdt, w->upload, seed, &w->wblock, err);
  if (s == DIT_OK) w->wbytes = block_bytes(&t), w->wparams = table_params(&t);
  dit_wtable_free(&t);
  if (s != DIT_OK) dit_error_prefix(err, "%s random weights", who);
  return s;
}

dit_status dit_wtable_load_dir(dit_backend *be, const char *dir, dit_wtable *t, const char *const *ignore,
                               dit_status (*after)(void *model, dit_error *err), void *model, dit_weights **files,
                               void **wblock, dit_error *err) {
  DIT_TRY(dit_weights_open(dir, NULL, files, err));
  dit_status s = dit_wtable_bind(t, *files, "", ignore, err);
  if (s != DIT_OK) {
    dit_error_prefix(err, "%s", dir);
    return s;
  }
  DIT_TRY(dit_wtable_check_float(t, err));
  if (after) DIT_TRY(after(model, err));
  if (dit_backend_is_host(be)) return DIT_OK;
  DIT_TRY(dit_backend_upload_wtable(be, t, wblock, err));
  dit_weights_close(*files);
  *files = NULL;
  return DIT_OK;
}

void dit_model_weights_release(dit_backend *be, dit_model_weights *w) {
  if (w->wblock) be->ops->free(be, w->wblock);
  if (w->files) dit_weights_close(w->files);
  for (size_t i = 0; i < w->n_lora_mem; i++) free(w->lora_mem[i]);
  free(w->lora_mem);
  free(w->lora_names);
  for (size_t i = 0; i < w->n_lowrank_mem; i++) free(w->lowrank_mem[i]);
  free(w->lowrank_mem);
  w->lowrank_mem = NULL, w->n_lowrank_mem = 0;
  if (w->lowrank_dev) be->ops->free(be, w->lowrank_dev);
  w->lowrank_dev = NULL;
  free(w->source);
  w->lora_mem = NULL, w->n_lora_mem = 0;
  w->lora_names = NULL, w->n_lora_names = 0;
  w->source = NULL;
  w->wblock = NULL;
  w->files = NULL;
}

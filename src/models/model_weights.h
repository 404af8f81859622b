/* A transformer's weights: the checkpoint's files while the tensors point into them (the
 * CPU backend), or one backend block holding every tensor (a device backend, or random
 * weights), and that block's size. The loading steps both transformers share. */
#ifndef DIT_MODELS_MODEL_WEIGHTS_H
#define DIT_MODELS_MODEL_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "io/safetensors.h"

typedef struct dit_model_weights {
  dit_weights *files; /* open checkpoint, or NULL once copied into wblock */
  void *wblock;       /* backend copy of the weights (device backends, random weights) or NULL */
  size_t wbytes;      /* its size */
  uint64_t wparams;   /* elements of the bound tensors (parameters) */
  unsigned upload;    /* set before loading: a device copy's conversions (DIT_UPLOAD_*, backend.h) */
  const char *prefix; /* set before loading: the stored names are this + the table's (NULL: none) */
  const char *const *ignore; /* set before loading: stored names under these prefixes stay unbound (NULL:
                                none; NULL-ended), e.g. tensors a model reads from the file itself */
  /* set before loading (NULL: none): renames an opened checkpoint saved under other names */
  dit_status (*rename)(dit_weights *files, dit_error *err);
  char *source;       /* the file or folder the checkpoint was opened from (a LoRA swap reads base
                         tensors from it again once the files are closed) */
  void **lora_mem;    /* host tensors with LoRAs merged in (models/lora.h), freed with the weights */
  size_t n_lora_mem;
  char (*lora_names)[DIT_WNAME_MAX]; /* the table names of the tensors the LoRAs changed */
  size_t n_lora_names;
  void **lowrank_mem; /* the low-rank terms of quantized tensors under LoRAs (dit_lowrank + its
                         a and b in one allocation each), freed with the weights */
  size_t n_lowrank_mem;
  void *lowrank_dev;  /* on a device backend: one block with those a and b in BF16 (NULL: none) */
} dit_model_weights;

/* dir/config.json into path; DIT_ERR_INVALID_ARG naming who when it does not fit. */
dit_status dit_model_config_path(const char *who, const char *dir, char *path, size_t len, dit_error *err);

/* Lists every tensor of a model in t (initialising t first, also on failure: the caller
 * frees it). */
typedef dit_status (*dit_wtable_build_fn)(void *model, dit_wtable *t, dit_error *err);

/* Opens the checkpoint in dir and binds every tensor build(model) lists (naming the first
 * problems, after "who: dir"); with check_float, a tensor that is not F32, BF16 or F16 (or a
 * block-quantized matrix) is refused by name. On a device backend then copies them into one block and closes the
 * files. */
dit_status dit_model_weights_load(dit_backend *be, dit_model_weights *w, const char *who, const char *dir,
                                  dit_wtable_build_fn build, void *model, bool check_float, dit_error *err);

/* Random weights (wdt, seed) for every tensor build(model) lists, in one block of be (a
 * failure is prefixed "who random weights"); w->upload's DIT_UPLOAD_FP8_COMPUTE applies. */
dit_status dit_model_weights_random(dit_backend *be, dit_model_weights *w, const char *who, dit_wtable_build_fn build,
                                    void *model, dit_dtype wdt, uint64_t seed, dit_error *err);

/* DIT_ERR_UNSUPPORTED naming the first bound tensor of t that is not F32, BF16 or F16 (the
 * dtypes the ops read weights in). */
dit_status dit_wtable_check_float(const dit_wtable *t, dit_error *err);
/* The same with choices: any element type passes when any_elements; quantized tensors
 * (GGUF's Q8_0 ..., fp8) pass when blocks and they are 2-D weight matrices (the linear and
 * embedding ops read those). */
dit_status dit_wtable_check_weights(const dit_wtable *t, bool any_elements, bool blocks, dit_error *err);

/* The loading steps of a decoder (VAE) without dit_model_weights: opens the checkpoint in dir
 * and binds t (stored tensors under a prefix of ignore, NULL-ended, are left out; problems
 * named after dir), refusing tensors that are not F32, BF16 or F16; then after(model) while
 * the files are mapped (host values readable; NULL: nothing), and on a device backend copies
 * the tensors into one block *wblock and closes the files (*files NULL). */
dit_status dit_wtable_load_dir(dit_backend *be, const char *dir, dit_wtable *t, const char *const *ignore,
                               dit_status (*after)(void *model, dit_error *err), void *model, dit_weights **files,
                               void **wblock, dit_error *err);

void dit_model_weights_release(dit_backend *be, dit_model_weights *w);

#endif

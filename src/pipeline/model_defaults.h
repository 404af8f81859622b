/* Generation defaults that come with a model folder: an optional `ditrun.json` beside
 * model_index.json (diffusers ignores files it does not know) overrides the family's
 * defaults, e.g. a model trained at 128x128 says so. docs/MODEL_DEFAULTS.md describes the
 * file. */
#ifndef DIT_PIPELINE_MODEL_DEFAULTS_H
#define DIT_PIPELINE_MODEL_DEFAULTS_H

#include "ditrun.h"
#include "io/model_dir.h"

#define DIT_MODEL_DEFAULTS_FILE "ditrun.json"

/* Reads dir->root/ditrun.json when it exists and overrides the fields of *d it sets
 * (width, height, steps, guidance, prompt); d->from_model_file says which were set. No file:
 * DIT_OK, *d unchanged. A malformed file fails with DIT_ERR_FORMAT naming the file and the
 * field (unknown keys too, except those starting with '_'); sizes must be multiples of
 * d->size_multiple. */
dit_status dit_model_defaults_apply(const dit_model_dir *dir, dit_gen_defaults *d, dit_error *err);

#endif

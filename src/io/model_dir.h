/* diffusers model folders: model_index.json names the pipeline class and its
 * components; each component folder has a config.json and its weights. */
#ifndef DIT_IO_MODEL_DIR_H
#define DIT_IO_MODEL_DIR_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"

#define DIT_MAX_COMPONENTS 16

typedef struct dit_component {
  char *name;     /* "transformer" */
  char *library;  /* "diffusers" */
  char *cls;      /* "ZImageTransformer2DModel" */
} dit_component;

typedef struct dit_model_dir {
  char *root;          /* folder path */
  char *pipeline;      /* model_index.json "_class_name" */
  json_t *index;       /* model_index.json */
  size_t n_components;
  dit_component components[DIT_MAX_COMPONENTS];
  char *files[DIT_MAX_COMPONENTS]; /* a single weights file standing in for component i, or NULL */
} dit_model_dir;

/* Opens a folder with model_index.json (or a modular pipeline's modular_model_index.json, whose
 * [library, class, spec] components must live in their own-named subfolders). Component names
 * must be plain folder names. */
dit_status dit_model_dir_open(const char *path, dit_model_dir **out, dit_error *err);
void dit_model_dir_close(dit_model_dir *d);
const dit_component *dit_model_dir_component(const dit_model_dir *d, const char *name);
/* Makes the weights file `path` (a regular file) stand in for component name's weights:
 * dit_model_dir_component_path gives the file from then on, while the component's
 * config.json, when its folder has one, still comes from the folder (a folder of configs
 * and tokenizers with single weight files, as people hold FLUX.1). Fails naming the
 * component when model_index.json has none of that name or the file cannot be read. */
dit_status dit_model_dir_set_file(dit_model_dir *d, const char *name, const char *path, dit_error *err);
/* The file set for component name, or NULL. */
const char *dit_model_dir_component_file(const dit_model_dir *d, const char *name);
/* root/name/config.json when that file exists (into buf), else NULL. */
const char *dit_model_dir_component_config_path(const dit_model_dir *d, const char *name, char *buf, size_t len);
/* Writes root/name (or the file set for it) into buf; fails if the component is unknown or
 * not a folder. */
dit_status dit_model_dir_component_path(const dit_model_dir *d, const char *name, char *buf, size_t len,
                                        dit_error *err);
/* Loads root/name/config.json (or scheduler_config.json for schedulers). */
dit_status dit_model_dir_component_config(const dit_model_dir *d, const char *name, json_t **out,
                                          dit_error *err);
/* Loads a config.json (at most 16 MiB) from a component folder. */
dit_status dit_config_load(const char *component_dir, json_t **out, dit_error *err);

#endif

/* The family registry: one row per model family (Z-Image, FLUX.2 [klein], ...). Everything
 * that lists or dispatches on families (dit_model_load, dit_gen_defaults_for, tokenize's chat
 * style, error messages, the CLI's help, `bench --arch`) reads this table. Adding a family = its
 * pipeline (and bench) file and one row in family.c. */
#ifndef DIT_PIPELINE_FAMILY_H
#define DIT_PIPELINE_FAMILY_H

#include <stddef.h>

#include "pipeline/family_bench.h"
#include "pipeline/model_rt.h"
#include "text/chat.h"

/* How a family's sampler holds its latents (what the step callback sees): a picture of
 * (H / grid * patch) x (W / grid * patch) latent pixels, either channel-major [C, h, w]
 * (packed 0) or as tokens of patch x patch pixels on the H / grid x W / grid grid, each
 * token's channels ordered (c, py, px) as diffusers' _pack_latents does (packed 1). */
typedef struct dit_latent_layout {
  int grid, patch, packed;
} dit_latent_layout;

/* The image inputs a family's pipeline takes (dit_family.inputs). */
enum { DIT_INPUT_INIT_IMAGE = 1, DIT_INPUT_REF_IMAGES = 2 };

typedef struct dit_family {
  const char *name;                /* "zimage": dit_gen_defaults.family, messages */
  const char *title;               /* "Z-Image / Z-Image-Turbo" */
  const char *const *pipelines;    /* model_index.json _class_name values it answers to, NULL-ended */
  dit_chat_style chat;             /* the prompt template of its text encoder */
  /* The family's defaults for this folder (before its ditrun.json). */
  dit_status (*defaults)(const dit_model_dir *dir, dit_gen_defaults *d, dit_error *err);
  /* Creates the family's state in *state and loads the components rt->keep holds. The state
   * begins with its dit_components (the model handle retunes and closes them). */
  dit_status (*open)(const dit_model_rt *rt, void **state, dit_error *err);
  /* One image; p has steps and guidance resolved, and width/height unless it was given an
   * init or reference image (then 0 = the family's size for that image). */
  dit_status (*generate)(const dit_model_rt *rt, void *state, const dit_gen_params *p, dit_image *out,
                         dit_gen_stats *st, dit_error *err);
  /* One clip (video families; NULL for image families, whose generate makes images; a video
   * family's generate is NULL): p has steps, guidance, size, frames and fps resolved. */
  dit_status (*generate_clip)(const dit_model_rt *rt, void *state, const dit_gen_params *p, dit_clip *out,
                              dit_gen_stats *st, dit_error *err);
  /* What a generate with p (resolved as generate resolves it) takes: the stages in run order
   * (plan.h's dit_plan_add), from the components opened on rt's host backend and never run.
   * NULL: the planner does not know the family yet. */
  dit_status (*plan)(const dit_model_rt *rt, void *state, const dit_gen_params *p, dit_plan *pl, dit_error *err);
  void (*close)(void *state);
  dit_latent_layout latent;        /* for dit_model_latent_preview */
  unsigned inputs;                 /* DIT_INPUT_* it takes (others are refused before it runs) */
  /* Its `ditrun bench --arch` variants (family_bench.h), ended by a row whose name is NULL. */
  const dit_bench_variant *bench;
} dit_family;

/* The row whose pipelines include class_name, or NULL. */
const dit_family *dit_family_find(const char *class_name);
size_t dit_family_count(void);
const dit_family *dit_family_at(size_t i);
/* "ZImagePipeline, Flux2KleinPipeline" (every class name of the table) into buf. */
const char *dit_family_pipeline_list(char *buf, size_t len);
/* The folder's family or DIT_ERR_UNSUPPORTED naming the pipeline and listing the supported. */
dit_status dit_family_of(const dit_model_dir *dir, const dit_family **out, dit_error *err);
/* The model's defaults: the family's, then the folder's ditrun.json over them. */
dit_status dit_family_model_defaults(const dit_family *f, const dit_model_dir *dir, dit_gen_defaults *d,
                                     dit_error *err);

/* The i-th benchmark variant over every family's list, in table order (and its family in
 * *fam when fam is not NULL), or NULL past the last. */
const dit_bench_variant *dit_bench_variant_at(size_t i, const dit_family **fam);
/* The variant named name (bench --arch), or NULL. */
const dit_bench_variant *dit_bench_variant_find(const char *name);
/* "zimage, flux2-klein-4b, ..." (every variant's name) into buf. */
const char *dit_bench_variant_list(char *buf, size_t len);

#endif

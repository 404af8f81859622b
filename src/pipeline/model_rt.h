/* The runtime every family's pipeline runs in (one per dit_model): the opened folder, the
 * backends (owned by the model: the host backend always, a device backend when the models run
 * on a GPU) and which components stay resident between generates. Families keep their loaded
 * components in a state of their own; the shared pieces here load the text encoder and run
 * the sampler loop for all of them. */
#ifndef DIT_PIPELINE_MODEL_RT_H
#define DIT_PIPELINE_MODEL_RT_H

#include <stdbool.h>

#include "backend/backend.h"
#include "core/ctx.h"
#include "io/model_dir.h"
#include "models/qwen3.h"
#include "text/tokenizer.h"

typedef struct dit_model_rt {
  dit_ctx *ctx;
  dit_model_dir *dir;
  dit_backend *host;  /* CPU backend: host-side work, and the models when device is the CPU */
  dit_backend *dev;   /* where the models run: host, or a device backend */
  unsigned keep;      /* DIT_KEEP_* (ditrun.h): components kept loaded between generates */
  dit_lora loras[DIT_MAX_LORAS]; /* merged into the transformer at each load (paths owned) */
  int n_loras;
} dit_model_rt;

/* True when the models run on a device backend (bf16 activations there). */
static inline bool dit_rt_on_device(const dit_model_rt *rt) { return rt->dev != rt->host; }

/* A component of a family's model (text encoder, transformer, VAE): how to load it on
 * rt->dev (with what the runtime asks of it: bf16 activations on a device, run options) and
 * free it, and the keep bit that says whether it stays loaded between generates. */
typedef struct dit_component_kind {
  const char *stage;  /* names the stage in messages: "transformer" */
  unsigned keep_bit;  /* DIT_KEEP_* */
  dit_status (*load)(const dit_model_rt *rt, void **obj, dit_error *err);
  void (*free)(void *obj);
  bool lazy;          /* not loaded when the model opens, only when a generate first needs it (the VAE
                         encoder: only image inputs use it); then kept or released as keep_bit says */
  /* Makes a resident object what the runtime now asks (rt->loras changed), as a fresh load
   * would be; on failure the object is as it was. NULL: the kind has nothing to redo. */
  dit_status (*retune)(const dit_model_rt *rt, void *obj, dit_error *err);
} dit_component_kind;

/* Defines `static const dit_component_kind kind` for a model of type T in the folder's
 * component `folder`: loaded on rt->dev by load_fn(rt->dev, path, &(T *), err), then made
 * ready for the runtime by prepare_fn(rt, (T *), err) (on failure it is freed again), freed
 * by free_fn; prepare_fn is run again on the resident object when the runtime's wishes change
 * (its retune), so it must be repeatable. */
#define DIT_COMPONENT_KIND(kind, stage_name, keep, folder, T, load_fn, prepare_fn, free_fn) \
  static dit_status kind##_load(const dit_model_rt *rt, void **obj, dit_error *err) {       \
    char path[4096];                                                                         \
    T *m = NULL;                                                                             \
    DIT_TRY(dit_model_dir_component_path(rt->dir, folder, path, sizeof path, err));         \
    DIT_TRY(load_fn(rt->dev, path, &m, err));                                                \
    dit_status s = prepare_fn(rt, m, err);                                                   \
    DIT_HAND_OVER(s, m, obj, free_fn);                                                       \
  }                                                                                          \
  DIT_COMPONENT_KIND_REST_(kind, stage_name, keep, T, prepare_fn, free_fn)

/* The same for a component a single weights file may stand in for: loaded by
 * load_fn(rt->dev, path, cfg, &(T *), err) with dit_component_source's path and cfg (for a
 * file, the folder's config.json when it has one, else NULL). */
#define DIT_COMPONENT_KIND_SRC(kind, stage_name, keep, folder, T, load_fn, prepare_fn, free_fn) \
  static dit_status kind##_load(const dit_model_rt *rt, void **obj, dit_error *err) {           \
    dit_component_src src;                                                                       \
    T *m = NULL;                                                                                 \
    DIT_TRY(dit_component_source(rt, folder, &src, err));                                        \
    DIT_TRY(load_fn(rt->dev, src.path, src.cfg, &m, err));                                       \
    dit_status s = prepare_fn(rt, m, err);                                                       \
    DIT_HAND_OVER(s, m, obj, free_fn);                                                           \
  }                                                                                              \
  DIT_COMPONENT_KIND_REST_(kind, stage_name, keep, T, prepare_fn, free_fn)

#define DIT_COMPONENT_KIND_REST_(kind, stage_name, keep, T, prepare_fn, free_fn)        \
  static void kind##_free(void *obj) { free_fn(obj); }                                 \
  static dit_status kind##_retune(const dit_model_rt *rt, void *obj, dit_error *err) { \
    return prepare_fn(rt, (T *)obj, err);                                              \
  }                                                                                    \
  static const dit_component_kind kind = {stage_name, keep, kind##_load, kind##_free, false, kind##_retune}

/* Where component name's weights are: its folder, or the single file set for it
 * (dit_model_dir_set_file) into path; *cfg is then the folder's config.json when it has one
 * (into cfg_buf of 4096), else NULL (a loader infers the config from the file). */
typedef struct dit_component_src {
  char path[4096];
  char cfg_buf[4096];
  const char *cfg;
  bool is_file;
} dit_component_src;
dit_status dit_component_source(const dit_model_rt *rt, const char *name, dit_component_src *src, dit_error *err);

enum { DIT_SLOT_TEXT = 0, DIT_SLOT_TRANSFORMER, DIT_SLOT_VAE, DIT_SLOT_VAE_ENC, DIT_N_SLOTS };

/* A family's components: kinds filled by the family, objects NULL until loaded. */
typedef struct dit_components {
  const dit_component_kind *kind[DIT_N_SLOTS];
  void *obj[DIT_N_SLOTS];
} dit_components;

/* Loads the components rt->keep holds, but not the lazy ones (a failure is prefixed with its
 * stage; on failure nothing is left loaded). */
dit_status dit_components_open(const dit_model_rt *rt, dit_components *c, dit_error *err);
/* The component in slot, loaded first when it is not resident. */
dit_status dit_component_get(const dit_model_rt *rt, dit_components *c, int slot, void **obj, dit_error *err);
/* The resident transformer made what rt now asks (its kind's retune: the LoRAs changed); a
 * transformer that is not loaded takes them when it loads. */
dit_status dit_components_retune(const dit_model_rt *rt, dit_components *c, dit_error *err);
/* After its stage: frees the component unless rt->keep holds it. */
void dit_component_done(const dit_model_rt *rt, dit_components *c, int slot);
void dit_components_close(dit_components *c);
/* Fills c's slots with the shared Qwen3 text encoder and the family's transformer and VAE
 * kinds, then loads what rt->keep holds (as dit_components_open). */
dit_status dit_components_start(const dit_model_rt *rt, dit_components *c, const dit_component_kind *transformer,
                                const dit_component_kind *vae, dit_error *err);
/* The same with the family's own text-encoder kind. */
dit_status dit_components_start_with(const dit_model_rt *rt, dit_components *c, const dit_component_kind *text,
                                     const dit_component_kind *transformer, const dit_component_kind *vae,
                                     dit_error *err);
/* A family's close for a malloc'd state whose first member is its dit_components. */
void dit_components_state_close(void *state);

/* The Qwen3 text encoder with its tokenizer, as both Z-Image and FLUX.2 [klein] use it: the
 * kind for DIT_SLOT_TEXT (its object is a dit_text_encoder). */
typedef struct dit_text_encoder {
  dit_tokenizer *tok;
  dit_qwen3 *te;
} dit_text_encoder;
extern const dit_component_kind dit_qwen3_text_encoder;

/* The text encoder of slot DIT_SLOT_TEXT with the RoPE frequency dtype a generate asks for. */
dit_status dit_text_encoder_get(const dit_model_rt *rt, dit_components *c, int rope_bf16, dit_text_encoder **out,
                                dit_error *err);

/* One denoising step of a family's loop: i is 0-based. */
typedef dit_status (*dit_denoise_fn)(void *state, int i, dit_error *err);

/* The sampler loop every family runs: steps calls of step(state, i), each timed; after each
 * the caller's on_step sees latents[0..n) and may cancel (nonzero: DIT_ERR_CANCELLED). A
 * failing step's message is prefixed with "denoising step i of N". rt and p may be NULL (no
 * log; no callbacks). */
dit_status dit_sampler_run(const dit_model_rt *rt, const dit_gen_params *p, int steps, dit_denoise_fn step,
                           void *state, const float *latents, size_t n, dit_error *err);

#endif

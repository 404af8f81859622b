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
} dit_model_rt;

/* True when the models run on a device backend (bf16 activations there). */
static inline bool dit_rt_on_device(const dit_model_rt *rt) { return rt->dev != rt->host; }

/* The Qwen3 text encoder with its tokenizer, as both Z-Image and FLUX.2 [klein] use it. */
typedef struct dit_text_encoder {
  dit_tokenizer *tok;
  dit_qwen3 *te;
} dit_text_encoder;

/* Loads tokenizer/ and text_encoder/ on rt->dev unless already loaded; on failure nothing
 * is left loaded. Then sets the RoPE frequency dtype a generate asks for (rope_bf16). */
dit_status dit_text_encoder_ensure(const dit_model_rt *rt, dit_text_encoder *t, int rope_bf16, dit_error *err);
/* Frees the encoder unless rt->keep holds DIT_KEEP_TEXT_ENCODER (force: always). */
void dit_text_encoder_release(const dit_model_rt *rt, dit_text_encoder *t, bool force);

/* One denoising step of a family's loop: i is 0-based. */
typedef dit_status (*dit_denoise_fn)(void *state, int i, dit_error *err);

/* The sampler loop every family runs: steps calls of step(state, i), each timed; after each
 * the caller's on_step sees latents[0..n) and may cancel (nonzero: DIT_ERR_CANCELLED). A
 * failing step's message is prefixed with "denoising step i of N". */
dit_status dit_sampler_run(const dit_model_rt *rt, const dit_gen_params *p, int steps, dit_denoise_fn step,
                           void *state, const float *latents, size_t n, dit_error *err);

#endif

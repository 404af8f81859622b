/* The FLUX.2 [klein] pipeline (diffusers Flux2KleinPipeline, text to image): Qwen3
 * prompt features stacked from layers 9/18/27, text and latent position ids, torch-CPU
 * noise packed to tokens, the flow-matching Euler loop with dynamic shifting by the
 * empirical mu, CFG against the empty prompt for the non-distilled (base) variants,
 * then the batch-norm de-normalisation, unpatchify and AutoencoderKLFlux2 decode. The
 * family's row (dit_family_flux2_klein, family.h) runs it. */
#ifndef DIT_PIPELINE_FLUX2_H
#define DIT_PIPELINE_FLUX2_H

#include <stdbool.h>

#include "backend/backend.h"
#include "core/ctx.h"
#include "io/model_dir.h"
#include "pipeline/family_bench.h"

/* model_index.json's is_distilled (absent = false, the pipeline's default); a value
 * that is not a boolean is DIT_ERR_FORMAT. */
dit_status dit_flux2_klein_is_distilled(const dit_model_dir *dir, bool *out, dit_error *err);

/* Defaults: 1024x1024 (the pipeline's default_sample_size 128 x vae_scale_factor 8),
 * sizes multiples of 16; distilled: 4 steps, guidance 1.0 (ignored: no CFG), as the
 * klein model cards run it; base: the pipeline's own 50 steps, guidance 4.0. */
void dit_flux2_klein_defaults(bool distilled, dit_gen_defaults *d);

/* Sigmas [steps+1] and timesteps [steps] for image_seq_len latent tokens, as the
 * pipeline computes them (np.linspace(1, 1/steps, steps) sigmas, mu =
 * compute_empirical_mu(image_seq_len, steps), the scheduler's dynamic shift). */
dit_status dit_flux2_klein_schedule(const dit_model_dir *dir, int steps, int image_seq_len, float *sigmas,
                                    float *timesteps, dit_error *err);

/* The benchmark variants of the family's row ("flux2-klein-4b", "-9b"; flux2_bench.c). */
extern const dit_bench_variant dit_flux2_klein_bench[];

#endif

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
#include "models/flux2.h"
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

/* The FLUX MMDiT's bench operations, for either variant (flux2_bench.c): a random model made
 * by create at the variant's config base with p's geometry overrides and bf16/F32
 * activations adt, token counts and FLOPs, inputs and one forward (family_bench.h). */
typedef dit_status (*dit_flux_create_fn)(dit_backend *be, const dit_flux2_config *c, dit_dtype wdt, uint64_t seed,
                                         dit_flux2 **out, dit_error *err);
dit_status dit_flux_bench_create(dit_flux_create_fn create, const dit_flux2_config *base, const dit_bench_params *p,
                                 dit_backend *be, dit_dtype adt, void **model, dit_error *err);
void dit_flux_bench_geometry(const void *model, const dit_bench_params *p, int64_t *img_tokens, int64_t *cap_tokens,
                             int64_t *aux_tokens, double *flops);
dit_status dit_flux_bench_inputs(const void *model, const dit_bench_params *p, dit_bench_io *io, dit_error *err);
dit_status dit_flux_bench_forward(void *model, dit_bench_io *io, dit_error *err);

#endif

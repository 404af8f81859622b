/* The Z-Image pipeline (diffusers ZImagePipeline): prompt encoding with Qwen3, the
 * flow-matching Euler loop with optional CFG (truncation, normalization) over the
 * Z-Image transformer, and the AutoencoderKL decode. The family's row (dit_family_zimage,
 * family.h) runs it. */
#ifndef DIT_PIPELINE_ZIMAGE_H
#define DIT_PIPELINE_ZIMAGE_H

#include "backend/backend.h"
#include "core/ctx.h"
#include "io/model_dir.h"
#include "models/zimage.h"
#include "pipeline/family_bench.h"

/* Published defaults (Z-Image-Turbo: distilled, 8 steps, no guidance, 1024x1024). */
void dit_zimage_defaults(dit_gen_defaults *d);

/* Sigmas [steps+1] and timesteps [steps] for a latent of h x w, as the pipeline
 * computes them (default Z-Image sigmas, mu from the image sequence length). */
dit_status dit_zimage_schedule(const dit_model_dir *dir, int steps, int h, int w, float *sigmas, float *timesteps,
                               dit_error *err);

/* The benchmark variants of the family's row ("zimage"; zimage_bench.c). */
extern const dit_bench_variant dit_zimage_bench[];

/* Z-Image-Turbo's transformer config with the bench's geometry overrides. */
dit_status dit_bench_zimage_config(const dit_bench_params *p, dit_zimage_config *c);

#endif

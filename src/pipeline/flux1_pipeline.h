/* The FLUX.1 pipeline (diffusers FluxPipeline; flux1_pipeline.c) and its benchmark
 * variants. The family's row (dit_family_flux1, family.h) runs it. */
#ifndef DIT_PIPELINE_FLUX1_H
#define DIT_PIPELINE_FLUX1_H

#include "pipeline/family_bench.h"

/* "flux1-dev", "flux1-schnell" (flux1_bench.c). */
extern const dit_bench_variant dit_flux1_bench[];

#endif

/* The Krea 2 pipeline (diffusers Krea2Pipeline; krea2_pipeline.c, whose row in the family
 * registry is dit_family_krea2) and its benchmark variant. */
#ifndef DIT_PIPELINE_KREA2_PIPELINE_H
#define DIT_PIPELINE_KREA2_PIPELINE_H

#include "pipeline/family_bench.h"

/* "krea2" (krea2_bench.c). */
extern const dit_bench_variant dit_krea2_bench[];

#endif

/* FLUX.1's benchmark variants (family_bench.h): the [dev] and [schnell] transformers with
 * the bench's geometry overrides; the rest is the FLUX MMDiT's (flux2_bench.c). */
#include <stdlib.h>

#include "models/flux1.h"
#include "pipeline/family_bench.h"
#include "pipeline/flux1_pipeline.h"
#include "pipeline/flux2_pipeline.h"

/* FLUX.1 dev (guidance embedder) / schnell with the bench's overrides (flux2_bench.c). */
static dit_status bench_create(const dit_bench_variant *v, const dit_bench_params *p, const dit_run_opts *o,
                               dit_backend *be, dit_dtype adt, void **model, dit_error *err) {
  (void)o;
  dit_flux2_config c;
  dit_flux1_config(&c, v->geometry == 0);
  return dit_flux_bench_create(dit_flux1_create_random, &c, p, be, adt, model, err);
}

DIT_BENCH_OPS(flux1_bench_ops, dit_flux2, bench_create, dit_flux_bench_geometry, dit_flux_bench_inputs,
              dit_flux_bench_forward, "(double + single blocks) x (2*(4D^2 + 2D*M)*S + 4*D*S^2), S = text + image tokens");

/* FluxPipeline's max_sequence_length 512 is the default caption length. */
const dit_bench_variant dit_flux1_bench[] = {
    {"flux1-dev", 512, 0, &flux1_bench_ops, 0},
    {"flux1-schnell", 512, 1, &flux1_bench_ops, 0},
    {NULL, 0, 0, NULL, 0},
};

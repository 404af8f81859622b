/* FLUX.1's benchmark variants (family_bench.h): the [dev] and [schnell] transformers with
 * the bench's geometry overrides; the rest is the FLUX MMDiT's (flux2_bench.c). */
#include <stdlib.h>

#include "models/flux1.h"
#include "pipeline/family_bench.h"
#include "pipeline/flux1_pipeline.h"
#include "pipeline/flux2_pipeline.h"

/* FLUX.1 dev / schnell with the test overrides: --dim the inner dim (head_dim = dim /
 * heads, a multiple of 16; RoPE axes hd/8, then two equal halves of the rest, as FLUX.1's
 * 16, 56, 56), --layers the double blocks, --refiners the single blocks, --cap-dim
 * joint_attention_dim. */
static dit_status flux1_bench_config(const dit_bench_variant *v, const dit_bench_params *p, dit_flux2_config *c,
                                     dit_error *err) {
  dit_flux1_config(c, v->geometry == 0);
  if (p->n_heads) c->n_heads = p->n_heads;
  if (p->dim || p->n_heads) {
    const int dim = p->dim ? p->dim : c->n_heads * c->head_dim;
    if (dim % c->n_heads || (dim / c->n_heads) % 16)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "bench: dim %d / heads %d must be a multiple of 16", dim,
                        c->n_heads);
    c->head_dim = dim / c->n_heads;
    c->axes_dims[0] = c->head_dim / 8;
    c->axes_dims[1] = c->axes_dims[2] = (c->head_dim - c->axes_dims[0]) / 2;
  }
  if (p->n_layers) c->n_layers = p->n_layers;
  if (p->n_refiner_layers) c->n_single_layers = p->n_refiner_layers;
  if (p->cap_feat_dim) c->joint_attention_dim = p->cap_feat_dim;
  return DIT_OK;
}

static dit_status bench_create(const dit_bench_variant *v, const dit_bench_params *p, const dit_run_opts *o,
                               dit_backend *be, dit_dtype adt, void **model, dit_error *err) {
  (void)o;
  dit_flux2_config c;
  DIT_TRY(flux1_bench_config(v, p, &c, err));
  return dit_flux_bench_create(dit_flux1_create_random, &c, p, be, adt, model, err);
}

DIT_BENCH_OPS(flux1_bench_ops, dit_flux2, bench_create, dit_flux_bench_geometry, dit_flux_bench_inputs,
              dit_flux_bench_forward, "(double + single blocks) x (2*(4D^2 + 2D*M)*S + 4*D*S^2), S = text + image tokens");

/* FluxPipeline's max_sequence_length 512 is the default caption length. */
const dit_bench_variant dit_flux1_bench[] = {
    {"flux1-dev", 512, 0, &flux1_bench_ops},
    {"flux1-schnell", 512, 1, &flux1_bench_ops},
    {NULL, 0, 0, NULL},
};

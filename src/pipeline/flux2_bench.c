/* FLUX.2 [klein]'s benchmark variants (family_bench.h): the 4B and 9B transformers with
 * the bench's geometry overrides, and the FLUX MMDiT's bench operations (token counts,
 * FLOPs, inputs and forward) that FLUX.1's variants share. */
#include <stdlib.h>

#include "models/flux2.h"
#include "pipeline/family_bench.h"
#include "pipeline/flux2_pipeline.h"

/* The bench's geometry overrides on a FLUX config: --dim the inner dim (head_dim = dim /
 * heads, with the RoPE axes split as the variant's published ones are: FLUX.2 four equal
 * axes (head_dim a multiple of 8), FLUX.1 head_dim/8 then two equal halves, as 16, 56, 56
 * (a multiple of 16)), --layers the double blocks, --refiners the single blocks, --cap-dim
 * joint_attention_dim. */
static dit_status bench_overrides(const dit_bench_params *p, dit_flux2_config *c, dit_error *err) {
  const bool v1 = c->variant == DIT_FLUX_1;
  const int mult = v1 ? 16 : 8;
  if (p->n_heads) c->n_heads = p->n_heads;
  if (p->dim || p->n_heads) {
    const int dim = p->dim ? p->dim : c->n_heads * c->head_dim;
    if (dim % c->n_heads || (dim / c->n_heads) % mult)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "bench: dim %d / heads %d must be a multiple of %d", dim, c->n_heads,
                        mult);
    c->head_dim = dim / c->n_heads;
    for (int i = 0; i < c->n_axes; i++) c->axes_dims[i] = c->head_dim / 4;
    if (v1) {
      c->axes_dims[0] = c->head_dim / 8;
      c->axes_dims[1] = c->axes_dims[2] = (c->head_dim - c->axes_dims[0]) / 2;
    }
  }
  if (p->n_layers) c->n_layers = p->n_layers;
  if (p->n_refiner_layers) c->n_single_layers = p->n_refiner_layers;
  if (p->cap_feat_dim) c->joint_attention_dim = p->cap_feat_dim;
  return DIT_OK;
}

/* klein 4B / 9B. */
static dit_status bench_create(const dit_bench_variant *v, const dit_bench_params *p, const dit_run_opts *o,
                               dit_backend *be, dit_dtype adt, void **model, dit_error *err) {
  (void)o;
  dit_flux2_config c;
  dit_flux2_config_klein(&c, v->geometry == 1);
  return dit_flux_bench_create(dit_flux2_create_random, &c, p, be, adt, model, err);
}

dit_status dit_flux_bench_create(dit_flux_create_fn create, const dit_flux2_config *base, const dit_bench_params *p,
                                 dit_backend *be, dit_dtype adt, void **model, dit_error *err) {
  dit_flux2 *m = NULL;
  dit_flux2_config c = *base;
  DIT_TRY(bench_overrides(p, &c, err));
  DIT_TRY(create(be, &c, p->dtype, p->seed, &m, err));
  dit_status s = dit_flux2_set_act_dtype(m, adt, err);
  DIT_HAND_OVER(s, m, model, dit_flux2_free);
}

void dit_flux_bench_geometry(const void *model, const dit_bench_params *p, int64_t *img_tokens, int64_t *cap_tokens,
                             int64_t *aux_tokens, double *flops) {
  *aux_tokens = 0;
  *img_tokens = (int64_t)(p->res / 16) * (p->res / 16) + (int64_t)(p->ref_res / 16) * (p->ref_res / 16); /* no padding */
  *cap_tokens = p->text_len;
  *flops = dit_flux_flops(dit_flux2_get_config(model), (double)*img_tokens, (double)*cap_tokens);
}

/* The inputs as the pipelines build them: (res/16)^2 packed image tokens with ids (0, h, w)
 * (FLUX.2: a fourth 0; then a reference's (ref_res/16)^2 tokens with ids (10, h, w, 0)), text
 * ids 0 (FLUX.2: (0, 0, 0, l)); FLUX.1's pooled vector (its values do not change the work). */
dit_status dit_flux_bench_inputs(const void *model, const dit_bench_params *p, dit_bench_io *io, dit_error *err) {
  const dit_flux2_config *c = dit_flux2_get_config(model);
  const int64_t g = p->res / 16, gr = p->ref_res / 16, si = g * g + gr * gr, st = p->text_len, na = c->n_axes;
  io->img_ids = calloc((size_t)(si * na), sizeof(float));
  io->txt_ids = calloc((size_t)(st * na), sizeof(float));
  io->vec = c->pooled_dim ? calloc((size_t)c->pooled_dim, sizeof(float)) : NULL;
  if (!io->img_ids || !io->txt_ids || (c->pooled_dim && !io->vec))
    return dit_errorf(err, DIT_ERR_NOMEM, "bench: out of memory for ids");
  for (int64_t i = 0; i < g * g; i++) {
    io->img_ids[i * na + 1] = (float)(i / g);
    io->img_ids[i * na + 2] = (float)(i % g);
  }
  for (int64_t i = 0; na == 4 && i < gr * gr; i++) {
    float *d = io->img_ids + (g * g + i) * na;
    d[0] = 10.0f, d[1] = (float)(i / gr), d[2] = (float)(i % gr);
  }
  if (na == 4)
    for (int64_t l = 0; l < st; l++) io->txt_ids[l * 4 + 3] = (float)l;
  for (int i = 0; i < c->pooled_dim; i++) io->vec[i] = (float)(i & 1);
  io->x = dit_tensor_3d(DIT_F32, NULL, 1, si, c->in_channels);
  io->out = dit_tensor_3d(DIT_F32, NULL, 1, si, c->in_channels);
  io->cap = dit_tensor_3d(DIT_F32, NULL, 1, st, c->joint_attention_dim);
  return DIT_OK;
}

/* One forward at t = 0.5 (guidance 3.5 where the model embeds it). */
dit_status dit_flux_bench_forward(void *model, dit_bench_io *io, dit_error *err) {
  const float t = 0.5f, guidance = 3.5f;
  const bool g = dit_flux2_get_config(model)->guidance_embeds;
  return dit_flux_forward(model, &io->x, &io->cap, io->vec, &t, g ? &guidance : NULL, io->img_ids, io->txt_ids,
                          &io->out, err);
}

DIT_BENCH_OPS(klein_bench_ops, dit_flux2, bench_create, dit_flux_bench_geometry, dit_flux_bench_inputs,
              dit_flux_bench_forward,
              "(double + single blocks) x (2*(4D^2 + 3D*M)*S + 4*D*S^2), S = text + image tokens");

/* klein's max_sequence_length 512 is the default caption length. */
const dit_bench_variant dit_flux2_klein_bench[] = {
    {"flux2-klein-4b", 512, 0, &klein_bench_ops, 0},
    {"flux2-klein-9b", 512, 1, &klein_bench_ops, 0},
    {NULL, 0, 0, NULL, 0},
};

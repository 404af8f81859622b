/* FLUX.1's benchmark variants (family_bench.h): the [dev] and [schnell] transformers with
 * the bench's geometry overrides, their token counts and FLOPs per forward. */
#include <stdlib.h>

#include "models/flux1.h"
#include "pipeline/family_bench.h"
#include "pipeline/flux1_pipeline.h"

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
  dit_flux2 *m = NULL;
  DIT_TRY(dit_flux1_create_random(be, &c, p->dtype, p->seed, &m, err));
  dit_status s = dit_flux2_set_act_dtype(m, adt, err);
  DIT_HAND_OVER(s, m, model, dit_flux2_free);
}

/* FLUX.1 per forward (S = St + Si text + image tokens, D = dim, M = mlp_hidden = 4D): a
 * double block does, for each stream's tokens, q, k, v, out (4 D^2 MACs) and the GELU MLP
 * (2 D M); a single block's q, k, v + MLP in (3 D^2 + D M) and its attention+MLP out
 * ((D + M) D) are the same 4 D^2 + 2 D M. Both attend over the joint sequence (QK^T and
 * PV: 2 S^2 D MACs). So flops = (n_double + n_single) (2 (4 D^2 + 2 D M) S + 4 D S^2);
 * embedders, modulations and the final layer are not counted (< 0.5% at 1024^2). */
static double flux1_flops(const dit_flux2_config *c, double n_img, double n_txt) {
  const double D = c->dim, M = c->mlp_hidden, S = n_img + n_txt;
  return (double)(c->n_layers + c->n_single_layers) * (2.0 * (4.0 * D * D + 2.0 * D * M) * S + 4.0 * D * S * S);
}

static void bench_geometry(const void *model, const dit_bench_params *p, int64_t *img_tokens, int64_t *cap_tokens,
                           double *flops) {
  *img_tokens = (int64_t)(p->res / 16) * (p->res / 16);
  *cap_tokens = p->text_len;
  *flops = flux1_flops(dit_flux2_get_config(model), (double)*img_tokens, (double)*cap_tokens);
}

/* FluxPipeline's inputs: (res/16)^2 packed image tokens with ids (0, h, w), text ids 0, a
 * pooled vector of zeros-and-ones (its values do not change the work). */
static dit_status bench_inputs(const void *model, const dit_bench_params *p, dit_bench_io *io, dit_error *err) {
  const dit_flux2_config *c = dit_flux2_get_config(model);
  const int64_t g = p->res / 16, si = g * g, st = p->text_len;
  io->img_ids = calloc((size_t)si * 3, sizeof(float));
  io->txt_ids = calloc((size_t)st * 3, sizeof(float));
  io->vec = calloc((size_t)c->pooled_dim, sizeof(float));
  if (!io->img_ids || !io->txt_ids || !io->vec) return dit_errorf(err, DIT_ERR_NOMEM, "bench: out of memory for ids");
  for (int64_t i = 0; i < si; i++) {
    io->img_ids[i * 3 + 1] = (float)(i / g);
    io->img_ids[i * 3 + 2] = (float)(i % g);
  }
  for (int i = 0; i < c->pooled_dim; i++) io->vec[i] = (float)(i & 1);
  io->x = dit_tensor_3d(DIT_F32, NULL, 1, si, c->in_channels);
  io->out = dit_tensor_3d(DIT_F32, NULL, 1, si, c->in_channels);
  io->cap = dit_tensor_3d(DIT_F32, NULL, 1, st, c->joint_attention_dim);
  return DIT_OK;
}

static dit_status bench_forward(void *model, dit_bench_io *io, dit_error *err) {
  const float t = 0.5f, guidance = 3.5f;
  return dit_flux_forward(model, &io->x, &io->cap, io->vec, &t, &guidance, io->img_ids, io->txt_ids, &io->out, err);
}

DIT_BENCH_OPS(flux1_bench_ops, dit_flux2, bench_create, bench_geometry, bench_inputs, bench_forward,
              "(double + single blocks) x (2*(4D^2 + 2D*M)*S + 4*D*S^2), S = text + image tokens");

/* FluxPipeline's max_sequence_length 512 is the default caption length. */
const dit_bench_variant dit_flux1_bench[] = {
    {"flux1-dev", 512, 0, &flux1_bench_ops},
    {"flux1-schnell", 512, 1, &flux1_bench_ops},
    {NULL, 0, 0, NULL},
};

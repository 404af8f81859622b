/* FLUX.2 [klein]'s benchmark variants (family_bench.h): the 4B and 9B transformers with
 * the bench's geometry overrides, their token counts and FLOPs per forward. */
#include <stdlib.h>

#include "models/flux2.h"
#include "pipeline/family_bench.h"
#include "pipeline/flux2_pipeline.h"

/* klein 4B / 9B with the test overrides: --dim is the inner dim (head_dim = dim / heads,
 * RoPE split in 4 equal even axes), --layers the double blocks, --refiners the single
 * blocks, --cap-dim joint_attention_dim. */
static dit_status flux2_bench_config(const dit_bench_variant *v, const dit_bench_params *p, dit_flux2_config *c,
                                     dit_error *err) {
  dit_flux2_config_klein(c, v->geometry == 1);
  if (p->n_heads) c->n_heads = p->n_heads;
  if (p->dim || p->n_heads) {
    const int dim = p->dim ? p->dim : c->n_heads * c->head_dim;
    if (dim % c->n_heads || (dim / c->n_heads) % 8)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "bench: dim %d / heads %d must be a multiple of 8", dim, c->n_heads);
    c->head_dim = dim / c->n_heads;
    for (int i = 0; i < DIT_FLUX2_N_AXES; i++) c->axes_dims[i] = c->head_dim / 4;
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
  DIT_TRY(flux2_bench_config(v, p, &c, err));
  dit_flux2 *m = NULL;
  DIT_TRY(dit_flux2_create_random(be, &c, p->dtype, p->seed, &m, err));
  dit_status s = dit_flux2_set_act_dtype(m, adt, err);
  DIT_HAND_OVER(s, m, model, dit_flux2_free);
}

/* FLUX.2 per forward (S = St + Si text + image tokens, D = dim, M = mlp_hidden): a
 * double block does, for each stream's tokens, qkv (3 D^2 MACs), out (D^2) and the SwiGLU
 * MLP in (D -> 2M) and out (M -> D): 4 D^2 + 3 D M MACs per token; a single block's fused
 * qkv+MLP-in (D -> 3D + 2M) and fused out (D + M -> D) are the same 4 D^2 + 3 D M. Both
 * attend over the joint sequence: QK^T and PV are 2 S^2 D MACs. So
 *   flops = (n_double + n_single) * (2 (4 D^2 + 3 D M) S + 4 D S^2).
 * Embedders (x, context, time), modulations and the final layer are not counted (< 0.1%
 * at klein's 1024^2 geometry). */
static double flux2_flops(const dit_flux2_config *c, double n_img, double n_txt) {
  const double D = c->dim, M = c->mlp_hidden, S = n_img + n_txt;
  return (double)(c->n_layers + c->n_single_layers) * (2.0 * (4.0 * D * D + 3.0 * D * M) * S + 4.0 * D * S * S);
}

static void bench_geometry(const void *model, const dit_bench_params *p, int64_t *img_tokens, int64_t *cap_tokens,
                           double *flops) {
  *img_tokens = (int64_t)(p->res / 16) * (p->res / 16); /* no padding in FLUX.2 */
  *cap_tokens = p->text_len;
  *flops = flux2_flops(dit_flux2_get_config(model), (double)*img_tokens, (double)*cap_tokens);
}

/* FLUX.2 inputs as the klein pipeline builds them: (res/16)^2 packed image tokens with
 * ids (0, h, w, 0), text tokens with ids (0, 0, 0, l). */
static dit_status bench_inputs(const void *model, const dit_bench_params *p, dit_bench_io *io, dit_error *err) {
  const dit_flux2_config *c = dit_flux2_get_config(model);
  const int64_t g = p->res / 16, si = g * g, st = p->text_len;
  io->img_ids = calloc((size_t)si * 4, sizeof(float));
  io->txt_ids = calloc((size_t)st * 4, sizeof(float));
  if (!io->img_ids || !io->txt_ids) return dit_errorf(err, DIT_ERR_NOMEM, "bench: out of memory for ids");
  for (int64_t i = 0; i < si; i++) {
    io->img_ids[i * 4 + 1] = (float)(i / g);
    io->img_ids[i * 4 + 2] = (float)(i % g);
  }
  for (int64_t l = 0; l < st; l++) io->txt_ids[l * 4 + 3] = (float)l;
  io->x = dit_tensor_3d(DIT_F32, NULL, 1, si, c->in_channels);
  io->out = dit_tensor_3d(DIT_F32, NULL, 1, si, c->in_channels);
  io->cap = dit_tensor_3d(DIT_F32, NULL, 1, st, c->joint_attention_dim);
  return DIT_OK;
}

static dit_status bench_forward(void *model, dit_bench_io *io, dit_error *err) {
  const float t = 0.5f;
  return dit_flux2_forward(model, &io->x, &io->cap, &t, NULL, io->img_ids, io->txt_ids, &io->out, err);
}

DIT_BENCH_OPS(klein_bench_ops, dit_flux2, bench_create, bench_geometry, bench_inputs, bench_forward,
              "(double + single blocks) x (2*(4D^2 + 3D*M)*S + 4*D*S^2), S = text + image tokens");

/* klein's max_sequence_length 512 is the default caption length. */
const dit_bench_variant dit_flux2_klein_bench[] = {
    {"flux2-klein-4b", 512, 0, &klein_bench_ops},
    {"flux2-klein-9b", 512, 1, &klein_bench_ops},
    {NULL, 0, 0, NULL},
};

/* Z-Image's benchmark variant (family_bench.h): Z-Image-Turbo's transformer with the
 * bench's geometry overrides, its padded token counts and FLOPs per forward. */
#include <stdlib.h>

#include "models/zimage.h"
#include "pipeline/family_bench.h"
#include "pipeline/zimage_pipeline.h"

dit_status dit_bench_zimage_config(const dit_bench_params *p, dit_zimage_config *c) {
  dit_zimage_config_turbo(c);
  if (p->dim) c->dim = p->dim;
  if (p->n_layers) c->n_layers = p->n_layers;
  if (p->n_refiner_layers) c->n_refiner_layers = p->n_refiner_layers;
  if (p->n_heads) c->n_heads = c->n_kv_heads = p->n_heads;
  if (p->cap_feat_dim) c->cap_feat_dim = p->cap_feat_dim;
  if (p->dim || p->n_heads) { /* keep the RoPE split proportional: 1/4, 3/8, 3/8 of the head */
    int hd = c->dim / c->n_heads;
    c->axes_dims[0] = hd / 4 / 2 * 2;
    c->axes_dims[1] = (hd - c->axes_dims[0]) / 2 / 2 * 2;
    c->axes_dims[2] = hd - c->axes_dims[0] - c->axes_dims[1];
  }
  return DIT_OK;
}

static dit_status bench_create(const dit_bench_variant *v, const dit_bench_params *p, const dit_run_opts *o,
                               dit_backend *be, dit_dtype adt, void **model, dit_error *err) {
  (void)v;
  dit_zimage_config c;
  dit_bench_zimage_config(p, &c);
  dit_zimage *m = NULL;
  DIT_TRY(dit_zimage_create_random(be, &c, p->dtype, p->seed, &m, err));
  dit_zimage_set_stacked_qkv(m, o->zimage_stack_qkv);
  dit_status s = dit_zimage_set_act_dtype(m, adt, err);
  DIT_HAND_OVER(s, m, model, dit_zimage_free);
}

static void bench_geometry(const void *model, const dit_bench_params *p, int64_t *img_tokens, int64_t *cap_tokens,
                           int64_t *aux_tokens, double *flops) {
  *aux_tokens = 0;
  const dit_zimage_config *c = dit_zimage_get_config(model);
  const int64_t q = DIT_ZIMAGE_SEQ_MULTI, side = p->res / 8 / c->patch_size;
  *img_tokens = (side * side + q - 1) / q * q;
  *cap_tokens = ((int64_t)p->text_len + q - 1) / q * q;
  *flops = dit_zimage_flops(c, (double)*img_tokens, (double)*cap_tokens);
}

static dit_status bench_inputs(const void *model, const dit_bench_params *p, dit_bench_io *io, dit_error *err) {
  (void)err;
  const dit_zimage_config *c = dit_zimage_get_config(model);
  const int64_t lat = p->res / 8, C = c->in_channels;
  io->x = dit_tensor_4d(DIT_F32, NULL, C, 1, lat, lat);
  io->out = dit_tensor_4d(DIT_F32, NULL, C, 1, lat, lat);
  io->cap = dit_tensor_2d(DIT_F32, NULL, p->text_len, c->cap_feat_dim);
  return DIT_OK;
}

static dit_status bench_forward(void *model, dit_bench_io *io, dit_error *err) {
  const float t = 0.5f;
  return dit_zimage_forward(model, 1, &io->x, &io->cap, &t, &io->out, err);
}

DIT_BENCH_OPS(zimage_bench_ops, dit_zimage, bench_create, bench_geometry, bench_inputs, bench_forward,
              "2*(4D^2 + 3D*Fd) per token per block + 4*D*S^2 attention per block");

const dit_bench_variant dit_zimage_bench[] = {
    {"zimage", 128, 0, &zimage_bench_ops, 0},
    {NULL, 0, 0, NULL, 0},
};

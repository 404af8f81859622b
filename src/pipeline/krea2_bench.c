/* Krea 2's benchmark variant (family_bench.h): Krea2Transformer2DModel.forward as diffusers
 * runs it every step, the text path (text fusion over the tapped states, txt_in) and the
 * blocks, on random weights at the released geometry or the bench's overrides. Every text
 * token is real (the forward is given no padding to skip). */
#include <stdlib.h>

#include "models/krea2.h"
#include "pipeline/family_bench.h"
#include "pipeline/krea2_pipeline.h"

/* The model and the buffer of its text conditioning between the two calls. */
typedef struct krea2_bench {
  dit_krea2 *m;
  dit_backend *be;
  void *txt;    /* [1, L, dim] F32 in the backend */
  int64_t txt_len;
} krea2_bench;

/* --heads (KV heads: a quarter, as released, where that divides), --dim (head_dim = dim /
 * heads, RoPE axes a quarter and two equal rests, a multiple of 8), --layers, --cap-dim the
 * text encoder's width (text heads of 128, or one). */
static dit_status overrides(const dit_bench_params *p, dit_krea2_config *c, dit_error *err) {
  if (p->n_heads) {
    c->n_heads = p->n_heads;
    c->n_kv_heads = p->n_heads % 4 == 0 ? p->n_heads / 4 : p->n_heads;
  }
  if (p->dim || p->n_heads) {
    const int dim = p->dim ? p->dim : c->n_heads * c->head_dim;
    if (dim % c->n_heads || (dim / c->n_heads) % 8)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "bench: dim %d / heads %d must be a multiple of 8", dim, c->n_heads);
    c->head_dim = dim / c->n_heads;
    c->axes_dims[0] = c->head_dim / 4;
    c->axes_dims[1] = c->axes_dims[2] = (c->head_dim - c->axes_dims[0]) / 2;
    c->ffn_dim = dim * 8 / 3;
  }
  if (p->n_layers) c->n_layers = p->n_layers;
  if (p->cap_feat_dim) {
    c->text_dim = p->cap_feat_dim;
    c->text_heads = c->text_kv_heads = p->cap_feat_dim % 128 == 0 ? p->cap_feat_dim / 128 : 1;
    c->text_ffn_dim = p->cap_feat_dim * 27 / 10;
  }
  return DIT_OK;
}

static void bench_free(void *obj) {
  krea2_bench *b = obj;
  if (!b) return;
  if (b->txt) b->be->ops->free(b->be, b->txt);
  dit_krea2_free(b->m);
  free(b);
}

static dit_status bench_create(const dit_bench_variant *v, const dit_bench_params *p, const dit_run_opts *o,
                               dit_backend *be, dit_dtype adt, void **model, dit_error *err) {
  (void)v, (void)o;
  dit_krea2_config c;
  dit_krea2_config_default(&c);
  DIT_TRY(overrides(p, &c, err));
  krea2_bench *b = calloc(1, sizeof *b);
  if (!b) return dit_errorf(err, DIT_ERR_NOMEM, "bench: out of memory");
  b->be = be;
  dit_status s = dit_krea2_create_random(be, &c, p->dtype, p->seed, &b->m, err);
  if (s == DIT_OK) s = dit_krea2_set_act_dtype(b->m, adt, err);
  b->txt_len = p->text_len;
  if (s == DIT_OK) s = be->ops->alloc(be, (size_t)p->text_len * (size_t)c.dim * sizeof(float), &b->txt, err);
  DIT_HAND_OVER(s, b, model, bench_free);
}

static void bench_geometry(const void *model, const dit_bench_params *p, int64_t *img_tokens, int64_t *cap_tokens,
                           int64_t *aux_tokens, double *flops) {
  *aux_tokens = 0;
  const dit_krea2_config *c = dit_krea2_get_config(((const krea2_bench *)model)->m);
  const double Si = (double)(p->res / 16) * (p->res / 16);
  *img_tokens = (int64_t)Si;
  *cap_tokens = p->text_len;
  *flops = dit_krea2_flops(c, Si, p->text_len);
}

/* x [1, Si, 64], the tapped states [1, L, T * td] (seen as [1, L, T, td]), ids: text at 0, the
 * image at (0, h, w), as one [(L + Si) * 3] array in img_ids. */
static dit_status bench_inputs(const void *model, const dit_bench_params *p, dit_bench_io *io, dit_error *err) {
  const dit_krea2_config *c = dit_krea2_get_config(((const krea2_bench *)model)->m);
  const int64_t g = p->res / 16, si = g * g, L = p->text_len;
  io->img_ids = calloc((size_t)((L + si) * 3), sizeof(float));
  if (!io->img_ids) return dit_errorf(err, DIT_ERR_NOMEM, "bench: out of memory for ids");
  for (int64_t i = 0; i < si; i++) {
    io->img_ids[(L + i) * 3 + 1] = (float)(i / g);
    io->img_ids[(L + i) * 3 + 2] = (float)(i % g);
  }
  io->x = dit_tensor_3d(DIT_F32, NULL, 1, si, c->in_channels);
  io->out = dit_tensor_3d(DIT_F32, NULL, 1, si, c->in_channels);
  io->cap = dit_tensor_3d(DIT_F32, NULL, 1, L, (int64_t)c->n_taps * c->text_dim);
  return DIT_OK;
}

static dit_status bench_forward(void *model, dit_bench_io *io, dit_error *err) {
  krea2_bench *b = model;
  const dit_krea2_config *c = dit_krea2_get_config(b->m);
  const float t = 0.5f;
  dit_tensor enc = dit_tensor_4d(DIT_F32, io->cap.data, 1, b->txt_len, c->n_taps, c->text_dim);
  dit_tensor txt = dit_tensor_3d(DIT_F32, b->txt, 1, b->txt_len, c->dim);
  enc.device = txt.device = io->cap.device;
  DIT_TRY(dit_krea2_encode_text(b->m, &enc, NULL, NULL, &txt, err));
  return dit_krea2_forward(b->m, &io->x, &txt, NULL, &t, io->img_ids, &io->out, err);
}

static size_t bench_weight_bytes(const void *m) { return dit_krea2_weight_bytes(((const krea2_bench *)m)->m); }
static uint64_t bench_weight_params(const void *m) { return dit_krea2_weight_params(((const krea2_bench *)m)->m); }
static void bench_graph_counts(const void *m, long *captures, long *launches) {
  dit_krea2_graph_counts(((const krea2_bench *)m)->m, captures, launches);
}

static const dit_bench_ops krea2_bench_ops = {
    bench_create, bench_geometry, bench_inputs, bench_forward, bench_weight_bytes, bench_weight_params,
    bench_graph_counts, bench_free,
    "blocks x (2*(3D^2 + 2D*Dkv + 3D*F)*S + 4*D*S^2) + the text fusion's blocks at the text width + txt_in"};

/* Krea2Pipeline's max_sequence_length 512 is the default caption length. */
const dit_bench_variant dit_krea2_bench[] = {
    {"krea2", 512, 0, &krea2_bench_ops, 0},
    {NULL, 0, 0, NULL, 0},
};

/* MiniMax-H3's benchmark variant (family_bench.h): one MiniMaxH3Transformer3DModel forward as the pipeline makes
 * it (minimax_h3_pipeline.c's step), on random weights at the released geometry or the bench's overrides, for one
 * square image: the packed layout of text_len text rows and one latent frame of (res / 32)^2 video rows (the VAE's
 * 16x spatial compression, the 2x2 patch), no audio rows, one timestep (0.5). As the pipeline does before its
 * steps, the modulation is folded for that timestep when the model is made (not timed); the activations are the
 * bench's (BF16 on a GPU for bf16 or quantized weights, else F32). dit_h3_forward takes host arrays: the bench's
 * inputs are copied to the host once, and each forward's velocities are copied back into the bench's output. */
#include <stdlib.h>
#include <string.h>

#include "models/minimax_h3.h"
#include "pipeline/family_bench.h"
#include "pipeline/minimax_h3_layout.h"
#include "pipeline/minimax_h3_pipeline.h"

#define VAE_SPATIAL 16 /* the video VAE's spatial compression: spatial_downsample_factors (2, 2, 2, 2, 1, 1) */
#define BENCH_T 0.5f

typedef struct h3_bench {
  dit_h3 *m;
  dit_backend *be;
  dit_h3_layout lay;
  int32_t *ti;                /* every row's timestep index (0) */
  float *video, *text, *vout; /* host copies of the bench's x and cap, and the velocities */
  bool have_inputs;           /* video and text hold the bench's inputs */
} h3_bench;

/* --dim D: hidden_size, the attention 4/3 as wide (7168 / 5376 as released) split into the heads, RoPE over an
 * eighth of each head (16 of 128 frequencies per axis), SwiGLU 8/3 D, the time MLP D -> D / 2; --heads; --layers;
 * --refiners: the token refiner's blocks; --cap-dim: text_dim (the text encoder's width). */
static dit_status overrides(const dit_bench_params *p, dit_h3_config *c, dit_error *err) {
  if (p->dim || p->n_heads) {
    const int D = p->dim ? p->dim : c->hidden, heads = p->n_heads ? p->n_heads : c->heads;
    const int64_t I = (int64_t)D * 4 / 3;
    if ((int64_t)D * 4 % 3 || I % heads || (I / heads) % 8 || D < 2)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3: dim %d (attention width 4/3 of it) over %d "
                        "heads must give heads of a multiple of 8", D, heads);
    c->hidden = c->time_hidden = D, c->time_dim = D / 2;
    c->heads = heads, c->head_dim = (int)(I / heads), c->rope_freq_dim = c->head_dim / 8;
    c->ffn = (int)((int64_t)D * 8 / 3);
  }
  if (p->n_layers) c->layers = p->n_layers;
  if (p->n_refiner_layers) c->refiner_layers = p->n_refiner_layers;
  if (p->cap_feat_dim) c->text_dim = p->cap_feat_dim;
  return DIT_OK;
}

static void bench_free(void *obj) {
  h3_bench *b = obj;
  if (!b) return;
  dit_h3_free(b->m);
  dit_h3_layout_free(&b->lay);
  free(b->ti), free(b->video), free(b->text), free(b->vout);
  free(b);
}

/* The latent side of a res-pixel image. */
static int latent_side(const dit_bench_params *p) { return p->res / VAE_SPATIAL; }

/* The packed layout and the host arrays of one image's forward. */
static dit_status make_layout(h3_bench *b, const dit_bench_params *p, dit_error *err) {
  const dit_h3_config *c = dit_h3_get_config(b->m);
  const int lat = latent_side(p);
  const dit_h3_layout_in li = {.n_text = p->text_len, .frames = 1, .lh = lat, .lw = lat, .patch_h = c->patch[1],
                               .patch_w = c->patch[2], .audio_latents = 0, .audio_channels = DIT_H3_AUDIO_CHANNELS};
  DIT_TRY(dit_h3_layout_make(&li, &b->lay, err));
  const size_t nv = (size_t)b->lay.n_video * (size_t)c->patch_dim;
  b->ti = calloc((size_t)b->lay.S, sizeof *b->ti);
  b->video = malloc(nv * sizeof *b->video);
  b->vout = malloc(nv * sizeof *b->vout);
  b->text = malloc((size_t)b->lay.n_text * (size_t)c->text_dim * sizeof *b->text);
  if (!b->ti || !b->video || !b->vout || !b->text)
    return dit_errorf(err, DIT_ERR_NOMEM, "minimax-h3: out of memory for %lld rows", (long long)b->lay.S);
  return DIT_OK;
}

static dit_status bench_create(const dit_bench_variant *v, const dit_bench_params *p, const dit_run_opts *o,
                               dit_backend *be, dit_dtype adt, void **model, dit_error *err) {
  (void)v, (void)o;
  dit_h3_config c;
  DIT_TRY(dit_h3_config_default(&c, err));
  DIT_TRY(overrides(p, &c, err));
  const int side = VAE_SPATIAL * c.patch[1];
  if (p->res % side)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3: --res %d is not a multiple of %d (the VAE's %dx "
                      "times the %d-pixel patch)", p->res, side, VAE_SPATIAL, c.patch[1]);
  h3_bench *b = calloc(1, sizeof *b);
  if (!b) return dit_errorf(err, DIT_ERR_NOMEM, "minimax-h3: out of memory");
  b->be = be;
  const float t = BENCH_T;
  dit_status s = dit_h3_create_random(be, &c, p->dtype, p->seed, &b->m, err);
  if (s == DIT_OK) s = dit_h3_set_act_dtype(b->m, adt, err);
  if (s == DIT_OK) s = make_layout(b, p, err);
  if (s == DIT_OK) s = dit_h3_fold(b->m, 1, &t, NULL, err);
  DIT_HAND_OVER(s, b, model, bench_free);
}

/* Per forward (dit_h3_flops, as the fold leaves it: no modulation projections): each block's q, k, v, out and
 * SwiGLU over all S rows and its attention, the refiner's over the text rows, the input projections and both
 * output heads over every row. */
static void bench_geometry(const void *model, const dit_bench_params *p, int64_t *img_tokens, int64_t *cap_tokens,
                           int64_t *aux_tokens, double *flops) {
  (void)p;
  const h3_bench *b = model;
  *img_tokens = b->lay.n_video;
  *cap_tokens = b->lay.n_text;
  *aux_tokens = b->lay.n_audio;
  *flops = dit_h3_flops(dit_h3_get_config(b->m), b->lay.n_text, b->lay.n_video, b->lay.n_audio);
}

/* x and out: the video rows [1, N, patch_dim]; cap: the text encoder's features [1, L, text_dim]. */
static dit_status bench_inputs(const void *model, const dit_bench_params *p, dit_bench_io *io, dit_error *err) {
  (void)p, (void)err;
  const h3_bench *b = model;
  const dit_h3_config *c = dit_h3_get_config(b->m);
  io->x = dit_tensor_3d(DIT_F32, NULL, 1, b->lay.n_video, c->patch_dim);
  io->out = dit_tensor_3d(DIT_F32, NULL, 1, b->lay.n_video, c->patch_dim);
  io->cap = dit_tensor_3d(DIT_F32, NULL, 1, b->lay.n_text, c->text_dim);
  return DIT_OK;
}

/* The forward at t = 0.5 on the host copies of x and cap (made at the first call), its velocities into out. */
static dit_status bench_forward(void *model, dit_bench_io *io, dit_error *err) {
  h3_bench *b = model;
  dit_backend *be = b->be;
  if (!b->have_inputs) {
    DIT_TRY(be->ops->download(be, b->video, io->x.data, dit_tensor_nbytes(&io->x), err));
    DIT_TRY(be->ops->download(be, b->text, io->cap.data, dit_tensor_nbytes(&io->cap), err));
    b->have_inputs = true;
  }
  const float t = BENCH_T;
  const dit_h3_layout *l = &b->lay;
  const dit_h3_call c = {.n_text = l->n_text, .n_video = l->n_video, .n_audio = l->n_audio, .text = b->text,
                         .video = b->video, .n_timesteps = 1, .timesteps = &t, .timestep_index = b->ti,
                         .tags = l->tags, .positions = l->positions, .text_index = l->text_index,
                         .video_index = l->video_index, .audio_index = l->audio_index};
  DIT_TRY(dit_h3_forward(b->m, &c, b->vout, NULL, err));
  return be->ops->upload(be, io->out.data, b->vout, dit_tensor_nbytes(&io->out), err);
}

static size_t bench_weight_bytes(const void *m) { return dit_h3_weight_bytes(((const h3_bench *)m)->m); }
static uint64_t bench_weight_params(const void *m) { return dit_h3_weight_params(((const h3_bench *)m)->m); }
static void bench_graph_counts(const void *m, long *captures, long *launches) {
  (void)m;
  *captures = *launches = 0; /* op by op: no captured graphs */
}

static const dit_bench_ops h3_bench_ops = {
    bench_create, bench_geometry, bench_inputs, bench_forward, bench_weight_bytes, bench_weight_params,
    bench_graph_counts, bench_free,
    "blocks x (2*(4*H*I + 3*H*F)*S + 4*I*S^2) + refiner blocks x the same over the L text rows + "
    "2*H*(text_dim*L + Pd*N) in + 2*H*(Pd + Ca)*S out (both heads over every row); the modulation folded for "
    "t = 0.5 before timing (the pipeline's path, not counted)"};

/* The pipeline encodes the prompt as it is (no fixed length): 512 text tokens by default. */
const dit_bench_variant dit_minimax_h3_bench[] = {
    {"minimax-h3", 512, 0, &h3_bench_ops, 0},
    {NULL, 0, 0, NULL, 0},
};

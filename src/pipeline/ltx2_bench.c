/* LTX-2's benchmark variants (family_bench.h): one LTX2VideoTransformer3DModel forward as
 * LTX2Pipeline makes it for one item, video and audio streams together, on random weights at
 * the released geometry (2.0 or 2.3) or the bench's overrides. The clip is res x height
 * pixels and `frames` frames at 24 fps (the pipeline's default rate): F x H x W video tokens
 * (the VAE's 8x temporal and 32x spatial compression), the audio tokens of the clip's
 * duration, and text_len tokens of text features for each stream (no padding). */
#include <stdlib.h>

#include "models/ltx2.h"
#include "pipeline/family_bench.h"
#include "pipeline/ltx2_pipeline.h"

#define BENCH_FPS 24.0

/* The model and the audio stream's buffers (the bench's x, cap and out are the video's). */
typedef struct ltx2_bench {
  dit_ltx2 *m;
  dit_backend *be;
  int F, H, W, L, T;  /* latent grid, audio tokens, text tokens */
  void *audio, *audio_out, *audio_text; /* F32 in the backend */
} ltx2_bench;

/* --heads N: N heads in each stream at the released head widths (128 video, 64 audio), the
 * text cross-attention at the streams' widths; --layers; --cap-dim: the text features' width
 * (LTX-2.0's caption projections take it; LTX-2.3 has none). */
static dit_status overrides(const dit_bench_params *p, dit_ltx2_config *c, dit_error *err) {
  if (p->dim || p->n_refiner_layers)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "ltx2 takes --heads, --layers and --cap-dim overrides");
  if (p->n_heads) {
    c->video.heads = c->audio.heads = p->n_heads;
    c->video.cross_attention_dim = p->n_heads * c->video.head_dim;
    c->audio.cross_attention_dim = p->n_heads * c->audio.head_dim;
  }
  if (p->n_layers) c->num_layers = p->n_layers;
  if (p->cap_feat_dim) c->caption_channels = p->cap_feat_dim;
  return DIT_OK;
}

static void bench_free(void *obj) {
  ltx2_bench *b = obj;
  if (!b) return;
  void *bufs[3] = {b->audio, b->audio_out, b->audio_text};
  for (int k = 0; k < 3; k++)
    if (bufs[k]) b->be->ops->free(b->be, bufs[k]);
  dit_ltx2_free(b->m);
  free(b);
}

/* Uniform values in the backend buffer *dst of n floats (seeded by key). */
static dit_status fill(dit_backend *be, size_t n, uint64_t key, void **dst, dit_error *err) {
  float *h = malloc(n * sizeof *h);
  if (!h) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory for the audio inputs");
  dit_bench_fill_host(h, n, key);
  dit_status s = be->ops->alloc(be, n * sizeof *h, dst, err);
  if (s == DIT_OK) s = be->ops->upload(be, *dst, h, n * sizeof *h, err);
  if (s == DIT_OK) s = be->ops->sync(be, err);
  free(h);
  return s;
}

static dit_status bench_create(const dit_bench_variant *v, const dit_bench_params *p, const dit_run_opts *o,
                               dit_backend *be, dit_dtype adt, void **model, dit_error *err) {
  (void)o;
  dit_ltx2_config c;
  dit_ltx2_config_default(&c, v->geometry == 1);
  DIT_TRY(overrides(p, &c, err));
  const int st = c.vae_scale_factors[0], sp = c.vae_scale_factors[1], height = p->height ? p->height : p->res;
  const int frames = p->frames ? p->frames : v->frames;
  if (p->res % sp || height % sp || (frames - 1) % st)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s takes sizes in multiples of %d and 1 + a multiple of %d "
                      "frames (got %dx%d, %d frames)", v->name, sp, st, p->res, height, frames);
  ltx2_bench *b = calloc(1, sizeof *b);
  if (!b) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  b->be = be;
  b->F = (frames - 1) / st + 1, b->H = height / sp, b->W = p->res / sp, b->T = p->text_len;
  b->L = dit_ltx2_audio_latent_frames(frames, BENCH_FPS, c.audio_sampling_rate, c.audio_hop_length);
  dit_status s = dit_ltx2_create_random(be, &c, p->dtype, p->seed, &b->m, err);
  if (s == DIT_OK) s = dit_ltx2_set_act_dtype(b->m, adt, err);
  const size_t na = (size_t)b->L, atw = c.use_prompt_embeddings ? (size_t)c.caption_channels
                                                                 : (size_t)c.audio.cross_attention_dim;
  if (s == DIT_OK) s = fill(be, na * (size_t)c.audio.in_channels, p->seed ^ 0x3333, &b->audio, err);
  if (s == DIT_OK) s = fill(be, (size_t)b->T * atw, p->seed ^ 0x4444, &b->audio_text, err);
  if (s == DIT_OK) s = be->ops->alloc(be, na * (size_t)c.audio.out_channels * sizeof(float), &b->audio_out, err);
  DIT_HAND_OVER(s, b, model, bench_free);
}

/* Per forward: dit_ltx2_flops (the same formula as bench/torch_ref.py's). */
static void bench_geometry(const void *model, const dit_bench_params *p, int64_t *img_tokens, int64_t *cap_tokens,
                           int64_t *aux_tokens, double *flops) {
  (void)p;
  const ltx2_bench *b = model;
  *img_tokens = (int64_t)b->F * b->H * b->W;
  *aux_tokens = b->L;
  *cap_tokens = b->T;
  *flops = dit_ltx2_flops(dit_ltx2_get_config(b->m), 1, *img_tokens, b->L, b->T);
}

/* x and out: the video tokens [1, N, 128]; cap: the video stream's text features. */
static dit_status bench_inputs(const void *model, const dit_bench_params *p, dit_bench_io *io, dit_error *err) {
  (void)p, (void)err;
  const ltx2_bench *b = model;
  const dit_ltx2_config *c = dit_ltx2_get_config(b->m);
  const int64_t N = (int64_t)b->F * b->H * b->W;
  io->x = dit_tensor_3d(DIT_F32, NULL, 1, N, c->video.in_channels);
  io->out = dit_tensor_3d(DIT_F32, NULL, 1, N, c->video.out_channels);
  io->cap = dit_tensor_3d(DIT_F32, NULL, 1, b->T, c->use_prompt_embeddings ? c->caption_channels
                                                                          : c->video.cross_attention_dim);
  return DIT_OK;
}

/* At t = 0.5 (timestep 500, sigma 0.5 as the pipeline passes it), cross timesteps on. */
static dit_status bench_forward(void *model, dit_bench_io *io, dit_error *err) {
  ltx2_bench *b = model;
  const float t = 500.0f;
  dit_ltx2_call call = {.B = 1, .frames = b->F, .height = b->H, .width = b->W, .fps = (float)BENCH_FPS,
                        .audio_frames = b->L, .text_len = b->T, .video = io->x.data, .audio = b->audio,
                        .text = io->cap.data, .audio_text = b->audio_text, .timestep = &t, .use_cross_timestep = true};
  return dit_ltx2_forward(b->m, &call, io->out.data, b->audio_out, err);
}

static size_t bench_weight_bytes(const void *m) { return dit_ltx2_weight_bytes(((const ltx2_bench *)m)->m); }
static uint64_t bench_weight_params(const void *m) { return dit_ltx2_weight_params(((const ltx2_bench *)m)->m); }
static void bench_graph_counts(const void *m, long *captures, long *launches) {
  (void)m;
  *captures = *launches = 0; /* op by op: no captured graphs */
}

static const dit_bench_ops ltx2_bench_ops = {
    bench_create, bench_geometry, bench_inputs, bench_forward, bench_weight_bytes, bench_weight_params,
    bench_graph_counts, bench_free,
    "blocks x per stream (self, text and cross-modal attention: 2*(Sq*Dq*I*2 + Sk*Dk*I*2) + 4*Sq*Sk*I; "
    "MLP 16*D^2*S) + proj_in/out + caption projections (2.0)"};

/* LTX2Pipeline's max_sequence_length 1024 and 121 frames are the defaults. */
const dit_bench_variant dit_ltx2_bench[] = {
    {"ltx2", 1024, 0, &ltx2_bench_ops, 121},
    {"ltx23", 1024, 1, &ltx2_bench_ops, 121},
    {NULL, 0, 0, NULL, 0},
};

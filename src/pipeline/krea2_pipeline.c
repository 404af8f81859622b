/* Krea 2 pipeline (diffusers Krea2Pipeline, text to image; Raw and Turbo). Mirrors
 * Krea2Pipeline.__call__ for one prompt and one image: the prompt (and, with guidance > 0, the
 * negative prompt, "" by default) through its template into the Qwen3-VL language model's
 * tapped hidden states (text_encoder_select_layers of model_index.json), torch-CPU noise
 * [16, h, w] packed to 2 x 2 tokens, position ids (0, y, x) for the image and 0 for the text,
 * np.linspace(1, 1/steps, steps) sigmas shifted by mu (Raw: calculate_shift over the
 * scheduler's bounds; Turbo, is_distilled: 1.15), the transformer at t = timestep / 1000
 * (cond and uncond as one batch of two under guidance: cond + g * (cond - uncond)), the Euler
 * update, then unpack, latents * std + mean and the Qwen-Image VAE decode. The text fusion
 * runs once per prompt (it does not depend on the step). The family's row is
 * dit_family_krea2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "io/json.h"
#include "models/krea2.h"
#include "models/vae_qwen.h"
#include "pipeline/family.h"
#include "pipeline/krea2_pipeline.h"
#include "pipeline/pipeline_common.h"
#include "pipeline/plan.h"
#include "pipeline/prompt.h"
#include "pipeline/rng_torch.h"
#include "pipeline/scheduler.h"

#define LATENT_CHANNELS 16
#define MAX_TAPS 64
#define TURBO_MU 1.15 /* the distilled checkpoint's fixed shift */

/* model_index.json's text_encoder_select_layers (the pipeline's default without it). */
static dit_status read_taps(const dit_model_dir *dir, int *taps, int *n, dit_error *err) {
  static const int def[12] = {2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32, 35};
  const json_t *a = json_object_get(dir->index, "text_encoder_select_layers");
  if (!a || json_is_null(a)) {
    memcpy(taps, def, sizeof def);
    *n = 12;
    return DIT_OK;
  }
  int64_t v[MAX_TAPS];
  size_t got = 0;
  DIT_TRY(dit_json_int_array(dir->index, "text_encoder_select_layers", 0, 4096, v, MAX_TAPS, &got,
                             "model_index.json", err));
  if (got < 1) return dit_errorf(err, DIT_ERR_FORMAT, "model_index.json: text_encoder_select_layers is empty");
  for (size_t i = 0; i < got; i++) taps[i] = (int)v[i];
  *n = (int)got;
  return DIT_OK;
}

static bool is_distilled(const dit_model_dir *dir) { return json_is_true(json_object_get(dir->index, "is_distilled")); }

/* ---- the components ---- */

/* The transformer on rt->dev, bf16 activations on a GPU. */
static dit_status dit_prepare(const dit_model_rt *rt, dit_krea2 *m, dit_error *err) {
  const dit_krea2_config *c = dit_krea2_get_config(m);
  if (c->in_channels != 4 * LATENT_CHANNELS)
    return dit_errorf(err, DIT_ERR_FORMAT, "transformer in_channels %d: Krea 2 packs 16 latent channels to %d",
                      c->in_channels, 4 * LATENT_CHANNELS);
  return dit_rt_on_device(rt) ? dit_krea2_set_act_dtype(m, DIT_BF16, err) : DIT_OK;
}
DIT_COMPONENT_KIND_SRC(krea2_dit, "transformer", DIT_KEEP_TRANSFORMER, "transformer", dit_krea2, dit_krea2_load_file,
                       dit_prepare, dit_krea2_free);

static dit_status vae_prepare(const dit_model_rt *rt, dit_vae_qwen *m, dit_error *err) {
  return dit_rt_on_device(rt) ? dit_vae_qwen_set_act_dtype(m, DIT_BF16, err) : DIT_OK;
}
DIT_COMPONENT_KIND(krea2_vae, "VAE decode", DIT_KEEP_VAE, "vae", dit_vae_qwen, dit_vae_qwen_load, vae_prepare,
                   dit_vae_qwen_free);

/* ---- text ---- */

typedef struct krea2_text {
  float *enc;    /* [nb, L, taps, dim] tapped states: the prompt's, then the negative prompt's */
  uint8_t *mask; /* [nb, L] */
  int nb, L, taps, dim;
} krea2_text;

static dit_status encode_prompts(const dit_model_rt *rt, dit_components *c, const dit_gen_params *p, bool cfg,
                                 krea2_text *T, dit_error *err) {
  int taps[MAX_TAPS], n_taps = 0;
  DIT_TRY(read_taps(rt->dir, taps, &n_taps, err));
  dit_text_encoder *t = NULL;
  DIT_TRY(dit_text_encoder_get(rt, c, p->text_rope_bf16, &t, err));
  const size_t H = (size_t)dit_qwen3_get_config(t->te)->hidden_size;
  T->L = p->max_sequence_length > 0 ? p->max_sequence_length : 512;
  T->nb = cfg ? 2 : 1;
  T->taps = n_taps, T->dim = (int)H;
  const size_t per = (size_t)T->L * (size_t)n_taps * H;
  T->enc = malloc((size_t)T->nb * per * sizeof(float));
  T->mask = malloc((size_t)T->nb * (size_t)T->L);
  dit_status s = T->enc && T->mask ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "out of memory for the prompt");
  for (int b = 0; b < T->nb && s == DIT_OK; b++) {
    float *e = NULL;
    uint8_t *m = NULL;
    const char *text = b == 0 ? p->prompt : (p->negative_prompt ? p->negative_prompt : "");
    s = dit_krea2_encode_prompt(t->te, t->tok, text, T->L, taps, n_taps, &e, &m, err);
    if (s == DIT_OK) {
      memcpy(T->enc + (size_t)b * per, e, per * sizeof(float));
      memcpy(T->mask + (size_t)b * (size_t)T->L, m, (size_t)T->L);
    }
    free(e);
    free(m);
  }
  dit_component_done(rt, c, DIT_SLOT_TEXT);
  return s;
}

/* ---- the denoising loop ---- */

typedef struct k2_state {
  dit_krea2 *dit;
  dit_backend *be;
  int C, lh, lw, nb;
  int64_t Si, L;
  size_t n;                 /* Si * C */
  float *latents, *pred;    /* [Si, C] */
  void *x, *txt, *out;      /* backend memory: [nb, Si, C], [nb, L, dim], [nb, Si, C] */
  float *host_out;          /* [nb, Si, C] */
  float *pos;               /* [(L + Si) * 3] */
  uint8_t *mask;            /* [nb, L] */
  float guidance;
  const float *sigmas, *timesteps;
} k2_state;

static dit_tensor on_dev(const k2_state *L, void *p, int64_t a, int64_t b, int64_t c) {
  dit_tensor t = dit_tensor_3d(DIT_F32, p, a, b, c);
  t.device = dit_backend_device(L->be);
  return t;
}

static dit_status denoise_step(void *state, int i, dit_error *err) {
  k2_state *L = state;
  dit_backend *be = L->be;
  const float t[2] = {L->timesteps[i] / 1000.0f, L->timesteps[i] / 1000.0f};
  const size_t bytes = L->n * sizeof(float);
  for (int b = 0; b < L->nb; b++) DIT_TRY(be->ops->upload(be, (char *)L->x + (size_t)b * bytes, L->latents, bytes, err));
  dit_tensor x = on_dev(L, L->x, L->nb, L->Si, L->C), out = on_dev(L, L->out, L->nb, L->Si, L->C);
  dit_tensor txt = on_dev(L, L->txt, L->nb, L->L, dit_krea2_get_config(L->dit)->dim);
  DIT_TRY(dit_krea2_forward(L->dit, &x, &txt, L->mask, t, L->pos, &out, err));
  DIT_TRY(be->ops->download(be, L->host_out, L->out, (size_t)L->nb * bytes, err));
  const float *cond = L->host_out, *uncond = L->host_out + L->n;
  if (L->nb == 2) {
    const float g = L->guidance;
    for (size_t k = 0; k < L->n; k++) L->pred[k] = cond[k] + g * (cond[k] - uncond[k]);
  } else {
    memcpy(L->pred, cond, bytes);
  }
  dit_flow_euler_step(L->latents, L->pred, L->n, L->sigmas[i], L->sigmas[i + 1]);
  return dit_check_finite(L->latents, L->n, "latents", err);
}

static void state_free(k2_state *L) {
  if (L->be) {
    if (L->x) L->be->ops->free(L->be, L->x);
    if (L->txt) L->be->ops->free(L->be, L->txt);
    if (L->out) L->be->ops->free(L->be, L->out);
  }
  free(L->latents), free(L->pred), free(L->host_out), free(L->pos), free(L->mask);
  memset(L, 0, sizeof *L);
}

/* The transformer, its text conditioning (the text fusion, once), the noise and the ids. */
static dit_status prepare(const dit_model_rt *rt, dit_components *c, krea2_text *T, uint64_t seed, k2_state *L,
                          dit_error *err) {
  void *obj = NULL;
  DIT_TRY(dit_component_get(rt, c, DIT_SLOT_TRANSFORMER, &obj, err));
  L->dit = obj;
  L->be = rt->dev;
  const dit_krea2_config *k = dit_krea2_get_config(L->dit);
  const int64_t D = k->dim;
  if (k->n_taps != T->taps || k->text_dim != T->dim)
    return dit_errorf(err, DIT_ERR_FORMAT, "transformer: num_text_layers %d / text_hidden_dim %d do not match the "
                      "pipeline's %d text_encoder_select_layers of the %d-wide text encoder", k->n_taps, k->text_dim,
                      T->taps, T->dim);
  L->C = k->in_channels;
  L->L = T->L;
  L->nb = T->nb;
  L->n = (size_t)L->Si * (size_t)L->C;
  const size_t bytes = L->n * sizeof(float), enc_n = (size_t)T->nb * (size_t)T->L * (size_t)k->n_taps * (size_t)k->text_dim;
  L->latents = malloc(bytes), L->pred = malloc(bytes), L->host_out = malloc((size_t)L->nb * bytes);
  L->pos = calloc((size_t)(L->L + L->Si) * 3, sizeof(float));
  L->mask = T->mask, T->mask = NULL;
  if (!L->latents || !L->pred || !L->host_out || !L->pos) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  dit_backend *be = rt->dev;
  void *enc = NULL;
  DIT_TRY(be->ops->alloc(be, (size_t)L->nb * bytes, &L->x, err));
  DIT_TRY(be->ops->alloc(be, (size_t)L->nb * bytes, &L->out, err));
  DIT_TRY(be->ops->alloc(be, (size_t)L->nb * (size_t)L->L * (size_t)D * sizeof(float), &L->txt, err));
  DIT_TRY(be->ops->alloc(be, enc_n * sizeof(float), &enc, err));
  dit_status s = be->ops->upload(be, enc, T->enc, enc_n * sizeof(float), err);
  if (s == DIT_OK) {
    dit_tensor te = dit_tensor_4d(DIT_F32, enc, L->nb, L->L, k->n_taps, k->text_dim);
    te.device = dit_backend_device(be);
    dit_tensor tt = on_dev(L, L->txt, L->nb, L->L, D);
    s = dit_krea2_encode_text(L->dit, &te, L->mask, NULL, &tt, err);
    if (s != DIT_OK) dit_error_prefix(err, "text fusion");
  }
  be->ops->free(be, enc);
  DIT_TRY(s);
  float *noise = malloc(bytes);
  if (!noise) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  dit_torch_rng g;
  dit_torch_rng_seed(&g, seed);
  dit_torch_randn(&g, noise, L->n);
  dit_pack_latents_2x2(noise, L->C / 4, L->lh, L->lw, L->latents);
  free(noise);
  for (int64_t r = 0; r < L->Si; r++) {
    L->pos[3 * (L->L + r) + 1] = (float)(r / L->lw);
    L->pos[3 * (L->L + r) + 2] = (float)(r % L->lw);
  }
  return DIT_OK;
}

static double krea2_mu_turbo(const dit_flow_sched_config *sc, int image_seq_len, int steps) {
  (void)sc, (void)image_seq_len, (void)steps;
  return TURBO_MU;
}

/* latents [16, 2 lh, 2 lw] * std + mean (as the pipeline: / (1 / std) + mean, in float32), the
 * decoder, the image. */
static dit_status decode(const dit_model_rt *rt, dit_components *c, const k2_state *L, int vae_tile, dit_image *out,
                         dit_error *err) {
  void *obj = NULL;
  DIT_TRY(dit_component_get(rt, c, DIT_SLOT_VAE, &obj, err));
  const dit_vae_qwen_config *vc = dit_vae_qwen_get_config(obj);
  const int h = 2 * L->lh, w = 2 * L->lw, H = 8 * h, W = 8 * w, Cl = L->C / 4;
  dit_status s = vc->z_dim == Cl ? DIT_OK
                                 : dit_errorf(err, DIT_ERR_FORMAT, "the VAE's z_dim %d is not the transformer's %d "
                                              "latent channels", vc->z_dim, Cl);
  float *z = malloc(L->n * sizeof(float)), *img = malloc(3 * (size_t)H * W * sizeof(float));
  if (s == DIT_OK && (!z || !img)) s = dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  if (s == DIT_OK) {
    dit_unpack_latents_2x2(L->latents, Cl, L->lh, L->lw, z);
    const size_t hw = (size_t)h * (size_t)w;
    for (int ch = 0; ch < Cl; ch++) {
      const float inv = 1.0f / vc->latents_std[ch], mean = vc->latents_mean[ch];
      for (size_t k = 0; k < hw; k++) z[(size_t)ch * hw + k] = z[(size_t)ch * hw + k] / inv + mean;
    }
    dit_tensor zt = dit_tensor_4d(DIT_F32, z, 1, Cl, h, w), it = dit_tensor_4d(DIT_F32, img, 1, 3, H, W);
    s = dit_vae_qwen_decode(obj, &zt, &it, vae_tile, err);
  }
  if (s == DIT_OK) s = dit_image_from_decoder(img, H, W, out, err);
  free(z);
  free(img);
  dit_component_done(rt, c, DIT_SLOT_VAE);
  return s;
}

static dit_status krea2_generate(const dit_model_rt *rt, void *state, const dit_gen_params *p, dit_image *out,
                                 dit_gen_stats *st, dit_error *err) {
  dit_components *c = state;
  const int W = p->width, H = p->height, steps = p->steps;
  if (W % 16 || H % 16)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "width and height must be multiples of 16 for Krea 2 (got %dx%d)", W, H);
  double t[5];
  t[0] = dit_time_now();
  k2_state L;
  memset(&L, 0, sizeof L);
  L.lh = H / 16, L.lw = W / 16, L.Si = (int64_t)L.lh * L.lw;
  L.guidance = (float)p->guidance;
  krea2_text T = {0};
  float *sigmas = malloc((size_t)(steps + 1) * sizeof(float)), *timesteps = malloc((size_t)steps * sizeof(float));
  dit_status s = sigmas && timesteps ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  if (s == DIT_OK) dit_stage_begin(p, "text encoder");
  if (s == DIT_OK) s = encode_prompts(rt, c, p, p->guidance > 0, &T, err);
  if (s != DIT_OK) dit_error_prefix(err, "text encoder");
  t[1] = dit_time_now();
  if (s == DIT_OK) s = prepare(rt, c, &T, p->seed, &L, err);
  if (s == DIT_OK)
    s = dit_flow_schedule_for(rt->dir, steps, (int)L.Si, dit_flux2_default_sigmas,
                              is_distilled(rt->dir) ? krea2_mu_turbo : dit_flow_mu_calculate_shift, sigmas, timesteps,
                              err);
  t[2] = dit_time_now();
  L.sigmas = sigmas, L.timesteps = timesteps;
  if (s == DIT_OK) s = dit_sampler_run(rt, p, steps, denoise_step, &L, L.latents, L.n, err);
  dit_component_done(rt, c, DIT_SLOT_TRANSFORMER);
  t[3] = dit_time_now();
  if (s == DIT_OK) {
    dit_stage_begin(p, "VAE decode");
    s = decode(rt, c, &L, p->vae_tile, out, err);
    if (s != DIT_OK) dit_error_prefix(err, "VAE decode");
  }
  t[4] = dit_time_now();
  if (st && s == DIT_OK) dit_fill_stats(st, t, steps);
  state_free(&L);
  free(T.enc), free(T.mask), free(sigmas), free(timesteps);
  return s;
}

/* The text stage: the prompt (and under guidance the negative one) to their tapped states,
 * each copied into the block both are held in through the run. */
static dit_status plan_text(const dit_model_rt *rt, dit_components *c, const dit_gen_params *p, int nb, int L,
                            dit_plan *pl, size_t *held, dit_error *err) {
  int taps[MAX_TAPS], n_taps = 0;
  DIT_TRY(read_taps(rt->dir, taps, &n_taps, err));
  dit_text_encoder *t = NULL;
  DIT_TRY(dit_text_encoder_get(rt, c, p->text_rope_bf16, &t, err));
  dit_cost one[2];
  memset(one, 0, sizeof one);
  int n = 0, n_neg = 0;
  dit_status s = dit_krea2_prompt_cost(t->te, t->tok, p->prompt, L, taps, n_taps, &one[0], &n, err);
  if (s == DIT_OK && nb == 2)
    s = dit_krea2_prompt_cost(t->te, t->tok, p->negative_prompt ? p->negative_prompt : "", L, taps, n_taps, &one[1],
                              &n_neg, err);
  const size_t per = (size_t)L * (size_t)n_taps * (size_t)dit_qwen3_get_config(t->te)->hidden_size * sizeof(float);
  *held = (size_t)nb * (per + (size_t)L); /* krea2_text: the features and masks of both */
  dit_cost run = {one[0].flops + one[1].flops, (one[0].act_bytes > one[1].act_bytes ? one[0].act_bytes
                                                                                      : one[1].act_bytes) + *held};
  run.act_bytes += dit_tok_table_bytes(t->tok);
  pl->text_tokens = n;
  const dit_plan_run r = {"text encoder", "text_encoder", DIT_KEEP_TEXT_ENCODER, run, 0, dit_tok_load_bytes(t->tok),
                          1, 0};
  dit_component_done(rt, c, DIT_SLOT_TEXT);
  return s == DIT_OK ? dit_plan_add(rt, pl, &r, err) : s;
}

/* Text encoder; the transformer's text fusion (once) and steps, batch 2 under guidance; the
 * Qwen-Image VAE's decode. */
static dit_status krea2_plan(const dit_model_rt *rt, void *state, const dit_gen_params *p, dit_plan *pl,
                             dit_error *err) {
  dit_components *c = state;
  const int W = p->width, H = p->height, nb = p->guidance > 0 ? 2 : 1;
  if (W % 16 || H % 16)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "width and height must be multiples of 16 for Krea 2 (got %dx%d)", W, H);
  const int L = p->max_sequence_length > 0 ? p->max_sequence_length : 512;
  size_t held = 0;
  DIT_TRY(plan_text(rt, c, p, nb, L, pl, &held, err));
  void *obj = NULL;
  DIT_TRY(dit_component_get(rt, c, DIT_SLOT_TRANSFORMER, &obj, err));
  const dit_krea2_config *k = dit_krea2_get_config(obj);
  const int lh = H / 16, lw = W / 16, C = k->in_channels;
  const int64_t Si = (int64_t)lh * lw;
  dit_cost run = {0};
  dit_status s = dit_krea2_cost(obj, nb, L, Si, &run, err);
  /* k2_state: latents, prediction, noise, and nb of the input, output (device and host); the
   * fused text on the device, and the tapped states' device copy while it is made; the ids */
  const size_t n = (size_t)Si * (size_t)C * sizeof(float);
  const size_t loop = held + (3 + 3 * (size_t)nb) * n + (size_t)nb * (size_t)L * (size_t)k->dim * sizeof(float) +
                      (size_t)(L + Si) * 3 * sizeof(float);
  const size_t acts = run.act_bytes;
  run.act_bytes += loop + (held - (size_t)nb * (size_t)L);
  run.flops *= p->steps; /* the text fusion once, counted with each step: under 1% at real sizes */
  dit_component_done(rt, c, DIT_SLOT_TRANSFORMER);
  pl->batch = nb;
  const dit_plan_run tr = {"transformer", "transformer", DIT_KEEP_TRANSFORMER, run, acts, 0, p->steps, 0};
  if (s == DIT_OK) s = dit_plan_add(rt, pl, &tr, err);
  if (s == DIT_OK) s = dit_component_get(rt, c, DIT_SLOT_VAE, &obj, err);
  dit_cost dec = {0};
  if (s == DIT_OK) {
    s = dit_vae_qwen_cost(obj, 2 * lh, 2 * lw, p->vae_tile, &dec, err);
    const size_t px = (size_t)H * (size_t)W;
    dec.act_bytes += loop + n + 3 * px * sizeof(float) + 3 * px; /* z, the decoded pixels, the 8-bit image */
    dit_component_done(rt, c, DIT_SLOT_VAE);
  }
  const dit_plan_run vr = {"VAE decode", "vae", DIT_KEEP_VAE, dec, 0, 0, 1, 0};
  if (s == DIT_OK) s = dit_plan_add(rt, pl, &vr, err);
  return s;
}

static dit_status krea2_open(const dit_model_rt *rt, void **state, dit_error *err) {
  *state = NULL;
  dit_components *c = calloc(1, sizeof *c);
  if (!c) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  dit_status s = dit_components_start(rt, c, &krea2_dit, &krea2_vae, err);
  DIT_HAND_OVER(s, c, state, free);
}

/* Raw: the pipeline's 28 steps at guidance 4.5; Turbo (is_distilled): 8 steps, no guidance;
 * 1024 x 1024. */
static dit_status krea2_defaults(const dit_model_dir *dir, dit_gen_defaults *d, dit_error *err) {
  (void)err;
  const bool turbo = is_distilled(dir);
  memset(d, 0, sizeof *d);
  d->family = "krea2";
  d->width = d->height = 1024;
  d->steps = turbo ? 8 : 28;
  d->guidance = turbo ? 0.0 : 4.5;
  d->size_multiple = 16;
  return DIT_OK;
}

static const char *const krea2_pipelines[] = {"Krea2Pipeline", NULL};

const dit_family dit_family_krea2 = {
    .name = "krea2",
    .title = "Krea 2 (Raw / Turbo)",
    .pipelines = krea2_pipelines,
    .chat = DIT_CHAT_KREA2,
    .defaults = krea2_defaults,
    .open = krea2_open,
    .generate = krea2_generate,
    .close = dit_components_state_close,
    .plan = krea2_plan,
    .latent = {16, 2, 1},
    .bench = dit_krea2_bench,
};

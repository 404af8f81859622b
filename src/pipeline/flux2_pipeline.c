/* FLUX.2 [klein] pipeline (see flux2_pipeline.h). Mirrors Flux2KleinPipeline.__call__
 * for one prompt and one image: every value the reference computes in float32 is
 * computed in float32 here, in the same order, so the latents after each step match it
 * to rounding. Components the model does not keep resident are loaded one at a time and
 * released before the next (text encoder, transformer, VAE), so peak memory is the largest
 * of them, not their sum. */
#include "pipeline/flux2_pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "io/json.h"
#include "io/png.h"
#include "models/flux2.h"
#include "models/qwen3.h"
#include "models/vae_flux2.h"
#include "pipeline/family.h"
#include "pipeline/image_prep.h"
#include "pipeline/pipeline_common.h"
#include "pipeline/plan.h"
#include "pipeline/prompt.h"
#include "pipeline/rng_torch.h"
#include "pipeline/scheduler.h"
#include "text/tokenizer.h"

dit_status dit_flux2_klein_is_distilled(const dit_model_dir *dir, bool *out, dit_error *err) {
  bool v = false;
  DIT_TRY(dit_json_bool_opt(dir->index, "is_distilled", &v, "model_index.json", err));
  *out = v;
  return DIT_OK;
}

void dit_flux2_klein_defaults(bool distilled, dit_gen_defaults *d) {
  memset(d, 0, sizeof *d);
  d->family = "flux2-klein";
  d->width = 1024;
  d->height = 1024;
  d->steps = distilled ? 4 : 50;
  d->guidance = distilled ? 1.0 : 4.0;
  d->size_multiple = 16;
}

/* The components of a FLUX.2 [klein] model and what its folder says. */
typedef struct klein_model {
  dit_components c;        /* first: the state closes with dit_components_state_close */
  bool distilled;          /* model_index.json is_distilled */
  int vsf;                 /* the VAE's scale factor */
} klein_model;

#define KLEIN_REF_AREA ((int64_t)1024 * 1024) /* Flux2KleinPipeline: larger references are resized to it */
#define KLEIN_REF_T0 10                        /* _prepare_image_ids: reference i at T = 10 + 10 i */

typedef struct f2_state {
  dit_flux2 *dit;
  int C;                   /* packed latent channels (transformer in_channels) */
  int lh, lw;              /* token grid: latent size / 2 */
  int64_t Si, St, Jd;      /* image tokens, text tokens, text feature width */
  int64_t Sr, S;           /* reference tokens (after the image's), Si + Sr */
  int Cr;                  /* the reference tokens' channels (the VAE's packed channels) */
  size_t n;                /* Si * C */
  bool cfg;
  float *latents;          /* [Si, C] */
  float *ref_tok;          /* [Sr, Cr]: the reference images' packed latents, or NULL */
  float *ref_ids;          /* [Sr, 4] */
  float *x2, *out2;        /* [2, S, C]: batched model input / output */
  float *txt;              /* [1 or 2, St, Jd]: prompt features (then the empty prompt's) */
  float *img_ids, *txt_ids; /* [S, 4] (the image's, then the references'), [St, 4] */
  double guidance;
  const float *sigmas, *timesteps;
} f2_state;

/* Encodes the prompt (and under CFG the negative prompt, "" unless given) into L->txt with
 * the text encoder, loading it when not resident and releasing it after unless kept. */
static dit_status encode_prompts(const dit_model_rt *rt, klein_model *k, const dit_gen_params *p, f2_state *L,
                                 dit_error *err) {
  float *pe = NULL, *ne = NULL;
  const int max_len = p->max_sequence_length > 0 ? p->max_sequence_length : 512;
  dit_text_encoder *t = NULL;
  DIT_TRY(dit_text_encoder_get(rt, &k->c, p->text_rope_bf16, &t, err));
  dit_qwen3 *te = t->te;
  dit_tokenizer *tok = t->tok;
  dit_status s = DIT_OK;
  if (s == DIT_OK) s = dit_flux2_klein_encode_prompt(te, tok, p->prompt, max_len, &pe, err);
  if (s == DIT_OK && L->cfg)
    s = dit_flux2_klein_encode_prompt(te, tok, p->negative_prompt ? p->negative_prompt : "", max_len, &ne, err);
  if (s == DIT_OK) {
    L->St = max_len;
    L->Jd = 3 * (int64_t)dit_qwen3_get_config(te)->hidden_size;
    const size_t one = (size_t)(L->St * L->Jd);
    L->txt = malloc((L->cfg ? 2 : 1) * one * sizeof(float));
    if (!L->txt) s = dit_errorf(err, DIT_ERR_NOMEM, "out of memory for the prompt features");
    if (s == DIT_OK) {
      memcpy(L->txt, pe, one * sizeof(float));
      if (L->cfg) memcpy(L->txt + one, ne, one * sizeof(float));
      s = dit_check_finite(L->txt, (L->cfg ? 2 : 1) * one, "prompt features", err);
    }
  }
  free(pe);
  free(ne);
  dit_component_done(rt, &k->c, DIT_SLOT_TEXT);
  return s;
}

/* compute_empirical_mu: the scheduler's shift bounds play no part. */
static double klein_mu(const dit_flow_sched_config *sc, int image_seq_len, int steps) {
  (void)sc;
  return dit_flux2_empirical_mu(image_seq_len, steps);
}

dit_status dit_flux2_klein_schedule(const dit_model_dir *dir, int steps, int image_seq_len, float *sigmas,
                                    float *timesteps, dit_error *err) {
  if (steps < 1 || steps > DIT_FLOW_MAX_STEPS)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "steps = %d is outside 1..%d", steps, DIT_FLOW_MAX_STEPS);
  return dit_flow_schedule_for(dir, steps, image_seq_len, dit_flux2_default_sigmas, klein_mu, sigmas, timesteps, err);
}

/* 2^(len(vae block_out_channels) - 1): the pipeline's vae_scale_factor. */
static dit_status vae_scale_factor(const dit_model_dir *dir, int *out, dit_error *err) {
  json_t *cfg = NULL;
  DIT_TRY(dit_model_dir_component_config(dir, "vae", &cfg, err));
  const json_t *b = json_object_get(cfg, "block_out_channels");
  size_t n = json_is_array(b) ? json_array_size(b) : 0;
  json_decref(cfg);
  if (n < 1 || n > 8)
    return dit_errorf(err, DIT_ERR_FORMAT, "vae/config.json: field \"block_out_channels\" must be an array of 1..8");
  *out = 1 << (n - 1);
  return DIT_OK;
}

/* Latent noise as prepare_latents draws it: randn(1, C, lh, lw) on the torch CPU
 * generator, packed to tokens [lh*lw, C]; latent ids (0, y, x, 0) and text ids
 * (0, 0, 0, l). */
static dit_status init_latents(f2_state *L, uint64_t seed, dit_error *err) {
  const size_t hw = (size_t)L->lh * (size_t)L->lw, row = (size_t)L->S * (size_t)L->C;
  float *noise = malloc(L->n * sizeof(float));
  L->latents = malloc(L->n * sizeof(float));
  L->x2 = malloc(2 * row * sizeof(float));
  L->out2 = malloc(2 * row * sizeof(float));
  L->img_ids = calloc((size_t)L->S * 4, sizeof(float));
  L->txt_ids = calloc((size_t)L->St * 4, sizeof(float));
  if (!noise || !L->latents || !L->x2 || !L->out2 || !L->img_ids || !L->txt_ids) {
    free(noise);
    return dit_errorf(err, DIT_ERR_NOMEM, "latents: out of memory");
  }
  dit_torch_rng g;
  dit_torch_rng_seed(&g, seed);
  dit_torch_randn(&g, noise, L->n);
  for (size_t r = 0; r < hw; r++) {
    for (int c = 0; c < L->C; c++) L->latents[r * (size_t)L->C + (size_t)c] = noise[(size_t)c * hw + r];
    L->img_ids[4 * r + 1] = (float)(r / (size_t)L->lw);
    L->img_ids[4 * r + 2] = (float)(r % (size_t)L->lw);
  }
  if (L->Sr) memcpy(L->img_ids + 4 * hw, L->ref_ids, (size_t)L->Sr * 4 * sizeof(float));
  for (int64_t l = 0; l < L->St; l++) L->txt_ids[4 * l + 3] = (float)l;
  free(noise);
  return DIT_OK;
}

/* One denoising step i: model call (cond and uncond batched under CFG), guidance, Euler. */
static dit_status denoise_step(void *state, int i, dit_error *err) {
  f2_state *L = state;
  const double guidance = L->guidance;
  const float *sigmas = L->sigmas, *timesteps = L->timesteps;
  const int nb = L->cfg ? 2 : 1;
  const float tv = timesteps[i] / 1000.0f;
  const float t[2] = {tv, tv};
  const size_t row = (size_t)L->S * (size_t)L->C, rn = (size_t)L->Sr * (size_t)L->C;
  float *xin = L->latents;
  if (L->cfg || L->Sr) { /* [latents, reference tokens] per batch item (torch.cat on dim 1) */
    for (int b = 0; b < nb; b++) {
      memcpy(L->x2 + b * row, L->latents, L->n * sizeof(float));
      if (rn) memcpy(L->x2 + b * row + L->n, L->ref_tok, rn * sizeof(float));
    }
    xin = L->x2;
  }
  dit_tensor x = dit_tensor_3d(DIT_F32, xin, nb, L->S, L->C);
  dit_tensor txt = dit_tensor_3d(DIT_F32, L->txt, nb, L->St, L->Jd);
  dit_tensor out = dit_tensor_3d(DIT_F32, L->out2, nb, L->S, L->C);
  DIT_TRY(dit_flux2_forward(L->dit, &x, &txt, t, NULL, L->img_ids, L->txt_ids, &out, err));
  float *pred = L->out2; /* the first Si tokens of each item are the image's */
  if (L->cfg) {
    /* neg + guidance * (cond - neg), each op rounded to float32 as torch */
    const float gf = (float)guidance, *neg = L->out2 + row;
    for (size_t k = 0; k < L->n; k++) {
      const float d = pred[k] - neg[k];
      const float sd = gf * d;
      pred[k] = neg[k] + sd;
    }
  }
  dit_flow_euler_step(L->latents, pred, L->n, sigmas[i], sigmas[i + 1]);
  return dit_check_finite(L->latents, L->n, "latents", err);
}

/* The VAE on rt->dev (bf16 activations on a GPU). */
static dit_status vae_prepare(const dit_model_rt *rt, dit_vae_flux2 *vae, dit_error *err) {
  return dit_rt_on_device(rt) ? dit_vae_flux2_set_act_dtype(vae, DIT_BF16, err) : DIT_OK;
}
DIT_COMPONENT_KIND(klein_vae, "VAE decode", DIT_KEEP_VAE, "vae", dit_vae_flux2, dit_vae_flux2_load, vae_prepare,
                   dit_vae_flux2_free);

/* The encoder (reference images only: loaded on first use). */
static dit_status vae_enc_load(const dit_model_rt *rt, void **obj, dit_error *err) {
  char path[4096];
  dit_vae_flux2_enc *m = NULL;
  DIT_TRY(dit_model_dir_component_path(rt->dir, "vae", path, sizeof path, err));
  DIT_TRY(dit_vae_flux2_enc_load(rt->dev, path, &m, err));
  dit_status s = dit_rt_on_device(rt) ? dit_vae_flux2_enc_set_act_dtype(m, DIT_BF16, err) : DIT_OK;
  DIT_HAND_OVER(s, m, obj, dit_vae_flux2_enc_free);
}
static void vae_enc_free(void *obj) { dit_vae_flux2_enc_free(obj); }
static const dit_component_kind klein_vae_enc = {"VAE encode", DIT_KEEP_VAE, vae_enc_load, vae_enc_free, true, NULL};

/* Flux2KleinPipeline.prepare_image_latents: each reference image prepared (area cap, crop to
 * multiples of mult), encoded to its mode, patchified and normalised, packed to tokens after
 * the previous one's, with ids (10 + 10 i, y, x, 0). */
static dit_status encode_refs(const dit_model_rt *rt, klein_model *k, const dit_gen_params *p, int mult, f2_state *L,
                              dit_error *err) {
  void *obj = NULL;
  DIT_TRY(dit_component_get(rt, &k->c, DIT_SLOT_VAE_ENC, &obj, err));
  dit_vae_flux2_enc *enc = obj;
  const int Cr = dit_vae_flux2_enc_packed_channels(enc);
  dit_status s = DIT_OK;
  for (int i = 0; s == DIT_OK && i < p->n_ref_images; i++) {
    float *px = NULL;
    int W = 0, H = 0;
    s = dit_flux2_ref_pixels(&p->ref_images[i], mult, KLEIN_REF_AREA, &px, &W, &H, err);
    const int64_t gh = H / mult, gw = W / mult, n = gh * gw;
    float *tok = s == DIT_OK ? realloc(L->ref_tok, (size_t)((L->Sr + n) * Cr) * sizeof(float)) : NULL;
    if (tok) L->ref_tok = tok;
    float *ids = tok ? realloc(L->ref_ids, (size_t)(L->Sr + n) * 4 * sizeof(float)) : NULL;
    if (ids) L->ref_ids = ids;
    if (s == DIT_OK && (!tok || !ids)) s = dit_errorf(err, DIT_ERR_NOMEM, "out of memory for the reference latents");
    if (s == DIT_OK) s = dit_vae_flux2_encode_packed(enc, px, H, W, p->vae_tile, L->ref_tok + L->Sr * Cr, err);
    for (int64_t r = 0; s == DIT_OK && r < n; r++) {
      float *d = L->ref_ids + 4 * (L->Sr + r);
      d[0] = (float)(KLEIN_REF_T0 + KLEIN_REF_T0 * i), d[1] = (float)(r / gw), d[2] = (float)(r % gw), d[3] = 0.0f;
    }
    if (s == DIT_OK) L->Sr += n;
    else dit_error_prefix(err, "reference image %d", i + 1);
    free(px);
  }
  L->Cr = Cr;
  dit_component_done(rt, &k->c, DIT_SLOT_VAE_ENC);
  return s;
}

/* VAE stage: de-normalise, unpatchify, decode, postprocess to 8-bit RGB. */
static dit_status decode_latents(const dit_model_rt *rt, klein_model *k, const f2_state *L, int vae_tile,
                                 dit_image *out, dit_error *err) {
  void *obj = NULL;
  DIT_TRY(dit_component_get(rt, &k->c, DIT_SLOT_VAE, &obj, err));
  dit_vae_flux2 *vae = obj;
  dit_status s = DIT_OK;
  if (dit_vae_flux2_packed_channels(vae) != L->C)
    s = dit_errorf(err, DIT_ERR_FORMAT, "the VAE's packed latent channels (4 x latent_channels = %d) differ from "
                   "the transformer's in_channels (%d)", dit_vae_flux2_packed_channels(vae), L->C);
  const int f = dit_vae_flux2_upscale(vae);
  const int H = L->lh * 2 * f, W = L->lw * 2 * f;
  float *img = s == DIT_OK ? malloc(3 * (size_t)H * W * sizeof(float)) : NULL;
  if (s == DIT_OK && !img) s = dit_errorf(err, DIT_ERR_NOMEM, "out of memory for the image");
  if (s == DIT_OK) {
    dit_tensor tk = dit_tensor_3d(DIT_F32, L->latents, 1, L->Si, L->C);
    dit_tensor it = dit_tensor_4d(DIT_F32, img, 1, 3, H, W);
    s = dit_vae_flux2_decode_packed(vae, &tk, L->lh, L->lw, &it, vae_tile, err);
  }
  if (s == DIT_OK) s = dit_image_from_decoder(img, H, W, out, err);
  free(img);
  dit_component_done(rt, &k->c, DIT_SLOT_VAE);
  return s;
}

/* The transformer on rt->dev (bf16 activations on a GPU). */
static dit_status dit_prepare(const dit_model_rt *rt, dit_flux2 *m, dit_error *err) {
  const dit_flux2_config *c = dit_flux2_get_config(m);
  if (c->out_channels != c->in_channels)
    return dit_errorf(err, DIT_ERR_FORMAT, "transformer out_channels %d != in_channels %d", c->out_channels,
                      c->in_channels);
  DIT_TRY(dit_flux2_apply_loras(m, rt->loras, rt->n_loras, err));
  return dit_rt_on_device(rt) ? dit_flux2_set_act_dtype(m, DIT_BF16, err) : DIT_OK;
}
DIT_COMPONENT_KIND_SRC(klein_dit, "transformer", DIT_KEEP_TRANSFORMER, "transformer", dit_flux2, dit_flux2_load_file,
                   dit_prepare, dit_flux2_free);

/* Loads the transformer (unless resident) and checks it against the prompt features. */
static dit_status load_transformer(const dit_model_rt *rt, klein_model *k, f2_state *L, dit_error *err) {
  void *obj = NULL;
  DIT_TRY(dit_component_get(rt, &k->c, DIT_SLOT_TRANSFORMER, &obj, err));
  const dit_flux2_config *c = dit_flux2_get_config(obj);
  if (c->joint_attention_dim != L->Jd)
    return dit_errorf(err, DIT_ERR_FORMAT,
                      "transformer joint_attention_dim %d != 3 x the text encoder's hidden size (%lld)",
                      c->joint_attention_dim, (long long)L->Jd);
  L->dit = obj;
  L->C = c->in_channels;
  if (L->Sr && L->Cr != L->C)
    return dit_errorf(err, DIT_ERR_FORMAT, "the VAE's packed latent channels (%d) differ from the transformer's "
                      "in_channels (%d)", L->Cr, L->C);
  return DIT_OK;
}

static void state_free(f2_state *L) {
  free(L->latents);
  free(L->ref_tok);
  free(L->ref_ids);
  free(L->x2);
  free(L->out2);
  free(L->txt);
  free(L->img_ids);
  free(L->txt_ids);
  memset(L, 0, sizeof *L);
}

static dit_status klein_open(const dit_model_rt *rt, void **state, dit_error *err) {
  *state = NULL;
  klein_model *k = calloc(1, sizeof *k);
  if (!k) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  dit_status s = dit_flux2_klein_is_distilled(rt->dir, &k->distilled, err);
  if (s == DIT_OK) s = vae_scale_factor(rt->dir, &k->vsf, err);
  k->c.kind[DIT_SLOT_VAE_ENC] = &klein_vae_enc;
  if (s == DIT_OK) s = dit_components_start(rt, &k->c, &klein_dit, &klein_vae, err);
  DIT_HAND_OVER(s, k, state, free);
}

static dit_status klein_generate(const dit_model_rt *rt, void *state, const dit_gen_params *p, dit_image *out,
                                 dit_gen_stats *st, dit_error *err) {
  klein_model *k = state;
  const int mult = 2 * k->vsf, steps = p->steps;
  int W = p->width, H = p->height;
  if (W <= 0 || H <= 0) { /* the first reference image's prepared size */
    int rw = 0, rh = 0;
    dit_status s0 = dit_flux2_ref_size(&p->ref_images[0], mult, KLEIN_REF_AREA, &rw, &rh, err);
    if (s0 != DIT_OK) {
      dit_error_prefix(err, "reference image 1");
      return s0;
    }
    W = W > 0 ? W : rw, H = H > 0 ? H : rh;
  }
  const double guidance = p->guidance;
  if (W % mult || H % mult)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "width and height must be multiples of %d for FLUX.2 (got %dx%d)",
                      mult, W, H);
  double t[5];
  t[0] = dit_time_now();
  f2_state L;
  memset(&L, 0, sizeof L);
  L.cfg = guidance > 1.0 && !k->distilled;
  L.lh = H / mult;
  L.lw = W / mult;
  L.Si = (int64_t)L.lh * L.lw;
  float *sigmas = malloc((size_t)(steps + 1) * sizeof(float));
  float *timesteps = malloc((size_t)steps * sizeof(float));
  dit_status s = (sigmas && timesteps) ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "out of memory");

  /* every model runs on rt->dev: the text encoder, the transformer and the VAE */
  if (s == DIT_OK) {
    dit_stage_begin(p, "text encoder");
    s = encode_prompts(rt, k, p, &L, err);
    if (s != DIT_OK) dit_error_prefix(err, "text encoder");
  }
  t[1] = dit_time_now();
  if (s == DIT_OK && p->n_ref_images > 0) s = encode_refs(rt, k, p, mult, &L, err);
  L.S = L.Si + L.Sr;
  if (s == DIT_OK) {
    s = load_transformer(rt, k, &L, err);
    if (s != DIT_OK) dit_error_prefix(err, "transformer");
  }
  if (s == DIT_OK) {
    L.n = (size_t)L.Si * (size_t)L.C;
    s = init_latents(&L, p->seed, err);
  }
  if (s == DIT_OK) s = dit_flux2_klein_schedule(rt->dir, steps, (int)L.Si, sigmas, timesteps, err);
  t[2] = dit_time_now();
  L.guidance = guidance;
  L.sigmas = sigmas;
  L.timesteps = timesteps;
  if (s == DIT_OK) s = dit_sampler_run(rt, p, steps, denoise_step, &L, L.latents, L.n, err);
  dit_component_done(rt, &k->c, DIT_SLOT_TRANSFORMER);
  t[3] = dit_time_now();
  if (s == DIT_OK) {
    dit_stage_begin(p, "VAE decode");
    s = decode_latents(rt, k, &L, p->vae_tile, out, err);
    if (s != DIT_OK) dit_error_prefix(err, "VAE decode");
  }
  t[4] = dit_time_now();
  if (st && s == DIT_OK) dit_fill_stats(st, t, steps);
  state_free(&L);
  free(sigmas);
  free(timesteps);
  return s;
}

/* The text encoder's stage: prompt (and under CFG the negative prompt), each padded to
 * max_len; then both copied into the features the steps take. */
static dit_status plan_text(const dit_model_rt *rt, klein_model *k, const dit_gen_params *p, bool cfg, dit_plan *pl,
                            int64_t *St, int64_t *Jd, dit_error *err) {
  const int max_len = p->max_sequence_length > 0 ? p->max_sequence_length : 512;
  dit_text_encoder *t = NULL;
  DIT_TRY(dit_text_encoder_get(rt, &k->c, p->text_rope_bf16, &t, err));
  dit_cost pos = {0}, neg = {0};
  int n = 0, n_neg = 0;
  dit_status s = dit_flux2_klein_prompt_cost(t->te, t->tok, p->prompt, max_len, &pos, &n, err);
  if (s == DIT_OK && cfg)
    s = dit_flux2_klein_prompt_cost(t->te, t->tok, p->negative_prompt ? p->negative_prompt : "", max_len, &neg,
                                    &n_neg, err);
  *St = max_len;
  *Jd = 3 * (int64_t)dit_qwen3_get_config(t->te)->hidden_size;
  const size_t one = (size_t)(*St * *Jd) * sizeof(float);
  /* the second encode while the first's features are held; then the features with both copies */
  dit_cost run = {pos.flops + neg.flops, pos.act_bytes};
  if (cfg && neg.act_bytes + one > run.act_bytes) run.act_bytes = neg.act_bytes + one;
  if ((cfg ? 4 : 2) * one > run.act_bytes) run.act_bytes = (cfg ? 4 : 2) * one;
  run.act_bytes += dit_tok_table_bytes(t->tok);
  pl->text_tokens = n;
  const dit_plan_run r = {"text encoder", "text_encoder", DIT_KEEP_TEXT_ENCODER, run, 0, dit_tok_load_bytes(t->tok),
                          1, 0};
  dit_component_done(rt, &k->c, DIT_SLOT_TEXT);
  return s == DIT_OK ? dit_plan_add(rt, pl, &r, err) : s;
}

/* Text encoder, the steps (batch 2 under CFG, the base models only) and the VAE decode. */
static dit_status klein_plan(const dit_model_rt *rt, void *state, const dit_gen_params *p, dit_plan *pl,
                             dit_error *err) {
  klein_model *k = state;
  if (p->n_ref_images) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "plan: reference images are not planned yet");
  const int mult = 2 * k->vsf, W = p->width, H = p->height;
  if (W % mult || H % mult)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "width and height must be multiples of %d for FLUX.2 (got %dx%d)",
                      mult, W, H);
  const bool cfg = p->guidance > 1.0 && !k->distilled;
  int64_t St = 0, Jd = 0;
  DIT_TRY(plan_text(rt, k, p, cfg, pl, &St, &Jd, err));
  void *obj = NULL;
  DIT_TRY(dit_component_get(rt, &k->c, DIT_SLOT_TRANSFORMER, &obj, err));
  const int lh = H / mult, lw = W / mult, C = dit_flux2_get_config(obj)->in_channels;
  const int64_t Si = (int64_t)lh * lw;
  dit_cost run = {0};
  dit_status s = dit_flux_cost(obj, cfg ? 2 : 1, Si, St, &run, err);
  dit_component_done(rt, &k->c, DIT_SLOT_TRANSFORMER);
  /* features, latents, the batched input and output, ids (f2_state), the noise */
  const size_t row = (size_t)Si * (size_t)C;
  const size_t loop = (size_t)((cfg ? 2 : 1) * St * Jd) * sizeof(float) + (6 * row) * sizeof(float) +
                      (size_t)(Si + St) * 4 * sizeof(float);
  const size_t acts = run.act_bytes;
  run.flops *= p->steps;
  run.act_bytes += loop;
  pl->batch = cfg ? 2 : 1;
  const dit_plan_run tr = {"transformer", "transformer", DIT_KEEP_TRANSFORMER, run, acts, 0, p->steps, 0};
  if (s == DIT_OK) s = dit_plan_add(rt, pl, &tr, err);
  if (s == DIT_OK) s = dit_component_get(rt, &k->c, DIT_SLOT_VAE, &obj, err);
  dit_cost dec = {0};
  if (s == DIT_OK) {
    s = dit_vae_flux2_cost(obj, lh, lw, p->vae_tile, &dec, err);
    const size_t px = (size_t)H * (size_t)W;
    dec.act_bytes += loop + 3 * px * sizeof(float) + 3 * px; /* the loop's buffers; decoded pixels, 8-bit image */
    dit_component_done(rt, &k->c, DIT_SLOT_VAE);
  }
  const dit_plan_run vr = {"VAE decode", "vae", DIT_KEEP_VAE, dec, 0, 0, 1, 0};
  if (s == DIT_OK) s = dit_plan_add(rt, pl, &vr, err);
  return s;
}

static dit_status klein_family_defaults(const dit_model_dir *dir, dit_gen_defaults *d, dit_error *err) {
  bool distilled = false;
  DIT_TRY(dit_flux2_klein_is_distilled(dir, &distilled, err));
  dit_flux2_klein_defaults(distilled, d);
  return DIT_OK;
}

static const char *const klein_pipelines[] = {"Flux2KleinPipeline", NULL};

const dit_family dit_family_flux2_klein = {
    .name = "flux2-klein",
    .title = "FLUX.2 [klein] (4B, 9B, distilled and base)",
    .pipelines = klein_pipelines,
    .chat = DIT_CHAT_QWEN3_NO_THINKING,
    .defaults = klein_family_defaults,
    .open = klein_open,
    .generate = klein_generate,
    .close = dit_components_state_close,
    .plan = klein_plan,
    .latent = {16, 2, 1},
    .inputs = DIT_INPUT_REF_IMAGES,
    .bench = dit_flux2_klein_bench,
};

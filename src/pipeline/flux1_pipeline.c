/* FLUX.1 pipeline (diffusers FluxPipeline, text to image; FLUX.1 [dev], [schnell] and their
 * fine-tunes). Mirrors FluxPipeline.__call__ for one prompt and one image: the CLIP pooled
 * embedding (77 tokens) and the T5 hidden states (max_sequence_length tokens, padded, no
 * mask), text ids 0, torch-CPU noise [16, h, w] packed to 2x2 tokens with ids (0, y, x),
 * np.linspace(1, 1/steps, steps) sigmas shifted by mu = calculate_shift(image tokens) when
 * the scheduler shifts dynamically (dev) or by its static shift (schnell), the transformer
 * with the embedded guidance (dev's guidance_embeds; schnell has none), the Euler update,
 * then unpack, scale/shift and the AutoencoderKL decode. Every float32 value is computed in
 * float32 in the reference's order. Not done: true CFG (negative prompt with
 * true_cfg_scale > 1). The family's row is dit_family_flux1. */
#include "pipeline/flux1_pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "io/json.h"
#include "models/clip_text.h"
#include "models/flux1.h"
#include "models/t5.h"
#include "pipeline/family.h"
#include "pipeline/kl_vae.h"
#include "pipeline/pipeline_common.h"
#include "pipeline/plan.h"
#include "pipeline/rng_torch.h"
#include "pipeline/scheduler.h"
#include "text/tokenizer.h"

#define CLIP_MAX_LEN 77 /* the CLIP tokenizer's model_max_length FluxPipeline pads to */
#define LATENT_CHANNELS 16

/* ---- the text encoders: CLIP-L (pooled) and T5 (hidden states), with their tokenizers -- */

typedef struct flux1_text {
  dit_tokenizer *clip_tok, *t5_tok;
  dit_clip_text *clip;
  dit_t5 *t5;
} flux1_text;

static void text_free(void *obj) {
  flux1_text *t = obj;
  if (!t) return;
  dit_tok_free(t->clip_tok);
  dit_tok_free(t->t5_tok);
  dit_clip_text_free(t->clip);
  dit_t5_free(t->t5);
  free(t);
}

/* CLIP from its folder, or from a single file with the folder's config.json when there is
 * one (the settings a file's shapes cannot tell), else the published CLIP-L settings. */
static dit_status clip_load(const dit_model_rt *rt, dit_clip_text **out, dit_error *err) {
  dit_component_src src;
  DIT_TRY(dit_component_source(rt, "text_encoder", &src, err));
  if (!src.cfg) return dit_clip_text_load(rt->dev, src.path, out, err);
  dit_clip_text_config c;
  DIT_TRY(dit_clip_text_read_config(src.cfg, &c, err));
  return dit_clip_text_load_file(rt->dev, src.path, &c, out, err);
}

static dit_status text_load(const dit_model_rt *rt, void **obj, dit_error *err) {
  *obj = NULL;
  flux1_text *t = calloc(1, sizeof *t);
  if (!t) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  char p[3][4096];
  static const char *const comp[3] = {"tokenizer", "tokenizer_2", "text_encoder_2"};
  dit_status s = DIT_OK;
  for (int i = 0; i < 3 && s == DIT_OK; i++) s = dit_model_dir_component_path(rt->dir, comp[i], p[i], sizeof p[i], err);
  if (s == DIT_OK) s = dit_tok_load(p[0], &t->clip_tok, err);
  if (s == DIT_OK) s = dit_tok_load(p[1], &t->t5_tok, err);
  if (s == DIT_OK) s = clip_load(rt, &t->clip, err);
  if (s == DIT_OK) s = dit_t5_load(rt->dev, p[2], &t->t5, err); /* a single file's geometry is in its shapes */
  DIT_HAND_OVER(s, t, obj, text_free);
}

static const dit_component_kind flux1_text_kind = {"text encoders", DIT_KEEP_TEXT_ENCODER, text_load, text_free, false, NULL};

/* ids of text as FluxPipeline tokenizes it (special tokens, truncation to max_len), padded
 * to max_len with the tokenizer's pad id (tokenizer_config.json's pad_token; without one,
 * the tokenizer class's default, pad_token, as transformers has it). */
static dit_status padded_ids(const dit_tokenizer *tok, const char *pad_token, const char *text, int max_len,
                             int32_t **out, dit_error *err) {
  int32_t *ids = NULL;
  size_t n = 0;
  *out = NULL;
  int32_t pad = dit_tok_pad_id(tok);
  if (pad < 0) pad = dit_tok_token_id(tok, pad_token);
  if (pad < 0) return dit_errorf(err, DIT_ERR_FORMAT, "the tokenizer has no pad token (nor %s)", pad_token);
  DIT_TRY(dit_tok_encode_model(tok, text, strlen(text), (size_t)max_len, &ids, &n, err));
  int32_t *p = realloc(ids, (size_t)max_len * sizeof *p);
  if (!p) {
    free(ids);
    return dit_errorf(err, DIT_ERR_NOMEM, "out of memory for %d tokens", max_len);
  }
  for (size_t i = n; i < (size_t)max_len; i++) p[i] = pad;
  *out = p;
  return DIT_OK;
}

/* A backend buffer of `bytes` for an encoder's output, filled by run, copied to host. */
typedef dit_status (*encode_fn)(void *model, const int32_t *ids, float *dev_out, dit_error *err);

static dit_status encode_to_host(dit_backend *be, size_t bytes, encode_fn run, void *model, const int32_t *ids,
                                 float *host, dit_error *err) {
  void *dev = NULL;
  DIT_TRY(be->ops->alloc(be, bytes, &dev, err));
  dit_status s = run(model, ids, dev, err);
  if (s == DIT_OK) s = be->ops->download(be, host, dev, bytes, err);
  be->ops->free(be, dev);
  return s;
}

typedef struct flux1_prompt {
  float *pooled;  /* [pooled_dim] CLIP pooled output */
  float *embeds;  /* [St, joint_dim] T5 last hidden state */
  int St, joint, pooled_dim;
} flux1_prompt;

static dit_status run_clip(void *model, const int32_t *ids, float *out, dit_error *err) {
  return dit_clip_text_encode(model, CLIP_MAX_LEN, ids, NULL, out, err);
}

typedef struct t5_call {
  dit_t5 *t5;
  int S;
} t5_call;

static dit_status run_t5(void *model, const int32_t *ids, float *out, dit_error *err) {
  t5_call *c = model;
  return dit_t5_encode(c->t5, c->S, ids, out, err);
}

/* encode_prompt: CLIP's pooled embedding and T5's hidden states of the prompt. */
static dit_status encode_prompt(const dit_model_rt *rt, flux1_text *t, const char *prompt, int max_len,
                                flux1_prompt *P, dit_error *err) {
  int32_t *cid = NULL, *tid = NULL;
  P->pooled_dim = dit_clip_text_get_config(t->clip)->hidden_size;
  P->joint = dit_t5_get_config(t->t5)->d_model;
  P->St = max_len;
  P->pooled = malloc((size_t)P->pooled_dim * sizeof(float));
  P->embeds = malloc((size_t)max_len * (size_t)P->joint * sizeof(float));
  dit_status s = P->pooled && P->embeds ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "out of memory for the prompt");
  if (s == DIT_OK) s = padded_ids(t->clip_tok, "<|endoftext|>", prompt, CLIP_MAX_LEN, &cid, err);
  if (s == DIT_OK) s = padded_ids(t->t5_tok, "<pad>", prompt, max_len, &tid, err);
  if (s == DIT_OK) {
    s = encode_to_host(rt->dev, (size_t)P->pooled_dim * sizeof(float), run_clip, t->clip, cid, P->pooled, err);
    if (s != DIT_OK) dit_error_prefix(err, "CLIP");
  }
  t5_call tc = {t->t5, max_len};
  if (s == DIT_OK) {
    s = encode_to_host(rt->dev, (size_t)max_len * (size_t)P->joint * sizeof(float), run_t5, &tc, tid, P->embeds, err);
    if (s != DIT_OK) dit_error_prefix(err, "T5");
  }
  if (s == DIT_OK) s = dit_check_finite(P->pooled, (size_t)P->pooled_dim, "CLIP pooled output", err);
  if (s == DIT_OK) s = dit_check_finite(P->embeds, (size_t)max_len * (size_t)P->joint, "T5 hidden states", err);
  free(cid);
  free(tid);
  return s;
}

/* ---- the denoising loop ---------------------------------------------------------- */

typedef struct f1_state {
  dit_flux2 *dit;
  int C;                   /* packed channels (transformer in_channels = 4 x 16) */
  int lh, lw;              /* token grid: latent size / 2 */
  int64_t Si;              /* image tokens */
  size_t n;                /* Si * C */
  flux1_prompt P;
  float *latents, *pred;   /* [Si, C] */
  float *img_ids, *txt_ids; /* [Si, 3], [St, 3] */
  float guidance;          /* embedded guidance (dev), as float32 */
  bool use_guidance;
  const float *sigmas, *timesteps;
} f1_state;

/* prepare_latents: randn(1, 16, 2 lh, 2 lw) on the torch CPU generator, _pack_latents to
 * [lh*lw, 64] (channel-major within each 2x2 patch), ids (0, y, x); text ids all 0. */
static dit_status init_latents(f1_state *L, uint64_t seed, dit_error *err) {
  const int Cl = L->C / 4;
  float *noise = malloc(L->n * sizeof(float));
  L->latents = malloc(L->n * sizeof(float));
  L->pred = malloc(L->n * sizeof(float));
  L->img_ids = calloc((size_t)L->Si * 3, sizeof(float));
  L->txt_ids = calloc((size_t)L->P.St * 3, sizeof(float));
  if (!noise || !L->latents || !L->pred || !L->img_ids || !L->txt_ids) {
    free(noise);
    return dit_errorf(err, DIT_ERR_NOMEM, "latents: out of memory");
  }
  dit_torch_rng g;
  dit_torch_rng_seed(&g, seed);
  dit_torch_randn(&g, noise, L->n);
  dit_pack_latents_2x2(noise, Cl, L->lh, L->lw, L->latents);
  for (int y = 0; y < L->lh; y++)
    for (int x = 0; x < L->lw; x++) {
      const size_t r = (size_t)y * (size_t)L->lw + (size_t)x;
      L->img_ids[3 * r + 1] = (float)y;
      L->img_ids[3 * r + 2] = (float)x;
    }
  free(noise);
  return DIT_OK;
}

static dit_status denoise_step(void *state, int i, dit_error *err) {
  f1_state *L = state;
  const float t = L->timesteps[i] / 1000.0f;
  dit_tensor x = dit_tensor_3d(DIT_F32, L->latents, 1, L->Si, L->C);
  dit_tensor txt = dit_tensor_3d(DIT_F32, L->P.embeds, 1, L->P.St, L->P.joint);
  dit_tensor out = dit_tensor_3d(DIT_F32, L->pred, 1, L->Si, L->C);
  DIT_TRY(dit_flux_forward(L->dit, &x, &txt, L->P.pooled, &t, L->use_guidance ? &L->guidance : NULL, L->img_ids,
                           L->txt_ids, &out, err));
  dit_flow_euler_step(L->latents, L->pred, L->n, L->sigmas[i], L->sigmas[i + 1]);
  return dit_check_finite(L->latents, L->n, "latents", err);
}

/* The transformer on rt->dev (bf16 activations on a GPU): the folder's, or a single file
 * with the folder's config.json when it has one. */
static dit_status dit_prepare(const dit_model_rt *rt, dit_flux2 *m, dit_error *err) {
  const dit_flux2_config *c = dit_flux2_get_config(m);
  if (c->out_channels != c->in_channels || c->in_channels != 4 * LATENT_CHANNELS)
    return dit_errorf(err, DIT_ERR_FORMAT, "transformer in/out channels %d/%d: FLUX.1 packs 16 latent channels to %d",
                      c->in_channels, c->out_channels, 4 * LATENT_CHANNELS);
  DIT_TRY(dit_flux1_apply_loras(m, rt->loras, rt->n_loras, err));
  return dit_rt_on_device(rt) ? dit_flux2_set_act_dtype(m, DIT_BF16, err) : DIT_OK;
}
DIT_COMPONENT_KIND_SRC(flux1_dit, "transformer", DIT_KEEP_TRANSFORMER, "transformer", dit_flux2, dit_flux1_load,
                       dit_prepare, dit_flux2_free);

/* FluxPipeline's schedule: linspace sigmas, mu = calculate_shift(image tokens) from the
 * scheduler's own bounds (used only when it shifts dynamically). */
static void state_free(f1_state *L) {
  free(L->latents);
  free(L->pred);
  free(L->img_ids);
  free(L->txt_ids);
  free(L->P.pooled);
  free(L->P.embeds);
  memset(L, 0, sizeof *L);
}

/* Text encoders, then the transformer with its checks against the prompt features. */
static dit_status prepare(const dit_model_rt *rt, dit_components *c, const dit_gen_params *p, f1_state *L,
                          dit_error *err) {
  void *obj = NULL;
  const int max_len = p->max_sequence_length > 0 ? p->max_sequence_length : 512;
  dit_stage_begin(p, "text encoder");
  DIT_TRY(dit_component_get(rt, c, DIT_SLOT_TEXT, &obj, err));
  dit_status s = encode_prompt(rt, obj, p->prompt, max_len, &L->P, err);
  dit_component_done(rt, c, DIT_SLOT_TEXT);
  if (s != DIT_OK) {
    dit_error_prefix(err, "text encoders");
    return s;
  }
  s = dit_component_get(rt, c, DIT_SLOT_TRANSFORMER, &obj, err);
  if (s != DIT_OK) {
    dit_error_prefix(err, "transformer");
    return s;
  }
  const dit_flux2_config *k = dit_flux2_get_config(obj);
  if (k->joint_attention_dim != L->P.joint || k->pooled_dim != L->P.pooled_dim)
    return dit_errorf(err, DIT_ERR_FORMAT,
                      "transformer: joint_attention_dim %d / pooled_projection_dim %d do not match the text encoders' "
                      "widths %d / %d",
                      k->joint_attention_dim, k->pooled_dim, L->P.joint, L->P.pooled_dim);
  L->dit = obj;
  L->C = k->in_channels;
  L->use_guidance = k->guidance_embeds;
  return DIT_OK;
}

static dit_status flux1_generate(const dit_model_rt *rt, void *state, const dit_gen_params *p, dit_image *out,
                                 dit_gen_stats *st, dit_error *err) {
  dit_components *c = state;
  const int W = p->width, H = p->height, steps = p->steps;
  if (W % 16 || H % 16)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "width and height must be multiples of 16 for FLUX.1 (got %dx%d)", W,
                      H);
  double t[5];
  t[0] = dit_time_now();
  f1_state L;
  memset(&L, 0, sizeof L);
  L.lh = H / 16;
  L.lw = W / 16;
  L.Si = (int64_t)L.lh * L.lw;
  L.guidance = (float)p->guidance;
  float *sigmas = malloc((size_t)(steps + 1) * sizeof(float)), *timesteps = malloc((size_t)steps * sizeof(float));
  float *z = NULL;
  dit_status s = (sigmas && timesteps) ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  if (s == DIT_OK) s = prepare(rt, c, p, &L, err);
  t[1] = dit_time_now();
  if (s == DIT_OK) {
    L.n = (size_t)L.Si * (size_t)L.C;
    s = init_latents(&L, p->seed, err);
  }
  if (s == DIT_OK)
    s = dit_flow_schedule_for(rt->dir, steps, (int)L.Si, dit_flux2_default_sigmas, dit_flow_mu_calculate_shift, sigmas,
                              timesteps, err);
  t[2] = dit_time_now();
  L.sigmas = sigmas;
  L.timesteps = timesteps;
  if (s == DIT_OK) s = dit_sampler_run(rt, p, steps, denoise_step, &L, L.latents, L.n, err);
  dit_component_done(rt, c, DIT_SLOT_TRANSFORMER);
  t[3] = dit_time_now();
  if (s == DIT_OK && !(z = malloc(L.n * sizeof(float)))) s = dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  if (s == DIT_OK) {
    dit_unpack_latents_2x2(L.latents, L.C / 4, L.lh, L.lw, z);
    dit_stage_begin(p, "VAE decode");
    s = dit_kl_decode_stage(rt, c, z, L.C / 4, 2 * L.lh, 2 * L.lw, p->vae_tile, out, err);
    if (s != DIT_OK) dit_error_prefix(err, "VAE decode");
  }
  t[4] = dit_time_now();
  if (st && s == DIT_OK) dit_fill_stats(st, t, steps);
  state_free(&L);
  free(z);
  free(sigmas);
  free(timesteps);
  return s;
}

/* The text stage: both tokenizers and encoders load, CLIP runs on 77 ids, then T5 on max_len,
 * each into a backend buffer copied to the prompt's host arrays. */
static dit_status plan_text(const dit_model_rt *rt, dit_components *c, const char *prompt, int max_len, dit_plan *pl,
                            int *St, int *joint, int *pooled_dim, dit_error *err) {
  void *obj = NULL;
  DIT_TRY(dit_component_get(rt, c, DIT_SLOT_TEXT, &obj, err));
  flux1_text *t = obj;
  dit_cost clip = {0}, t5 = {0};
  int32_t *ids = NULL;
  size_t n_ids = 0; /* the prompt's T5 tokens before padding */
  dit_status s = dit_tok_encode_model(t->t5_tok, prompt, strlen(prompt), (size_t)max_len, &ids, &n_ids, err);
  free(ids);
  pl->text_tokens = (int)n_ids;
  if (s == DIT_OK) s = dit_clip_text_cost(t->clip, CLIP_MAX_LEN, &clip, err);
  if (s == DIT_OK) s = dit_t5_cost(t->t5, max_len, &t5, err);
  *pooled_dim = dit_clip_text_get_config(t->clip)->hidden_size;
  *joint = dit_t5_get_config(t->t5)->d_model;
  *St = max_len;
  const size_t pooled = (size_t)*pooled_dim * sizeof(float), embeds = (size_t)max_len * (size_t)*joint * sizeof(float);
  const size_t id_bytes = (size_t)(CLIP_MAX_LEN + max_len) * sizeof(int32_t);
  const size_t tables = dit_tok_table_bytes(t->clip_tok) + dit_tok_table_bytes(t->t5_tok);
  const size_t a = clip.act_bytes + pooled, b = t5.act_bytes + embeds;
  dit_cost run = {clip.flops + t5.flops, (a > b ? a : b) + pooled + embeds + id_bytes + tables};
  /* the tokenizers load one after the other: the second's transient beside the first's tables */
  const size_t l1 = dit_tok_load_bytes(t->clip_tok), l2 = dit_tok_table_bytes(t->clip_tok) + dit_tok_load_bytes(t->t5_tok);
  const dit_plan_run r = {"text encoder", "text_encoder+text_encoder_2", DIT_KEEP_TEXT_ENCODER, run, 0,
                          l1 > l2 ? l1 : l2, 1, 0};
  dit_component_done(rt, c, DIT_SLOT_TEXT);
  return s == DIT_OK ? dit_plan_add(rt, pl, &r, err) : s;
}

/* CLIP and T5, the steps (one item: dev's guidance is embedded), the VAE decode. */
static dit_status flux1_plan(const dit_model_rt *rt, void *state, const dit_gen_params *p, dit_plan *pl,
                             dit_error *err) {
  dit_components *c = state;
  const int W = p->width, H = p->height;
  if (W % 16 || H % 16)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "width and height must be multiples of 16 for FLUX.1 (got %dx%d)", W,
                      H);
  int St = 0, joint = 0, pooled_dim = 0;
  DIT_TRY(plan_text(rt, c, p->prompt, p->max_sequence_length > 0 ? p->max_sequence_length : 512, pl, &St, &joint,
                    &pooled_dim, err));
  void *obj = NULL;
  DIT_TRY(dit_component_get(rt, c, DIT_SLOT_TRANSFORMER, &obj, err));
  const int lh = H / 16, lw = W / 16, C = dit_flux2_get_config(obj)->in_channels;
  const int64_t Si = (int64_t)lh * lw;
  dit_cost run = {0};
  dit_status s = dit_flux_cost(obj, 1, Si, St, &run, err);
  dit_component_done(rt, c, DIT_SLOT_TRANSFORMER);
  /* the prompt's features, latents, prediction, noise, ids (f1_state) */
  const size_t n = (size_t)Si * (size_t)C;
  const size_t loop = ((size_t)pooled_dim + (size_t)St * (size_t)joint + 3 * n + 3 * (size_t)(Si + St)) * sizeof(float);
  const size_t acts = run.act_bytes;
  run.flops *= p->steps;
  run.act_bytes += loop;
  const dit_plan_run tr = {"transformer", "transformer", DIT_KEEP_TRANSFORMER, run, acts, 0, p->steps, 0};
  if (s == DIT_OK) s = dit_plan_add(rt, pl, &tr, err);
  dit_cost dec = {0};
  if (s == DIT_OK) s = dit_kl_decode_cost(rt, c, C / 4, 2 * lh, 2 * lw, p->vae_tile, &dec, err);
  dec.act_bytes += loop + n * sizeof(float); /* and the unpacked latents */
  const dit_plan_run vr = {"VAE decode", "vae", DIT_KEEP_VAE, dec, 0, 0, 1, 0};
  if (s == DIT_OK) s = dit_plan_add(rt, pl, &vr, err);
  return s;
}

static dit_status flux1_open(const dit_model_rt *rt, void **state, dit_error *err) {
  *state = NULL;
  dit_components *c = calloc(1, sizeof *c);
  if (!c) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  dit_status s = dit_components_start_with(rt, c, &flux1_text_kind, &flux1_dit, dit_vae_kl_component, err);
  DIT_HAND_OVER(s, c, state, free);
}

/* dev (a guidance embedder): FluxPipeline's 28 steps at guidance 3.5; schnell: 4 steps,
 * guidance unused (0); 1024x1024 (default_sample_size 128 x vae_scale_factor 8). */
static dit_status flux1_defaults(const dit_model_dir *dir, dit_gen_defaults *d, dit_error *err) {
  json_t *cfg = NULL;
  DIT_TRY(dit_model_dir_component_config(dir, "transformer", &cfg, err));
  bool dev = false;
  dit_status s = dit_json_bool_opt(cfg, "guidance_embeds", &dev, "transformer/config.json", err);
  json_decref(cfg);
  DIT_TRY(s);
  memset(d, 0, sizeof *d);
  d->family = "flux1";
  d->width = d->height = 1024;
  d->steps = dev ? 28 : 4;
  d->guidance = dev ? 3.5 : 0.0;
  d->size_multiple = 16;
  return DIT_OK;
}

static const char *const flux1_pipelines[] = {"FluxPipeline", NULL};

const dit_family dit_family_flux1 = {
    .name = "flux1",
    .title = "FLUX.1 [dev] / [schnell]",
    .pipelines = flux1_pipelines,
    .chat = DIT_CHAT_NONE,
    .defaults = flux1_defaults,
    .open = flux1_open,
    .generate = flux1_generate,
    .close = dit_components_state_close,
    .plan = flux1_plan,
    .latent = {16, 2, 1},
    .bench = dit_flux1_bench,
};

/* Z-Image pipeline (see zimage_pipeline.h). Mirrors ZImagePipeline.__call__: every
 * value that the reference computes in float32 is computed in float32 here, in the same
 * order, so the latents after each step match it to rounding. Components the model does
 * not keep resident are loaded one at a time and released before the next (text encoder,
 * transformer, VAE), so peak memory is the largest of them, not their sum. */
#include "pipeline/zimage_pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "models/model_weights.h"
#include "models/qwen3.h"
#include "models/zimage.h"
#include "pipeline/family.h"
#include "pipeline/image_prep.h"
#include "pipeline/kl_vae.h"
#include "pipeline/plan.h"
#include "pipeline/pipeline_common.h"
#include "pipeline/prompt.h"
#include "pipeline/rng_torch.h"
#include "pipeline/scheduler.h"
#include "io/json.h"
#include "io/png.h"
#include "text/tokenizer.h"

void dit_zimage_defaults(dit_gen_defaults *d) {
  memset(d, 0, sizeof *d);
  d->family = "zimage";
  d->width = 1024;
  d->height = 1024;
  d->steps = 8;
  d->guidance = 0.0;
  d->size_multiple = 16;
}

/* Caption features of one prompt: [n_tokens, hidden] malloc'd. */
typedef struct caption {
  float *embeds;
  int n_tokens;
} caption;

/* Encodes the prompt (and the negative prompt when guidance is on) with the text encoder,
 * loading it first when it is not resident and releasing it after unless kept. */
static dit_status encode_prompts(const dit_model_rt *rt, dit_components *c, const dit_gen_params *p, bool cfg,
                                 caption *pos, caption *neg, dit_error *err) {
  dit_text_encoder *t = NULL;
  DIT_TRY(dit_text_encoder_get(rt, c, p->text_rope_bf16, &t, err));
  dit_qwen3 *te = t->te;
  dit_tokenizer *tok = t->tok;
  dit_status s = DIT_OK;
  int max_len = p->max_sequence_length > 0 ? p->max_sequence_length : 512;
  if (s == DIT_OK) s = dit_zimage_encode_prompt(te, tok, p->prompt, max_len, &pos->embeds, &pos->n_tokens, err);
  if (s == DIT_OK && cfg)
    s = dit_zimage_encode_prompt(te, tok, p->negative_prompt ? p->negative_prompt : "", max_len, &neg->embeds,
                                 &neg->n_tokens, err);
  if (s == DIT_OK) {
    size_t hidden = dit_qwen3_get_config(te)->hidden_size;
    s = dit_check_finite(pos->embeds, (size_t)pos->n_tokens * hidden, "text encoder (prompt)", err);
    if (s == DIT_OK && cfg)
      s = dit_check_finite(neg->embeds, (size_t)neg->n_tokens * hidden, "text encoder (negative prompt)", err);
  }
  dit_component_done(rt, c, DIT_SLOT_TEXT);
  return s;
}

typedef struct loop_state {
  dit_zimage *dit;
  int C, h, w;              /* latent channels and size */
  size_t n;                 /* C*h*w */
  float *latents, *pred, *out2; /* latents [n]; model outputs [2n] */
  caption pos, neg;
  const dit_gen_params *p;
  double guidance;
  const float *sigmas, *timesteps;
} loop_state;

/* The guidance of the step at `timestep` (0: no CFG there): the pipeline's cfg_truncation
 * turns it off past that fraction of the schedule. */
static double step_guidance(const dit_gen_params *p, double guidance, float timestep) {
  const float t_norm = (1000.0f - timestep) / 1000.0f;
  if (guidance > 0 && p->cfg_truncation <= 1.0 && (double)t_norm > p->cfg_truncation) return 0.0;
  return guidance > 0 ? guidance : 0.0;
}

/* One denoising step i: model call (batched cond/uncond under CFG), guidance, Euler. */
static dit_status denoise_step(void *state, int i, dit_error *err) {
  loop_state *L = state;
  const dit_gen_params *p = L->p;
  const float *sigmas = L->sigmas, *timesteps = L->timesteps;
  const float t_norm = (1000.0f - timesteps[i]) / 1000.0f;
  const double g = step_guidance(p, L->guidance, timesteps[i]);
  const bool apply_cfg = g > 0;
  const int nb = apply_cfg ? 2 : 1;
  dit_tensor x[2], cap[2], out[2];
  float t[2] = {t_norm, t_norm};
  const int64_t hidden = dit_zimage_get_config(L->dit)->cap_feat_dim;
  for (int b = 0; b < nb; b++) {
    x[b] = dit_tensor_4d(DIT_F32, L->latents, L->C, 1, L->h, L->w);
    const caption *c = b == 0 ? &L->pos : &L->neg;
    cap[b] = dit_tensor_2d(DIT_F32, c->embeds, c->n_tokens, hidden);
    out[b] = dit_tensor_4d(DIT_F32, L->out2 + (size_t)b * L->n, L->C, 1, L->h, L->w);
  }
  DIT_TRY(dit_zimage_forward(L->dit, nb, x, cap, t, out, err));
  const float *posv = L->out2, *negv = L->out2 + L->n;
  if (apply_cfg) {
    const float gf = (float)g;
    for (size_t k = 0; k < L->n; k++) L->pred[k] = posv[k] + gf * (posv[k] - negv[k]);
    if (p->cfg_normalization > 0) {
      double pn = 0, nn = 0;
      for (size_t k = 0; k < L->n; k++) {
        pn += (double)posv[k] * posv[k];
        nn += (double)L->pred[k] * L->pred[k];
      }
      const float ori = (float)sqrt(pn), cur = (float)sqrt(nn);
      const float max_norm = ori * (float)p->cfg_normalization;
      if (cur > max_norm) {
        const float r = max_norm / cur;
        for (size_t k = 0; k < L->n; k++) L->pred[k] *= r;
      }
    }
  } else {
    memcpy(L->pred, posv, L->n * sizeof(float));
  }
  for (size_t k = 0; k < L->n; k++) L->pred[k] = -L->pred[k];
  dit_flow_euler_step(L->latents, L->pred, L->n, sigmas[i], sigmas[i + 1]);
  char stage[64];
  snprintf(stage, sizeof stage, "denoising step %d", i + 1);
  return dit_check_finite(L->latents, L->n, stage, err);
}

dit_status dit_zimage_schedule(const dit_model_dir *dir, int steps, int h, int w, float *sigmas, float *timesteps,
                                dit_error *err) {
  return dit_flow_schedule_for(dir, steps, (h / 2) * (w / 2), dit_zimage_default_sigmas, dit_flow_mu_calculate_shift,
                               sigmas, timesteps, err);
}

/* The image token grid must fit the transformer's RoPE tables (axes_lens[1], [2]): checked
 * from config.json before any model runs, so a too-large size fails at once. */
static dit_status check_grid(const dit_model_dir *dir, int H, int W, dit_error *err) {
  json_t *cfg = NULL;
  DIT_TRY(dit_model_dir_component_config(dir, "transformer", &cfg, err));
  int64_t lens[3] = {0, 0, 0};
  size_t n = 0;
  dit_status s = dit_json_int_array(cfg, "axes_lens", 1, 1 << 20, lens, 3, &n, "transformer/config.json", err);
  json_decref(cfg);
  if (s != DIT_OK) return s;
  if (n == 3 && (H / 16 > lens[1] || W / 16 > lens[2]))
    return dit_errorf(err, DIT_ERR_INVALID_ARG,
                      "%dx%d is too large for this transformer: at most %lldx%lld pixels (axes_lens %lld, %lld)", W,
                      H, (long long)lens[2] * 16, (long long)lens[1] * 16, (long long)lens[1], (long long)lens[2]);
  return DIT_OK;
}

/* The transformer on rt->dev (bf16 activations on a GPU; q/k/v stacked unless the run
 * options say no). */
static dit_status dit_prepare(const dit_model_rt *rt, dit_zimage *m, dit_error *err) {
  dit_zimage_set_stacked_qkv(m, rt->ctx->opts.zimage_stack_qkv);
  DIT_TRY(dit_zimage_apply_loras(m, rt->loras, rt->n_loras, err));
  return dit_rt_on_device(rt) ? dit_zimage_set_act_dtype(m, DIT_BF16, err) : DIT_OK;
}
/* The folder's transformer, or a single file set for it (diffusers' or the original names)
 * with the folder's transformer/config.json. */
DIT_COMPONENT_KIND_SRC(zimage_dit, "transformer", DIT_KEEP_TRANSFORMER, "transformer", dit_zimage,
                       dit_zimage_load_file, dit_prepare, dit_zimage_free);

/* The state is the components alone. */
static dit_status zimage_open(const dit_model_rt *rt, void **state, dit_error *err) {
  *state = NULL;
  dit_components *c = calloc(1, sizeof *c);
  if (!c) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  c->kind[DIT_SLOT_VAE_ENC] = dit_vae_kl_enc_component;
  dit_status s = dit_components_start(rt, c, &zimage_dit, dit_vae_kl_component, err);
  DIT_HAND_OVER(s, c, state, free);
}

/* ZImageImg2ImgPipeline.get_timesteps: the first step run, t_start = int(max(steps -
 * min(steps * strength, steps), 0)) in double as Python computes it. */
static int img2img_start(int steps, double strength) {
  const double init = fmin(steps * strength, (double)steps);
  return (int)fmax(steps - init, 0.0);
}

/* The starting latents of image-to-image (ZImageImg2ImgPipeline.prepare_latents): the init
 * image encoded and sampled with the generator, then scale_noise with a second draw:
 * sigma * noise + (1 - sigma) * image_latents, sigma the schedule's first sigma run. */
static dit_status img2img_latents(const dit_model_rt *rt, dit_components *c, const dit_gen_params *p, int W, int H,
                                  float sigma, float *latents, size_t n, dit_error *err) {
  float *px = NULL, *il = NULL;
  int C = 0;
  dit_torch_rng g;
  dit_torch_rng_seed(&g, p->seed);
  /* VaeImageProcessor.preprocess: PIL's Lanczos, its default resample */
  DIT_TRY(dit_image_to_pixels(p->init_image, W, H, DIT_RESAMPLE_LANCZOS, &px, err));
  dit_status s = dit_kl_encode_stage(rt, c, px, H, W, &g, p->vae_tile, &il, &C, err);
  if (s == DIT_OK && (size_t)C * (size_t)(H / 8) * (size_t)(W / 8) != n)
    s = dit_errorf(err, DIT_ERR_FORMAT, "the VAE's %d latent channels do not fit the transformer's latents", C);
  if (s == DIT_OK) {
    dit_torch_randn(&g, latents, n);
    for (size_t k = 0; k < n; k++) latents[k] = sigma * latents[k] + (1.0f - sigma) * il[k];
  }
  free(px);
  free(il);
  if (s != DIT_OK) dit_error_prefix(err, "init image");
  return s;
}

static dit_status zimage_generate(const dit_model_rt *rt, void *state, const dit_gen_params *p, dit_image *out,
                                  dit_gen_stats *st, dit_error *err) {
  dit_components *c = state;
  dit_gen_defaults d;
  dit_zimage_defaults(&d);
  const dit_image *init = p->init_image;
  const int W = p->width > 0 ? p->width : init->width / d.size_multiple * d.size_multiple;
  const int H = p->height > 0 ? p->height : init->height / d.size_multiple * d.size_multiple;
  const int steps = p->steps;
  if (W < 1 || H < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "the init image (%dx%d) is smaller than %d pixels", init->width,
                      init->height, d.size_multiple);
  const double guidance = p->guidance;
  if (W % d.size_multiple || H % d.size_multiple)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "width and height must be multiples of %d for Z-Image (got %dx%d)",
                      d.size_multiple, W, H);
  DIT_TRY(check_grid(rt->dir, H, W, err));
  const bool cfg = guidance > 0;
  double t[5];
  t[0] = dit_time_now();
  loop_state L;
  memset(&L, 0, sizeof L);
  float *sigmas = malloc((size_t)(steps + 1) * sizeof(float));
  float *timesteps = malloc((size_t)steps * sizeof(float));
  dit_status s = (sigmas && timesteps) ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "out of memory");

  /* every model runs on rt->dev: the text encoder, the transformer and the VAE */
  if (s == DIT_OK) dit_stage_begin(p, "text encoder");
  if (s == DIT_OK) s = encode_prompts(rt, c, p, cfg, &L.pos, &L.neg, err);
  if (s != DIT_OK) dit_error_prefix(err, "text encoder");
  t[1] = dit_time_now();

  void *dit = NULL;
  if (s == DIT_OK) s = dit_component_get(rt, c, DIT_SLOT_TRANSFORMER, &dit, err);
  if (s == DIT_OK) {
    L.dit = dit;
    L.C = (int)dit_zimage_get_config(L.dit)->in_channels;
    L.h = 2 * (H / 16);
    L.w = 2 * (W / 16);
    L.n = (size_t)L.C * L.h * L.w;
    L.latents = malloc(L.n * sizeof(float));
    L.pred = malloc(L.n * sizeof(float));
    L.out2 = malloc(2 * L.n * sizeof(float));
    if (!L.latents || !L.pred || !L.out2) s = dit_errorf(err, DIT_ERR_NOMEM, "latents: out of memory");
  }
  if (s == DIT_OK) s = dit_zimage_schedule(rt->dir, steps, L.h, L.w, sigmas, timesteps, err);
  /* image-to-image runs the schedule from t_start on */
  const int t0 = init ? img2img_start(steps, p->strength) : 0, run = steps - t0;
  if (s == DIT_OK && run < 1)
    s = dit_errorf(err, DIT_ERR_INVALID_ARG, "strength %g with %d steps leaves no step to run", p->strength, steps);
  if (s == DIT_OK && init) {
    s = img2img_latents(rt, c, p, W, H, sigmas[t0], L.latents, L.n, err);
  } else if (s == DIT_OK) {
    dit_torch_rng g;
    dit_torch_rng_seed(&g, p->seed);
    dit_torch_randn(&g, L.latents, L.n);
  }
  t[2] = dit_time_now();
  L.p = p;
  L.guidance = guidance;
  L.sigmas = sigmas + t0;
  L.timesteps = timesteps + t0;
  if (s == DIT_OK) s = dit_sampler_run(rt, p, run, denoise_step, &L, L.latents, L.n, err);
  dit_component_done(rt, c, DIT_SLOT_TRANSFORMER);
  t[3] = dit_time_now();
  if (s == DIT_OK) dit_stage_begin(p, "VAE decode");
  if (s == DIT_OK) s = dit_kl_decode_stage(rt, c, L.latents, L.C, L.h, L.w, p->vae_tile, out, err);
  t[4] = dit_time_now();
  if (st && s == DIT_OK) dit_fill_stats(st, t, run);
  free(L.pos.embeds);
  free(L.neg.embeds);
  free(L.latents);
  free(L.pred);
  free(L.out2);
  free(sigmas);
  free(timesteps);
  return s;
}

/* The text encoder's stage: the prompt (and, under guidance, the negative prompt) encoded in
 * turn; the features of both are held into the denoising. */
static dit_status plan_text(const dit_model_rt *rt, dit_components *c, const dit_gen_params *p, bool cfg, dit_plan *pl,
                            int n_tok[2], dit_error *err) {
  dit_text_encoder *t = NULL;
  DIT_TRY(dit_text_encoder_get(rt, c, p->text_rope_bf16, &t, err));
  const int max_len = p->max_sequence_length > 0 ? p->max_sequence_length : 512;
  dit_cost pos = {0}, neg = {0};
  n_tok[1] = 0;
  dit_status s = dit_zimage_prompt_cost(t->te, t->tok, p->prompt, max_len, &pos, &n_tok[0], err);
  if (s == DIT_OK && cfg)
    s = dit_zimage_prompt_cost(t->te, t->tok, p->negative_prompt ? p->negative_prompt : "", max_len, &neg, &n_tok[1],
                               err);
  const size_t feat = (size_t)dit_qwen3_get_config(t->te)->hidden_size * sizeof(float);
  if (s != DIT_OK) {
    dit_component_done(rt, c, DIT_SLOT_TEXT);
    return s;
  }
  /* the second encode runs while the first's features are held */
  dit_cost run = {pos.flops + neg.flops, pos.act_bytes};
  if (cfg && neg.act_bytes + (size_t)n_tok[0] * feat > run.act_bytes) run.act_bytes = neg.act_bytes + (size_t)n_tok[0] * feat;
  pl->text_tokens = n_tok[0];
  run.act_bytes += dit_tok_table_bytes(t->tok);
  const dit_plan_run r = {"text encoder", "text_encoder", DIT_KEEP_TEXT_ENCODER, run, 0, dit_tok_load_bytes(t->tok),
                          1, 0};
  dit_component_done(rt, c, DIT_SLOT_TEXT);
  return dit_plan_add(rt, pl, &r, err);
}

/* Text encoder, the denoising steps (batch 2 where guidance applies) and the VAE decode. */
static dit_status zimage_plan(const dit_model_rt *rt, void *state, const dit_gen_params *p, dit_plan *pl,
                              dit_error *err) {
  dit_components *c = state;
  if (p->init_image) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "plan: image-to-image is not planned yet");
  const int W = p->width, H = p->height, steps = p->steps;
  if (W % 16 || H % 16)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "width and height must be multiples of 16 for Z-Image (got %dx%d)", W,
                      H);
  DIT_TRY(check_grid(rt->dir, H, W, err));
  const bool cfg = p->guidance > 0;
  int n_tok[2];
  DIT_TRY(plan_text(rt, c, p, cfg, pl, n_tok, err));
  void *obj = NULL;
  DIT_TRY(dit_component_get(rt, c, DIT_SLOT_TRANSFORMER, &obj, err));
  dit_zimage *dit = obj;
  const int C = (int)dit_zimage_get_config(dit)->in_channels, h = 2 * (H / 16), w = 2 * (W / 16);
  const size_t n = (size_t)C * h * w, feat = (size_t)dit_zimage_get_config(dit)->cap_feat_dim * sizeof(float);
  float *sigmas = malloc((size_t)(steps + 1) * sizeof(float)), *timesteps = malloc((size_t)steps * sizeof(float));
  dit_status s = sigmas && timesteps ? dit_zimage_schedule(rt->dir, steps, h, w, sigmas, timesteps, err)
                                     : dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  dit_cost one = {0}, two = {0}, run = {0};
  if (s == DIT_OK) s = dit_zimage_cost(dit, 1, h, w, n_tok, &one, err);
  if (s == DIT_OK && cfg) s = dit_zimage_cost(dit, 2, h, w, n_tok, &two, err);
  int batched = 0;
  for (int i = 0; s == DIT_OK && i < steps; i++) batched += step_guidance(p, p->guidance, timesteps[i]) > 0;
  pl->batch = batched ? 2 : 1;
  /* the buffer grows to the largest call; latents, prediction and both outputs, captions */
  const size_t loop = 4 * n * sizeof(float) + (size_t)(n_tok[0] + n_tok[1]) * feat;
  run.flops = (steps - batched) * one.flops + batched * two.flops;
  const size_t acts = batched ? two.act_bytes : one.act_bytes;
  run.act_bytes = acts + loop;
  free(sigmas);
  free(timesteps);
  dit_component_done(rt, c, DIT_SLOT_TRANSFORMER);
  const dit_plan_run tr = {"transformer", "transformer", DIT_KEEP_TRANSFORMER, run, acts, 0, steps, 0};
  if (s == DIT_OK) s = dit_plan_add(rt, pl, &tr, err);
  dit_cost dec = {0};
  if (s == DIT_OK) s = dit_kl_decode_cost(rt, c, C, h, w, p->vae_tile, &dec, err);
  dec.act_bytes += loop; /* the loop's buffers live until the image is made */
  const dit_plan_run vr = {"VAE decode", "vae", DIT_KEEP_VAE, dec, 0, 0, 1, 0};
  if (s == DIT_OK) s = dit_plan_add(rt, pl, &vr, err);
  return s;
}

static dit_status zimage_family_defaults(const dit_model_dir *dir, dit_gen_defaults *d, dit_error *err) {
  (void)dir;
  (void)err;
  dit_zimage_defaults(d);
  return DIT_OK;
}

static const char *const zimage_pipelines[] = {"ZImagePipeline", NULL};

const dit_family dit_family_zimage = {
    .name = "zimage",
    .title = "Z-Image / Z-Image-Turbo",
    .pipelines = zimage_pipelines,
    .chat = DIT_CHAT_QWEN3_THINKING,
    .defaults = zimage_family_defaults,
    .open = zimage_open,
    .generate = zimage_generate,
    .close = dit_components_state_close,
    .plan = zimage_plan,
    .latent = {16, 2, 0},
    .inputs = DIT_INPUT_INIT_IMAGE,
    .bench = dit_zimage_bench,
};

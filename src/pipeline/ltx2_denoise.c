/* LTX-2's denoising loop (LTX2Pipeline.__call__ step 7): per step the transformer on the
 * conditional and unconditional inputs as one batch (under guidance), once more with
 * spatio-temporal guidance (STG) on the conditional inputs, once more with the modalities
 * isolated, then dit_ltx2_guide and the Euler step for video and audio. Image-to-video
 * (LTX2ImageToVideoPipeline): the first frame's tokens take timestep 0 in every call and no
 * step. */
#include <stdlib.h>
#include <string.h>

#include "models/ltx2.h"
#include "pipeline/ltx2_pipeline_internal.h"
#include "pipeline/pipeline_common.h"
#include "pipeline/scheduler.h"

typedef struct loop_state {
  dit_ltx2 *dit;
  dit_backend *be;
  const dit_ltx2_opts *o;
  const dit_ltx2_cond *cond;
  const dit_ltx2_geom *g;
  bool cfg, stg, iso;
  size_t nv, na;                 /* floats of one item's video / audio latents */
  float *video, *audio;          /* host latents (the caller's) */
  float *hv, *ha;                /* host outputs: [3 slots][nb max 2] items */
  float *pv, *pa;                /* guided velocities */
  void *xv, *xa, *ov, *oa;       /* backend: inputs [2] items, outputs [2] items */
  const float *sigmas, *timesteps;
} loop_state;

/* One transformer call on B items (B 2: the [uncond, cond] batch; 1: the conditional inputs,
 * STG or isolated) into host hv / ha. */
static dit_status run_call(loop_state *L, int i, int B, bool stg, bool iso, float *hv, float *ha, dit_error *err) {
  dit_backend *be = L->be;
  const dit_ltx2_cond *c = L->cond;
  const dit_ltx2_geom *g = L->g;
  const int first = c->nb - B; /* the positive item is the last */
  const float t[2] = {L->timesteps[i], L->timesteps[i]};
  dit_ltx2_call call = {
      .B = B, .frames = g->F, .height = g->H, .width = g->W, .fps = g->fps, .audio_frames = g->L, .text_len = c->S,
      .video = L->xv, .audio = L->xa,
      .text = (const float *)c->video + (size_t)first * c->S * c->video_dim,
      .audio_text = (const float *)c->audio + (size_t)first * c->S * c->audio_dim,
      .text_mask = c->mask + (size_t)first * c->S, .timestep = t, .use_cross_timestep = true,
      .isolate_modalities = iso, .stg_blocks = stg ? L->o->stg_blocks : NULL, .n_stg_blocks = stg ? L->o->n_stg_blocks : 0,
      .cond_tokens = g->cond_tokens}; /* their timestep 0: t * (1 - conditioning mask) */
  DIT_TRY(dit_ltx2_forward(L->dit, &call, L->ov, L->oa, err));
  DIT_TRY(be->ops->download(be, hv, L->ov, (size_t)B * L->nv * sizeof(float), err));
  return be->ops->download(be, ha, L->oa, (size_t)B * L->na * sizeof(float), err);
}

static dit_status denoise_step(void *state, int i, dit_error *err) {
  loop_state *L = state;
  dit_backend *be = L->be;
  const int nb = L->cond->nb;
  const size_t bv = L->nv * sizeof(float), ba = L->na * sizeof(float);
  for (int b = 0; b < nb; b++) {
    DIT_TRY(be->ops->upload(be, (char *)L->xv + (size_t)b * bv, L->video, bv, err));
    DIT_TRY(be->ops->upload(be, (char *)L->xa + (size_t)b * ba, L->audio, ba, err));
  }
  /* slot 0: [uncond, cond] (or cond); slot 1: STG; slot 2: isolated */
  float *v0 = L->hv, *a0 = L->ha, *v1 = L->hv + 2 * L->nv, *a1 = L->ha + 2 * L->na;
  float *v2 = L->hv + 3 * L->nv, *a2 = L->ha + 3 * L->na;
  DIT_TRY(run_call(L, i, nb, false, false, v0, a0, err));
  if (L->stg) DIT_TRY(run_call(L, i, 1, true, false, v1, a1, err));
  if (L->iso) DIT_TRY(run_call(L, i, 1, false, true, v2, a2, err));
  const float *vc = v0 + (size_t)(nb - 1) * L->nv, *ac = a0 + (size_t)(nb - 1) * L->na;
  const float sigma = L->sigmas[i];
  if (dit_ltx2_guide(&L->o->video, L->nv, L->video, sigma, vc, L->cfg ? v0 : NULL, L->stg ? v1 : NULL,
                     L->iso ? v2 : NULL, L->pv) ||
      dit_ltx2_guide(&L->o->audio, L->na, L->audio, sigma, ac, L->cfg ? a0 : NULL, L->stg ? a1 : NULL,
                     L->iso ? a2 : NULL, L->pa))
    return dit_errorf(err, DIT_ERR_NUMERIC, "guidance: a prediction without spread to rescale by");
  /* the conditioning frame's tokens keep their latents (the step runs on frames 1.. only) */
  const size_t kept = (size_t)L->g->cond_tokens * L->g->C;
  dit_flow_euler_step(L->video + kept, L->pv + kept, L->nv - kept, sigma, L->sigmas[i + 1]);
  dit_flow_euler_step(L->audio, L->pa, L->na, sigma, L->sigmas[i + 1]);
  DIT_TRY(dit_check_finite(L->video, L->nv, "video latents", err));
  return dit_check_finite(L->audio, L->na, "audio latents", err);
}

static void loop_free(loop_state *L) {
  if (L->be) {
    void *p[4] = {L->xv, L->xa, L->ov, L->oa};
    for (int k = 0; k < 4; k++)
      if (p[k]) L->be->ops->free(L->be, p[k]);
  }
  free(L->hv), free(L->ha), free(L->pv), free(L->pa);
}

/* The transformer's widths against the latents the pipeline makes. */
static dit_status check_widths(const dit_ltx2 *dit, const dit_ltx2_geom *g, dit_error *err) {
  const dit_ltx2_config *k = dit_ltx2_get_config(dit);
  if (k->video.in_channels != g->C || k->video.out_channels != g->C)
    return dit_errorf(err, DIT_ERR_FORMAT, "transformer: in/out_channels %d/%d, the latents have %d",
                      k->video.in_channels, k->video.out_channels, g->C);
  if (k->audio.in_channels != g->Ca * g->M || k->audio.out_channels != g->Ca * g->M)
    return dit_errorf(err, DIT_ERR_FORMAT, "transformer: audio_in/out_channels %d/%d, the audio VAE's latents "
                      "have %d x %d", k->audio.in_channels, k->audio.out_channels, g->Ca, g->M);
  return DIT_OK;
}

dit_status dit_ltx2_schedule(const dit_model_rt *rt, int steps, const dit_ltx2_geom *g, float **sigmas,
                             float **timesteps, dit_error *err) {
  *sigmas = malloc((size_t)(steps + 1) * sizeof(float)), *timesteps = malloc((size_t)steps * sizeof(float));
  if (!*sigmas || !*timesteps) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  return dit_flow_schedule_for(rt->dir, steps, g->F * g->H * g->W, dit_flux2_default_sigmas,
                               dit_flow_mu_calculate_shift, *sigmas, *timesteps, err);
}

dit_status dit_ltx2_denoise(const dit_model_rt *rt, dit_components *c, const dit_gen_params *p,
                            const dit_ltx2_opts *o, const dit_ltx2_cond *cond, const dit_ltx2_geom *g,
                            const float *sigmas, const float *timesteps, float *video, float *audio, dit_error *err) {
  const int steps = p->steps;
  loop_state L = {.o = o, .cond = cond, .g = g, .video = video, .audio = audio, .be = rt->dev};
  L.nv = dit_ltx2_video_n(g), L.na = dit_ltx2_audio_n(g);
  L.cfg = cond->nb == 2;
  L.stg = o->n_stg_blocks > 0 && (o->video.stg > 0 || o->audio.stg > 0);
  L.iso = o->video.modality > 1 || o->audio.modality > 1;
  void *obj = NULL;
  dit_status s = dit_component_get(rt, c, DIT_SLOT_TRANSFORMER, &obj, err);
  L.dit = obj;
  if (s == DIT_OK) s = check_widths(L.dit, g, err);
  if (s == DIT_OK) {
    L.hv = malloc(4 * L.nv * sizeof(float)), L.ha = malloc(4 * L.na * sizeof(float));
    L.pv = malloc(L.nv * sizeof(float)), L.pa = malloc(L.na * sizeof(float));
    if (!L.hv || !L.ha || !L.pv || !L.pa) s = dit_errorf(err, DIT_ERR_NOMEM, "out of memory for the latents");
  }
  dit_backend *be = rt->dev;
  const size_t bv = L.nv * sizeof(float), ba = L.na * sizeof(float);
  if (s == DIT_OK) s = be->ops->alloc(be, 2 * bv, &L.xv, err);
  if (s == DIT_OK) s = be->ops->alloc(be, 2 * ba, &L.xa, err);
  if (s == DIT_OK) s = be->ops->alloc(be, 2 * bv, &L.ov, err);
  if (s == DIT_OK) s = be->ops->alloc(be, 2 * ba, &L.oa, err);
  L.sigmas = sigmas, L.timesteps = timesteps;
  if (s == DIT_OK) s = dit_sampler_run(rt, p, steps, denoise_step, &L, video, L.nv, err);
  loop_free(&L);
  dit_component_done(rt, c, DIT_SLOT_TRANSFORMER);
  return s;
}

dit_status dit_ltx2_denoise_cost(const dit_model_rt *rt, dit_components *c, const dit_ltx2_opts *o,
                                 const dit_ltx2_cond *cond, const dit_ltx2_geom *g, dit_cost *out, size_t *kept,
                                 dit_error *err) {
  void *obj = NULL;
  DIT_TRY(dit_component_get(rt, c, DIT_SLOT_TRANSFORMER, &obj, err));
  const dit_ltx2 *dit = obj;
  const bool stg = o->n_stg_blocks > 0 && (o->video.stg > 0 || o->audio.stg > 0);
  const bool iso = o->video.modality > 1 || o->audio.modality > 1;
  dit_ltx2_call call = {.B = cond->nb, .frames = g->F, .height = g->H, .width = g->W, .fps = g->fps,
                        .audio_frames = g->L, .text_len = cond->S, .use_cross_timestep = true,
                        .cond_tokens = g->cond_tokens};
  dit_cost batch = {0}, one = {0};
  dit_status s = check_widths(dit, g, err);
  if (s == DIT_OK) s = dit_ltx2_cost(dit, &call, &batch, err);
  call.B = 1;
  if (s == DIT_OK) s = dit_ltx2_cost(dit, &call, &one, err);
  dit_component_done(rt, c, DIT_SLOT_TRANSFORMER);
  /* the host outputs (4 items), the guided velocities, the backend inputs and outputs (2 items each) */
  const size_t loop = 9 * (dit_ltx2_video_n(g) + dit_ltx2_audio_n(g)) * sizeof(float);
  *kept = batch.act_bytes; /* the batch's activations and tables are the largest; they stay with the model */
  out->act_bytes = batch.act_bytes + loop;
  out->flops = batch.flops + (double)(stg + iso) * one.flops;
  return s;
}

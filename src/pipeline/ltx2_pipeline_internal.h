/* The LTX-2 pipeline's stages (ltx2_pipeline.c: text and orchestration; ltx2_denoise.c: the
 * sampler loop; ltx2_decode.c: the video and audio decoders). */
#ifndef DIT_PIPELINE_LTX2_PIPELINE_INTERNAL_H
#define DIT_PIPELINE_LTX2_PIPELINE_INTERNAL_H

#include <stdint.h>

#include "core/cost.h"
#include "pipeline/ltx2_pipeline.h"
#include "pipeline/model_rt.h"

/* The text conditioning, in the transformer's backend memory: nb = 2 under guidance
 * ([negative, positive], LTX2Pipeline's order), else 1. */
typedef struct dit_ltx2_cond {
  int nb, S;
  int video_dim, audio_dim;
  void *video, *audio; /* [nb, S, video_dim], [nb, S, audio_dim] */
  uint8_t *mask;       /* host [nb * S]: the connectors' attention mask */
} dit_ltx2_cond;

/* The latent geometry of one clip. */
typedef struct dit_ltx2_geom {
  int C, F, H, W;     /* video latents [C, F, H, W]: N = F*H*W tokens of C */
  int Ca, L, M;       /* audio latents [Ca, L, M]: L tokens of Ca*M */
  int frames, height, width; /* the clip */
  float fps;
  int cond_tokens;    /* image-to-video: the first frame's H*W tokens, kept from the image's latents; else 0 */
} dit_ltx2_geom;

static inline size_t dit_ltx2_video_n(const dit_ltx2_geom *g) { return (size_t)g->C * g->F * g->H * g->W; }
static inline size_t dit_ltx2_audio_n(const dit_ltx2_geom *g) { return (size_t)g->Ca * g->L * g->M; }

/* The schedule of `steps` steps over g's video tokens: *sigmas [steps + 1] and *timesteps
 * [steps], malloc'd (the caller frees them, also on failure). */
dit_status dit_ltx2_schedule(const dit_model_rt *rt, int steps, const dit_ltx2_geom *g, float **sigmas,
                             float **timesteps, dit_error *err);

/* The denoising loop over that schedule: video [N, C] and audio [L, Ca*M] packed latents
 * (host), the initial noise in, the final latents out. */
dit_status dit_ltx2_denoise(const dit_model_rt *rt, dit_components *c, const dit_gen_params *p,
                            const dit_ltx2_opts *o, const dit_ltx2_cond *cond, const dit_ltx2_geom *g,
                            const float *sigmas, const float *timesteps, float *video, float *audio, dit_error *err);

/* The loop's stage as the planner sees it (pipeline/plan.h): the transformer's calls of one step at
 * cond's and g's sizes (its FLOPs, all calls of a step), what the loop allocates (its activations,
 * tables and the loop's host and backend buffers) and of that, *kept: what stays with a kept
 * transformer. */
dit_status dit_ltx2_denoise_cost(const dit_model_rt *rt, dit_components *c, const dit_ltx2_opts *o,
                                 const dit_ltx2_cond *cond, const dit_ltx2_geom *g, dit_cost *out, size_t *kept,
                                 dit_error *err);

/* The decoders' stage as the planner sees it: their FLOPs and what dit_ltx2_decode allocates
 * (the latents' copies, the decoded video and frames, the mel and the sound, the decoders'
 * activations; p->vae_tile's tiling). */
dit_status dit_ltx2_decode_cost(const dit_model_rt *rt, dit_components *c, const dit_gen_params *p,
                                const dit_ltx2_geom *g, dit_cost *out, dit_error *err);

/* LTX2ImageToVideoPipeline's image CRF for Gemma 3 text encoders (LTX-2.0, 2.3). */
#define DIT_LTX2_DEFAULT_IMAGE_CRF 33

/* Image-to-video (LTX2ImageToVideoPipeline.prepare_latents): p->init_image, re-compressed at
 * p->image_crf, encoded by the video VAE's encoder (c's DIT_SLOT_VAE_ENC, dit_ltx2_vae_enc) into
 * the first latent frame's tokens of the packed video latents (replacing their noise). */
dit_status dit_ltx2_condition_image(const dit_model_rt *rt, dit_components *c, const dit_gen_params *p,
                                    const dit_ltx2_geom *g, float *video, dit_error *err);

/* The video VAE's encoder as the family's lazy DIT_SLOT_VAE_ENC component (ltx2_image.c). */
extern const dit_component_kind dit_ltx2_vae_enc;

/* The decoders' slot object: the video VAE, the audio VAE and the vocoder. */
extern const dit_component_kind dit_ltx2_decoders;

/* Final packed latents to out: frames from the video VAE, sound from the audio VAE and the
 * vocoder; o->video_out as dit_ltx2_opts says. */
dit_status dit_ltx2_decode(const dit_model_rt *rt, dit_components *c, const dit_gen_params *p, const dit_ltx2_geom *g,
                           const float *video, const float *audio, const dit_ltx2_opts *o, dit_clip *out,
                           dit_error *err);

#endif

/* MiniMax-H3's text to video + stereo audio run (diffusers' MiniMaxH3ModularPipeline, workflow t2va): the
 * prompt tokenized verbatim and encoded (Qwen3-VL hidden_states[50]), the packed [text | audio | video]
 * layout, noise from one torch CPU generator (video latents first, then the audio rows), the two schedules
 * folded into the transformer's modulation once, one forward per step (no guidance: the model is distilled),
 * each modality stepped down its own schedule, then both decoded (the video VAE tiled as the pipeline does,
 * pixels mapped from ImageNet normalization to [0, 1]; the audio VAE per stereo channel). The folder's
 * components are loaded by dit_h3_parts_load. The registry family and the CLI are not built yet. */
#ifndef DIT_PIPELINE_MINIMAX_H3_PIPELINE_H
#define DIT_PIPELINE_MINIMAX_H3_PIPELINE_H

#include <stdint.h>

#include "backend/backend.h"
#include "core/error.h"
#include "models/minimax_h3.h"
#include "models/qwen3.h"
#include "models/vae_minimax_h3.h"
#include "models/vae_minimax_h3_audio.h"
#include "pipeline/model_rt.h"
#include "text/tokenizer.h"

#define DIT_H3_TEXT_LAYER 50 /* the conditioning: hidden_states[50] (the pipeline refuses fewer than 51 layers) */
#define DIT_H3_FPS 24
#define DIT_H3_AUDIO_LATENTS_PER_SECOND 40
#define DIT_H3_AUDIO_CHANNELS 2

typedef struct dit_h3_parts {
  dit_tokenizer *tok;
  dit_qwen3 *te;
  dit_h3 *tr;
  dit_h3_vae *vae;
  dit_h3_audio *audio;
  double video_shift, audio_shift; /* the two schedulers' shift */
} dit_h3_parts;

/* The folder's components (tokenizer/, text_encoder/, transformer/, vae/, audio_vae/, scheduler/,
 * audio_scheduler/) on be. On failure nothing stays loaded. */
dit_status dit_h3_parts_load(dit_backend *be, const char *dir, dit_h3_parts *p, dit_error *err);
void dit_h3_parts_free(dit_h3_parts *p);

typedef struct dit_h3_request {
  const char *prompt;
  int height, width;  /* pixels: multiples of the VAE's compression times the transformer's patch */
  int frames;         /* 17 n + 5 (other counts are refused, naming the nearest) */
  int steps;          /* num_inference_steps as diffusers counts it: sigmas, the terminal 0 included */
  uint64_t seed;
  /* optional (NULL: none): the runtime (its log) and the caller's stage / step callbacks (a step's latents
   * are not shown: on_step gets none) */
  const dit_model_rt *rt;
  const dit_gen_params *progress;
} dit_h3_request;

typedef struct dit_h3_result {
  int frames, height, width;
  float *video;       /* [frames, height, width, 3] in [0, 1] */
  int channels, sample_rate;
  int64_t samples;
  float *audio;       /* [channels, samples] in [-1, 1] */
  float *latents;       /* the denoised video latents [C, T, h, w] (before the VAE's denormalization) */
  float *audio_latents; /* the denoised audio latents [channels, C, Na] */
  double t[5];          /* dit_time_now() at the start, after the text, after the fold and noise, after the
                           steps, after the decode (pipeline_common.h's dit_fill_stats reads them) */
  int steps;            /* model evaluations run */
} dit_h3_result;

dit_status dit_h3_generate(dit_backend *be, const dit_h3_parts *p, const dit_h3_request *r, dit_h3_result *out,
                           dit_error *err);
void dit_h3_result_free(dit_h3_result *r);

#endif

/* MiniMax-H3's text to video + stereo audio run (diffusers' MiniMaxH3ModularPipeline, workflow t2va): the
 * prompt tokenized verbatim and encoded (Qwen3-VL hidden_states[50]), the packed [text | audio | video]
 * layout, noise from one torch CPU generator (video latents first, then the audio rows), the two schedules
 * folded into the transformer's modulation once, one forward per step (no guidance: the model is distilled),
 * each modality stepped down its own schedule, then both decoded (the video VAE tiled as the pipeline does,
 * pixels mapped from ImageNet normalization to [0, 1]; the audio VAE per stereo channel). The components
 * are all loaded by dit_h3_parts_load, or taken stage by stage from the registry family's slots
 * (dit_family_minimax_h3, family.h), which load and release them as the runtime's keep bits say. */
#ifndef DIT_PIPELINE_MINIMAX_H3_PIPELINE_H
#define DIT_PIPELINE_MINIMAX_H3_PIPELINE_H

#include <stdint.h>

#include "backend/backend.h"
#include "core/error.h"
#include "models/minimax_h3.h"
#include "models/qwen3.h"
#include "models/vae_minimax_h3.h"
#include "models/vae_minimax_h3_audio.h"
#include "pipeline/family_bench.h"
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
  dit_h3_config tc;                /* the components' configs, read before any weights */
  dit_h3_vae_config vc;
  dit_h3_audio_config ac;
  double video_shift, audio_shift; /* the two schedulers' shift */
  /* NULL: the components above are all loaded (dit_h3_parts_load). Else the family's: each stage takes
   * its component from these slots (DIT_SLOT_TEXT: a dit_text_encoder; DIT_SLOT_TRANSFORMER: the dit_h3;
   * DIT_SLOT_VAE: both VAEs), loaded when not resident, and hands it back after (freed unless rt keeps it) */
  const dit_model_rt *rt;
  dit_components *slots;
} dit_h3_parts;

/* The folder's configs and schedulers' shifts into p (no weights; the slots are left as they are). */
dit_status dit_h3_parts_configs(const char *dir, dit_h3_parts *p, dit_error *err);
/* The folder's components (tokenizer/, text_encoder/, transformer/, vae/, audio_vae/, scheduler/,
 * audio_scheduler/) on be, all loaded. On failure nothing stays loaded. */
dit_status dit_h3_parts_load(dit_backend *be, const char *dir, dit_h3_parts *p, dit_error *err);
void dit_h3_parts_free(dit_h3_parts *p);

typedef struct dit_h3_request {
  const char *prompt;
  int height, width;  /* pixels: multiples of the VAE's compression times the transformer's patch */
  int frames;         /* 17 n + 5 (other counts are refused, naming the nearest) */
  int steps;          /* num_inference_steps as diffusers counts it: sigmas, the terminal 0 included */
  uint64_t seed;
  int vae_tile;       /* the video VAE's tiles in latent pixels (overlap a quarter); 0: the pipeline's (256 px) */
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

/* The run of r with p's components into *out, filled afresh (what it held before is not freed: free it with
 * dit_h3_result_free first); on failure *out holds nothing. */
dit_status dit_h3_generate(dit_backend *be, dit_h3_parts *p, const dit_h3_request *r, dit_h3_result *out,
                           dit_error *err);
void dit_h3_result_free(dit_h3_result *r);

/* The family's `ditrun bench` variant (minimax_h3_bench.c). */
extern const dit_bench_variant dit_minimax_h3_bench[];

#endif

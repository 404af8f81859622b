/* MiniMax-H3's audio VAE decoder (diffusers AutoencoderKLMiniMaxH3Audio.decode): dec_in_proj (a 1x1 Conv1d,
 * latent_channels -> latent_dim) then a BigVGAN generator (anti-aliased snake-beta AMP blocks, weight norm,
 * output clamped to [-1, 1]), run by the LTX-2 vocoder's code (models/vocoder_ltx2.h). The pipeline passes
 * the two stereo channels as a batch of two. */
#ifndef DIT_MODELS_VAE_MINIMAX_H3_AUDIO_H
#define DIT_MODELS_VAE_MINIMAX_H3_AUDIO_H

#include <stdint.h>

#include "backend/backend.h"
#include "core/cost.h"
#include "core/error.h"

#define DIT_H3_AUDIO_MAX_CHANNELS 256

typedef struct dit_h3_audio_config {
  int latent_channels, latent_dim, sample_rate, hop; /* hop: the product of the decoder rates */
  float latents_mean[DIT_H3_AUDIO_MAX_CHANNELS], latents_std[DIT_H3_AUDIO_MAX_CHANNELS];
} dit_h3_audio_config;

typedef struct dit_h3_audio dit_h3_audio;

/* The audio_vae folder's config.json alone. */
dit_status dit_h3_audio_read_config(const char *dir, dit_h3_audio_config *c, dit_error *err);
dit_status dit_h3_audio_load(dit_backend *be, const char *dir, dit_h3_audio **out, dit_error *err);
/* What dit_h3_audio_decode of B channels of T latents costs (core/cost.h): the projection and vocoder FLOPs;
 * the mel frames (host and backend), the waveform and the vocoder's arena (kept with the model). */
void dit_h3_audio_cost(const dit_h3_audio *a, int B, int T, dit_cost *out);
void dit_h3_audio_free(dit_h3_audio *a);
const dit_h3_audio_config *dit_h3_audio_get_config(const dit_h3_audio *a);

/* Samples per channel the decode of T latents gives (T * hop). */
int64_t dit_h3_audio_samples(const dit_h3_audio *a, int T);
/* decode: z [B, latent_channels, T] (host, denormalized) into out [B, T * hop] (host), in [-1, 1]. */
dit_status dit_h3_audio_decode(dit_h3_audio *a, int B, int T, const float *z, float *out, dit_error *err);

#endif

/* The LTX-2 audio VAE's decoder (diffusers' AutoencoderKLLTX2Audio, decode path): latents
 * [B, C, L, M] (C latent channels, L latent frames, M latent mel bins) to a mel spectrogram
 * [B, output_channels, T, mel_bins]. conv_in, a mid block of two resnets, then per level
 * (deepest first) num_res_blocks + 1 resnets and, above level 0, a 2x nearest upsample with
 * a conv whose first output row is dropped; PixelNorm + SiLU, conv_out, and the crop (or zero
 * pad) to T = max(4 L - 3, 1) frames and mel_bins bins. Every convolution is causal along
 * time (the height axis): k - 1 zero rows in front, (k - 1) / 2 zero columns on each side.
 * A resnet is PixelNorm, SiLU, conv1, PixelNorm, SiLU, conv2, plus its input (through a 1x1
 * nin_shortcut when the channels change). Also the pipeline's latent denormalization.
 *
 * Tensors live in the backend's memory; activations are F32. Configs with another norm_type
 * (group), causality_axis, mid-block or level attention are refused (DIT_ERR_UNSUPPORTED
 * naming the field); the LTX-2 and LTX-2.3 checkpoints use none of them. */
#ifndef DIT_MODELS_VAE_LTX2_AUDIO_H
#define DIT_MODELS_VAE_LTX2_AUDIO_H

#include <stdbool.h>

#include "backend/backend.h"
#include "core/cost.h"
#include "core/error.h"
#include "core/tensor.h"

#define DIT_VAE_LTX2_AUDIO_MAX_LEVELS 8    /* len(ch_mult) */
#define DIT_VAE_LTX2_AUDIO_MAX_STATS 4096  /* base_channels: the latent statistics' length */

typedef struct dit_vae_ltx2_audio_config {
  int latent_channels; /* decoder input channels C (8 in LTX-2) */
  int output_channels; /* spectrogram channels (2: stereo) */
  int base_channels;   /* 128; also the length of latents_mean / latents_std */
  int n_levels;        /* len(ch_mult) */
  int ch_mult[DIT_VAE_LTX2_AUDIO_MAX_LEVELS];
  int num_res_blocks;  /* a level runs num_res_blocks + 1 resnets */
  int mel_bins;        /* output mel bins (64); 0 when the config has null: the latents' own M */
  int sample_rate;     /* 16000 */
  int mel_hop_length;  /* 160 */
  bool is_causal;
  int temporal_ratio;  /* temporal_compression_ratio: 4, as diffusers hard-codes it */
  int mel_ratio;       /* mel_compression_ratio: 4, likewise */
  bool has_latents_stats; /* latents_mean / latents_std were in the checkpoint */
  float latents_mean[DIT_VAE_LTX2_AUDIO_MAX_STATS]; /* [base_channels] (0 when absent) */
  float latents_std[DIT_VAE_LTX2_AUDIO_MAX_STATS];  /* [base_channels] (1 when absent) */
} dit_vae_ltx2_audio_config;

typedef struct dit_vae_ltx2_audio dit_vae_ltx2_audio;

/* Loads folder/config.json (class AutoencoderKLLTX2Audio) and the decoder's weights (stored
 * dtype kept; encoder.* is not bound) with latents_mean / latents_std. Errors name the config
 * field or the tensor. On failure *out is NULL. */
dit_status dit_vae_ltx2_audio_load(dit_backend *be, const char *folder, dit_vae_ltx2_audio **out, dit_error *err);
void dit_vae_ltx2_audio_free(dit_vae_ltx2_audio *m);
const dit_vae_ltx2_audio_config *dit_vae_ltx2_audio_get_config(const dit_vae_ltx2_audio *m);

/* The spectrogram's frames and mel bins for L x M latents: T = max(L * 4 - 3, 1), Mo =
 * mel_bins (M when the config's is null). */
void dit_vae_ltx2_audio_output_size(const dit_vae_ltx2_audio *m, int L, int M, int *T, int *Mo);

/* In place, latents [B, latent_channels, L, M] F32 (contiguous, backend memory), the
 * pipeline's denormalization of packed latents [B, L, C * M] seen unpacked: element (c, l, m)
 * becomes x * latents_std[c M + m] + latents_mean[c M + m], run as x * (1 + s) + mean with
 * s = std - 1 (the same floats whenever std - 1 is exact, as for bf16 statistics or std in
 * [0.5, 2]). DIT_ERR_INVALID_ARG unless C * M equals the statistics' length (base_channels). */
dit_status dit_vae_ltx2_audio_denormalize(dit_vae_ltx2_audio *m, dit_tensor *latents, dit_error *err);

/* audio_vae.decode(latents): latents [B, latent_channels, L, M] F32 (contiguous, backend
 * memory, already denormalized) into out [B, output_channels, T, Mo] F32 (contiguous, backend
 * memory, caller-allocated; sizes from dit_vae_ltx2_audio_output_size). Items are decoded one
 * after another; the activation buffers stay allocated for the next decode that fits
 * (dit_vae_ltx2_audio_free releases them). DIT_ERR_INVALID_ARG for NULL or mis-shaped
 * tensors. */
dit_status dit_vae_ltx2_audio_decode(dit_vae_ltx2_audio *m, const dit_tensor *latents, dit_tensor *out,
                                     dit_error *err);

/* One item of L x M latents (core/cost.h): the activation slots its decode allocates (kept with
 * the VAE) and its convolutions' FLOPs (the norms and copies not counted). */
dit_status dit_vae_ltx2_audio_cost(const dit_vae_ltx2_audio *m, int L, int M, dit_cost *out, dit_error *err);

#endif

/* The LTX-2 video VAE (diffusers' AutoencoderKLLTX2Video). Its decoder (untiled or tiled):
 * conv_in, a mid block of resnets, up blocks (an optional channel-changing resnet, a 3-D
 * pixel-shuffle upsampler with an optional residual, resnets), PerChannelRMSNorm + SiLU,
 * conv_out and the unpatchify of patch_size x patch_size pixels out of the channels. Every
 * convolution is 3-D with replicate padding in time (causal: kt - 1 copies of the first
 * frame in front; otherwise (kt - 1) / 2 copies of the first frame in front and of the last
 * behind) and zero or reflect padding in space. Also the pipeline's latent denormalization
 * (latents * latents_std / scaling_factor + latents_mean, per channel).
 *
 * Tensors live in the backend's memory; activations are F32 (a GPU's convolutions round
 * their inputs to the weights' bf16, as its conv2d does). Configs with timestep
 * conditioning, noise injection, patch_size_t != 1 or another padding mode are refused
 * (DIT_ERR_UNSUPPORTED naming the field).
 *
 * Its encoder (dit_vae_ltx2_enc: a separate object, loaded only by those who encode): the
 * patchify of patch_size x patch_size pixels into the channels, conv_in, down blocks (resnets,
 * then a downsampler: a conv whose output and whose input, both folded space-to-depth by the
 * block's strides, are added, the input's channels averaged in groups), a mid block,
 * PerChannelRMSNorm + SiLU and conv_out; the posterior's mode (its mean) is what the pipelines
 * take. */
#ifndef DIT_MODELS_VAE_LTX2_H
#define DIT_MODELS_VAE_LTX2_H

#include <stdbool.h>

#include "backend/backend.h"
#include "core/cost.h"
#include "core/error.h"
#include "core/tensor.h"

#define DIT_VAE_LTX2_MAX_UP 8       /* up blocks */
#define DIT_VAE_LTX2_MAX_LATENT 1024 /* latent channels */

typedef struct dit_vae_ltx2_config {
  int latent_channels; /* decoder input channels (128 in LTX-2) */
  int out_channels;    /* image channels (3) */
  int patch_size;      /* spatial unpatchify factor (4) */
  int patch_size_t;    /* temporal one (1: the only one supported) */
  int n_up;            /* up blocks: len(decoder_block_out_channels) */
  /* the decoder's lists as the config gives them (diffusers reverses all but upsample_type) */
  int block_out[DIT_VAE_LTX2_MAX_UP];         /* decoder_block_out_channels */
  int layers[DIT_VAE_LTX2_MAX_UP + 1];        /* decoder_layers_per_block (n_up + 1) */
  bool scaling[DIT_VAE_LTX2_MAX_UP];          /* decoder_spatio_temporal_scaling */
  int up_stride[DIT_VAE_LTX2_MAX_UP][3];      /* upsample_type as (t, h, w) strides */
  bool up_residual[DIT_VAE_LTX2_MAX_UP];      /* upsample_residual */
  int up_factor[DIT_VAE_LTX2_MAX_UP];         /* upsample_factor */
  bool causal;                                /* decoder_causal */
  bool reflect;                               /* decoder_spatial_padding_mode "reflect" (else "zeros") */
  float resnet_eps;                           /* resnet_norm_eps: the shortcut's LayerNorm */
  float scaling_factor;                       /* pipeline: latents * std / scaling_factor + mean */
  int spatial_ratio, temporal_ratio;          /* spatial / temporal_compression_ratio (or derived) */
  bool has_latents_stats;                     /* latents_mean / latents_std were in the checkpoint */
  float latents_mean[DIT_VAE_LTX2_MAX_LATENT]; /* [latent_channels] (0 when absent) */
  float latents_std[DIT_VAE_LTX2_MAX_LATENT];  /* [latent_channels] (1 when absent) */
} dit_vae_ltx2_config;

typedef struct dit_vae_ltx2 dit_vae_ltx2;

/* Loads folder/config.json (class AutoencoderKLLTX2Video) and the decoder's weights (stored
 * dtype kept; encoder.* is not bound) with latents_mean / latents_std. Errors name the config
 * field or the tensor. On failure *out is NULL. */
dit_status dit_vae_ltx2_load(dit_backend *be, const char *folder, dit_vae_ltx2 **out, dit_error *err);
void dit_vae_ltx2_free(dit_vae_ltx2 *m);
const dit_vae_ltx2_config *dit_vae_ltx2_get_config(const dit_vae_ltx2 *m);

/* The decoded video's frames, height and width for F x H x W latents (every upsampler:
 * frames f * st - (st - 1), sides times their strides; then the patch size). */
void dit_vae_ltx2_output_size(const dit_vae_ltx2 *m, int F, int H, int W, int *T, int *Ho, int *Wo);

/* In place, latents [B, latent_channels, F, H, W] F32 (contiguous, backend memory):
 * latents * latents_std / scaling_factor + latents_mean per channel, run as latents * (1 + s)
 * + mean with s = std / scaling_factor - 1 (the same floats whenever std / scaling_factor - 1
 * is exact, as for scaling_factor 1 and std in [0.5, 2]). */
dit_status dit_vae_ltx2_denormalize(dit_vae_ltx2 *m, dit_tensor *latents, dit_error *err);

/* vae.decode(latents): latents [B, latent_channels, F, H, W] F32 (contiguous, backend memory,
 * already denormalized) into out [B, out_channels, T, Ho, Wo] F32 (contiguous, backend memory,
 * caller-allocated; sizes from dit_vae_ltx2_output_size), in model space (about [-1, 1], not
 * clamped). Items are decoded one after another; the activation buffers stay allocated for
 * the next decode that fits (dit_vae_ltx2_free releases them). DIT_ERR_INVALID_ARG for NULL
 * or mis-shaped tensors. */
dit_status dit_vae_ltx2_decode(dit_vae_ltx2 *m, const dit_tensor *latents, dit_tensor *out, dit_error *err);

/* Tiling of a decode, as diffusers' enable_tiling (spatial) and use_framewise_decoding
 * (temporal) set it; sizes in decoded pixels and frames (diffusers' tile_sample_min_* and
 * tile_sample_stride_*), multiples of the VAE's compression, each stride at most its tile. */
typedef struct dit_vae_ltx2_tiling {
  bool spatial, temporal;
  int min_h, min_w, stride_h, stride_w;
  int min_frames, stride_frames;
} dit_vae_ltx2_tiling;
/* diffusers' defaults: 512 x 512 tiles every 448, 16-frame windows every 8; both off. */
void dit_vae_ltx2_tiling_default(dit_vae_ltx2_tiling *t);
/* dit_vae_ltx2_decode with the tiling t: spatial tiles when the latents are wider or taller than
 * a tile, temporal windows when there are more latent frames than a window holds (then each
 * window in spatial tiles where those apply), blended as diffusers blends them; the result
 * differs from the untiled decode near the seams, as diffusers' does. Activation memory is that
 * of one tile; the decoded tiles are blended on the host (one row of tiles and the output of
 * one item there). t NULL or neither on: the untiled decode. */
dit_status dit_vae_ltx2_decode_tiled(dit_vae_ltx2 *m, const dit_tensor *latents, dit_tensor *out,
                                     const dit_vae_ltx2_tiling *t, dit_error *err);
/* The same into host memory, where the tiles are blended: out [B, out_channels, T, Ho, Wo] F32
 * (sizes from dit_vae_ltx2_output_size), no backend buffer of the whole video. t must turn
 * spatial or temporal tiling on. */
dit_status dit_vae_ltx2_decode_tiled_host(dit_vae_ltx2 *m, const dit_tensor *latents, float *out,
                                          const dit_vae_ltx2_tiling *t, dit_error *err);
/* One item of F x H x W latents (core/cost.h): the convolutions' FLOPs and what the decode
 * allocates beyond its input and output: untiled (t NULL or neither on) the activation slots
 * (kept with the VAE); with t, dit_vae_ltx2_decode_tiled_host's: the slots of its largest
 * window, the window's backend copies and the tiles, rows and windows it blends on the host. */
dit_status dit_vae_ltx2_cost(const dit_vae_ltx2 *m, int F, int H, int W, const dit_vae_ltx2_tiling *t, dit_cost *out,
                             dit_error *err);

/* ---- the encoder ---- */

typedef struct dit_vae_ltx2_enc dit_vae_ltx2_enc;

/* Loads folder/config.json (class AutoencoderKLLTX2Video) and the encoder's weights (decoder.*
 * is not bound) with latents_mean / latents_std. Configs with the strided-conv downsampler
 * ("conv"), patch_size_t != 1 or a padding mode other than zeros / reflect are refused
 * (DIT_ERR_UNSUPPORTED naming the field). On failure *out is NULL. */
dit_status dit_vae_ltx2_enc_load(dit_backend *be, const char *folder, dit_vae_ltx2_enc **out, dit_error *err);
void dit_vae_ltx2_enc_free(dit_vae_ltx2_enc *e);
/* latent_channels and in_channels. */
int dit_vae_ltx2_enc_latent_channels(const dit_vae_ltx2_enc *e);
int dit_vae_ltx2_enc_in_channels(const dit_vae_ltx2_enc *e);
/* The latents' frames, height and width for T x H x W pixels; DIT_ERR_INVALID_ARG saying why
 * when the encoder cannot take that size (H, W multiples of the spatial compression, T - 1 of
 * the temporal one). */
dit_status dit_vae_ltx2_enc_latent_size(const dit_vae_ltx2_enc *e, int T, int H, int W, int *F, int *h, int *w,
                                        dit_error *err);
/* vae.encode(x).latent_dist.mode(): x [B, in_channels, T, H, W] F32 (contiguous, backend memory,
 * pixels in [-1, 1]) into mean [B, latent_channels, F, h, w] F32 (contiguous, backend memory,
 * caller-allocated; sizes from dit_vae_ltx2_enc_latent_size). Items one after another; the
 * activation buffers stay allocated for the next call that fits. */
dit_status dit_vae_ltx2_encode(dit_vae_ltx2_enc *e, const dit_tensor *x, dit_tensor *mean, dit_error *err);
/* The pipelines' latent normalization, on host latents [C, n] F32 in place: (x - latents_mean)
 * * scaling_factor / latents_std per channel, in float32 as torch computes it. */
void dit_vae_ltx2_enc_normalize(const dit_vae_ltx2_enc *e, float *x, int64_t n);

#endif

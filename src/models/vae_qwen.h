/* The Qwen-Image VAE's decoder (diffusers' AutoencoderKLQwenImage, Wan-2.1-style, which Krea 2
 * decodes with) for single images: its causal 3-D convolutions see one frame after two frames
 * of zeros, so each is the 2-D convolution of its kernel's last temporal slice, and the first
 * frame skips the temporal upsampling (time_conv). RMS_norm over channels (F.normalize *
 * sqrt(C) * gamma), one single-head attention in the mid block, spatial resamples that halve
 * the channels; the decoder's output is clamped to [-1, 1] as diffusers' _decode does. It runs
 * on the AutoencoderKL decoder's machinery (vae_kl_internal.h): the same blocks with the
 * channel norm, tiling and buffers. */
#ifndef DIT_MODELS_VAE_QWEN_H
#define DIT_MODELS_VAE_QWEN_H

#include "backend/backend.h"
#include "core/cost.h"
#include "core/error.h"

#define DIT_VAE_QWEN_MAX_Z 64

typedef struct dit_vae_qwen_config {
  int base_dim;          /* base_dim (96 in Qwen-Image) */
  int z_dim;             /* latent channels (16) */
  int n_levels;          /* len(dim_mult) */
  int dim_mult[8];
  int num_res_blocks;
  bool temporal_down[8]; /* temperal_downsample (n_levels - 1 of them); reversed for the decoder */
  int out_channels;      /* input_channels (3) */
  float latents_mean[DIT_VAE_QWEN_MAX_Z], latents_std[DIT_VAE_QWEN_MAX_Z];
} dit_vae_qwen_config;

typedef struct dit_vae_qwen dit_vae_qwen;

/* Loads dir/config.json (class AutoencoderKLQwenImage) and the decoder's weights (encoder.*,
 * quant_conv.* and the unused time_conv.* are not bound). Errors name the field or tensor. */
dit_status dit_vae_qwen_load(dit_backend *be, const char *dir, dit_vae_qwen **out, dit_error *err);
void dit_vae_qwen_free(dit_vae_qwen *m);
const dit_vae_qwen_config *dit_vae_qwen_get_config(const dit_vae_qwen *m);
/* Activation dtype: F32 (default; the CPU's), or BF16 on GPU backends. */
dit_status dit_vae_qwen_set_act_dtype(dit_vae_qwen *m, dit_dtype dt, dit_error *err);
/* Decodes z [B, z_dim, h, w] F32 (host; the decoder's input: the pipeline has already applied
 * latents * std + mean) into img [B, out_channels, 8h, 8w] F32 (host) in [-1, 1]. tile as
 * dit_vae_kl_decode (0: whole). DIT_ERR_INVALID_ARG for bad shapes, DIT_ERR_NUMERIC for
 * NaN/Inf in z or the image. */
dit_status dit_vae_qwen_decode(dit_vae_qwen *m, const dit_tensor *z, dit_tensor *img, int tile, dit_error *err);
/* What one decode of an h x w latent in tiles of `tile` latent pixels (0: whole) costs
 * (core/cost.h), as dit_vae_kl_cost_of. Nothing runs. */
dit_status dit_vae_qwen_cost(const dit_vae_qwen *m, int h, int w, int tile, dit_cost *out, dit_error *err);

#endif

/* MiniMax-H3's video VAE decoder (diffusers AutoencoderKLMiniMaxH3): post_quant_conv (a 1x1x1 conv) and
 * the non-causal ViT decoder: every latent voxel one token (proj_in), 4 learned register tokens and one
 * zero token appended, blocks of pre-norm attention (biased q/k/v/out, per-head RMSNorm without weight,
 * rotate-half RoPE over each head's leading channels from (t, h, w) positions in [-1, 1)) and a biased
 * SwiGLU MLP, each branch scaled per channel into the residual; LayerNorm, proj_out into pt x p x p pixel
 * blocks. Its output is ImageNet-normalized RGB (the pipeline maps it to [0, 1]). The whole decode runs it
 * as diffusers' decode does: temporal chunks of 7 latent frames (the encoder's 17-frame clips, cross-faded
 * over 5 frames) and, on by default, spatial tiles of 256 px with overlaps of at least 64 px, blended. */
#ifndef DIT_MODELS_VAE_MINIMAX_H3_H
#define DIT_MODELS_VAE_MINIMAX_H3_H

#include "backend/backend.h"
#include "core/cost.h"
#include "core/error.h"

#define DIT_H3_VAE_MAX_CHANNELS 256

typedef struct dit_h3_vae_config {
  int latent_channels, out_channels;
  int patch, patch_t;       /* spatial and temporal compression (products of the down factors) */
  int layers, heads, head_dim, registers, ffn_mult;
  int clip_length, token_drop; /* the encoder's clips (pixel frames) and the latent frames dropped per clip */
  double rope_theta, rope_dim_ratio;
  float eps;
  float latents_mean[DIT_H3_VAE_MAX_CHANNELS], latents_std[DIT_H3_VAE_MAX_CHANNELS];
} dit_h3_vae_config;

typedef struct dit_h3_vae dit_h3_vae;

/* The vae folder's config.json alone. */
dit_status dit_h3_vae_read_config(const char *dir, dit_h3_vae_config *c, dit_error *err);
/* Loads the vae folder (config.json + weights; the encoder's tensors are left alone). */
dit_status dit_h3_vae_load(dit_backend *be, const char *dir, dit_h3_vae **out, dit_error *err);
void dit_h3_vae_free(dit_h3_vae *v);
const dit_h3_vae_config *dit_h3_vae_get_config(const dit_h3_vae *v);

/* post_quant_conv + the ViT decoder on latents z [C, T, h, w] (host, as the model takes them: already
 * denormalized) into out [out_channels, T * patch_t, h * patch, w * patch] (host), untiled. */
dit_status dit_h3_vae_decode_clip(dit_h3_vae *v, int T, int h, int w, const float *z, float *out, dit_error *err);

/* The decode's tiling: tiles of tile_px pixels overlapping by at least min_overlap_px (the class defaults
 * 256 and 64), or none (tile_px 0: every clip whole). */
typedef struct dit_h3_vae_tiling {
  int tile_px, min_overlap_px;
} dit_h3_vae_tiling;
#define DIT_H3_VAE_TILING_DEFAULT ((dit_h3_vae_tiling){256, 64})

/* One clip as diffusers' _decode_clip: spatially tiled as t says (each tile decoded whole, then blended with
 * the raw tile above and the raw tile to the left over their overlaps, and trimmed), into out as
 * dit_h3_vae_decode_clip's. */
dit_status dit_h3_vae_decode_clip_tiled(dit_h3_vae *v, int T, int h, int w, const float *z, dit_h3_vae_tiling t,
                                        float *out, dit_error *err);
/* What dit_h3_vae_decode costs (core/cost.h) with tiling t: the FLOPs of every clip and tile, and the
 * memory it allocates at its peak (the chunk, clip and overlap frames, the raw tiles, and one clip's
 * buffers); dit_h3_vae_clip_cost: one clip of T x h x w latents alone (its buffers and host tables). */
dit_status dit_h3_vae_cost(const dit_h3_vae *v, int T, int h, int w, dit_h3_vae_tiling t, dit_cost *out,
                           dit_error *err);
void dit_h3_vae_clip_cost(const dit_h3_vae *v, int T, int h, int w, dit_cost *out);
/* Pixel frames the decode of T latent frames gives (17 n + 5 for T = 5 n + 2); 0 for T < 1. */
int dit_h3_vae_frames(const dit_h3_vae *v, int T);
/* diffusers' decode: z [C, T, h, w] (host, denormalized) into out [out_channels, dit_h3_vae_frames(T), h * patch,
 * w * patch] (host) through the temporal chunks, each clip spatially tiled as t says. */
dit_status dit_h3_vae_decode(dit_h3_vae *v, int T, int h, int w, const float *z, dit_h3_vae_tiling t, float *out,
                             dit_error *err);

#endif

/* AutoencoderKL decoder internals shared by vae_kl.c (config, weights, loading) and
 * vae_kl_decode.c (the forward pass, buffer planning and tiling). Not part of the API. */
#ifndef DIT_MODELS_VAE_KL_INTERNAL_H
#define DIT_MODELS_VAE_KL_INTERNAL_H

#include "io/safetensors.h"
#include "models/vae_kl.h"

#define DIT_VAE_KL_EPS 1e-6f /* every GroupNorm of the decoder (resnet_eps, conv_norm_out) */

/* ResnetBlock2D without time embedding: norm1 -> silu -> conv1 -> norm2 -> silu -> conv2,
 * plus the input (through a 1x1 conv_shortcut when cin != cout). */
typedef struct vae_resnet {
  int cin, cout;
  dit_tensor norm1_w, norm1_b; /* [cin] */
  dit_tensor conv1_w, conv1_b; /* [cout, cin, 3, 3], [cout] */
  dit_tensor norm2_w, norm2_b; /* [cout] */
  dit_tensor conv2_w, conv2_b; /* [cout, cout, 3, 3], [cout] */
  dit_tensor short_w, short_b; /* conv_shortcut [cout, cin, 1, 1], [cout]; data NULL when cin == cout */
} vae_resnet;

/* The mid block's Attention: group_norm, one head of dim c over the h*w tokens,
 * residual connection, rescale_output_factor 1. */
typedef struct vae_attn {
  int c;
  dit_tensor gn_w, gn_b; /* group_norm [c] */
  dit_tensor q_w, q_b;   /* to_q [c, c], [c] */
  dit_tensor k_w, k_b;   /* to_k [c, c], [c] */
  dit_tensor v_w, v_b;   /* to_v [c, c], [c] */
  dit_tensor o_w, o_b;   /* to_out.0 [c, c], [c] */
} vae_attn;

/* UpDecoderBlock2D: layers_per_block + 1 resnets, then (all but the last) Upsample2D:
 * nearest 2x and a 3x3 conv. */
typedef struct vae_up_block {
  int cin, cout, n_resnets;
  vae_resnet *resnets;  /* [n_resnets], points into dit_vae_kl.resnet_pool */
  bool upsample;
  dit_tensor up_w, up_b; /* upsamplers.0.conv [cout, cout, 3, 3], [cout] */
} vae_up_block;

struct dit_vae_kl {
  dit_backend *be;
  dit_vae_kl_config cfg;
  dit_dtype adt;         /* activation dtype of the decode: F32 (default), or BF16 on GPU backends */
  dit_weights *weights;  /* the mapped checkpoint (load) or NULL */
  void *owned;           /* the random-weights blob (create_random) or NULL */
  void *wblock;          /* device copy of every weight (non-host backends) or NULL */
  dit_tensor pq_w, pq_b; /* post_quant_conv [L, L, 1, 1], [L]; data NULL when unused */
  dit_tensor conv_in_w, conv_in_b; /* [C_top, L, 3, 3], [C_top] */
  vae_resnet mid_res[2];           /* mid_block.resnets.{0,1}, C_top -> C_top */
  vae_attn mid_attn;               /* mid_block.attentions.0 (when mid_block_add_attention) */
  vae_up_block up[DIT_VAE_KL_MAX_LEVELS]; /* up_blocks.i, i = 0 at the latent resolution */
  vae_resnet *resnet_pool;
  dit_tensor norm_out_w, norm_out_b; /* conv_norm_out [C0] */
  dit_tensor conv_out_w, conv_out_b; /* [out, C0, 3, 3], [out] */
};

/* dit_vae_kl_load for any class of the AutoencoderKL family that shares its decoder
 * (config.json's _class_name must be `cls`, e.g. "AutoencoderKLFlux2"; its
 * decoder_block_out_channels, when set, replaces block_out_channels). Stored tensors
 * starting with one of extra_ignore (NULL-terminated, at most 13, may be NULL) are left
 * for the caller, who can read them through m->weights. */
dit_status vae_kl_load_class(dit_backend *be, const char *component_dir, const char *cls,
                             const char *const *extra_ignore, dit_vae_kl **out, dit_error *err);

/* The LDM ("CompVis") naming of a single checkpoint file, vae_kl_ldm.c. */
/* true when w names its tensors the LDM way (decoder.mid.block_1.norm1.weight exists). */
bool vae_kl_ldm_detect(const dit_weights *w);
/* Renames every entry of t (built with the diffusers names for a decoder of n_levels) to
 * its LDM name; the attention's q/k/v/proj_out weights are then expected as the 1x1
 * convolutions [C, C, 1, 1] LDM stores, unless w holds them as [C, C]. */
dit_status vae_kl_ldm_rename(dit_wtable *t, const dit_weights *w, int n_levels, dit_error *err);
/* After binding: the attention weights bound as [C, C, 1, 1] are described as [C, C]
 * (the same data), in their destinations and in t. */
void vae_kl_ldm_flatten(dit_wtable *t);

#endif

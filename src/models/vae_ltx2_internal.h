/* The LTX-2 video VAE decoder's internals shared by vae_ltx2.c (config, weights, API) and
 * vae_ltx2_decode.c (the forward pass). Not part of the API. */
#ifndef DIT_MODELS_VAE_LTX2_INTERNAL_H
#define DIT_MODELS_VAE_LTX2_INTERNAL_H

#include "io/safetensors.h"
#include "models/vae_ltx2.h"

#define LTX2_VAE_NORM_EPS 1e-8f /* PerChannelRMSNorm */

/* A convolution as stored: w [co, ci, k, k, k], b [co]. causal_pad: the decoder's causal conv
 * (replicate padding in time, the config's spatial padding); otherwise a plain Conv3d without
 * padding (the shortcut's 1x1x1). */
typedef struct ltx2_conv {
  int ci, co, k;
  dit_tensor w, b;
} ltx2_conv;

/* LTX2VideoResnetBlock3d: norm1, SiLU, conv1, norm2, SiLU, conv2, plus the input (through a
 * LayerNorm over the channels and a 1x1x1 conv_shortcut when cin != cout). */
typedef struct ltx2_resnet {
  int cin, cout;
  ltx2_conv conv1, conv2;
  dit_tensor norm3_w, norm3_b; /* [cin]; data NULL when cin == cout */
  ltx2_conv shortcut;          /* [cout, cin, 1, 1, 1] */
} ltx2_resnet;

/* LTX2VideoUpBlock3d: conv_in (a resnet, when the block's channels change), the upsampler
 * (conv then 3-D pixel shuffle of strides st, dropping the first st[0] - 1 frames; residual:
 * plus the input shuffled alike, its channels repeated), the resnets. */
typedef struct ltx2_up_block {
  bool has_conv_in;
  ltx2_resnet conv_in;
  bool has_up, residual;
  int st[3], factor;
  ltx2_conv up; /* [cin * st0 st1 st2 / factor, cin, 3, 3, 3] */
  int n_res;
  ltx2_resnet *res; /* into dit_vae_ltx2.pool */
} ltx2_up_block;

struct dit_vae_ltx2 {
  dit_backend *be;
  dit_vae_ltx2_config cfg;
  dit_weights *weights; /* the mapped checkpoint (CPU) */
  void *wblock;         /* every weight on a device backend */
  void *stats;          /* backend memory: [C] scale std / sf - 1, then [C] shift mean (F32) */
  ltx2_conv conv_in;
  int n_mid;
  ltx2_resnet *mid; /* into pool */
  ltx2_up_block up[DIT_VAE_LTX2_MAX_UP];
  ltx2_conv conv_out;
  ltx2_resnet *pool;
  dit_tensor mean_t, std_t; /* the stored latents_mean / latents_std (host, while loading) */
  void *act;                /* activation buffers (backend memory), act_bytes of them */
  size_t act_bytes;
};

/* Channels out of the mid block and of up block i (i < n_up), as the decoder computes them. */
int ltx2_vae_mid_channels(const dit_vae_ltx2_config *c);
int ltx2_vae_up_out_channels(const dit_vae_ltx2_config *c, int i);

/* One item's decode: x [1, C, F, H, W] (backend memory) into out [1, oc, T, Ho, Wo]. */
/* dit_vae_ltx2_decode's checks of m and latents (ltx2_vae_check_latents), and of out too
 * (shapes, dtype, memory). */
dit_status ltx2_vae_check_latents(const dit_vae_ltx2 *m, const dit_tensor *latents, dit_error *err);
dit_status ltx2_vae_check_decode_io(const dit_vae_ltx2 *m, const dit_tensor *latents, const dit_tensor *out,
                                    dit_error *err);
dit_status ltx2_vae_decode_item(dit_vae_ltx2 *m, const dit_tensor *x, dit_tensor *out, dit_error *err);

#endif

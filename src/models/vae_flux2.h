/* FLUX.2 VAE decoding (diffusers AutoencoderKLFlux2): the AutoencoderKL decoder of
 * vae_kl (shared, not copied) plus what Flux2KleinPipeline does to its packed latents
 * before vae.decode: the batch-norm de-normalisation with the VAE's running statistics
 * (x * sqrt(running_var + batch_norm_eps) + running_mean, per packed channel) and the
 * unpatchify of 2x2 patches from channels back to space. Only the decoder is built. */
#ifndef DIT_MODELS_VAE_FLUX2_H
#define DIT_MODELS_VAE_FLUX2_H

#include "backend/backend.h"
#include "core/error.h"
#include "core/tensor.h"

typedef struct dit_vae_flux2 dit_vae_flux2;

/* Loads component_dir (config.json with _class_name AutoencoderKLFlux2, its weights:
 * decoder.*, post_quant_conv.*, bn.running_mean / bn.running_var; encoder.*,
 * quant_conv.* and bn.num_batches_tracked are ignored). Errors name the config field
 * or tensor. On failure *out is NULL. */
dit_status dit_vae_flux2_load(dit_backend *be, const char *component_dir, dit_vae_flux2 **out, dit_error *err);
/* Activation dtype of the decoder (see dit_vae_kl_set_act_dtype). */
dit_status dit_vae_flux2_set_act_dtype(dit_vae_flux2 *m, dit_dtype dt, dit_error *err);
void dit_vae_flux2_free(dit_vae_flux2 *m);

/* latent_channels L of the decoder; packed channels L * ph * pw (the transformer's
 * in_channels); the decoder's upscale factor f = 2^(levels - 1). */
int dit_vae_flux2_latent_channels(const dit_vae_flux2 *m);
int dit_vae_flux2_packed_channels(const dit_vae_flux2 *m);
int dit_vae_flux2_patch_h(const dit_vae_flux2 *m);
int dit_vae_flux2_patch_w(const dit_vae_flux2 *m);
int dit_vae_flux2_upscale(const dit_vae_flux2 *m);

/* vae.decode(z): z [B, L, h, w] F32 host -> img [B, 3, f*h, f*w] (post_quant_conv and
 * the decoder; no statistics applied). tile as dit_vae_kl_decode. */
dit_status dit_vae_flux2_decode(dit_vae_flux2 *m, const dit_tensor *z, dit_tensor *img, int tile, dit_error *err);

/* The pipeline's tail on packed tokens: tokens [B, h*w, L*ph*pw] F32 host, token r at
 * latent position (r / w, r % w) (the order of the pipeline's latent ids, so the
 * scatter by ids is this reshape), are de-normalised with the batch-norm statistics,
 * unpatchified to [B, L, h*ph, w*pw] and decoded into img [B, 3, f*h*ph, f*w*pw].
 * DIT_ERR_INVALID_ARG for bad shapes, DIT_ERR_NUMERIC for NaN/Inf. */
dit_status dit_vae_flux2_decode_packed(dit_vae_flux2 *m, const dit_tensor *tokens, int h, int w, dit_tensor *img,
                                       int tile, dit_error *err);

#endif

/* FLUX.2 VAE decoding (diffusers AutoencoderKLFlux2): the AutoencoderKL decoder of
 * vae_kl (shared, not copied) plus what Flux2KleinPipeline does to its packed latents
 * before vae.decode: the batch-norm de-normalisation with the VAE's running statistics
 * (x * sqrt(running_var + batch_norm_eps) + running_mean, per packed channel) and the
 * unpatchify of 2x2 patches from channels back to space; and the other way for reference
 * images (Flux2KleinPipeline._encode_vae_image): the encoder's mode, patchified and
 * normalised with the same statistics. */
#ifndef DIT_MODELS_VAE_FLUX2_H
#define DIT_MODELS_VAE_FLUX2_H

#include "backend/backend.h"
#include "core/cost.h"
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
/* What one dit_vae_flux2_decode_packed of an h x w token grid in tiles of `tile` latent pixels
 * costs (core/cost.h): the decoder's run and its unpatchified latents. Nothing runs. */
dit_status dit_vae_flux2_cost(const dit_vae_flux2 *m, int h, int w, int tile, dit_cost *out, dit_error *err);

/* The encoder (loaded on its own, only when images are encoded): encoder.*, quant_conv.* and
 * the bn statistics of component_dir. */
typedef struct dit_vae_flux2_enc dit_vae_flux2_enc;
dit_status dit_vae_flux2_enc_load(dit_backend *be, const char *component_dir, dit_vae_flux2_enc **out, dit_error *err);
dit_status dit_vae_flux2_enc_set_act_dtype(dit_vae_flux2_enc *m, dit_dtype dt, dit_error *err);
void dit_vae_flux2_enc_free(dit_vae_flux2_enc *m);
/* The encoder's downscale factor f (the tokens' grid is H / (2 f) x W / (2 f)). */
int dit_vae_flux2_enc_downscale(const dit_vae_flux2_enc *m);
int dit_vae_flux2_enc_packed_channels(const dit_vae_flux2_enc *m);
/* pixels [3, H, W] (host F32, [-1, 1]; H, W multiples of 2 f) -> the latent distribution's
 * mode -> 2x2 patchify -> (x - running_mean) / sqrt(running_var + eps) -> tokens
 * [(H/2f) * (W/2f), 4L] (host, caller-allocated; row-major over the token grid). tile as
 * dit_vae_kl_encode. */
dit_status dit_vae_flux2_encode_packed(dit_vae_flux2_enc *m, const float *pixels, int H, int W, int tile,
                                       float *tokens, dit_error *err);

#endif

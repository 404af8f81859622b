/* The VAE stages of the pipelines whose VAE is diffusers' AutoencoderKL with scaling and
 * shift factors (Z-Image, FLUX.1): the component kinds of its decoder (DIT_SLOT_VAE) and
 * encoder (DIT_SLOT_VAE_ENC, loaded on first use) from the "vae" folder or file (bf16
 * activations on a GPU), latents -> 8-bit image, and pixels -> latents. */
#ifndef DIT_PIPELINE_KL_VAE_H
#define DIT_PIPELINE_KL_VAE_H

#include "core/cost.h"
#include "pipeline/model_rt.h"
#include "pipeline/rng_torch.h"

extern const dit_component_kind *const dit_vae_kl_component;
extern const dit_component_kind *const dit_vae_kl_enc_component;

/* pixels [3, H, W] (model space, [-1, 1]) -> the encoder's latent distribution -> a sample
 * drawn with g (torch.randn of the latent's shape, as retrieve_latents(sample_mode="sample"))
 * or its mode when g is NULL -> (z - shift_factor) * scaling_factor into *latents (malloc'd,
 * [*C, H/f, W/f], *C the VAE's latent channels). Loads the encoder of slot DIT_SLOT_VAE_ENC
 * when it is not resident and releases it after unless kept. */
dit_status dit_kl_encode_stage(const dit_model_rt *rt, dit_components *c, const float *pixels, int H, int W,
                               dit_torch_rng *g, int vae_tile, float **latents, int *C, dit_error *err);

/* latents [C, h, w] (unscaled model space) -> latents / scaling_factor + shift_factor ->
 * the decoder -> out (8h x 8w RGB). Loads the VAE of slot DIT_SLOT_VAE when it is not
 * resident and releases it after unless kept. */
dit_status dit_kl_decode_stage(const dit_model_rt *rt, dit_components *c, const float *latents, int C, int h, int w,
                               int vae_tile, dit_image *out, dit_error *err);
/* What dit_kl_decode_stage costs (core/cost.h): the decoder's run (tiled as vae_tile says) and
 * its host buffers (scaled latents, decoded pixels, the 8-bit image); opens the VAE of slot
 * DIT_SLOT_VAE to ask it, runs nothing, and releases it after unless kept. */
dit_status dit_kl_decode_cost(const dit_model_rt *rt, dit_components *c, int C, int h, int w, int vae_tile,
                              dit_cost *out, dit_error *err);

#endif

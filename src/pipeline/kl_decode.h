/* The decode stage of the pipelines whose VAE is diffusers' AutoencoderKL with scaling and
 * shift factors (Z-Image, FLUX.1): its component kind for DIT_SLOT_VAE (the "vae" folder,
 * bf16 activations on a GPU) and latents -> 8-bit image. */
#ifndef DIT_PIPELINE_KL_DECODE_H
#define DIT_PIPELINE_KL_DECODE_H

#include "pipeline/model_rt.h"

extern const dit_component_kind *const dit_vae_kl_component;

/* latents [C, h, w] (unscaled model space) -> latents / scaling_factor + shift_factor ->
 * the decoder -> out (8h x 8w RGB). Loads the VAE of slot DIT_SLOT_VAE when it is not
 * resident and releases it after unless kept. */
dit_status dit_kl_decode_stage(const dit_model_rt *rt, dit_components *c, const float *latents, int C, int h, int w,
                               int vae_tile, dit_image *out, dit_error *err);

#endif

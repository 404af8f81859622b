/* FLUX.1 transformer (diffusers FluxTransformer2DModel: FLUX.1 [dev], [schnell] and their
 * fine-tunes), run by the FLUX MMDiT forward of models/flux2.h as its DIT_FLUX_1 variant:
 * dit_flux_forward with 3 position ids per token (t, h, w) and the pooled CLIP embedding.
 *
 * Two layouts load:
 *  - a diffusers transformer folder (config.json + diffusion_pytorch_model*.safetensors);
 *  - Black Forest Labs' single file (flux1-dev.safetensors / flux1-schnell.safetensors: the
 *    original key names, fused img/txt qkv, single blocks' linear1 = [q; k; v; mlp_in],
 *    final_layer.adaLN_modulation with shift before scale; also with ComfyUI's
 *    "model.diffusion_model." before every name). Its config is read from the
 *    tensor shapes: head_dim from the q-norm scale, blocks by count, guidance_embeds from
 *    guidance_in.*, joint/pooled widths from txt_in / vector_in, the MLP ratio from
 *    img_mlp.0. The RoPE axes are not in the file: FLUX.1's (16, 56, 56) for head_dim 128,
 *    otherwise they must come from a config.json given beside (cfg_json). The fused
 *    tensors are used as they are (q, k, v are row views of qkv; no copies). */
#ifndef DIT_MODELS_FLUX1_H
#define DIT_MODELS_FLUX1_H

#include <stdbool.h>
#include <stdint.h>

#include "models/flux2.h"

#define DIT_FLUX1_N_AXES 3

/* path: a transformer folder or a single .safetensors file. cfg_json: NULL, or a
 * FluxTransformer2DModel config.json whose axes_dims_rope a single file uses (its other
 * fields must agree with the tensor shapes). On failure *out is NULL and the message names
 * the field or tensor that was wrong. */
dit_status dit_flux1_load(dit_backend *be, const char *path, const char *cfg_json, dit_flux2 **out, dit_error *err);
/* Sets the loaded weights' LoRAs to these, replacing earlier ones (models/lora.h): diffusers'
 * names, and BFL's original names (kohya, AI-Toolkit) on a model loaded from a folder; on one
 * loaded from a single file, the names of that file. */
dit_status dit_flux1_apply_loras(dit_flux2 *m, const dit_lora *l, int n, dit_error *err);
/* The names `ditrun quantize` writes a FLUX.1 transformer under (BFL's). */
extern const dit_wexport dit_flux1_export;
/* FLUX.1 [dev] (guidance embedder) or [schnell] transformer config: 19 double + 38 single
 * blocks, 24 heads of 128, in_channels 64, joint_attention_dim 4096, pooled 768. */
void dit_flux1_config(dit_flux2_config *c, bool dev);
/* Random weights of dtype wdt at config c (for benchmarks at the real geometry). */
dit_status dit_flux1_create_random(dit_backend *be, const dit_flux2_config *c, dit_dtype wdt, uint64_t seed,
                                   dit_flux2 **out, dit_error *err);

#endif

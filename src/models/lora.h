/* LoRA: low-rank updates W += scale * B A merged into a model's weights when it is loaded.
 * A LoRA file is a safetensors file of pairs, in the layouts people have:
 *   diffusers / PEFT   "<module>.lora_A.weight" [r, in], "<module>.lora_B.weight" [out, r]
 *                      (also "<module>.lora.down.weight" / ".lora.up.weight")
 *   kohya / sd-scripts "<module>.lora_down.weight", "<module>.lora_up.weight", "<module>.alpha",
 *                      the module's dots written as '_' after "lora_unet_" / "lora_transformer_"
 * with or without the prefixes "transformer.", "diffusion_model.", "model.diffusion_model.",
 * "base_model.model."; the modules named as the model's table names them (diffusers' names) or
 * as the family's original checkpoint names them (the family's remap: e.g. Z-Image's fused
 * "attention.qkv", whose B is split by rows over to_q, to_k, to_v). The scale of a pair is the
 * user's times alpha / r when the file gives an alpha (kohya, AI-Toolkit), else the user's.
 * A module whose row halves lie in the other order under the original names (FLUX's final
 * modulation: shift then scale there, scale then shift in diffusers) gets B's halves
 * exchanged where the pair's layout and the loaded tensor's differ (the remap's `swapped`
 * list, the table entry's halves_swapped), as diffusers' converters swap lora_B.
 * Every key must be used: keys that match nothing, a rank or shape that does not fit, or a
 * non-finite value are DIT_ERR_FORMAT listing them, and the model is left as it was. */
#ifndef DIT_MODELS_LORA_H
#define DIT_MODELS_LORA_H

#include "backend/backend.h"
#include "ditrun.h"
#include "io/safetensors.h"
#include "models/model_weights.h"

/* Sets the transformer's LoRAs to these n (0: none) in the float (F32/BF16/F16) tensors of t,
 * which are bound: a tensor an earlier set changed starts again from the checkpoint's values
 * (w->files, or w->source opened again once a device copy replaced them), so the weights equal
 * a fresh load with these LoRAs, and one that no LoRA touches now gets them back. On the host
 * the updated tensors get new memory owned by w (the checkpoint's mapping is read-only); on a
 * device they are updated in place (captured graphs keep their addresses). orig (may be NULL)
 * is the family's remap of its original checkpoint names. A LoRA on a quantized tensor is
 * kept apart as the tensor's run-time low-rank term (dit_lowrank: F32 host memory on the CPU,
 * a BF16 device copy on a GPU; new memory at each call, so a model with captured graphs drops
 * them when it had or has such terms). Any failure before the weights are written (a bad file, no match, out
 * of memory) leaves the model as it was. */
dit_status dit_lora_apply(dit_backend *be, const dit_wtable *t, const dit_lora *loras, int n, const dit_wremap *orig,
                          dit_model_weights *w, dit_error *err);
/* True when setting n LoRAs changes nothing: none now and none before (no merged tensor, no
 * low-rank term), so a family need not even list its table. */
static inline bool dit_lora_nothing_to_do(const dit_model_weights *w, int n) {
  return n <= 0 && !w->n_lora_names && !w->n_lowrank_mem;
}

#endif

/* Krea 2's transformer (diffusers Krea2Transformer2DModel): config from config.json, weights
 * bound by checkpoint name, and the forward as two calls, because its text path does not
 * depend on the timestep:
 *   dit_krea2_encode_text: Krea2TextFusion (layerwise blocks attending across the tapped
 *     text-encoder layers of each token, a linear projector over that axis, refiner blocks
 *     over the tokens) and txt_in (RMSNorm, linear, tanh-GELU, linear), once per prompt;
 *   dit_krea2_forward: the single-stream blocks over [text, image] with the shared time
 *     modulation plus each block's table, and the final layer, once per step.
 * Diffusers runs both every step; the results are the same. Attention is grouped-query
 * without repeating K/V heads; the text padding is a key mask (no [L, L] tensor), and the
 * tokens run in the order [image, real text, padded text] (attention does not depend on the
 * order of its keys; RoPE rows travel with their tokens), so that every key mask is a prefix of
 * valid keys, which fused attention kernels take (cuDNN's padding mask). Norms are
 * Krea2RMSNorm (scale 1 + weight), the attention output is gated by sigmoid(to_gate(x)), RoPE
 * is FluxPosEmbed over (t, h, w) position ids. */
#ifndef DIT_MODELS_KREA2_H
#define DIT_MODELS_KREA2_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/cost.h"
#include "core/error.h"

#define DIT_KREA2_N_AXES 3 /* RoPE axes (t, h, w) */

typedef struct dit_krea2_config {
  /* read from config.json (diffusers' names in the comments) */
  int in_channels;      /* in_channels: packed latent channels (16 x 2 x 2) */
  int n_layers;         /* num_layers */
  int head_dim;         /* attention_head_dim */
  int n_heads;          /* num_attention_heads */
  int n_kv_heads;       /* num_key_value_heads (divides n_heads) */
  int ffn_dim;          /* intermediate_size */
  int t_embed_dim;      /* timestep_embed_dim (even) */
  int text_dim;         /* text_hidden_dim */
  int n_taps;           /* num_text_layers: tapped text-encoder states per token */
  int text_heads;       /* text_num_attention_heads (divides text_dim) */
  int text_kv_heads;    /* text_num_key_value_heads */
  int text_ffn_dim;     /* text_intermediate_size */
  int n_layerwise;      /* num_layerwise_text_blocks */
  int n_refiner;        /* num_refiner_text_blocks */
  int axes_dims[DIT_KREA2_N_AXES]; /* axes_dims_rope: each even, sum = head_dim */
  double rope_theta;
  float eps;            /* norm_eps */
  /* derived */
  int dim;              /* n_heads * head_dim */
  int text_head_dim;    /* text_dim / text_heads */
} dit_krea2_config;

typedef struct dit_krea2 dit_krea2;

/* Loads component_dir/config.json and its weights (stored dtype, mapped on the CPU). Errors
 * name the field or tensor; heads not divisible by KV heads and a missing text-fusion layer
 * are among them. On failure *out is NULL. */
dit_status dit_krea2_load(dit_backend *be, const char *component_dir, dit_krea2 **out, dit_error *err);
/* The same from a weights path (a folder or one file, under diffusers' names) and a config.json
 * path. (The original krea-ai checkpoint names, which ComfyUI loads, are not mapped: only the
 * linears' names are known from diffusers' LoRA converter, not the norms' and tables'.) */
dit_status dit_krea2_load_from(dit_backend *be, const char *weights, const char *config_json, dit_krea2 **out,
                               dit_error *err);
/* A folder (as dit_krea2_load) or one weights file with cfg_json, or, when cfg_json is NULL,
 * the released Krea 2 geometry (diffusers' defaults: 28 blocks of 48 heads / 12 KV heads of 128,
 * 12 taps of a 2560-wide text encoder). */
dit_status dit_krea2_load_file(dit_backend *be, const char *path, const char *cfg_json, dit_krea2 **out,
                               dit_error *err);
void dit_krea2_free(dit_krea2 *m);
const dit_krea2_config *dit_krea2_get_config(const dit_krea2 *m);
/* Bytes of the weights held in backend memory (0 when they stay in mapped files), and their
 * parameters. */
size_t dit_krea2_weight_bytes(const dit_krea2 *m);
uint64_t dit_krea2_weight_params(const dit_krea2 *m);
/* Forwards recorded as graphs and forwards replayed from one so far (GPU backends). */
void dit_krea2_graph_counts(const dit_krea2 *m, long *captures, long *launches);
/* The released model's config (diffusers' defaults), derived fields filled. */
void dit_krea2_config_default(dit_krea2_config *c);
/* A model of config c with deterministic random weights of dtype wdt in one backend block
 * (benchmarks at the real geometry without checkpoint files). */
dit_status dit_krea2_create_random(dit_backend *be, const dit_krea2_config *c, dit_dtype wdt, uint64_t seed,
                                   dit_krea2 **out, dit_error *err);

/* Activation dtype: F32 (the default; the CPU's) or BF16 (GPU backends; the F32 inputs and
 * outputs of the calls below are converted on the device). */
dit_status dit_krea2_set_act_dtype(dit_krea2 *m, dit_dtype dt, dit_error *err);

/* Text conditioning of B prompts of L tokens: enc [B, L, n_taps, text_dim] F32 (the tapped
 * hidden states, backend memory), mask host [B * L] (1 = real token) or NULL for all real.
 * fused [B, L, text_dim] F32 (Krea2TextFusion's output) may be NULL; txt [B, L, dim] F32 is
 * what dit_krea2_forward takes. */
dit_status dit_krea2_encode_text(dit_krea2 *m, const dit_tensor *enc, const uint8_t *mask, dit_tensor *fused,
                                 dit_tensor *txt, dit_error *err);

/* FLOPs of one item (2 per MAC): a block's q, gate and out (3 D^2) and k, v (2 D Dkv, Dkv the KV
 * heads' width) and SwiGLU (3 D F) per token of S = L text + Si image, QK^T and PV (2 S^2 D);
 * the text fusion's layerwise blocks over each token's T taps and refiner blocks over the L
 * tokens (the same terms at the text width), txt_in (td D + D^2 per token). Embedders,
 * modulations and the final layer are not counted. */
double dit_krea2_flops(const dit_krea2_config *c, double Si, double L);
/* What the text fusion and one forward of B items of L text and Si image tokens cost
 * (core/cost.h): FLOPs of both and the model's buffer (grown to the larger of their plans)
 * with its host tables. Nothing runs. */
dit_status dit_krea2_cost(const dit_krea2 *m, int64_t B, int64_t L, int64_t Si, dit_cost *out, dit_error *err);

/* One step: x [B, Si, in_channels] F32 packed latents, txt [B, L, dim] F32 from
 * dit_krea2_encode_text with the same mask (host [B * L] or NULL), t host [B] (the
 * pipeline's timestep / 1000), pos host [(L + Si) * 3] (t, h, w) ids of [text, image], shared
 * by the batch; out [B, Si, in_channels] F32. Tensors live in the backend's memory; the
 * activations in one buffer the model keeps and grows (one call at a time per model).
 * DIT_ERR_INVALID_ARG (nothing computed) for bad shapes or non-finite t / ids. */
dit_status dit_krea2_forward(dit_krea2 *m, const dit_tensor *x, const dit_tensor *txt, const uint8_t *mask,
                             const float *t, const float *pos, dit_tensor *out, dit_error *err);

#endif

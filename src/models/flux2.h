/* The FLUX MMDiT: FLUX.2's transformer (diffusers Flux2Transformer2DModel, FLUX.2 [dev] and
 * [klein]) and, as a variant of the same forward, FLUX.1's (FluxTransformer2DModel, loaded
 * by models/flux1.h): config from config.json, weights bound by checkpoint name, and one
 * forward over a batch of packed latent token sequences with their text features, computed
 * as the diffusers modules are (without FLUX.2's reference-image KV cache modes).
 * Double-stream blocks keep separate image/text weights and attend jointly over [text,
 * image]; single-stream blocks project q, k, v and the MLP input from one normed input and
 * run one attention+MLP-out projection over the joint sequence.
 * The variants differ in: modulation (FLUX.2: one per block kind, shared by all blocks;
 * FLUX.1: every block its own AdaLayerNormZero), biases (FLUX.1 only), the MLP (FLUX.2:
 * SwiGLU, ratio 3; FLUX.1: tanh-GELU, ratio 4), the RoPE axes (4 vs 3) and FLUX.1's pooled
 * text embedding added to the time embedding. */
#ifndef DIT_MODELS_FLUX2_H
#define DIT_MODELS_FLUX2_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/cost.h"
#include "core/error.h"
#include "io/safetensors.h"

#define DIT_FLUX2_N_AXES 4 /* RoPE axes over the position ids (t, h, w, l); FLUX.1 has 3 */
#define DIT_FLUX2_MAX_HEAD_DIM 512 /* attention_head_dim accepted */

typedef enum dit_flux_variant { DIT_FLUX_2 = 0, DIT_FLUX_1 } dit_flux_variant;

typedef struct dit_flux2_config {
  dit_flux_variant variant;    /* which transformer (set by the loader, not config.json) */
  int n_axes;                  /* RoPE axes: 4 (FLUX.2), 3 (FLUX.1) */
  int pooled_dim;              /* FLUX.1's pooled_projection_dim (CLIP pooled width); 0 for FLUX.2 */
  /* read from config.json */
  int patch_size;              /* only 1 (the pipeline packs 2x2 patches into channels) */
  int in_channels;             /* packed latent channels (128 for klein, 32 for the fixture) */
  int out_channels;            /* null in the config = in_channels */
  int n_layers;                /* num_layers: double-stream blocks */
  int n_single_layers;         /* num_single_layers */
  int head_dim;                /* attention_head_dim */
  int n_heads;                 /* num_attention_heads */
  int joint_attention_dim;     /* text feature width (3 x text encoder hidden for klein) */
  int t_channels;              /* timestep_guidance_channels (sinusoid width) */
  double mlp_ratio;
  int axes_dims[DIT_FLUX2_N_AXES]; /* axes_dims_rope (n_axes of them), each even, sum = head_dim */
  double rope_theta;
  float eps;                   /* LayerNorm and q/k RMSNorm eps */
  bool guidance_embeds;        /* a guidance embedder exists (FLUX.2 [dev]); false for klein */
  /* derived */
  int dim;                     /* inner_dim = n_heads * head_dim */
  int mlp_hidden;              /* int(dim * mlp_ratio) */
} dit_flux2_config;

typedef struct dit_flux2 dit_flux2;

/* Loads config.json + weights from a transformer component folder. The config is
 * validated first (errors name the field); weights stay mapped in their stored dtype
 * (errors name missing, mis-shaped or unexpected tensors). On failure *out is NULL. */
dit_status dit_flux2_load(dit_backend *be, const char *component_dir, dit_flux2 **out, dit_error *err);
/* Loads a single weights file (safetensors or GGUF; a folder: as dit_flux2_load) under
 * diffusers' names or BFL's (BFL's
 * flux-2-klein-*.safetensors, ComfyUI's with "model.diffusion_model." before every name,
 * GGUF files made from them), with cfg_json's config, or (NULL) the one its shapes imply
 * (head size 128: FLUX.2's published RoPE; others need the config). */
dit_status dit_flux2_load_file(dit_backend *be, const char *path, const char *cfg_json, dit_flux2 **out,
                               dit_error *err);
/* The names `ditrun quantize` writes a FLUX.2 transformer under (BFL's). */
extern const dit_wexport dit_flux2_export;
/* A model with deterministic random weights of dtype wdt (F32/BF16/F16) created directly
 * in the backend's memory (no files), for benchmarks at the real geometry. c's "read
 * from config.json" fields must be set (dit_flux2_config_klein gives klein's); the
 * derived ones are computed and checked like a loaded config's. */
dit_status dit_flux2_create_random(dit_backend *be, const dit_flux2_config *c, dit_dtype wdt, uint64_t seed,
                                   dit_flux2 **out, dit_error *err);
/* FLUX.2 [klein] transformer config: 4B (hidden 3072, 24 heads, 5 double + 20 single
 * blocks, joint_attention_dim 7680) or 9B (hidden 4096, 32 heads, 8 + 24 blocks, 12288);
 * in_channels 128, no guidance embedder. Derived fields left for create to fill. */
void dit_flux2_config_klein(dit_flux2_config *c, bool nine_b);
/* Activation dtype of the forward: F32 (the default; the only one on the CPU backend) or
 * BF16 (GPU backends: activations and GEMM inputs in bf16; RoPE tables and the inputs /
 * outputs of dit_flux2_forward stay F32, converted through staging buffers). */
dit_status dit_flux2_set_act_dtype(dit_flux2 *m, dit_dtype dt, dit_error *err);
/* Bytes of the weights as stored in the backend (0 when they stay in mapped files). */
size_t dit_flux2_weight_bytes(const dit_flux2 *m);
/* Parameters (elements) of its weights. */
uint64_t dit_flux2_weight_params(const dit_flux2 *m);
void dit_flux2_free(dit_flux2 *m);
/* Sets the loaded weights' LoRAs to these, replacing earlier ones (models/lora.h; diffusers' and
 * BFL's names). */
dit_status dit_flux2_apply_loras(dit_flux2 *m, const dit_lora *l, int n, dit_error *err);
/* Forwards recorded as graphs and forwards replayed from one so far (GPU backends). */
void dit_flux2_graph_counts(const dit_flux2 *m, long *captures, long *launches);
const dit_flux2_config *dit_flux2_get_config(const dit_flux2 *m);

/* FLOPs of one item's forward (S = St + Si text + image tokens, D = dim, M = mlp_hidden): a
 * double block does, for each stream's tokens, q, k, v, out (4 D^2 MACs) and the MLP:
 * FLUX.2's SwiGLU in (D -> 2M) and out (M -> D), 3 D M; FLUX.1's GELU MLP, 2 D M. A single
 * block's projections (q, k, v + MLP in; attention + MLP out) come to the same per token.
 * Both attend over the joint sequence: QK^T and PV are 2 S^2 D MACs. So
 *   flops = (n_double + n_single) * (2 (4 D^2 + m D M) S + 4 D S^2), m = 3 or 2.
 * Embedders (x, context, time, pooled text), modulations and the final layer are not
 * counted (< 0.5% at the 1024^2 geometries). */
double dit_flux_flops(const dit_flux2_config *c, double n_img, double n_txt);
/* What one forward of B items of Si image and St text tokens from host tensors costs
 * (core/cost.h): FLOPs and the activation buffer plus host tables it plans. Nothing runs. */
dit_status dit_flux_cost(const dit_flux2 *m, int64_t B, int64_t Si, int64_t St, dit_cost *out, dit_error *err);

/* One forward over a batch of B items sharing one geometry, as
 * Flux2Transformer2DModel.forward(hidden_states, encoder_hidden_states, timestep,
 * img_ids, txt_ids, guidance):
 *   x    [B, Si, in_channels] F32 packed image tokens,
 *   txt  [B, St, joint_attention_dim] F32 text features,
 *   t    host [B]: the value the pipeline passes (its timestep / 1000; the model
 *        multiplies by 1000 in float32 as the reference does),
 *   guidance host [B] or NULL (used only when the config has guidance_embeds; passed
 *        like t, before the * 1000),
 *   img_ids host [Si * 4], txt_ids host [St * 4]: (t, h, w, l) positions, shared by the
 *        batch (the reference takes ids[0] too),
 *   out  [B, Si, out_channels] F32, caller-allocated.
 * Tensors are in the backend's memory (host pointers, DIT_DEV_CPU, on the CPU backend;
 * device pointers and DIT_DEV_CUDA on the GPU, where the call only enqueues work: sync
 * or download before reading out); t, guidance and the ids are host arrays. Activations
 * live in one
 * buffer owned by the model, grown when a call needs more and reused otherwise (one
 * forward at a time per model). DIT_ERR_INVALID_ARG (nothing computed) for bad shapes,
 * dtypes, empty sequences or non-finite t / ids. */
dit_status dit_flux2_forward(dit_flux2 *m, const dit_tensor *x, const dit_tensor *txt, const float *t,
                             const float *guidance, const float *img_ids, const float *txt_ids, dit_tensor *out,
                             dit_error *err);
/* The same for either variant: img_ids / txt_ids hold n_axes values per token, and pooled
 * (host [B * pooled_dim], FLUX.1's pooled text embedding; required when pooled_dim > 0,
 * ignored otherwise). */
dit_status dit_flux_forward(dit_flux2 *m, const dit_tensor *x, const dit_tensor *txt, const float *pooled,
                            const float *t, const float *guidance, const float *img_ids, const float *txt_ids,
                            dit_tensor *out, dit_error *err);

#endif

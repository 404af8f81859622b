/* Z-Image transformer (diffusers ZImageTransformer2DModel, the DiT of Z-Image and
 * Z-Image-Turbo): config from config.json, weights bound by checkpoint name, and one
 * forward over a batch of latents of possibly different sizes, computed exactly as the
 * diffusers module is when called with lists. Only the basic (non-omni) mode with
 * patch size 2 and frame patch size 1 is supported. */
#ifndef DIT_MODELS_ZIMAGE_H
#define DIT_MODELS_ZIMAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/cost.h"
#include "core/error.h"
#include "io/safetensors.h"

#define DIT_ZIMAGE_N_AXES 3   /* RoPE axes: frame/caption position, height, width */
#define DIT_ZIMAGE_SEQ_MULTI 32 /* token streams are padded to multiples of this */

typedef struct dit_zimage_config {
  /* read from config.json */
  int dim;                         /* model width D */
  int n_layers;                    /* main (unified-sequence) layers */
  int n_refiner_layers;            /* noise-refiner layers and context-refiner layers, each */
  int n_heads;                     /* attention heads (diffusers builds full K/V heads) */
  int n_kv_heads;                  /* read and validated; diffusers does not use it */
  int cap_feat_dim;                /* caption feature width (text encoder hidden size) */
  int in_channels;                 /* latent channels C (out_channels = in_channels) */
  int axes_dims[DIT_ZIMAGE_N_AXES]; /* RoPE dims per axis, sum = head_dim, each even */
  int axes_lens[DIT_ZIMAGE_N_AXES]; /* RoPE table length per axis: ids must stay below */
  double rope_theta;
  double t_scale;                  /* the transformer embeds t * t_scale */
  float norm_eps;                  /* RMSNorm eps of the block and caption norms */
  bool qk_norm;                    /* per-head RMSNorm (eps 1e-5) on q and k */
  int patch_size;                  /* all_patch_size, only [2] */
  int f_patch_size;                /* all_f_patch_size, only [1] */
  /* derived */
  int head_dim;                    /* dim / n_heads */
  int ffn_dim;                     /* int(dim / 3 * 8) */
  int adaln_dim;                   /* min(dim, 256): timestep embedding width */
  int t_mid_dim;                   /* 1024: timestep MLP hidden width */
  int t_freq_dim;                  /* 256: sinusoidal timestep features */
  int patch_dim;                   /* f_patch * patch^2 * in_channels */
} dit_zimage_config;

typedef struct dit_zimage dit_zimage;

/* Loads config.json + weights from a transformer component folder (one .safetensors,
 * shards with an index, or the single *.safetensors there). The config is validated
 * before anything is built; weights stay mapped in their stored dtype. On failure *out
 * is NULL and the message names the config field or the tensor that was wrong. */
dit_status dit_zimage_load(dit_backend *be, const char *component_dir, dit_zimage **out, dit_error *err);
/* How ditrun writes a Z-Image transformer to GGUF: the original checkpoint's names (q, k, v
 * fused), as Z-Image's own GGUF files and stable-diffusion.cpp use. */
extern const dit_wexport dit_zimage_export;
/* The same from a weights path (a folder as above, or one file) and a config.json path.
 * Besides diffusers' names, the weights may carry the original checkpoint's (fused
 * attention.qkv, final_layer, x_embedder ...), with or without ComfyUI's
 * "model.diffusion_model." prefix, as Z-Image's single files and GGUF files do. */
dit_status dit_zimage_load_from(dit_backend *be, const char *weights, const char *config_json, dit_zimage **out,
                                dit_error *err);
/* A transformer folder (as dit_zimage_load), or a single weights file with cfg_json (the
 * model folder's transformer/config.json; NULL is refused naming it). */
dit_status dit_zimage_load_file(dit_backend *be, const char *path, const char *cfg_json, dit_zimage **out,
                                dit_error *err);
/* A model with deterministic random weights of dtype wdt (F32/BF16/F16) created directly
 * in the backend's memory (no files), for benchmarks at the real geometry. c's "read
 * from config.json" fields must be set (dit_zimage_config_turbo gives Z-Image-Turbo's);
 * the derived ones are computed and checked like a loaded config's. */
dit_status dit_zimage_create_random(dit_backend *be, const dit_zimage_config *c, dit_dtype wdt, uint64_t seed,
                                    dit_zimage **out, dit_error *err);
/* Z-Image-Turbo's transformer config (diffusers ZImageTransformer2DModel defaults, with
 * the shipped axes_lens [1536, 512, 512]); derived fields left for create to fill. */
void dit_zimage_config_turbo(dit_zimage_config *c);
/* Activation dtype of the forward: F32 (the default; the only one on the CPU backend) or
 * BF16 (GPU backends: activations and GEMM inputs in bf16, fp32 accumulation, RoPE
 * tables and the inputs/outputs of dit_zimage_forward stay F32). */
dit_status dit_zimage_set_act_dtype(dit_zimage *m, dit_dtype dt, dit_error *err);
/* Where a block's to_q, to_k and to_v weights lie back to back in backend memory (weights
 * uploaded to a GPU, or random weights), the forward projects q, k and v with one GEMM
 * (default on; the same products, so the same numbers up to the GEMM's summation order).
 * Off: three GEMMs, as with weights read in place from files. The run option
 * zimage_stack_qkv (DIT_ZIMAGE_STACK_QKV=0, core/options.h) turns it off where models are
 * made: the pipeline and the benchmarks. */
void dit_zimage_set_stacked_qkv(dit_zimage *m, bool on);
/* Bytes of the weights as stored in the backend (0 when they stay in mapped files). */
size_t dit_zimage_weight_bytes(const dit_zimage *m);
/* Parameters (elements) of its weights. */
uint64_t dit_zimage_weight_params(const dit_zimage *m);
void dit_zimage_free(dit_zimage *m);
/* Sets the loaded weights' LoRAs to these, replacing earlier ones (models/lora.h; Z-Image's original
 * names too). */
dit_status dit_zimage_apply_loras(dit_zimage *m, const dit_lora *l, int n, dit_error *err);
const dit_zimage_config *dit_zimage_get_config(const dit_zimage *m);
/* Forwards recorded as graphs and forwards replayed from one so far (GPU backends). */
void dit_zimage_graph_counts(const dit_zimage *m, long *captures, long *launches);

/* FLOPs of one item's forward from its padded token counts: every block does q, k, v, out
 * (4 D^2 MACs per token) and the SwiGLU FFN (3 D Fd), 2 flop per MAC; attention does QK^T
 * and PV (2 S^2 D MACs per stream). Main layers see the unified stream, refiners their own
 * (the same formula as bench/torch_ref.py). Embedders, adaLN and the final layer are not
 * counted (< 0.1%). */
double dit_zimage_flops(const dit_zimage_config *c, double n_img, double n_cap);
/* What one dit_zimage_forward of n items costs (core/cost.h), each a C x h x w latent (one
 * frame) with a caption of cap_len[i] tokens: FLOPs from the padded token counts and the
 * activation buffer plus host tables the forward plans for that geometry (its staging
 * copies on a GPU model). Nothing runs and no weight is read. */
dit_status dit_zimage_cost(const dit_zimage *m, int n, int h, int w, const int *cap_len, dit_cost *out,
                           dit_error *err);

/* One forward over a batch of n items of possibly different sizes, exactly as the
 * diffusers module is called with lists: x[i] latent [C, F, H, W] F32, cap[i] caption
 * features [L_i, cap_feat_dim] F32, t[i] the timestep value passed to the transformer
 * (the pipeline passes (1000 - t)/1000). out[i] [C, F, H, W] F32, caller-allocated (the
 * model's raw output, before the pipeline's negation). Tensors are in the backend's
 * memory (host pointers and device DIT_DEV_CPU on the CPU backend, device pointers and
 * DIT_DEV_CUDA on the GPU); t is a host array. On a GPU backend the call only enqueues
 * work: sync (or download) before reading out. A GPU model also takes host tensors (all
 * of x, cap and out with device DIT_DEV_CPU): they are staged through the model's device
 * buffer and the call returns with out written (for CPU pipelines around a GPU DiT).
 * Activations live in one buffer owned by the model, sized for the call's geometry and
 * reused by later calls that fit (so a model runs one forward at a time).
 * Returns DIT_ERR_INVALID_ARG (nothing written) for bad shapes, dtypes, H/W not
 * multiples of the patch, empty captions or positions beyond axes_lens. */
dit_status dit_zimage_forward(dit_zimage *m, int n, const dit_tensor *x, const dit_tensor *cap, const float *t,
                              dit_tensor *out, dit_error *err);

#endif

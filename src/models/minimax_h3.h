/* MiniMax-H3's transformer (diffusers MiniMaxH3Transformer3DModel): one stack of blocks over one
 * packed sequence that holds the text, the audio and the video rows together. Config from
 * config.json, weights bound by diffusers' names. The forward, as diffusers computes it:
 *   proj_in / audio_proj_in / context_embedder project each modality's rows; the text rows go
 *   through the token refiner (plain pre-norm blocks: no RoPE, no modulation, no mask) and its
 *   final RMSNorm; the rows are placed at their packed positions;
 *   one timestep embedding per distinct timestep (sinusoid of the unscaled t, an MLP);
 *   each block: its adaln_proj makes six modulation vectors per (timestep, modality) pair, each
 *   row takes the pair timestep_index * 3 + tag (video 0, text 1, audio 2); RMSNorm + modulation,
 *   attention wider than the residual (per-head RMSNorm on q and k, then rotate-half RoPE on the
 *   first 6 R channels of each head over (t, h, w) positions, the rest passed through), full
 *   unmasked attention, gated residual; the same with a SwiGLU MLP ([value; gate] projection);
 *   norm_out: RMSNorm + shift/scale per timestep (not per modality), then both output heads.
 * Rows that share a modulation pair are processed as one run (the pipeline's layout has three:
 * text, audio, video), so no per-row tables are made. Batch 1 (the pipeline has no CFG). */
#ifndef DIT_MODELS_MINIMAX_H3_H
#define DIT_MODELS_MINIMAX_H3_H

#include <stdint.h>

#include "backend/backend.h"
#include "core/cost.h"
#include "core/error.h"

#define DIT_H3_MODALITIES 3 /* row tags: 0 video, 1 text, 2 audio */

typedef struct dit_h3_config {
  /* read from config.json (diffusers' names) */
  int heads;          /* num_attention_heads */
  int head_dim;       /* attention_head_dim */
  int hidden;         /* hidden_size (the residual width; heads * head_dim may exceed it) */
  int layers;         /* num_layers */
  int refiner_layers; /* num_refiner_layers */
  int ffn;            /* ffn_dim */
  int in_channels;    /* in_channels (video latent channels) */
  int audio_channels; /* audio_in_channels */
  int patch[3];       /* patch_size (t, h, w) */
  int text_dim;       /* text_dim */
  int freq_dim;       /* freq_dim (the timestep sinusoid's width) */
  int time_hidden;    /* time_embed_hidden_dim */
  int time_dim;       /* time_embed_dim */
  int rope_freq_dim;  /* rope_freq_dim: R frequencies per axis, 6 R channels rotated per head */
  double rope_theta;
  float norm_eps, qk_norm_eps, final_norm_eps;
  /* derived */
  int patch_dim;      /* in_channels * patch volume: a video row's width */
} dit_h3_config;

typedef struct dit_h3 dit_h3;

/* component_dir/config.json alone (diffusers' field names, or the release's where they differ). */
dit_status dit_h3_read_config(const char *component_dir, dit_h3_config *c, dit_error *err);
/* Loads component_dir/config.json and its weights (stored dtype, mapped on the CPU): diffusers'
 * checkpoint, or MiniMax's release (fused per-head interleaved qkv_proj, its module names), recognized
 * by its names; a QKV layout that is neither is refused. Errors name the field or tensor. On failure
 * *out is NULL. */
dit_status dit_h3_load(dit_backend *be, const char *component_dir, dit_h3 **out, dit_error *err);
/* The same from one weights file (a GGUF `ditrun quantize` wrote, a single safetensors) with the folder's
 * config.json at cfg_json; a folder path is dit_h3_load. Matrices may be block-quantized (Q8_0, Q4_K, ...)
 * or fp8; norms and biases stay float. */
dit_status dit_h3_load_file(dit_backend *be, const char *path, const char *cfg_json, dit_h3 **out, dit_error *err);
/* The released config (diffusers' defaults: 50 blocks of 5376 with 56 heads of 128, ...). */
dit_status dit_h3_config_default(dit_h3_config *c, dit_error *err);
/* Random weights (wdt, seed) at config c (patch_dim derived from it), for benchmarks and tests: every tensor in one
 * block of be; the modulation projections, which a checkpoint keeps in its mapping, in host memory (a CPU backend's
 * on a device), streamed or folded as a loaded model's are. DIT_ERR_INVALID_ARG for sizes the forward cannot take. */
dit_status dit_h3_create_random(dit_backend *be, const dit_h3_config *c, dit_dtype wdt, uint64_t seed, dit_h3 **out,
                                dit_error *err);
void dit_h3_free(dit_h3 *m);
const dit_h3_config *dit_h3_get_config(const dit_h3 *m);
/* Activations in dt: F32 (the default, the CPU's only choice) or BF16 on a GPU, as the other families run there
 * (the inputs, RoPE tables and outputs stay F32). The fold's tables are kept in the activation dtype, so a change
 * while folded is refused (DIT_ERR_INVALID_ARG): set it before dit_h3_fold. */
dit_status dit_h3_set_act_dtype(dit_h3 *m, dit_dtype dt, dit_error *err);

/* One packed sequence of S = n_text + n_video + n_audio rows (host arrays). Every row is placed by
 * exactly one of the three index arrays. */
typedef struct dit_h3_call {
  int64_t n_text, n_video, n_audio;
  const float *text;              /* [n_text, text_dim]: the text encoder's conditioning */
  const float *video;             /* [n_video, patch_dim]: patchified latent rows */
  const float *audio;             /* [n_audio, audio_channels] (may be NULL when n_audio is 0) */
  int n_timesteps;                /* distinct timesteps, 1..64 */
  const float *timesteps;         /* [n_timesteps], unscaled in [0, 1] */
  const int32_t *timestep_index;  /* [S]: each row's timestep */
  const int32_t *tags;            /* [S]: each row's modality (0 video, 1 text, 2 audio) */
  const double *positions;        /* [S, 3]: (t, h, w) RoPE coordinates (the pipeline's float64) */
  const int32_t *text_index, *video_index, *audio_index; /* packed positions of each modality's rows */
} dit_h3_call;

/* The velocities of the video rows [n_video, patch_dim] and audio rows [n_audio, audio_channels]
 * (host arrays, in the order of video_index / audio_index; audio_out may be NULL when n_audio is 0).
 * DIT_ERR_INVALID_ARG naming the problem for inconsistent layouts (rows placed twice or not at all,
 * a tag or timestep index out of range, non-finite positions). */
dit_status dit_h3_forward(dit_h3 *m, const dit_h3_call *c, float *video_out, float *audio_out, dit_error *err);

/* The modulation projections (every block's adaln_proj, 13.0 B of the real model's 33.1 B parameters) are
 * never held in backend memory: they stay in the checkpoint's mapping, and a device backend streams one
 * block's at a time when it evaluates them. The fold evaluates them once per request: every block's
 * timestep-only modulation (adaln_proj(SiLU(temb))) and norm_out's shift / scale for the n distinct
 * timesteps the request will use (a schedule's), kept as tables (layers x n x 18 H values); later forwards
 * index them and read no projection, and a forward whose timesteps are not all among them is refused
 * (DIT_ERR_INVALID_ARG naming the timestep). Without a fold every forward streams the projections again
 * (slow on a device: for tests). A new fold replaces the last. info (may be NULL): the tables' bytes, the
 * projection bytes read (not held), the build time. */
typedef struct dit_h3_fold_info {
  size_t table_bytes;
  size_t streamed_bytes;
  double build_s;
} dit_h3_fold_info;
/* Bytes of the weights held in backend memory (0 on the CPU, where they stay in the mapped files), and of
 * the modulation projections, which are not. */
size_t dit_h3_weight_bytes(const dit_h3 *m);
size_t dit_h3_modulation_bytes(const dit_h3 *m);
/* Parameters: the bound tensors' elements and the modulation projections'. */
uint64_t dit_h3_weight_params(const dit_h3 *m);
dit_status dit_h3_fold(dit_h3 *m, int n, const float *timesteps, dit_h3_fold_info *info, dit_error *err);
/* Drops the fold (forwards compute the modulation again). */
void dit_h3_unfold(dit_h3 *m);

/* The FLOPs of one forward over n_text + n_video + n_audio rows (its GEMMs and attention; folded: no
 * modulation projections). */
double dit_h3_flops(const dit_h3_config *g, int64_t n_text, int64_t n_video, int64_t n_audio);
/* What a folded forward of that many rows costs (core/cost.h), as the forward's own plan carves it: flops, and
 * act_bytes the activation space (kept with the model), the fold's tables for n_fold timesteps and the host
 * memory a call allocates. */
dit_status dit_h3_cost(const dit_h3 *m, int64_t n_text, int64_t n_video, int64_t n_audio, int n_fold, dit_cost *out,
                       dit_error *err);

/* The token refiner alone (context_embedder, the refiner blocks, final_norm) on n text rows:
 * out [n, hidden] (host). */
dit_status dit_h3_refine_text(dit_h3 *m, int64_t n, const float *text, float *out, dit_error *err);

#endif

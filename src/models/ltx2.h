/* LTX2VideoTransformer3DModel (diffusers' LTX-2.0 / 2.3 audio-video DiT): a video stream and an
 * audio stream, each block running self-attention (3-D RoPE for video, 1-D for audio), text
 * cross-attention, audio-to-video and video-to-audio cross-attention (1-D RoPE on time) and a
 * GELU-tanh MLP, modulated by AdaLN-single tables from the timestep. LTX-2.3 adds per-head
 * gated attention, modulation of the text cross-attention (query and key/value sides, from
 * sigma) and spatio-temporal guidance that replaces a block's self-attention by its values. */
#ifndef DIT_MODELS_LTX2_H
#define DIT_MODELS_LTX2_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/cost.h"
#include "core/error.h"

typedef struct dit_ltx2_stream_config {
  int in_channels, out_channels;
  int heads, head_dim;         /* inner width = heads * head_dim */
  int cross_attention_dim;     /* the text features' width its text cross-attention takes */
  bool gated_attn;             /* per-head output gates (2.3) */
  bool cross_attn_mod;         /* modulated text cross-attention (2.3) */
  int pos_embed_max_pos;       /* RoPE: the frames' base */
} dit_ltx2_stream_config;

typedef struct dit_ltx2_config {
  dit_ltx2_stream_config video, audio;
  int num_layers;
  int caption_channels;        /* the connectors' output width (use_prompt_embeddings) */
  int vae_scale_factors[3];    /* (temporal, spatial, spatial) */
  int base_height, base_width;
  int audio_scale_factor, audio_sampling_rate, audio_hop_length;
  int causal_offset;
  float norm_eps;
  double rope_theta;
  bool rope_double_precision;
  double timestep_scale_multiplier, cross_attn_timestep_scale_multiplier;
  bool use_prompt_embeddings;  /* caption projections (2.0) */
  bool perturbed_attn;         /* STG replaces self-attention by its values (2.3) */
  bool use_prompt_adaln_single;
} dit_ltx2_config;

typedef struct dit_ltx2 dit_ltx2;

/* The released transformer's configuration: LTX-2.0 (19B), or LTX-2.3 (22B: gated attention,
 * modulated text cross-attention, no caption projections, STG by values). */
void dit_ltx2_config_default(dit_ltx2_config *c, bool v23);

dit_status dit_ltx2_load(dit_backend *be, const char *component_dir, dit_ltx2 **out, dit_error *err);
/* Random weights (wdt, seed) for configuration c (checked as a loaded one is). */
dit_status dit_ltx2_create_random(dit_backend *be, const dit_ltx2_config *c, dit_dtype wdt, uint64_t seed,
                                  dit_ltx2 **out, dit_error *err);
/* Activations in dt: F32 (the default), or BF16 on a GPU backend; the call's inputs and outputs
 * stay F32. */
dit_status dit_ltx2_set_act_dtype(dit_ltx2 *m, dit_dtype dt, dit_error *err);
size_t dit_ltx2_weight_bytes(const dit_ltx2 *m);
uint64_t dit_ltx2_weight_params(const dit_ltx2 *m);
void dit_ltx2_free(dit_ltx2 *m);
const dit_ltx2_config *dit_ltx2_get_config(const dit_ltx2 *m);

/* One transformer call, as LTX2Pipeline makes it. Tensors are F32 in the backend's memory. */
typedef struct dit_ltx2_call {
  int B;                       /* batch */
  int frames, height, width;   /* the video latents' grid: N = frames * height * width tokens */
  float fps;
  int audio_frames;            /* NA audio tokens */
  int text_len;                /* T */
  const float *video;          /* [B, N, in_channels] */
  const float *audio;          /* [B, NA, audio in_channels] */
  const float *text;           /* [B, T, video text width] (the video connector's output) */
  const float *audio_text;     /* [B, T, audio text width] */
  const uint8_t *text_mask;    /* host [B*T] (1 = attend), or NULL */
  const float *timestep;       /* host [B]: the video timestep (sigma * 1000) */
  const float *audio_timestep; /* host [B], or NULL: timestep */
  const float *sigma;          /* host [B], or NULL: timestep (the pipeline passes sigma = timestep) */
  const float *audio_sigma;    /* host [B], or NULL: sigma */
  bool use_cross_timestep;     /* a2v/v2a modulation from the other stream's sigma (the pipeline's default) */
  bool isolate_modalities;     /* no a2v / v2a cross-attention (modality guidance) */
  const int *stg_blocks;       /* blocks whose self-attention spatio-temporal guidance perturbs (all items) */
  int n_stg_blocks;
  /* Image-to-video's per-token video timestep: the first cond_tokens video tokens of each item (the
   * conditioning frame's) take cond_timestep (host [B]; NULL: 0) instead of timestep, for the
   * video stream's modulation (and its cross-modal one without use_cross_timestep), as diffusers
   * does with a [B, N] timestep. 0: every token takes timestep. */
  int cond_tokens;
  const float *cond_timestep;
} dit_ltx2_call;

/* video_out [B, N, out_channels], audio_out [B, NA, audio out_channels], F32 in the backend's memory. */
dit_status dit_ltx2_forward(dit_ltx2 *m, const dit_ltx2_call *c, float *video_out, float *audio_out, dit_error *err);
/* One forward of c's geometry (B, the grid, audio_frames, text_len, cond_tokens, use_cross_timestep;
 * its pointers are not read) (core/cost.h): the FLOPs of its GEMMs and attention, and what it
 * allocates: the activation space and the RoPE tables that stay with the model, and the
 * tables' host transient. */
dit_status dit_ltx2_cost(const dit_ltx2 *m, const dit_ltx2_call *c, dit_cost *out, dit_error *err);
/* One forward's FLOPs for B items of n_video video, n_audio audio and n_text text tokens: each block's self,
 * text and cross-modal attention and its 4x GELU MLP in each stream (2 per MAC, QK^T and PV 4 Sq Sk I), proj_in /
 * proj_out and LTX-2.0's caption projections; the AdaLN tables (per item, not per token) are not counted. */
double dit_ltx2_flops(const dit_ltx2_config *c, int64_t B, int64_t n_video, int64_t n_audio, int64_t n_text);

#endif

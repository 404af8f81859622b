/* MiniMax-H3 transformer internals shared by minimax_h3.c (config, weights, load) and
 * minimax_h3_forward.c (the forward). */
#ifndef DIT_MODELS_MINIMAX_H3_INTERNAL_H
#define DIT_MODELS_MINIMAX_H3_INTERNAL_H

#include "models/act_space.h"
#include "models/minimax_h3.h"
#include "models/model_weights.h"

/* MiniMaxH3Attention: q/k/v [I, H], out [H, I] (no biases), per-head q/k norms [head_dim]. */
typedef struct h3_attn_w {
  dit_tensor to_q, to_k, to_v, to_out, norm_q, norm_k;
} h3_attn_w;

/* A transformer block or a token-refiner block (no adaln_proj). ff_in is the stored [2F, H]
 * projection ([value; gate]); ff_value and ff_gate are views of its two halves. */
typedef struct h3_block_w {
  dit_tensor norm1, norm2;
  h3_attn_w attn;
  dit_tensor ff_in, ff_value, ff_gate, ff_down;
  dit_tensor ada_w, ada_b; /* adaln_proj.linear [3 * 6 H, time_dim] (transformer blocks only) */
} h3_block_w;

typedef struct h3_weights {
  dit_tensor proj_in_w, proj_in_b, aproj_in_w, aproj_in_b, ctx_w, ctx_b;
  dit_tensor t1_w, t1_b, t2_w, t2_b; /* time_embedder.linear_1 / linear_2 */
  dit_tensor refiner_norm;           /* token_refiner.final_norm */
  dit_tensor out_norm, out_w, out_b; /* norm_out.norm, norm_out.linear [2 H, time_dim] */
  dit_tensor proj_out_w, proj_out_b, aproj_out_w, aproj_out_b;
  h3_block_w *refiner, *blocks;
} h3_weights;

struct dit_h3 {
  dit_backend *be;
  dit_h3_config cfg;
  dit_model_weights mw;
  h3_weights w;
  bool release_names; /* the checkpoint is MiniMax's release (fused, per-head interleaved qkv_proj; mlp.fc1
                         as [gate; value]), read through rename_release (minimax_h3.c) */
  dit_act_space as;
  /* every block's adaln_proj weights (the modulation projections, 39% of the real model), bound to the
   * checkpoint's own mapping and never copied into backend memory: a device backend streams each block's
   * through ada_scratch (allocated while in use) when it evaluates them */
  dit_weights *ada_files;
  void *ada_scratch;
  size_t ada_bytes, ada_block_bytes; /* all of them; the largest block's weight + bias (aligned) */
  /* random weights (dit_h3_create_random): the projections' host block instead of a mapping, allocated by be on
   * the CPU, else by ada_host (a CPU backend kept for it; NULL on the CPU) */
  void *ada_block;
  dit_backend *ada_host;
  /* the fold (dit_h3_fold): one backend block with every block's modulation table [n_fold * 3, 6 H], then
   * norm_out's [n_fold, 2 H] (activation dtype); NULL: not folded */
  void *fold;
  float *fold_t; /* the folded timesteps [n_fold] (host) */
  int n_fold;
};

#endif

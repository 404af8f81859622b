/* Gemma 3 text encoder: the language model of Gemma3ForConditionalGeneration (or a
 * Gemma3ForCausalLM / Gemma3TextModel checkpoint) run as an encoder, as LTX-2 uses it: the
 * pipeline takes every hidden state, so the API returns those and never the logits.
 *
 * What sets it apart from Qwen3 (qwen3.h): the token embeddings are scaled by sqrt(hidden);
 * every RMSNorm multiplies by (1 + w); each block normalizes the attention and MLP outputs
 * again before the residual add (four norms a layer); the MLP is GeGLU with tanh GELU; the
 * attention scale is query_pre_attn_scalar^-0.5; layers alternate between sliding-window
 * ("sliding_attention", RoPE base rope_local_base_freq) and global ("full_attention", RoPE
 * base rope_theta, with linear position scaling in the 4B-27B models) attention.
 *
 * hidden_states indexing follows transformers' output_hidden_states: index 0 is the scaled
 * token embeddings, index k (1 <= k < L) the residual stream after decoder layer k, and
 * index L the output of the final norm. */
#ifndef DIT_MODELS_GEMMA3_H
#define DIT_MODELS_GEMMA3_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/cost.h"
#include "core/error.h"

#define DIT_GEMMA3_MAX_LAYERS 256

typedef struct dit_gemma3_config {
  int hidden_size;             /* H */
  int num_layers;              /* L */
  int num_heads;               /* query heads */
  int num_kv_heads;            /* key/value heads (divides num_heads) */
  int head_dim;                /* D */
  int intermediate_size;       /* MLP width */
  int vocab_size;
  int max_position_embeddings;
  int sliding_window;          /* window of the sliding layers (a query sees the last sliding_window keys) */
  float rms_norm_eps;
  double query_pre_attn_scalar; /* attention scale = query_pre_attn_scalar^-0.5 */
  double rope_local_theta;      /* RoPE base of the sliding layers */
  double rope_global_theta;     /* RoPE base of the global layers */
  double rope_global_factor;    /* linear scaling of the global layers' positions (1: none) */
  bool sliding[DIT_GEMMA3_MAX_LAYERS]; /* layer i uses the sliding window and the local RoPE */
} dit_gemma3_config;

typedef struct dit_gemma3 dit_gemma3;

/* Loads component_dir/config.json (a Gemma3ForConditionalGeneration config with its
 * text_config, or a bare Gemma 3 text config; transformers 5's layer_types and
 * rope_parameters, or the older sliding_window_pattern, rope_local_base_freq and
 * rope_scaling) and the weights in component_dir, with the names of transformers 5
 * ("model.language_model."), transformers 4 ("language_model.model."), Gemma3ForCausalLM
 * ("model.") or none; the vision tower, the projector and lm_head are ignored. Weights stay
 * in their stored dtype (the embedding may be fp8), mapped on the CPU. */
dit_status dit_gemma3_load(dit_backend *be, const char *component_dir, dit_gemma3 **out, dit_error *err);
void dit_gemma3_free(dit_gemma3 *m);
const dit_gemma3_config *dit_gemma3_get_config(const dit_gemma3 *m);
dit_backend *dit_gemma3_backend(const dit_gemma3 *m);

/* Runs the encoder on B sequences of S tokens and writes every hidden state, 0..L, stacked
 * on the last axis as LTX2Pipeline does (torch.stack(hidden_states, dim=-1)):
 * out [B, S, H, L+1] F32 in the backend's memory (a host pointer on the CPU backend).
 * ids, mask: [B*S] host arrays (mask 1 = real token, 0 = padding; NULL = all real).
 * Positions are 0..S-1 whatever the mask (transformers' position_ids with left padding);
 * attention is causal and never attends to padded keys. Rows of padded queries are
 * computed like any other (they see no real key before them when padding is on the left,
 * and their values are then not meaningful); callers mask them.
 * S longer than the sliding window is refused (DIT_ERR_UNSUPPORTED): the banded mask is not
 * implemented, and LTX-2's prompts (1024 tokens) are not longer than Gemma 3's window (1024). */
dit_status dit_gemma3_encode_all(dit_gemma3 *m, int B, int S, const int32_t *ids, const uint8_t *mask, float *out,
                                 dit_error *err);
/* One dit_gemma3_encode_all of B padded sequences of S tokens (core/cost.h): its FLOPs and the
 * activation buffer and RoPE tables it allocates (not its output); S refused as the encode
 * refuses it. */
dit_status dit_gemma3_cost(const dit_gemma3 *m, int B, int S, dit_cost *out, dit_error *err);

#endif

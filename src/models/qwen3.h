/* Qwen3 text encoder: the Qwen3 decoder LLM (Qwen3Model / Qwen3ForCausalLM checkpoints, and
 * the language model of Qwen3-VL's, for text-only input) run as an encoder. The DiT pipelines (Z-Image, FLUX.2 klein) take hidden states of
 * chosen layers as caption features, so the API returns those and never the logits.
 *
 * hidden_states indexing follows transformers' output_hidden_states: index 0 is the
 * token embeddings, index k (1 <= k < L) the residual stream after decoder layer k, and
 * index L (= -1) the output of the final RMSNorm. Layers past the deepest requested
 * index are not run. */
#ifndef DIT_MODELS_QWEN3_H
#define DIT_MODELS_QWEN3_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/cost.h"
#include "core/error.h"
#include "io/safetensors.h"

typedef struct dit_qwen3_config {
  int hidden_size;             /* H */
  int num_layers;              /* L (num_hidden_layers) */
  int num_heads;               /* query heads (num_attention_heads) */
  int num_kv_heads;            /* key/value heads (num_key_value_heads, divides num_heads) */
  int head_dim;                /* D (head_dim, or hidden_size / num_heads when absent) */
  int intermediate_size;       /* MLP width */
  int vocab_size;
  int max_position_embeddings; /* longest sequence encode accepts */
  float rms_norm_eps;
  double rope_theta;           /* "default" RoPE base */
  bool attention_bias;         /* q/k/v/o projections carry a bias */
  dit_dtype rope_freq_dtype;   /* precision of RoPE inv_freq: DIT_F32 unless set (see below) */
  int mrope_pairs;             /* Qwen3-VL: the rotary pairs its mrope_section splits among (t, h, w)
                                  (= head_dim / 2); 0 for Qwen3. Text-only positions are equal on
                                  every axis, so this RoPE is then the plain one */
} dit_qwen3_config;

typedef struct dit_qwen3 dit_qwen3;

/* Loads component_dir/config.json and the weights in component_dir (model.safetensors,
 * shards with an index, or the single *.safetensors), with `model.`-prefixed
 * (Qwen3ForCausalLM) or bare (Qwen3Model) names; lm_head.* is ignored. Weights stay in
 * their stored dtype, mapped. On failure *out is NULL and the message names the field
 * or tensor that was wrong. */
dit_status dit_qwen3_load(dit_backend *be, const char *component_dir, dit_qwen3 **out, dit_error *err);
/* How ditrun writes a Qwen3 text encoder to GGUF: llama.cpp's names (no lm_head). */
extern const dit_wexport dit_qwen3_export;
/* The same from a weights path (a folder, or one file: transformers' names or llama.cpp's,
 * as in its GGUF files) and a config.json path. */
dit_status dit_qwen3_load_from(dit_backend *be, const char *weights, const char *config_json, dit_qwen3 **out,
                               dit_error *err);
void dit_qwen3_free(dit_qwen3 *m);
/* A model of config c (rope_freq_dtype as given) with deterministic random weights of
 * dtype wdt in one backend allocation (dit_backend_random_wtable): for benchmarks at the
 * real geometry without checkpoint files. */
dit_status dit_qwen3_create_random(dit_backend *be, const dit_qwen3_config *c, dit_dtype wdt, uint64_t seed,
                                   dit_qwen3 **out, dit_error *err);
const dit_qwen3_config *dit_qwen3_get_config(const dit_qwen3 *m);
/* The backend the model runs on (out buffers of encode live in its memory). */
dit_backend *dit_qwen3_backend(const dit_qwen3 *m);

/* RoPE frequencies as a model holds them. transformers computes the inv_freq buffer in
 * fp32 and from_pretrained keeps it fp32 whatever the weights' dtype (checked with
 * transformers 5.17): that is the default, DIT_F32. A model that went through
 * module.to(torch.bfloat16) (or float16) holds inv_freq rounded to that dtype, and
 * the rotary angles of every position move with it. The reference fixtures in
 * tests/fixtures/models were made that way (their generator rounds every buffer to bf16),
 * so reproducing them takes DIT_BF16. dt: DIT_F32, DIT_BF16 or DIT_F16. */
dit_status dit_qwen3_set_rope_freq_dtype(dit_qwen3 *m, dit_dtype dt, dit_error *err);

/* Streaming from the mapped files (on: MiniMax-H3's 32B encoder): on the CPU each layer's weights leave
 * the process's resident set once the layer has run, so an encode holds about one layer of them
 * rather than the whole model (they are read from the file, or the page cache, again by the next
 * encode). Off by default: an encoder kept for many prompts keeps its pages. On a device backend
 * the weights are uploaded whole at load; streaming them there is not built. */
void dit_qwen3_set_stream(dit_qwen3 *m, bool on);
/* The weights a streamed encode holds at once at most: the embedding table and norm (all of them, as a
 * bound: an encode touches only its tokens' rows) and the largest layer. */
size_t dit_qwen3_stream_bytes(const dit_qwen3 *m);

/* What one dit_qwen3_encode of B x S ids costs (core/cost.h) when its deepest requested
 * hidden state is `deepest` (negative: from the end, as in encode's layers) and, with masked,
 * some ids are padding: FLOPs of the layers it runs (attention counted over all S keys) and
 * its activation buffer plus RoPE tables. Nothing runs. */
dit_status dit_qwen3_cost(const dit_qwen3 *m, int B, int S, int deepest, bool masked, dit_cost *out,
                          dit_error *err);

/* Runs the encoder on B sequences of S tokens.
 * ids, mask: [B*S] row-major host arrays (mask 1 = real token, 0 = padding; mask may be
 * NULL for all real). Positions are 0..S-1 whatever the mask (as transformers does);
 * attention is causal and never attends to padded keys.
 * layers[j]: hidden_states index, 0..L, or negative from the end (-1 = L = after the
 * final norm, -2 = L-1). out[j]: caller-allocated F32 [B*S*hidden_size] in the
 * backend's memory (host pointers on the CPU backend).
 * Activations come from one buffer allocated per call and freed before returning.
 * Returns DIT_ERR_INVALID_ARG for bad sizes, ids outside the vocabulary or bad layer
 * indices (nothing is written to out then). */
dit_status dit_qwen3_encode(dit_qwen3 *m, int B, int S, const int32_t *ids, const uint8_t *mask, int n_layers,
                            const int *layers, float *const *out, dit_error *err);


#endif

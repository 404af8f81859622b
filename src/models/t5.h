/* T5 text encoder: the encoder stack of transformers' T5EncoderModel (T5 v1.1, as FLUX.1's
 * text_encoder_2 uses it). FluxPipeline takes its last hidden state as the prompt
 * embedding; the API also gives any hidden_states index.
 *
 * One block: x += o(attn(q(n), k(n), v(n)) + position bias)   n = rms_norm(x) * layer.0.layer_norm
 *            x += wo(act(wi_0(n)) * wi_1(n))                   n = rms_norm(x) * layer.1.layer_norm
 * then encoder.final_layer_norm. Attention scores are q.k (no 1/sqrt(d_kv) scaling) plus a
 * learned bias per head and relative-position bucket, held by block 0
 * (relative_attention_bias [num_buckets, num_heads]) and added in every block. Buckets
 * are bidirectional: num_buckets/2 per sign of key - query, exact below num_buckets/4,
 * log-spaced up to max_distance beyond (transformers' _relative_position_bucket with its
 * fp32 arithmetic and truncation). The non-gated feed-forward (one wi, T5 v1.0) is held
 * too, but only with an activation the backend ops have (not ReLU: see dit_t5_load).
 *
 * hidden_states indexing follows transformers' output_hidden_states: index 0 is the token
 * embeddings, index k (1 <= k < L) the residual stream after block k, index L (= -1) the
 * output of the final norm. Blocks past the deepest requested index are not run. */
#ifndef DIT_MODELS_T5_H
#define DIT_MODELS_T5_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/cost.h"
#include "core/error.h"

typedef struct dit_t5_config {
  int d_model;            /* hidden size */
  int num_layers;         /* encoder blocks */
  int num_heads;
  int d_kv;               /* per-head size (inner width = num_heads * d_kv, may differ from d_model) */
  int d_ff;               /* feed-forward width */
  int vocab_size;
  int num_buckets;        /* relative_attention_num_buckets */
  int max_distance;       /* relative_attention_max_distance */
  float layer_norm_epsilon;
  bool gated;             /* wi_0 (activated) * wi_1, or one wi */
  dit_act act;            /* the feed-forward activation (gelu_new = DIT_ACT_GELU_TANH) */
} dit_t5_config;

typedef struct dit_t5 dit_t5;

/* The longest sequence encode takes (the scores of all heads are [num_heads, S, S]). */
#define DIT_T5_MAX_TOKENS 8192

/* path is one of:
 * - a component folder with config.json (transformers' T5Config: d_model, num_layers,
 *   num_heads, d_kv, d_ff, vocab_size, relative_attention_num_buckets (32),
 *   relative_attention_max_distance (128), layer_norm_epsilon (1e-6), feed_forward_proj
 *   ("relu"; "gated-gelu" means gelu_new), dense_act_fn / is_gated_act when present) and
 *   its weights (model.safetensors, shards with an index, or the single *.safetensors);
 * - a single .safetensors file (or a folder without config.json), as t5xxl_fp16.safetensors
 *   is published: the config is read off the tensors with T5 v1.1's fixed settings:
 *   d_model and vocab_size from the embedding, num_heads from relative_attention_bias
 *   [num_buckets, num_heads], d_kv = q rows / num_heads, d_ff from wi_0, num_layers from the
 *   highest encoder.block index, max_distance 128, layer_norm_epsilon 1e-6, gated gelu_new
 *   (a file without wi_0 is refused: T5 v1.0's ReLU feed-forward has no backend op).
 * Tensor names are those of T5EncoderModel's state dict: shared.weight (or
 * encoder.embed_tokens.weight; one of them, shared wins when both are there),
 * encoder.block.{i}.layer.0.SelfAttention.{q,k,v,o}.weight,
 * encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight,
 * encoder.block.{i}.layer.{0,1}.layer_norm.weight,
 * encoder.block.{i}.layer.1.DenseReluDense.{wi_0,wi_1,wo}.weight (wi, wo when not gated),
 * encoder.final_layer_norm.weight. Weights may be F32, BF16 or F16, each in its own dtype
 * (an fp32 wo among bf16 tensors is fine). On failure *out is NULL and the message names the
 * field or tensor that was wrong. */
dit_status dit_t5_load(dit_backend *be, const char *path, dit_t5 **out, dit_error *err);
/* T5 v1.1 XXL's geometry (FLUX.1's text_encoder_2): d_model 4096, 24 blocks, 64 heads of 64,
 * d_ff 10240, vocabulary 32128, 32 buckets up to 128, eps 1e-6, gated gelu_new. */
void dit_t5_config_xxl(dit_t5_config *c);
/* A model of config c with deterministic random weights of dtype wdt in one backend
 * allocation (dit_backend_random_wtable): for benchmarks without checkpoint files. */
dit_status dit_t5_create_random(dit_backend *be, const dit_t5_config *c, dit_dtype wdt, uint64_t seed, dit_t5 **out,
                                dit_error *err);
void dit_t5_free(dit_t5 *m);
const dit_t5_config *dit_t5_get_config(const dit_t5 *m);
/* The backend the model runs on (out buffers of encode live in its memory). */
dit_backend *dit_t5_backend(const dit_t5 *m);
/* Bytes of the weights when they are in one backend block (device backends, random
 * weights), else 0 (mapped from the files). */
size_t dit_t5_weight_bytes(const dit_t5 *m);

/* What one encode of S ids costs (core/cost.h): FLOPs of every block and its activation
 * buffer plus the position-bias table. Nothing runs. */
dit_status dit_t5_cost(const dit_t5 *m, int S, dit_cost *out, dit_error *err);

/* Runs the encoder on one sequence of S tokens (host array ids [S]).
 * mask: NULL (every position attends to every other, pads included: what FluxPipeline
 * does), or [S] host bytes, 0 = a key no query attends to (transformers' attention_mask).
 * layers[j]: hidden_states index, 0..L, or negative from the end (-1 = L, the final
 * norm's output). out[j]: caller-allocated F32 [S * d_model] in the backend's memory
 * (host pointers on the CPU backend). The activation buffer is kept by the model and
 * reused by later calls that fit. DIT_ERR_INVALID_ARG for a bad S, ids outside the
 * vocabulary or bad layer indices (nothing is written to out then). */
dit_status dit_t5_encode_hidden(dit_t5 *m, int S, const int32_t *ids, const uint8_t *mask, int n_layers,
                                const int *layers, float *const *out, dit_error *err);
/* The last hidden state [S * d_model] (index -1) without a mask, as FluxPipeline takes it. */
dit_status dit_t5_encode(dit_t5 *m, int S, const int32_t *ids, float *last_hidden, dit_error *err);

/* The position-bias bucket of rel = key position - query position (transformers'
 * _relative_position_bucket, bidirectional): num_buckets/2 buckets per sign (rel > 0 in
 * the upper half); distances below num_buckets/4 get their own bucket, longer ones
 * log-spaced buckets up to max_distance, beyond which all share the last. */
int dit_t5_relative_bucket(int rel, int num_buckets, int max_distance);

#endif

/* CLIP text encoder: the text tower of CLIP (transformers' CLIPTextModel), as FLUX.1
 * (and the Stable Diffusion family) use it. Token embedding + learned position embedding
 * (positions 0..S-1), L pre-LayerNorm encoder layers with causal self-attention, then
 * final_layer_norm. Outputs: last_hidden_state (after final_layer_norm), the pooled output
 * (last_hidden_state at the end-of-text position) and, on request, hidden_states[k].
 *
 * hidden_states indexing follows transformers' output_hidden_states for CLIP: index 0 is
 * the embeddings, index k (1 <= k <= L) the residual stream after encoder layer k; index L
 * is taken BEFORE final_layer_norm (last_hidden_state is the normed one). Negative indices
 * count from the end (-1 = L, -2 = L-1, the penultimate layer SDXL uses).
 *
 * Pooled position (transformers' rule): with eos_token_id == 2 (the value the published
 * CLIP configs carry) it is argmax(ids), the first occurrence of the largest id (CLIP's
 * end-of-text token 49407 is the last of the vocabulary); otherwise the first position
 * whose id == eos_token_id (0 when there is none).
 *
 * Checkpoints: tensor names of the transformers state dict, with or without the
 * "text_model." prefix (transformers 5 saves CLIPTextModel without it). Stored
 * text_projection.*, position_ids, logit_scale and a full CLIPModel's vision_model.* /
 * visual_projection.* are ignored. Weights may be F32, BF16 or F16 and stay in their
 * stored dtype. */
#ifndef DIT_MODELS_CLIP_TEXT_H
#define DIT_MODELS_CLIP_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/cost.h"
#include "core/error.h"

typedef enum dit_clip_act {
  DIT_CLIP_QUICK_GELU = 0, /* "quick_gelu": x * sigmoid(1.702 x) (OpenAI CLIP) */
  DIT_CLIP_GELU            /* "gelu": exact erf GELU (OpenCLIP towers) */
} dit_clip_act;

typedef struct dit_clip_text_config {
  int hidden_size;             /* H */
  int num_layers;              /* L (num_hidden_layers) */
  int num_heads;               /* num_attention_heads (divides H; head_dim = H / num_heads) */
  int intermediate_size;       /* MLP width (fc1 rows) */
  int vocab_size;
  int max_position_embeddings; /* rows of the position table: the longest input */
  float layer_norm_eps;
  dit_clip_act hidden_act;
  int eos_token_id;            /* 2 selects the argmax rule for the pooled position (see above) */
} dit_clip_text_config;

typedef struct dit_clip_text dit_clip_text;

/* The published CLIP ViT-L/14 text tower (FLUX.1's text_encoder, ComfyUI's clip_l):
 * H 768, L 12, 12 heads, MLP 3072, vocabulary 49408, 77 positions, quick_gelu, eps 1e-5,
 * eos_token_id 2. */
void dit_clip_text_config_l(dit_clip_text_config *c);

/* Loads a model from `path`:
 * - a folder: config.json (model_type "clip_text_model", or a full CLIPModel's "clip"
 *   config whose text_config is read) and the weights there (model.safetensors, shards
 *   with an index, or the single *.safetensors);
 * - a .safetensors file without a config (as ComfyUI's clip_l.safetensors is held): the
 *   config is inferred from the tensor shapes with the published CLIP settings: H and the
 *   vocabulary from the token table, max_position_embeddings from the position table, L
 *   from the count of encoder layers, intermediate_size from fc1, num_heads = H / 64
 *   (every published CLIP text tower has 64-wide heads; H must be a multiple of 64),
 *   hidden_act quick_gelu, layer_norm_eps 1e-5, eos_token_id 2.
 * On failure *out is NULL and the message names the field or tensor that was wrong
 * (missing, mis-shaped, of a dtype other than F32/BF16/F16, or not a CLIP tensor). */
dit_status dit_clip_text_load(dit_backend *be, const char *path, dit_clip_text **out, dit_error *err);
/* Reads a config.json (as a folder's) into c. */
dit_status dit_clip_text_read_config(const char *path, dit_clip_text_config *c, dit_error *err);
/* A .safetensors file (as dit_clip_text_load), with the settings tensor shapes cannot
 * tell taken from `settings` instead of the published ones: num_heads, hidden_act,
 * layer_norm_eps and eos_token_id (its sizes are ignored: they come from the file). */
dit_status dit_clip_text_load_file(dit_backend *be, const char *file, const dit_clip_text_config *settings,
                                   dit_clip_text **out, dit_error *err);
/* A model of config c with deterministic random weights of dtype wdt in one backend
 * allocation: for benchmarks at the real geometry without checkpoint files. */
dit_status dit_clip_text_create_random(dit_backend *be, const dit_clip_text_config *c, dit_dtype wdt, uint64_t seed,
                                       dit_clip_text **out, dit_error *err);
void dit_clip_text_free(dit_clip_text *m);
const dit_clip_text_config *dit_clip_text_get_config(const dit_clip_text *m);
/* The backend the model runs on (out buffers of encode live in its memory). */
dit_backend *dit_clip_text_backend(const dit_clip_text *m);
/* Bytes of the weights (their stored dtypes). */
size_t dit_clip_text_weight_bytes(const dit_clip_text *m);

/* The pooled position of ids[0..S) under cfg's eos rule (see above). */
int dit_clip_text_pooled_index(const dit_clip_text_config *c, int S, const int32_t *ids);

/* What one encode of S ids costs (core/cost.h): FLOPs of every layer and its activation
 * buffer. Nothing runs. */
dit_status dit_clip_text_cost(const dit_clip_text *m, int S, dit_cost *out, dit_error *err);

/* Runs the encoder on one sequence of S tokens (1 <= S <= max_position_embeddings; no
 * padding mask: padded positions are attended causally, as CLIPTextModel does without an
 * attention_mask, which is how FLUX.1 and Stable Diffusion call it).
 * ids: [S] host array. last_hidden: F32 [S*H] or NULL; pooled: F32 [H] or NULL; both
 * caller-allocated in the backend's memory (host pointers on the CPU backend).
 * Activations come from one buffer allocated per call and freed before returning.
 * DIT_ERR_INVALID_ARG for a bad size or an id outside the vocabulary (nothing written). */
dit_status dit_clip_text_encode(dit_clip_text *m, int S, const int32_t *ids, float *last_hidden, float *pooled,
                                dit_error *err);
/* The same, also writing hidden_states[layers[j]] into hidden[j] (F32 [S*H] in the
 * backend's memory) for j < n_layers (indices as above). Layers past the deepest index
 * asked are not run when neither last_hidden nor pooled is wanted. */
dit_status dit_clip_text_encode_hidden(dit_clip_text *m, int S, const int32_t *ids, int n_layers, const int *layers,
                                       float *const *hidden, float *last_hidden, float *pooled, dit_error *err);

#endif

/* LTX2Attention (diffusers' LTX-2 attention, used by the text connectors and every
 * attention of the LTX-2 transformer): q/k/v projections with bias, RMSNorm of q and k across
 * all heads (one weight over heads * head_dim), "split" RoPE (each head's first half rotates
 * with its second half, each head with its own frequencies), attention without a causal mask,
 * and in LTX-2.3 a per-head output gate 2 * sigmoid(to_gate_logits(x)); then to_out. */
#ifndef DIT_MODELS_LTX2_ATTN_H
#define DIT_MODELS_LTX2_ATTN_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "io/safetensors.h"
#include "models/act_space.h"

typedef struct dit_ltx2_attn {
  int heads, head_dim;
  bool gated;                       /* to_gate_logits present (LTX-2.3) */
  dit_tensor to_q, to_q_b, to_k, to_k_b, to_v, to_v_b;
  dit_tensor norm_q, norm_k;        /* [heads * head_dim] */
  dit_tensor to_out, to_out_b;
  dit_tensor gate, gate_b;          /* [heads, query_dim], [heads] */
} dit_ltx2_attn;

/* Adds the attention's weights under `prefix` (e.g. "video_connector.transformer_blocks.0.attn1"):
 * query width qdim, key/value input width kvdim, output width qdim. */
void dit_ltx2_attn_table(dit_wtable *t, dit_ltx2_attn *a, int heads, int head_dim, bool gated, int64_t qdim,
                         int64_t kvdim, const char *prefix);

/* Scratch of one call, in the activation space: q [Mq, I], k and v [Mk, I], o [Mq, I] and, gated,
 * g [Mq, heads] (I = heads * head_dim): DIT_LTX2_ATTN_SCRATCH buffers, in this order. */
typedef struct dit_ltx2_attn_scratch {
  void *q, *k, *v, *o, *g;
} dit_ltx2_attn_scratch;
#define DIT_LTX2_ATTN_SCRATCH 5

/* Bytes of each scratch buffer for Mq query rows and Mk key rows (activation element es). */
void dit_ltx2_attn_scratch_sizes(const dit_ltx2_attn *a, int64_t Mq, int64_t Mk, size_t es,
                                 size_t sizes[DIT_LTX2_ATTN_SCRATCH]);

/* y [B, Sq, qdim] = attention of x [B, Sq, qdim] over ctx [B, Sk, kvdim] (ctx NULL: x).
 * q_cos/q_sin and k_cos/k_sin: split-RoPE tables [B, S * heads, head_dim / 2] or
 * [S * heads, head_dim / 2] (row s * heads + h: head h of position s), F32; NULL: no RoPE
 * (k tables NULL with q tables given: the keys use the query's); a table's rows say how many
 * heads it splits the width into (S * hr rows), which may differ from the attention's. key_mask
 * [B, Sk] U8 or NULL. values_only (self-attention; LTX-2.3's spatio-temporal guidance): the
 * attention's output is v itself. y must not alias x or ctx. */
dit_status dit_ltx2_attn_forward(dit_backend *be, const dit_act_space *as, const dit_ltx2_attn *a, float eps, int64_t B,
                                 int64_t Sq, int64_t Sk, const dit_tensor *x, const dit_tensor *ctx,
                                 const dit_tensor *q_cos, const dit_tensor *q_sin, const dit_tensor *k_cos,
                                 const dit_tensor *k_sin, const dit_tensor *key_mask, bool values_only,
                                 const dit_ltx2_attn_scratch *s, dit_tensor *y, dit_error *err);

#endif

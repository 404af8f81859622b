/* LTX2Attention (see ltx2_attn.h), as diffusers' LTX2AudioVideoAttnProcessor computes it. */
#include "models/ltx2_attn.h"

#include <math.h>
#include <stdio.h>

static void add_linear(dit_wtable *t, dit_tensor *w, dit_tensor *b, int64_t n, int64_t k, const char *prefix,
                       const char *name) {
  dit_wtable_add(t, w, false, 2, (int64_t[]){n, k}, "%s.%s.weight", prefix, name);
  dit_wtable_add(t, b, false, 1, (int64_t[]){n}, "%s.%s.bias", prefix, name);
}

void dit_ltx2_attn_table(dit_wtable *t, dit_ltx2_attn *a, int heads, int head_dim, bool gated, int64_t qdim,
                         int64_t kvdim, const char *prefix) {
  a->heads = heads;
  a->head_dim = head_dim;
  a->gated = gated;
  int64_t I = (int64_t)heads * head_dim;
  add_linear(t, &a->to_q, &a->to_q_b, I, qdim, prefix, "to_q");
  add_linear(t, &a->to_k, &a->to_k_b, I, kvdim, prefix, "to_k");
  add_linear(t, &a->to_v, &a->to_v_b, I, kvdim, prefix, "to_v");
  add_linear(t, &a->to_out, &a->to_out_b, qdim, I, prefix, "to_out.0");
  /* elementwise_affine=False leaves the q/k norms without weights */
  dit_wtable_add(t, &a->norm_q, true, 1, (int64_t[]){I}, "%s.norm_q.weight", prefix);
  dit_wtable_add(t, &a->norm_k, true, 1, (int64_t[]){I}, "%s.norm_k.weight", prefix);
  if (gated) add_linear(t, &a->gate, &a->gate_b, heads, qdim, prefix, "to_gate_logits");
}

void dit_ltx2_attn_scratch_sizes(const dit_ltx2_attn *a, int64_t Mq, int64_t Mk, size_t es,
                                 size_t sizes[DIT_LTX2_ATTN_SCRATCH]) {
  size_t I = (size_t)a->heads * (size_t)a->head_dim;
  sizes[0] = (size_t)Mq * I * es;
  sizes[1] = sizes[2] = (size_t)Mk * I * es;
  sizes[3] = (size_t)Mq * I * es;
  sizes[4] = a->gated ? (size_t)Mq * (size_t)a->heads * es : 0;
}

static const dit_tensor *opt(const dit_tensor *w) { return w->data ? w : NULL; }

/* RMSNorm over all heads, then split RoPE (one fused op where the backend has it): x [B, S, I], where
 * the table [.., S * hr, r] says how many RoPE heads hr it splits I into (the attention's heads, or
 * another stream's for the cross-modal attention) and r = I / hr / 2. */
static dit_status norm_rope(dit_backend *be, const dit_act_space *as, const dit_ltx2_attn *a, float eps, void *p,
                            int64_t B, int64_t S, const dit_tensor *w, const dit_tensor *cos, const dit_tensor *sin,
                            dit_error *err) {
  int64_t I = (int64_t)a->heads * a->head_dim;
  if (!cos) {
    dit_tensor x = dit_act_2d(as, p, B * S, I);
    return dit_op_rms_norm(be, &x, &x, opt(w), eps, err);
  }
  const int64_t rows = cos->shape[cos->ndim - 2], r = cos->shape[cos->ndim - 1];
  if (rows % S || 2 * r * (rows / S) != I)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "ltx2 attention: RoPE table [%lld, %lld] does not split %lld "
                      "positions of width %lld", (long long)rows, (long long)r, (long long)S, (long long)I);
  dit_tensor x = dit_act_3d(as, p, B, S, I);
  return dit_op_rms_norm_rope_row(be, &x, opt(w), eps, cos, sin, DIT_ROPE_HALF, err);
}

/* The per-head gate (2.3) on o, then to_out into y. */
static dit_status finish(dit_backend *be, const dit_act_space *as, const dit_ltx2_attn *a, int64_t B, int64_t Sq,
                         const dit_tensor *x, const dit_ltx2_attn_scratch *s, dit_tensor *o, dit_tensor *y,
                         dit_error *err) {
  const int64_t H = a->heads, D = a->head_dim;
  if (a->gated) { /* o *= 2 * sigmoid(gate_logits), one gate per head over its D values */
    dit_tensor g = dit_act_3d(as, s->g, B, Sq, H), o2 = dit_act_2d(as, o->data, B * Sq * H, D);
    DIT_TRY(dit_op_linear(be, &g, x, &a->gate, &a->gate_b, DIT_ACT_SIGMOID, err));
    DIT_TRY(dit_op_mul_rows(be, &o2, &o2, &g, 2.0f, err));
  }
  return dit_op_linear(be, y, o, &a->to_out, &a->to_out_b, DIT_ACT_NONE, err);
}

dit_status dit_ltx2_attn_forward(dit_backend *be, const dit_act_space *as, const dit_ltx2_attn *a, float eps, int64_t B,
                                 int64_t Sq, int64_t Sk, const dit_tensor *x, const dit_tensor *ctx,
                                 const dit_tensor *q_cos, const dit_tensor *q_sin, const dit_tensor *k_cos,
                                 const dit_tensor *k_sin, const dit_tensor *key_mask,
                                 bool values_only, const dit_ltx2_attn_scratch *s, dit_tensor *y, dit_error *err) {
  const int64_t H = a->heads, D = a->head_dim, I = H * D;
  if (!ctx) {
    ctx = x;
    Sk = Sq;
  }
  if (q_cos && !k_cos) {
    k_cos = q_cos;
    k_sin = q_sin;
  }
  dit_tensor q = dit_act_3d(as, s->q, B, Sq, I), k = dit_act_3d(as, s->k, B, Sk, I), v = dit_act_3d(as, s->v, B, Sk, I);
  dit_tensor o = dit_act_3d(as, s->o, B, Sq, I);
  if (values_only) { /* spatio-temporal guidance: the attention is its values (self-attention only) */
    if (ctx != x) return dit_errorf(err, DIT_ERR_INVALID_ARG, "ltx2 attention: values only for self-attention");
    DIT_TRY(dit_op_linear(be, &o, x, &a->to_v, &a->to_v_b, DIT_ACT_NONE, err));
    return finish(be, as, a, B, Sq, x, s, &o, y, err);
  }
  DIT_TRY(dit_op_linear(be, &q, x, &a->to_q, &a->to_q_b, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &k, ctx, &a->to_k, &a->to_k_b, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_linear(be, &v, ctx, &a->to_v, &a->to_v_b, DIT_ACT_NONE, err));
  DIT_TRY(norm_rope(be, as, a, eps, s->q, B, Sq, &a->norm_q, q_cos, q_sin, err));
  DIT_TRY(norm_rope(be, as, a, eps, s->k, B, Sk, &a->norm_k, q_cos ? k_cos : NULL, k_sin, err));
  dit_tensor q4 = dit_act_4d(as, s->q, B, Sq, H, D), k4 = dit_act_4d(as, s->k, B, Sk, H, D);
  dit_tensor v4 = dit_act_4d(as, s->v, B, Sk, H, D), o4 = dit_act_4d(as, s->o, B, Sq, H, D);
  DIT_TRY(dit_op_attention(be, &o4, &q4, &k4, &v4, key_mask, 1.0f / sqrtf((float)D), false, err));
  return finish(be, as, a, B, Sq, x, s, &o, y, err);
}

/* LTX2VideoTransformer3DModel's forward pass (see ltx2.h), in the order of diffusers'
 * LTX2VideoTransformer3DModel.forward and LTX2VideoTransformerBlock.forward. Stream index 0 is
 * the video, 1 the audio. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "models/ltx2_internal.h"
#include "models/ltx2_rope.h"

/* One AdaLN-single's outputs: modT [n, B, dim] (its n vectors per item, each contiguous) and the
 * embedded timestep emb [B, dim]. */
typedef struct ada_out {
  void *modT, *emb;
} ada_out;

typedef struct stream_bufs {
  int64_t S, D;           /* tokens, width */
  void *x, *h, *y, *nrm, *mq, *ff, *ctx, *ctxm, *ctmp;
  void *pb, *pp, *pc;     /* a block's parameters: [9, B, D], [2, B, D] (prompt), [5, B, D] (cross-modal) */
  ada_out time, cass, cag, prompt;
  /* the conditioning tokens' versions (image-to-video, the video stream; NULL otherwise): pb and
   * time always, pc, cass and cag when the cross-modal modulation follows the stream's timestep */
  void *pbc, *pcc;
  ada_out timec, cassc, cagc;
} stream_bufs;

typedef struct lx_bufs {
  stream_bufs s[2];
  void *tt, *sinus, *e1, *semb, *mod; /* AdaLN scratch: [B], [B, 256], [B, Dmax] x2, [B, 9 Dmax] */
  void *kmask;                        /* [B, T] */
  dit_ltx2_attn_scratch at;
} lx_bufs;

static const dit_ltx2_stream_config *scfg(const dit_ltx2 *m, int i) { return i ? &m->cfg.audio : &m->cfg.video; }
static ltx2_stream *stream(dit_ltx2 *m, int i) { return i ? &m->a : &m->v; }

/* ---- planning ---------------------------------------------------------------------- */

static dit_status take_ada(dit_arena *ar, bool real, const ltx2_adaln *a, int64_t B, size_t es, ada_out *o,
                           dit_error *err) {
  DIT_ACT_TAKE(ar, real, o->modT, (size_t)(a->n * B * a->dim) * es);
  DIT_ACT_TAKE(ar, real, o->emb, (size_t)(B * a->dim) * es);
  return DIT_OK;
}

static dit_status plan(dit_arena *ar, bool real, dit_ltx2 *m, const dit_ltx2_call *c, lx_bufs *b, dit_error *err) {
  const size_t es = m->as.es;
  const int64_t B = c->B, T = c->text_len;
  const int64_t S[2] = {(int64_t)c->frames * c->height * c->width, c->audio_frames};
  size_t at[DIT_LTX2_ATTN_SCRATCH] = {0};
  int64_t Dmax = 0;
  for (int i = 0; i < 2; i++) {
    stream_bufs *s = &b->s[i];
    const dit_ltx2_stream_config *sc = scfg(m, i);
    const int64_t D = s->D = stream(m, i)->D, R = B * S[i];
    s->S = S[i];
    Dmax = D > Dmax ? D : Dmax;
    void **act[] = {&s->x, &s->h, &s->y, &s->nrm, &s->mq};
    for (size_t k = 0; k < sizeof act / sizeof *act; k++) DIT_ACT_TAKE(ar, real, *act[k], (size_t)(R * D) * es);
    DIT_ACT_TAKE(ar, real, s->ff, (size_t)(R * 4 * D) * es);
    const int64_t C = m->cfg.use_prompt_embeddings ? D : sc->cross_attention_dim;
    DIT_ACT_TAKE(ar, real, s->ctx, (size_t)(B * T * C) * es);
    DIT_ACT_TAKE(ar, real, s->ctxm, (size_t)(B * T * C) * es);
    DIT_ACT_TAKE(ar, real, s->ctmp, (size_t)(B * T * D) * es);
    DIT_ACT_TAKE(ar, real, s->pb, (size_t)(9 * B * D) * es);
    DIT_ACT_TAKE(ar, real, s->pp, (size_t)(2 * B * D) * es);
    DIT_ACT_TAKE(ar, real, s->pc, (size_t)(5 * B * D) * es);
    ltx2_stream *st = stream(m, i);
    DIT_TRY(take_ada(ar, real, &st->time, B, es, &s->time, err));
    DIT_TRY(take_ada(ar, real, &st->ca_scale_shift, B, es, &s->cass, err));
    DIT_TRY(take_ada(ar, real, &st->ca_gate, B, es, &s->cag, err));
    if (st->prompt.n) DIT_TRY(take_ada(ar, real, &st->prompt, B, es, &s->prompt, err));
    if (i == 0 && c->cond_tokens > 0) {
      DIT_ACT_TAKE(ar, real, s->pbc, (size_t)(9 * B * D) * es);
      DIT_TRY(take_ada(ar, real, &st->time, B, es, &s->timec, err));
      if (!c->use_cross_timestep) {
        DIT_ACT_TAKE(ar, real, s->pcc, (size_t)(5 * B * D) * es);
        DIT_TRY(take_ada(ar, real, &st->ca_scale_shift, B, es, &s->cassc, err));
        DIT_TRY(take_ada(ar, real, &st->ca_gate, B, es, &s->cagc, err));
      }
    }
    /* the attentions whose queries are this stream's: self, text, cross-modal */
    const ltx2_half *h = &m->blocks[0].v;
    if (i) h = &m->blocks[0].a;
    const dit_ltx2_attn *as3[3] = {&h->attn1, &h->attn2, &h->cross};
    const int64_t keys[3] = {S[i], T, S[1 - i]};
    for (int k = 0; k < 3; k++) {
      size_t sz[DIT_LTX2_ATTN_SCRATCH];
      dit_ltx2_attn_scratch_sizes(as3[k], R, B * keys[k], es, sz);
      for (int q = 0; q < DIT_LTX2_ATTN_SCRATCH; q++) at[q] = sz[q] > at[q] ? sz[q] : at[q];
    }
  }
  DIT_ACT_TAKE(ar, real, b->tt, (size_t)B * sizeof(float));
  DIT_ACT_TAKE(ar, real, b->sinus, (size_t)(B * 256) * es);
  DIT_ACT_TAKE(ar, real, b->e1, (size_t)(B * Dmax) * es);
  DIT_ACT_TAKE(ar, real, b->semb, (size_t)(B * Dmax) * es);
  DIT_ACT_TAKE(ar, real, b->mod, (size_t)(9 * B * Dmax) * es);
  DIT_ACT_TAKE(ar, real, b->kmask, (size_t)(B * T));
  void **ap[DIT_LTX2_ATTN_SCRATCH] = {&b->at.q, &b->at.k, &b->at.v, &b->at.o, &b->at.g};
  for (int q = 0; q < DIT_LTX2_ATTN_SCRATCH; q++) {
    *ap[q] = NULL;
    if (at[q]) DIT_ACT_TAKE(ar, real, *ap[q], at[q]);
  }
  return DIT_OK;
}

/* ---- pieces ------------------------------------------------------------------------ */

/* LTX2AdaLayerNormSingle of the host timesteps t[B] (times mult) into o. */
static dit_status adaln(dit_ltx2 *m, const ltx2_adaln *a, const float *t, float mult, int64_t B, lx_bufs *b,
                        ada_out *o, dit_error *err) {
  dit_backend *be = m->be;
  const dit_act_space *as = &m->as;
  float tv[64];
  if (B > 64) return dit_errorf(err, DIT_ERR_INVALID_ARG, "ltx2: batch %lld is larger than 64", (long long)B);
  for (int64_t i = 0; i < B; i++) tv[i] = t[i] * mult;
  DIT_TRY(be->ops->upload(be, b->tt, tv, (size_t)B * sizeof(float), err));
  dit_tensor tt = dit_act_mk(as, DIT_F32, b->tt, 1, (int64_t[]){B});
  dit_tensor sn = dit_act_2d(as, b->sinus, B, 256), e1 = dit_act_2d(as, b->e1, B, a->dim);
  dit_tensor emb = dit_act_2d(as, o->emb, B, a->dim), se = dit_act_2d(as, b->semb, B, a->dim);
  dit_tensor mod = dit_act_2d(as, b->mod, B, (int64_t)a->n * a->dim);
  DIT_TRY(dit_op_timestep_embedding(be, &sn, &tt, 256, 10000.0f, 0.0f, 1.0f, true, err));
  DIT_TRY(dit_op_linear(be, &e1, &sn, &a->l1, &a->l1_b, DIT_ACT_SILU, err));
  DIT_TRY(dit_op_linear(be, &emb, &e1, &a->l2, &a->l2_b, DIT_ACT_NONE, err));
  DIT_TRY(dit_op_activation(be, &se, &emb, DIT_ACT_SILU, err));
  DIT_TRY(dit_op_linear(be, &mod, &se, &a->lin, &a->lin_b, DIT_ACT_NONE, err));
  /* [B, n, dim] -> [n, B, dim] */
  dit_tensor src = dit_act_3d(as, b->mod, a->n, B, a->dim), dst = dit_act_3d(as, o->modT, a->n, B, a->dim);
  src.stride[0] = a->dim, src.stride[1] = (int64_t)a->n * a->dim, src.stride[2] = 1;
  return dit_op_copy(be, &dst, &src, err);
}

/* out [n, B, D] = table [n, D] (each item) + modT [n, B, D]. */
static dit_status block_params(dit_ltx2 *m, const dit_tensor *table, const void *modT, int64_t n, int64_t B, int64_t D,
                               void *out, dit_error *err) {
  const dit_act_space *as = &m->as;
  dit_tensor tb = *table, o = dit_act_3d(as, out, n, B, D), md = dit_act_3d(as, (void *)modT, n, B, D);
  tb.ndim = 3;
  tb.shape[0] = n, tb.shape[1] = B, tb.shape[2] = D;
  tb.stride[0] = D, tb.stride[1] = 0, tb.stride[2] = 1;
  DIT_TRY(dit_op_copy(m->be, &o, &tb, err));
  return dit_op_add(m->be, &o, &o, &md, err);
}

/* Vector k of a parameter block p [n, B, D]. */
static dit_tensor pvec(const dit_ltx2 *m, void *p, int k, int64_t B, int64_t D) {
  return dit_act_2d(&m->as, dit_act_el(&m->as, p, (int64_t)k * B * D), B, D);
}

/* x += gate * r (r NULL: no residual; gate NULL: 1), then h = rms_norm(x) (no weight) * (1 +
 * scale) + shift (scale NULL: the norm only; h NULL: none): one pass where the backend fuses it. */
static dit_status res_norm_mod(dit_ltx2 *m, dit_tensor *x, const dit_tensor *r, const dit_tensor *gate, dit_tensor *h,
                               const dit_tensor *scale, const dit_tensor *shift, dit_error *err) {
  return dit_op_residual_rms_mod(m->be, x, r, gate, h, NULL, scale, shift, m->cfg.norm_eps, err);
}

/* Vector k of a stream's parameter block [n, B, D]: p for every token, or for the tokens after
 * the conditioning ones when pc (their version) is not NULL. p NULL: no vector. */
typedef struct pref {
  void *p, *pc;
  int k;
} pref;

static pref pr(void *p, void *pc, int k) { return (pref){p, pc, k}; }
static const pref NOREF = {NULL, NULL, 0};

/* One modulated elementwise op over a stream's [B, S, D] buffers: MOD_RNM: x += gate * r, then
 * h = rms_norm(x) * (1 + scale) + shift (res_norm_mod's NULL rules); MOD_MOD: h = x * (1 + scale)
 * + shift; MOD_GADD: x += gate * r. */
enum { MOD_RNM, MOD_MOD, MOD_GADD };
typedef struct mod_op {
  int kind;
  void *x, *r, *h;
  pref gate, scale, shift;
} mod_op;

typedef struct call_state {
  const dit_ltx2_call *c;
  int64_t B, T;
  int64_t P; /* conditioning tokens per item (the video stream's; 0: none) */
  bool masked;
  dit_tensor rope[2][2], crope[2][2]; /* [stream][cos, sin] */
} call_state;

/* mod_op on items [b, b + nb) and tokens [t0, t0 + nt) of each, with the conditioning tokens'
 * parameters when cond. */
static dit_status mod_part(dit_ltx2 *m, const mod_op *o, int64_t B, int64_t S, int64_t D, int64_t b, int64_t nb,
                           int64_t t0, int64_t nt, bool cond, dit_error *err) {
  const dit_act_space *as = &m->as;
  const int64_t off = (b * S + t0) * D;
  void *bufs[3] = {o->x, o->r, o->h};
  dit_tensor t[3], v[3];
  dit_tensor *tp[3] = {NULL, NULL, NULL}, *vp[3] = {NULL, NULL, NULL};
  for (int k = 0; k < 3; k++)
    if (bufs[k]) t[k] = dit_act_3d(as, dit_act_el(as, bufs[k], off), nb, nt, D), tp[k] = &t[k];
  const pref *refs[3] = {&o->gate, &o->scale, &o->shift};
  for (int k = 0; k < 3; k++) {
    if (!refs[k]->p) continue;
    void *base = cond && refs[k]->pc ? refs[k]->pc : refs[k]->p;
    v[k] = dit_act_2d(as, dit_act_el(as, base, ((int64_t)refs[k]->k * B + b) * D), nb, D), vp[k] = &v[k];
  }
  switch (o->kind) {
    case MOD_RNM: return res_norm_mod(m, tp[0], tp[1], vp[0], tp[2], vp[1], vp[2], err);
    case MOD_MOD: return dit_op_modulate(m->be, tp[2], tp[0], vp[1], vp[2], err);
    default: return dit_op_gated_add(m->be, tp[0], tp[1], vp[0], false, err);
  }
}

/* mod_op o on a stream of S tokens of width D: in one call, or, when a vector of it has a
 * conditioning version, per item in two parts (the first cs->P tokens, then the rest). */
static dit_status mod_run(dit_ltx2 *m, const call_state *cs, int64_t S, int64_t D, const mod_op *o, dit_error *err) {
  const int64_t B = cs->B, P = cs->P < S ? cs->P : S;
  if (P == 0 || !(o->gate.pc || o->scale.pc || o->shift.pc)) return mod_part(m, o, B, S, D, 0, B, 0, S, false, err);
  if (P == S) return mod_part(m, o, B, S, D, 0, B, 0, S, true, err);
  for (int64_t b = 0; b < B; b++) {
    DIT_TRY(mod_part(m, o, B, S, D, b, 1, 0, P, true, err));
    DIT_TRY(mod_part(m, o, B, S, D, b, 1, P, S - P, false, err));
  }
  return DIT_OK;
}

/* A stream's block vectors: k of pb [9, B, D] (time) and of pc [5, B, D] (cross-modal). */
static pref pb_ref(const stream_bufs *s, int k) { return pr(s->pb, s->pbc, k); }
static pref pc_ref(const stream_bufs *s, int k) { return pr(s->pc, s->pcc, k); }

static dit_status ff(dit_ltx2 *m, const ltx2_ff *f, dit_tensor *h, void *mid, dit_tensor *y, dit_error *err) {
  dit_tensor u = dit_act_3d(&m->as, mid, h->shape[0], h->shape[1], 4 * h->shape[2]);
  DIT_TRY(dit_op_linear(m->be, &u, h, &f->w1, &f->b1, DIT_ACT_GELU_TANH, err));
  return dit_op_linear(m->be, y, &u, &f->w2, &f->b2, DIT_ACT_NONE, err);
}

/* ---- a block ---------------------------------------------------------------------- */

static dit_tensor act3(const dit_ltx2 *m, void *p, int64_t B, int64_t S, int64_t D) { return dit_act_3d(&m->as, p, B, S, D); }

/* Self-attention and text cross-attention of stream i; then the next norm of its residual:
 * the cross-modal attention's (into nrm) or, with the modalities isolated, the MLP's (into h). */
static dit_status self_and_text(dit_ltx2 *m, const ltx2_half *h, int i, bool stg, const call_state *cs, lx_bufs *b,
                                dit_error *err) {
  const dit_ltx2_stream_config *sc = scfg(m, i);
  stream_bufs *s = &b->s[i];
  const int64_t B = cs->B, S = s->S, D = s->D, T = cs->T;
  dit_tensor hn = act3(m, s->h, B, S, D), y = act3(m, s->y, B, S, D);
  const mod_op n1 = {MOD_RNM, s->x, NULL, s->h, NOREF, pb_ref(s, 1), pb_ref(s, 0)};
  DIT_TRY(mod_run(m, cs, S, D, &n1, err));
  DIT_TRY(dit_ltx2_attn_forward(m->be, &m->as, &h->attn1, m->cfg.norm_eps, B, S, S, &hn, NULL, &cs->rope[i][0],
                                &cs->rope[i][1], NULL, NULL, NULL, stg, &b->at, &y, err));
  /* the residual, and the text cross-attention's queries */
  const int64_t C = m->cfg.use_prompt_embeddings ? D : sc->cross_attention_dim;
  dit_tensor ctx = act3(m, s->ctx, B, T, C);
  const mod_op n2 = {MOD_RNM, s->x, s->y, s->h, pb_ref(s, 2), sc->cross_attn_mod ? pb_ref(s, 7) : NOREF,
                     sc->cross_attn_mod ? pb_ref(s, 6) : NOREF};
  DIT_TRY(mod_run(m, cs, S, D, &n2, err));
  if (m->cfg.video.cross_attn_mod || m->cfg.audio.cross_attn_mod) { /* the prompt side, from sigma */
    dit_tensor kv_shift = pvec(m, s->pp, 0, B, C), kv_scale = pvec(m, s->pp, 1, B, C);
    dit_tensor cm = act3(m, s->ctxm, B, T, C);
    DIT_TRY(dit_op_modulate(m->be, &cm, &ctx, &kv_scale, &kv_shift, err));
    ctx = cm;
  }
  dit_tensor km = dit_act_mk(&m->as, DIT_U8, b->kmask, 2, (int64_t[]){B, T});
  DIT_TRY(dit_ltx2_attn_forward(m->be, &m->as, &h->attn2, m->cfg.norm_eps, B, S, T, &hn, &ctx, NULL, NULL, NULL, NULL,
                                cs->masked ? &km : NULL, false, &b->at, &y, err));
  const pref gq = sc->cross_attn_mod ? pb_ref(s, 8) : NOREF;
  const bool iso = cs->c->isolate_modalities; /* then the MLP's norm next */
  const mod_op n3 = {MOD_RNM, s->x, s->y, iso ? s->h : s->nrm, gq, iso ? pb_ref(s, 4) : NOREF,
                     iso ? pb_ref(s, 3) : NOREF};
  return mod_run(m, cs, S, D, &n3, err);
}

/* Audio-to-video and video-to-audio cross-attention: both read the norms of the streams as
 * they are before either update (nrm, made by self_and_text); then each stream's residual and
 * its MLP's norm (into h). The modulated norms of both sides go to the streams' mq. */
static dit_status cross_modal(dit_ltx2 *m, const ltx2_block *blk, const call_state *cs, lx_bufs *b, dit_error *err) {
  const int64_t B = cs->B;
  for (int i = 0; i < 2; i++) { /* i = the queries' stream: 0 a2v (video queries), 1 v2a */
    stream_bufs *q = &b->s[i], *k = &b->s[1 - i];
    const ltx2_half *h = i ? &blk->a : &blk->v;
    /* ca params [5, B, D]: (a2v scale, a2v shift, v2a scale, v2a shift, gate) */
    const int sq = i ? 2 : 0;
    const mod_op mq = {MOD_MOD, q->nrm, NULL, q->mq, NOREF, pc_ref(q, sq), pc_ref(q, sq + 1)};
    const mod_op mk = {MOD_MOD, k->nrm, NULL, k->mq, NOREF, pc_ref(k, sq), pc_ref(k, sq + 1)};
    DIT_TRY(mod_run(m, cs, q->S, q->D, &mq, err));
    DIT_TRY(mod_run(m, cs, k->S, k->D, &mk, err));
    dit_tensor y = act3(m, q->y, B, q->S, q->D), qt = act3(m, q->mq, B, q->S, q->D);
    dit_tensor kt = act3(m, k->mq, B, k->S, k->D);
    DIT_TRY(dit_ltx2_attn_forward(m->be, &m->as, &h->cross, m->cfg.norm_eps, B, q->S, k->S, &qt, &kt, &cs->crope[i][0],
                                  &cs->crope[i][1], &cs->crope[1 - i][0], &cs->crope[1 - i][1], NULL, false, &b->at, &y,
                                  err));
    const mod_op r = {MOD_RNM, q->x, q->y, q->h, pc_ref(q, 4), pb_ref(q, 4), pb_ref(q, 3)};
    DIT_TRY(mod_run(m, cs, q->S, q->D, &r, err));
  }
  return DIT_OK;
}

static dit_status block_forward(dit_ltx2 *m, int bi, const call_state *cs, lx_bufs *b, dit_error *err) {
  const ltx2_block *blk = &m->blocks[bi];
  const int64_t B = cs->B;
  bool stg = false;
  for (int k = 0; k < cs->c->n_stg_blocks; k++) stg = stg || cs->c->stg_blocks[k] == bi;
  stg = stg && m->cfg.perturbed_attn; /* LTX-2.0's processor ignores the perturbation */
  for (int i = 0; i < 2; i++) {
    const ltx2_half *h = i ? &blk->a : &blk->v;
    stream_bufs *s = &b->s[i];
    ltx2_stream *st = stream(m, i);
    DIT_TRY(block_params(m, &h->table, s->time.modT, st->time.n, B, s->D, s->pb, err));
    if (s->pbc) DIT_TRY(block_params(m, &h->table, s->timec.modT, st->time.n, B, s->D, s->pbc, err));
    if (st->prompt.n) DIT_TRY(block_params(m, &h->prompt_table, s->prompt.modT, 2, B, s->D, s->pp, err));
    /* ca_table [5, D]: rows 0..3 with the scale/shift AdaLN, row 4 with the gate's */
    DIT_TRY(block_params(m, &h->ca_table, s->cass.modT, 4, B, s->D, s->pc, err));
    dit_tensor gt = h->ca_table;
    gt.data = (char *)gt.data + (size_t)4 * (size_t)s->D * dit_dtype_size(gt.dtype);
    gt.shape[0] = 1;
    DIT_TRY(block_params(m, &gt, s->cag.modT, 1, B, s->D, dit_act_el(&m->as, s->pc, 4 * B * s->D), err));
    if (s->pcc) {
      DIT_TRY(block_params(m, &h->ca_table, s->cassc.modT, 4, B, s->D, s->pcc, err));
      DIT_TRY(block_params(m, &gt, s->cagc.modT, 1, B, s->D, dit_act_el(&m->as, s->pcc, 4 * B * s->D), err));
    }
  }
  for (int i = 0; i < 2; i++) DIT_TRY(self_and_text(m, i ? &blk->a : &blk->v, i, stg, cs, b, err));
  if (!cs->c->isolate_modalities) DIT_TRY(cross_modal(m, blk, cs, b, err));
  for (int i = 0; i < 2; i++) { /* the MLP on h, its norm made above */
    const ltx2_half *h = i ? &blk->a : &blk->v;
    stream_bufs *s = &b->s[i];
    dit_tensor hn = act3(m, s->h, B, s->S, s->D), y = act3(m, s->y, B, s->S, s->D);
    DIT_TRY(ff(m, &h->ff, &hn, s->ff, &y, err));
    const mod_op g = {MOD_GADD, s->x, s->y, NULL, pb_ref(s, 5), NOREF, NOREF};
    DIT_TRY(mod_run(m, cs, s->S, s->D, &g, err));
  }
  return DIT_OK;
}

/* ---- the call ---------------------------------------------------------------------- */

/* Uploads cos/sin of angles [n] as a [rows, n / rows] table pair at *at (advanced past both). */
static dit_status upload_rope(dit_ltx2 *m, const float *angles, int64_t n, int64_t rows, char **at, dit_tensor *tab,
                              dit_error *err) {
  float *cs = malloc((size_t)(2 * n) * sizeof *cs);
  if (!cs) return dit_errorf(err, DIT_ERR_NOMEM, "ltx2: out of memory for RoPE tables");
  dit_ltx2_rope_cos_sin(angles, n, cs, cs + n);
  dit_status s = m->be->ops->upload(m->be, *at, cs, (size_t)(2 * n) * sizeof *cs, err);
  free(cs);
  tab[0] = dit_act_mk(&m->as, DIT_F32, *at, 2, (int64_t[]){rows, n / rows});
  tab[1] = dit_act_mk(&m->as, DIT_F32, *at + (size_t)n * sizeof(float), 2, (int64_t[]){rows, n / rows});
  *at += (size_t)(2 * n) * sizeof(float);
  return s;
}

/* The four RoPE tables of a geometry, into the model's cache (a new block): video (3 axes) and
 * audio (time) self-attention, and both streams' time for the cross-modal attention (width
 * audio_cross_attention_dim, split over the video heads for the video side and the audio
 * heads for the audio side). */
static dit_status build_ropes(dit_ltx2 *m, const dit_ltx2_call *c, int64_t N, int64_t NA, dit_error *err) {
  const dit_ltx2_config *g = &m->cfg;
  ltx2_rope_cache *rc = &m->rope;
  const int64_t Dv = m->v.D, Da = m->a.D, Dca = g->audio.cross_attention_dim;
  const int64_t big = N > NA ? N : NA, wide = Dv > Dca ? (Dv > Da ? Dv : Da) : (Dca > Da ? Dca : Da);
  if (rc->block) m->be->ops->free(m->be, rc->block);
  rc->block = NULL, rc->valid = false;
  DIT_TRY(m->be->ops->alloc(m->be, (size_t)(N * (Dv + Dca) + NA * (Da + Dca)) * sizeof(float), &rc->block, err));
  char *at = rc->block;
  float *coords = malloc((size_t)(6 * big + 3 * big + big * wide / 2) * sizeof *coords);
  if (!coords) return dit_errorf(err, DIT_ERR_NOMEM, "ltx2: out of memory for RoPE positions");
  float *pos = coords + 6 * big, *ang = pos + 3 * big;
  const int cmax = g->video.pos_embed_max_pos > g->audio.pos_embed_max_pos ? g->video.pos_embed_max_pos
                                                                           : g->audio.pos_embed_max_pos;
  /* video: midpoints of the patch boundaries over (frames, height, width) bases */
  dit_ltx2_video_coords(c->frames, c->height, c->width, g->vae_scale_factors, g->causal_offset, c->fps, coords);
  const float vbase[3] = {(float)g->video.pos_embed_max_pos, (float)g->base_height, (float)g->base_width};
  for (int64_t n = 0; n < N; n++)
    for (int d = 0; d < 3; d++)
      pos[n * 3 + d] = (coords[(d * N + n) * 2] + coords[(d * N + n) * 2 + 1]) / 2.0f / vbase[d];
  dit_ltx2_rope_angles(pos, N, 3, (int)Dv, g->rope_theta, g->rope_double_precision, ang);
  dit_status s = upload_rope(m, ang, N * Dv / 2, N * g->video.heads, &at, rc->rope[0], err);
  for (int64_t n = 0; s == DIT_OK && n < N; n++) pos[n] = (coords[n * 2] + coords[n * 2 + 1]) / 2.0f / (float)cmax;
  if (s == DIT_OK) {
    dit_ltx2_rope_angles(pos, N, 1, (int)Dca, g->rope_theta, g->rope_double_precision, ang);
    s = upload_rope(m, ang, N * Dca / 2, N * g->video.heads, &at, rc->crope[0], err);
  }
  /* audio: the time axis */
  if (s == DIT_OK) {
    dit_ltx2_audio_coords((int)NA, g->audio_scale_factor, g->causal_offset, g->audio_hop_length,
                          g->audio_sampling_rate, coords);
    for (int64_t n = 0; n < NA; n++)
      pos[n] = (coords[n * 2] + coords[n * 2 + 1]) / 2.0f / (float)g->audio.pos_embed_max_pos;
    dit_ltx2_rope_angles(pos, NA, 1, (int)Da, g->rope_theta, g->rope_double_precision, ang);
    s = upload_rope(m, ang, NA * Da / 2, NA * g->audio.heads, &at, rc->rope[1], err);
  }
  if (s == DIT_OK) {
    for (int64_t n = 0; n < NA; n++) pos[n] = (coords[n * 2] + coords[n * 2 + 1]) / 2.0f / (float)cmax;
    dit_ltx2_rope_angles(pos, NA, 1, (int)Dca, g->rope_theta, g->rope_double_precision, ang);
    s = upload_rope(m, ang, NA * Dca / 2, NA * g->audio.heads, &at, rc->crope[1], err);
  }
  free(coords);
  if (s == DIT_OK) {
    rc->valid = true;
    rc->frames = c->frames, rc->height = c->height, rc->width = c->width, rc->audio_frames = c->audio_frames;
    rc->fps = c->fps;
  }
  return s;
}

/* The call's RoPE tables: the cached ones when its geometry is the last call's. */
static dit_status ropes(dit_ltx2 *m, const dit_ltx2_call *c, const lx_bufs *b, call_state *cs, dit_error *err) {
  const ltx2_rope_cache *rc = &m->rope;
  if (!(rc->valid && rc->frames == c->frames && rc->height == c->height && rc->width == c->width &&
        rc->audio_frames == c->audio_frames && rc->fps == c->fps))
    DIT_TRY(build_ropes(m, c, b->s[0].S, b->s[1].S, err));
  memcpy(cs->rope, rc->rope, sizeof cs->rope);
  memcpy(cs->crope, rc->crope, sizeof cs->crope);
  return DIT_OK;
}

/* Inputs: proj_in, the text features (caption projections in 2.0), and the call's AdaLNs. */
static dit_status prologue(dit_ltx2 *m, const dit_ltx2_call *c, lx_bufs *b, dit_error *err) {
  const int64_t B = c->B, T = c->text_len;
  const float *tv = c->timestep, *ta = c->audio_timestep ? c->audio_timestep : tv;
  const float *sv = c->sigma ? c->sigma : tv, *sa = c->audio_sigma ? c->audio_sigma : sv;
  const float gate_mult = (float)(m->cfg.cross_attn_timestep_scale_multiplier / m->cfg.timestep_scale_multiplier);
  for (int i = 0; i < 2; i++) {
    stream_bufs *s = &b->s[i];
    ltx2_stream *st = stream(m, i);
    const dit_ltx2_stream_config *sc = scfg(m, i);
    dit_tensor in = dit_act_mk(&m->as, DIT_F32, (void *)(i ? c->audio : c->video), 3, (int64_t[]){B, s->S, sc->in_channels});
    dit_tensor x = act3(m, s->x, B, s->S, s->D);
    DIT_TRY(dit_op_linear(m->be, &x, &in, &st->proj_in, &st->proj_in_b, DIT_ACT_NONE, err));
    const int64_t tw = m->cfg.use_prompt_embeddings ? m->cfg.caption_channels : sc->cross_attention_dim;
    dit_tensor txt = dit_act_mk(&m->as, DIT_F32, (void *)(i ? c->audio_text : c->text), 3, (int64_t[]){B, T, tw});
    if (m->cfg.use_prompt_embeddings) {
      dit_tensor t1 = act3(m, s->ctmp, B, T, s->D), ctx = act3(m, s->ctx, B, T, s->D);
      DIT_TRY(dit_op_linear(m->be, &t1, &txt, &st->cap1, &st->cap1_b, DIT_ACT_GELU_TANH, err));
      DIT_TRY(dit_op_linear(m->be, &ctx, &t1, &st->cap2, &st->cap2_b, DIT_ACT_NONE, err));
    } else {
      dit_tensor ctx = act3(m, s->ctx, B, T, tw);
      DIT_TRY(dit_op_copy(m->be, &ctx, &txt, err));
    }
    /* the stream's own timestep; the cross-modal ones from the other stream's sigma with use_cross_timestep */
    const float *own = i ? ta : tv, *cross = c->use_cross_timestep ? (i ? sv : sa) : own;
    DIT_TRY(adaln(m, &st->time, own, 1.0f, B, b, &s->time, err));
    DIT_TRY(adaln(m, &st->ca_scale_shift, cross, 1.0f, B, b, &s->cass, err));
    DIT_TRY(adaln(m, &st->ca_gate, cross, gate_mult, B, b, &s->cag, err));
    if (st->prompt.n) DIT_TRY(adaln(m, &st->prompt, i ? sa : sv, 1.0f, B, b, &s->prompt, err));
    if (s->pbc) { /* the conditioning tokens' timestep */
      float zero[64] = {0};
      const float *tc = c->cond_timestep ? c->cond_timestep : zero;
      DIT_TRY(adaln(m, &st->time, tc, 1.0f, B, b, &s->timec, err));
      if (s->pcc) {
        DIT_TRY(adaln(m, &st->ca_scale_shift, tc, 1.0f, B, b, &s->cassc, err));
        DIT_TRY(adaln(m, &st->ca_gate, tc, gate_mult, B, b, &s->cagc, err));
      }
    }
  }
  return DIT_OK;
}

/* The output's shift / scale into out [2, B, D]: the table plus the embedded timestep emb [B, D]
 * (twice, through the stream's pp). */
static dit_status out_params(dit_ltx2 *m, const ltx2_stream *st, stream_bufs *s, int64_t B, void *emb, void *out,
                             dit_error *err) {
  for (int k = 0; k < 2; k++) {
    dit_tensor src = dit_act_2d(&m->as, emb, B, s->D), dst = pvec(m, s->pp, k, B, s->D);
    DIT_TRY(dit_op_copy(m->be, &dst, &src, err));
  }
  return block_params(m, &st->table, s->pp, 2, B, s->D, out, err);
}

/* norm_out (LayerNorm without weights), then shift / scale = table + the embedded timestep, proj_out. */
static dit_status epilogue(dit_ltx2 *m, const call_state *cs, lx_bufs *b, float *vout, float *aout, dit_error *err) {
  const int64_t B = cs->B;
  for (int i = 0; i < 2; i++) {
    stream_bufs *s = &b->s[i];
    ltx2_stream *st = stream(m, i);
    DIT_TRY(out_params(m, st, s, B, s->time.emb, s->pb, err));
    if (s->pbc) DIT_TRY(out_params(m, st, s, B, s->timec.emb, s->pbc, err));
    dit_tensor x = act3(m, s->x, B, s->S, s->D), hn = act3(m, s->h, B, s->S, s->D);
    DIT_TRY(dit_op_layer_norm(m->be, &hn, &x, NULL, NULL, 1e-6f, err));
    const mod_op mo = {MOD_MOD, s->h, NULL, s->h, NOREF, pb_ref(s, 1), pb_ref(s, 0)};
    DIT_TRY(mod_run(m, cs, s->S, s->D, &mo, err));
    const int64_t oc = scfg(m, i)->out_channels;
    dit_tensor out = dit_act_mk(&m->as, DIT_F32, i ? aout : vout, 3, (int64_t[]){B, s->S, oc});
    DIT_TRY(dit_op_linear(m->be, &out, &hn, &st->proj_out, &st->proj_out_b, DIT_ACT_NONE, err));
  }
  return DIT_OK;
}

static dit_status check_call(const dit_ltx2 *m, const dit_ltx2_call *c, dit_error *err) {
  if (!c || !c->video || !c->audio || !c->text || !c->audio_text || !c->timestep)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "ltx2 forward: a NULL input");
  if (c->B < 1 || c->B > 64 || c->frames < 1 || c->height < 1 || c->width < 1 || c->audio_frames < 1 ||
      c->text_len < 1 || !(c->fps > 0.0f) || (int64_t)c->frames * c->height * c->width > (1 << 24))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "ltx2 forward: batch %d, %dx%dx%d latents, %d audio frames, %d text "
                      "tokens or %g fps out of range", c->B, c->frames, c->height, c->width, c->audio_frames,
                      c->text_len, c->fps);
  if (c->cond_tokens < 0 || (int64_t)c->cond_tokens > (int64_t)c->frames * c->height * c->width)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "ltx2 forward: %d conditioning tokens of %lld", c->cond_tokens,
                      (long long)c->frames * c->height * c->width);
  for (int k = 0; k < c->n_stg_blocks; k++)
    if (!c->stg_blocks || c->stg_blocks[k] < 0 || c->stg_blocks[k] >= m->cfg.num_layers)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "ltx2 forward: STG block %d is not one of the %d blocks",
                        c->stg_blocks ? c->stg_blocks[k] : -1, m->cfg.num_layers);
  return DIT_OK;
}

dit_status dit_ltx2_forward(dit_ltx2 *m, const dit_ltx2_call *c, float *video_out, float *audio_out, dit_error *err) {
  if (!m || !video_out || !audio_out) return dit_errorf(err, DIT_ERR_INVALID_ARG, "ltx2 forward: NULL argument");
  DIT_TRY(check_call(m, c, err));
  lx_bufs b;
  memset(&b, 0, sizeof b);
  dit_arena ar;
  dit_arena_init_measure(&ar);
  DIT_TRY(plan(&ar, false, m, c, &b, err));
  DIT_TRY(dit_act_space_fit(&m->as, m->be, &ar, 0, &(bool){false}, err));
  DIT_TRY(plan(&ar, true, m, c, &b, err));
  call_state cs = {.c = c, .B = c->B, .T = c->text_len, .P = c->cond_tokens, .masked = false};
  if (c->text_mask) {
    for (int64_t i = 0; i < (int64_t)c->B * c->text_len; i++) cs.masked = cs.masked || !c->text_mask[i];
    if (cs.masked) DIT_TRY(m->be->ops->upload(m->be, b.kmask, c->text_mask, (size_t)c->B * c->text_len, err));
  }
  DIT_TRY(ropes(m, c, &b, &cs, err));
  DIT_TRY(prologue(m, c, &b, err));
  for (int i = 0; i < m->cfg.num_layers; i++) {
    dit_status s = block_forward(m, i, &cs, &b, err);
    if (s != DIT_OK) {
      dit_error_prefix(err, "ltx2 block %d", i);
      return s;
    }
  }
  DIT_TRY(epilogue(m, &cs, &b, video_out, audio_out, err));
  return m->be->ops->sync(m->be, err);
}

dit_status dit_ltx2_cost(const dit_ltx2 *m, const dit_ltx2_call *c, dit_cost *out, dit_error *err) {
  if (!m || !c || !out || c->B < 1 || c->B > 64 || c->frames < 1 || c->height < 1 || c->width < 1 ||
      c->audio_frames < 1 || c->text_len < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "ltx2 cost: bad arguments");
  lx_bufs b;
  memset(&b, 0, sizeof b);
  dit_arena ar;
  dit_arena_init_measure(&ar);
  DIT_TRY(plan(&ar, false, (dit_ltx2 *)m, c, &b, err));
  const int64_t N = (int64_t)c->frames * c->height * c->width, NA = c->audio_frames, T = c->text_len;
  const int64_t Dv = m->v.D, Da = m->a.D, Dca = m->cfg.audio.cross_attention_dim;
  const int64_t big = N > NA ? N : NA, wide = Dv > Dca ? (Dv > Da ? Dv : Da) : (Dca > Da ? Dca : Da);
  /* build_ropes: the tables (kept), its positions and one table's cos/sin on the host */
  const size_t tables = (size_t)(N * (Dv + Dca) + NA * (Da + Dca)) * sizeof(float);
  const size_t host = (size_t)(9 * big + big * wide / 2) * sizeof(float) + (size_t)(big * wide) * sizeof(float);
  out->act_bytes = ar.peak + tables + host;
  out->flops = dit_ltx2_flops(&m->cfg, c->B, N, NA, T);
  return DIT_OK;
}

/* One attention's MACs whose queries are Sq tokens of width Dq, keys Sk tokens of width Dk, inner width I
 * (q, k, v, out and, gated, the per-head gate logits), and its QK^T + PV. */
static double attn_flops(double Sq, double Dq, double Sk, double Dk, double I, double heads, bool gated) {
  const double macs = Sq * Dq * I * 2 + Sk * Dk * I * 2 + (gated ? Sq * Dq * heads : 0);
  return 2 * macs + 4 * Sq * Sk * I;
}

double dit_ltx2_flops(const dit_ltx2_config *c, int64_t B, int64_t n_video, int64_t n_audio, int64_t n_text) {
  const double S[2] = {(double)n_video, (double)n_audio}, T = (double)n_text;
  const dit_ltx2_stream_config *sc[2] = {&c->video, &c->audio};
  const double Ica = (double)c->audio.heads * c->audio.head_dim; /* the cross-modal attentions' inner width */
  double blk = 0, rest = 0;
  for (int i = 0; i < 2; i++) {
    const double D = (double)sc[i]->heads * sc[i]->head_dim, Do = (double)sc[1 - i]->heads * sc[1 - i]->head_dim;
    const double C = c->use_prompt_embeddings ? D : sc[i]->cross_attention_dim;
    blk += attn_flops(S[i], D, S[i], D, D, sc[i]->heads, sc[i]->gated_attn);
    blk += attn_flops(S[i], D, T, C, D, sc[i]->heads, sc[i]->gated_attn);
    blk += attn_flops(S[i], D, S[1 - i], Do, Ica, c->audio.heads, sc[i]->gated_attn);
    blk += 2 * 8 * D * D * S[i];
    rest += 2 * S[i] * D * (sc[i]->in_channels + sc[i]->out_channels);
    if (c->use_prompt_embeddings) rest += 2 * T * (c->caption_channels * D + D * D);
  }
  return (double)B * (c->num_layers * blk + rest);
}

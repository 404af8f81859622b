/* Attention-related ops of the CPU backend: scaled dot-product attention (GQA, key
 * padding mask, causal), rotary embeddings (interleaved and rotate-half) and softmax.
 * Attention is blocked (flash-attention style, see below): the full [Sq, Sk] score
 * matrix is never materialised. */
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "backend/cpu/cpu_gemm.h"
#include "backend/cpu/cpu_internal.h"

static dit_status check_qkv(const char *name, const dit_tensor *t, dit_error *err) {
  if (!t) return dit_errorf(err, DIT_ERR_INVALID_ARG, "attention: %s is NULL", name);
  if (t->dtype != DIT_F32 || t->ndim != 4 || !t->data)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "attention: %s must be a 4-D F32 tensor [B, S, H, D] (got %s, %d dims)",
                      name, dit_dtype_name(t->dtype), t->ndim);
  if (t->stride[3] != 1 && t->shape[3] > 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "attention: %s must have unit stride on its last dim", name);
  return DIT_OK;
}

/* Blocked attention: a work item is (batch, head, block of QB queries); keys are taken
 * KB at a time: S = Q K^T with the GEMM kernels (K block packed like a weight), masked,
 * folded into a running max / sum per query (online softmax), and O += P V (V block
 * packed K-major). Only QB x KB scores exist at a time. */
#define ATT_QB 192
#define ATT_KB 128

typedef struct att_args {
  const cpu_gemm_path *P;
  const dit_tensor *q, *k, *v;
  const uint8_t *mask;
  const dit_tensor *out; /* any strides, unit last */
  int64_t Sq, Sk, Hq, Hkv, D;
  float scale;
  bool causal;
} att_args;

/* Per-thread buffers: K and V of one head packed for every key (reused by all query
 * blocks of a work item), and the state of one query block. */
typedef struct att_buf {
  float *kp, *vp, *qs, *s, *o, *m, *l;
} att_buf;

static int64_t rup(int64_t a, int64_t m) { return (a + m - 1) / m * m; }

static size_t att_buf_floats(int64_t Sk, int64_t D, int nr) {
  size_t n = (size_t)(rup(Sk, nr) * D + rup(D, nr) * Sk + 2 * ATT_QB * D + ATT_QB * ATT_KB + 2 * ATT_QB + 64);
  return (n + 15) & ~(size_t)15; /* keeps every thread's buffer 64-byte aligned */
}

/* The threads of an attention over B x Hq heads of Sq queries, and its work items: (batch, head, chunk of
 * query blocks); chunks only as small as needed for about 8 items per thread, since each item packs its K
 * and V once. */
static int att_threads(const dit_backend *be, int64_t B, int64_t Sq, int64_t Hq, int64_t *nch_out, int64_t *bpc_out,
                       int64_t *items) {
  int nt = be->n_threads < 1 ? 1 : be->n_threads;
  int64_t nqb = (Sq + ATT_QB - 1) / ATT_QB, nch = (8 * nt + B * Hq - 1) / (B * Hq);
  if (nch > nqb) nch = nqb;
  if (nch < 1) nch = 1;
  const int64_t bpc = (nqb + nch - 1) / nch;
  nch = (nqb + bpc - 1) / bpc;
  *nch_out = nch, *bpc_out = bpc, *items = B * Hq * nch;
  return *items < nt ? (int)*items : nt;
}

size_t dit_cpu_attention_workspace(const dit_backend *be, int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t D) {
  if (!dit_backend_is_host(be) || B < 1 || Sq < 1 || Sk < 1 || Hq < 1 || D < 1) return 0;
  int64_t nch, bpc, items;
  const int nt = att_threads(be, B, Sq, Hq, &nch, &bpc, &items);
  return att_buf_floats(Sk, D, cpu_gemm_path_for(be)->nr) * sizeof(float) * (size_t)nt;
}

static void att_buf_split(att_buf *B, float *base, int64_t Sk, int64_t D, int nr) {
  B->kp = base; /* packed panels on 64-byte boundaries: aligned loads in the kernels */
  B->vp = B->kp + rup(rup(Sk, nr) * D, 16);
  B->qs = B->vp + rup(rup(D, nr) * Sk, 16);
  B->o = B->qs + ATT_QB * D;
  B->s = B->o + ATT_QB * D;
  B->m = B->s + ATT_QB * ATT_KB;
  B->l = B->m + ATT_QB;
}

/* y[0..M, 0..N) (+)= x[0..M, 0..K) . panels (nr columns each, ps floats apart). */
static void mm_panels(const cpu_gemm_path *P, int64_t M, int64_t N, int64_t K, const float *x, int64_t ldx,
                      const float *wp, int64_t ps, float *y, int64_t ldy, bool acc) {
  for (int64_t i = 0; i < M; i += P->mr) {
    int mr = (int)(M - i < P->mr ? M - i : P->mr);
    for (int64_t j = 0; j < N; j += P->nr) {
      int nr = (int)(N - j < P->nr ? N - j : P->nr);
      P->kern(mr, nr, K, x + i * ldx, ldx, wp + (j / P->nr) * ps, y + i * ldy + j, ldy, acc);
    }
  }
}

/* Masks one S block (rows = queries i0.., columns = keys j0..) and folds it into the
 * running softmax state; leaves P = exp(S - m) in S and rescales O. */
static void att_softmax_block(const att_args *A, att_buf *B, int64_t b, int64_t i0, int64_t qn, int64_t j0,
                              int64_t kb) {
  const cpu_gemm_path *P = A->P;
  int64_t D = A->D;
  if (A->mask) {
    const uint8_t *mk = A->mask + b * A->Sk + j0;
    for (int64_t j = 0; j < kb; j++)
      if (!mk[j])
        for (int64_t r = 0; r < qn; r++) B->s[r * ATT_KB + j] = -INFINITY;
  }
  for (int64_t r = 0; r < qn; r++) {
    float *sr = B->s + r * ATT_KB;
    if (A->causal)
      for (int64_t j = i0 + r + 1 - j0 < 0 ? 0 : i0 + r + 1 - j0; j < kb; j++) sr[j] = -INFINITY;
    float mold = B->m[r], mnew = P->row_max(sr, kb);
    mnew = mnew > mold ? mnew : mold;
    if (mnew == -INFINITY) { /* nothing visible yet in this row */
      memset(sr, 0, sizeof(float) * (size_t)kb);
      continue;
    }
    float alpha = mold == -INFINITY ? 0.0f : expf(mold - mnew);
    float sum = P->exp_sum(sr, kb, mnew);
    B->l[r] = B->l[r] * alpha + sum;
    B->m[r] = mnew;
    if (alpha != 1.0f) {
      float *orow = B->o + r * D;
#pragma omp simd
      for (int64_t d = 0; d < D; d++) orow[d] *= alpha;
    }
  }
}

/* One block of qn queries from i0 against keys [0, nkeys) already packed in B. */
static void att_qblock(const att_args *A, att_buf *B, int64_t b, int64_t h, int64_t i0, int64_t qn,
                       int64_t nkeys) {
  const cpu_gemm_path *P = A->P;
  int64_t D = A->D;
  const dit_tensor *q = A->q;
  for (int64_t r = 0; r < qn; r++) {
    const float *qr = (const float *)q->data + b * q->stride[0] + (i0 + r) * q->stride[1] + h * q->stride[2];
    float *qs = B->qs + r * D;
#pragma omp simd
    for (int64_t d = 0; d < D; d++) qs[d] = qr[d] * A->scale;
    B->m[r] = -INFINITY;
    B->l[r] = 0.0f;
  }
  memset(B->o, 0, sizeof(float) * (size_t)(qn * D));
  int64_t jend = A->causal ? (i0 + qn < nkeys ? i0 + qn : nkeys) : nkeys;
  for (int64_t j0 = 0; j0 < jend; j0 += ATT_KB) {
    int64_t kb = jend - j0 < ATT_KB ? jend - j0 : ATT_KB;
    mm_panels(P, qn, kb, D, B->qs, D, B->kp + (j0 / P->nr) * D * P->nr, D * P->nr, B->s, ATT_KB, false);
    att_softmax_block(A, B, b, i0, qn, j0, kb);
    mm_panels(P, qn, D, kb, B->s, ATT_KB, B->vp + j0 * P->nr, nkeys * P->nr, B->o, D, true);
  }
  for (int64_t r = 0; r < qn; r++) {
    float *orow = (float *)A->out->data + cpu_off4(A->out, b, i0 + r, h), *o = B->o + r * D;
    float inv = B->l[r] > 0 ? 1.0f / B->l[r] : 0.0f;
#pragma omp simd
    for (int64_t d = 0; d < D; d++) orow[d] = o[d] * inv;
  }
}

/* Queries [qa, qz) of head h: packs K (like a weight: panels of keys) and V (K-major:
 * panels of channels) of its kv head once, then runs the query blocks. */
static void att_chunk(const att_args *A, att_buf *B, int64_t b, int64_t h, int64_t qa, int64_t qz) {
  const cpu_gemm_path *P = A->P;
  const dit_tensor *k = A->k, *v = A->v;
  int64_t hk = h / (A->Hq / A->Hkv);
  int64_t nkeys = A->causal ? (qz < A->Sk ? qz : A->Sk) : A->Sk;
  if (nkeys > 0) {
    const float *kbase = (const float *)k->data + b * k->stride[0] + hk * k->stride[2];
    const float *vbase = (const float *)v->data + b * v->stride[0] + hk * v->stride[2];
    P->pack(B->kp, kbase, DIT_F32, k->stride[1], 0, nkeys, 0, A->D, P->nr);
    cpu_pack_kn(B->vp, vbase, v->stride[1], 0, A->D, nkeys, P->nr);
  }
  for (int64_t i0 = qa; i0 < qz; i0 += ATT_QB) att_qblock(A, B, b, h, i0, qz - i0 < ATT_QB ? qz - i0 : ATT_QB, nkeys);
}

dit_status cpu_attention(dit_backend *be, dit_tensor *out, const dit_tensor *q, const dit_tensor *k,
                         const dit_tensor *v, const dit_tensor *key_mask, float scale, bool causal,
                         dit_error *err) {
  DIT_TRY(check_qkv("q", q, err));
  DIT_TRY(check_qkv("k", k, err));
  DIT_TRY(check_qkv("v", v, err));
  DIT_TRY(check_qkv("out", out, err));
  DIT_TRY(cpu_check_same_shape("attention", "out", out, "q", q, err));
  DIT_TRY(cpu_check_same_shape("attention", "v", v, "k", k, err));
  int64_t B = q->shape[0], Sq = q->shape[1], Hq = q->shape[2], D = q->shape[3];
  int64_t Sk = k->shape[1], Hkv = k->shape[2];
  if (k->shape[0] != B || k->shape[3] != D || Hkv <= 0 || Hq % Hkv != 0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG,
                      "attention: k [%lld, %lld, %lld, %lld] incompatible with q [%lld, %lld, %lld, %lld] "
                      "(same B and D, Hq %% Hkv == 0)",
                      (long long)k->shape[0], (long long)Sk, (long long)Hkv, (long long)k->shape[3], (long long)B,
                      (long long)Sq, (long long)Hq, (long long)D);
  const uint8_t *mask = NULL;
  if (key_mask) {
    if (key_mask->dtype != DIT_U8 && key_mask->dtype != DIT_BOOL)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "attention: key_mask must be U8 or BOOL, got %s",
                        dit_dtype_name(key_mask->dtype));
    int64_t ms[2] = {B, Sk};
    if (!dit_tensor_has_shape(key_mask, 2, ms) || !dit_tensor_is_contiguous(key_mask))
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "attention: key_mask must be contiguous [%lld, %lld]",
                        (long long)B, (long long)Sk);
    mask = key_mask->data;
  }
  for (int i = 0; i < 3; i++)
    if (k->stride[i] < 0 || v->stride[i] < 0 || q->stride[i] < 0 || out->stride[i] < 0)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "attention: negative strides are not supported");
  att_args A = {cpu_gemm_path_for(be), q, k, v, mask, out, Sq, Sk, Hq, Hkv, D, scale, causal};
  if (dit_tensor_numel(out) == 0) return DIT_OK;
  if (Sk == 0 || D == 0) {
    for (int64_t b = 0; b < B; b++)
      for (int64_t i = 0; i < Sq; i++)
        for (int64_t h = 0; h < Hq; h++)
          memset((float *)out->data + cpu_off4(out, b, i, h), 0, sizeof(float) * (size_t)D);
    return DIT_OK;
  }
  int64_t nch = 0, bpc = 0, items = 0;
  const int nt = att_threads(be, B, Sq, Hq, &nch, &bpc, &items);
  if (ATT_KB % A.P->nr)
    return dit_errorf(err, DIT_ERR_INTERNAL, "attention: the kernel path's %d-column panels do not divide the "
                      "%d-key blocks", A.P->nr, ATT_KB);
  size_t per = att_buf_floats(Sk, D, A.P->nr);
  void *mem;
  DIT_TRY(cpu_scratch_take(be, 1, (size_t[]){per * sizeof(float) * (size_t)nt}, &mem, "attention", err));
  float *buf = mem;
#pragma omp parallel num_threads(nt)
  {
    att_buf Bf;
    att_buf_split(&Bf, buf + per * (size_t)omp_get_thread_num(), Sk, D, A.P->nr);
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; it++) {
      int64_t c = it % nch, h = (it / nch) % Hq, b = it / (nch * Hq);
      int64_t qa = c * bpc * ATT_QB, qz = (c + 1) * bpc * ATT_QB;
      att_chunk(&A, &Bf, b, h, qa, qz < Sq ? qz : Sq);
    }
  }
  return DIT_OK;
}

dit_status cpu_rope_check(const dit_tensor *x, const dit_tensor *cos, const dit_tensor *sin, dit_rope_mode mode,
                          bool *shared_out, dit_error *err) {
  DIT_TRY(cpu_check_strided4("rope", "x", x, err));
  DIT_TRY(cpu_check_act("rope", "cos", cos, err));
  DIT_TRY(cpu_check_act("rope", "sin", sin, err));
  DIT_TRY(cpu_check_same_shape("rope", "sin", sin, "cos", cos, err));
  if (x->shape[3] % 2 != 0) return dit_errorf(err, DIT_ERR_INVALID_ARG, "rope: x must be [B, S, H, D] with even D");
  if (mode != DIT_ROPE_INTERLEAVED && mode != DIT_ROPE_HALF)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "rope: unknown mode %d", (int)mode);
  int64_t B = x->shape[0], S = x->shape[1], h2 = x->shape[3] / 2;
  /* cos/sin: [B, S, D/2], or [1, S, D/2] / [S, D/2] shared over the batch. */
  bool ok = cos->shape[cos->ndim - 1] == h2 && cos->ndim >= 2 && cos->shape[cos->ndim - 2] == S &&
            (cos->ndim == 2 || (cos->ndim == 3 && (cos->shape[0] == B || cos->shape[0] == 1)));
  if (!ok) {
    char s1[128];
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "rope: cos/sin %s, expected [%lld, %lld, %lld]",
                      dit_shape_str(cos->shape, cos->ndim, s1, sizeof s1), (long long)B, (long long)S,
                      (long long)h2);
  }
  *shared_out = cos->ndim == 2 || cos->shape[0] == 1;
  return DIT_OK;
}

dit_status cpu_rope(dit_backend *be, dit_tensor *x, const dit_tensor *cos, const dit_tensor *sin,
                    dit_rope_mode mode, dit_error *err) {
  bool shared;
  DIT_TRY(cpu_rope_check(x, cos, sin, mode, &shared, err));
  int64_t B = x->shape[0], S = x->shape[1], H = x->shape[2], D = x->shape[3], h2 = D / 2;
  float *xd = x->data;
  const float *cd = cos->data, *sd = sin->data;
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t bs = 0; bs < B * S; bs++) {
    int64_t crow = shared ? bs % S : bs;
    const float *c = cd + crow * h2, *s = sd + crow * h2;
    for (int64_t h = 0; h < H; h++) cpu_rope_row(xd + cpu_off4(x, bs / S, bs % S, h), c, s, h2, mode);
  }
  return DIT_OK;
}

dit_status cpu_softmax(dit_backend *be, dit_tensor *y, const dit_tensor *x, dit_error *err) {
  int64_t rows, D;
  DIT_TRY(cpu_check_rowwise("softmax", y, x, &rows, &D, err));
  const float *xd = x->data;
  float *yd = y->data;
#pragma omp parallel for num_threads(be->n_threads) schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = xd + r * D;
    float *yr = yd + r * D;
    float mx = -INFINITY;
    for (int64_t i = 0; i < D; i++) mx = xr[i] > mx ? xr[i] : mx;
    float sum = 0;
    for (int64_t i = 0; i < D; i++) {
      yr[i] = expf(xr[i] - mx);
      sum += yr[i];
    }
    float inv = 1.0f / sum;
    for (int64_t i = 0; i < D; i++) yr[i] *= inv;
  }
  return DIT_OK;
}

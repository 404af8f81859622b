/* Attention for head dims above the flash kernels' 256 (the VAE decoder's one-head D = 512
 * mid-block attention): per batch item, head and chunk of query rows, S = Q K^T (cuBLASLt,
 * fp32 accumulation and output) into scratch, a masked row softmax (k_attn_gemm.cu) to P,
 * then O = P V written straight into out's rows. F32 operands: fp32 GEMMs with P in place
 * over S; BF16: BF16 GEMMs with P a BF16 copy. The chunk bounds the scratch (S and P) to
 * im->attn_chunk_bytes (0: CU_ATTN_CHUNK_BYTES). No host sync once the scratch is large
 * enough, so it runs inside a stream capture after an eager call of the same shape. */
#include "backend/cuda/cuda_internal.h"

#define CU_ATTN_CHUNK_BYTES ((size_t)256 << 20)

static int64_t up16(int64_t n) { return (n + 15) / 16 * 16; }
static size_t al256(size_t n) { return (n + 255) & ~(size_t)255; }

/* Query rows per chunk: all of Sq when they fit the budget, else the largest power of two
 * that does (equal chunks for the power-of-two latent sizes: fewer GEMM plans), at least 1. */
static int64_t chunk_rows(size_t budget, size_t row_bytes, int64_t Sq) {
  int64_t fit = (int64_t)(budget / row_bytes);
  if (fit >= Sq) return Sq;
  int64_t n = 1;
  while (n * 2 <= fit) n *= 2;
  return n;
}

/* Sk == 0: every query row sees no key, so out is zero (row by row: out may be strided). */
static dit_status zero_out(cu_impl *im, void *out, size_t es, int64_t B, int64_t Sq, int64_t Hq, int64_t D,
                           const cu_attn_strides *as, dit_error *err) {
  size_t w = (size_t)D * es, pitch = Sq > 1 ? (size_t)as->o[1] * es : w;
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < Hq; h++)
      DIT_TRY(cu_check(cudaMemset2DAsync((char *)out + (size_t)(b * as->o[0] + h * as->o[2]) * es, pitch, 0, w,
                                         (size_t)Sq, im->stream),
                       "cuda attention", "zero out (no keys)", err));
  return DIT_OK;
}

/* Leading dimension of the rows of an [S, D] slice: its sequence stride (D when S == 1, where
 * the stride is not used and may be anything). */
static int64_t row_ld(int64_t S, int64_t stride, int64_t D) { return S > 1 ? stride : D; }

dit_status cu_attention_gemm(dit_backend *be, void *out, const void *q, const void *k, const void *v, int dt,
                             int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D,
                             const uint8_t *mask, float scale, bool causal, const cu_attn_strides *as,
                             dit_error *err) {
  const char *op = "cuda attention (gemm)";
  cu_impl *im = cu_im(be);
  if (dt != DIT_F32 && dt != DIT_BF16)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: %s operands unsupported (F32, BF16)", op,
                      dit_dtype_name((dit_dtype)dt));
  if (B <= 0 || Sq <= 0 || Hq <= 0 || D <= 0) return DIT_OK;
  const size_t es = dit_dtype_size((dit_dtype)dt);
  if (Sk <= 0) return zero_out(im, out, es, B, Sq, Hq, D, as, err);
  const bool bf = dt == DIT_BF16;
  const int pdt = bf ? DIT_BF16 : DIT_F32;
  const int64_t lds = up16(Sk), ldp = lds; /* S: fp32 rows; P: BF16 rows (bf) or S itself */
  const size_t row_bytes = (size_t)lds * 4 + (bf ? (size_t)ldp * 2 : 0);
  const int64_t nq = chunk_rows(im->attn_chunk_bytes ? im->attn_chunk_bytes : CU_ATTN_CHUNK_BYTES, row_bytes, Sq);
  const size_t sbytes = al256((size_t)(nq * lds) * 4), pbytes = bf ? (size_t)(nq * ldp) * 2 : 0;
  void *scr = NULL;
  DIT_TRY(cu_scratch(be, sbytes + pbytes, &scr, err));
  float *S = (float *)scr;
  void *P = bf ? (void *)((char *)scr + sbytes) : scr;
  const int64_t ldq = row_ld(Sq, as->q[1], D), ldk = row_ld(Sk, as->k[1], D), ldv = row_ld(Sk, as->v[1], D),
                ldo = row_ld(Sq, as->o[1], D), group = Hq / Hkv;
  for (int64_t b = 0; b < B; b++) {
    const uint8_t *mb = mask ? mask + b * Sk : NULL;
    for (int64_t h = 0; h < Hq; h++) {
      const int64_t hk = h / group;
      const char *kp = (const char *)k + (size_t)(b * as->k[0] + hk * as->k[2]) * es;
      const char *vp = (const char *)v + (size_t)(b * as->v[0] + hk * as->v[2]) * es;
      for (int64_t i0 = 0; i0 < Sq; i0 += nq) {
        const int64_t n = Sq - i0 < nq ? Sq - i0 : nq;
        const char *qp = (const char *)q + (size_t)(b * as->q[0] + i0 * as->q[1] + h * as->q[2]) * es;
        char *outp = (char *)out + (size_t)(b * as->o[0] + i0 * as->o[1] + h * as->o[2]) * es;
        /* column-major: S^T [Sk, n] = K [D, Sk]^T Q [D, n], i.e. S rows of Sk scores per query */
        DIT_TRY(cu_gemm(be, op, 1, 0, Sk, n, D, 1.0f, kp, ldk, qp, ldq, dt, S, lds, DIT_F32, NULL,
                        CUBLASLT_EPILOGUE_DEFAULT, err));
        DIT_TRY(cu_check(cuk_attn_softmax(P, pdt, ldp, S, lds, n, Sk, scale, mb, causal, i0, im->stream), op,
                         "softmax kernel", err));
        /* O^T [D, n] = V^T [D, Sk] P^T [Sk, n]: out's rows, ld its sequence stride */
        DIT_TRY(cu_gemm(be, op, 0, 0, D, n, Sk, 1.0f, vp, ldv, P, ldp, pdt, outp, ldo, dt, NULL, CUBLASLT_EPILOGUE_DEFAULT,
                        err));
      }
    }
  }
  return DIT_OK;
}

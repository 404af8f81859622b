/* ggml's block formats: dit_dequant_row and dit_quant_row against ggml's own outputs
 * (tests/fixtures/quant/ggml_vectors.bin, made by tests/fixtures/gen/make_quant_vectors.sh),
 * bit for bit; the AVX-512 dequantization against the portable one; round-trip error bounds;
 * and the CPU linear and embedding ops over block-quantized weights against the same
 * weights dequantized to F32 (identical results: the GEMM packs what dequantization gives). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_gemm.h"
#include "backend/cpu/cpu_internal.h"
#include "core/quant.h"
#include "core/splitmix.h"
#include "testing.h"

static const struct {
  int ggml_id;
  dit_dtype dt;
} id_map[] = {{2, DIT_Q4_0}, {3, DIT_Q4_1}, {6, DIT_Q5_0}, {7, DIT_Q5_1}, {8, DIT_Q8_0},
              {10, DIT_Q2_K}, {11, DIT_Q3_K}, {12, DIT_Q4_K}, {13, DIT_Q5_K}, {14, DIT_Q6_K}};
static const dit_dtype all_types[] = {DIT_Q4_0, DIT_Q4_1, DIT_Q5_0, DIT_Q5_1, DIT_Q8_0,
                                      DIT_Q2_K, DIT_Q3_K, DIT_Q4_K, DIT_Q5_K, DIT_Q6_K};
enum { N_TYPES = sizeof all_types / sizeof *all_types };

static bool dtype_of(uint32_t id, dit_dtype *dt) {
  for (size_t i = 0; i < sizeof id_map / sizeof *id_map; i++)
    if ((uint32_t)id_map[i].ggml_id == id) return *dt = id_map[i].dt, true;
  return false;
}

static uint32_t rd32(const unsigned char *p) { return (uint32_t)p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

/* Whether the dequantized floats holding byte i are both NaN: a NaN made from no NaN operand
 * (an infinite scale times 0) has the machine's default bits (x86: negative, Arm: positive),
 * which the vectors, made on x86, record. */
static bool both_nan(const unsigned char *got, const unsigned char *want, size_t i) {
  float g, w;
  memcpy(&g, got + i / 4 * 4, 4);
  memcpy(&w, want + i / 4 * 4, 4);
  return isnan(g) && isnan(w);
}

/* Every record of the vectors file, checked bit for bit (NaN bits aside). */
static void test_ggml_vectors(const dt_args *a) {
  char path[4096];
  snprintf(path, sizeof path, "%s/quant/ggml_vectors.bin", a->data);
  FILE *f = fopen(path, "rb");
  CHECK_MSG(f != NULL, "cannot open %s", path);
  if (!f) return;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = malloc((size_t)len);
  CHECK(buf && fread(buf, 1, (size_t)len, f) == (size_t)len);
  fclose(f);
  CHECK(len > 12 && !memcmp(buf, "DITQVEC1", 8));
  uint32_t n = rd32(buf + 8), seen[2] = {0, 0};
  size_t off = 12;
  int types_seen = 0;
  for (uint32_t r = 0; r < n && off + 16 <= (size_t)len; r++) {
    uint32_t kind = rd32(buf + off), id = rd32(buf + off + 4), ne = rd32(buf + off + 8), cs = rd32(buf + off + 12);
    off += 16;
    dit_dtype dt;
    uint64_t qb = 0;
    if (!dtype_of(id, &dt) || kind > 1 || !dit_dtype_row_bytes(dt, ne, &qb)) {
      CHECK_MSG(0, "record %u: bad header (kind %u, type %u, n %u)", r, kind, id, ne);
      break;
    }
    size_t fb = (size_t)ne * 4, in = kind ? fb : (size_t)qb, outb = kind ? (size_t)qb : fb;
    if (off + in + outb > (size_t)len) {
      CHECK_MSG(0, "record %u: truncated", r);
      break;
    }
    const unsigned char *src = buf + off, *want = buf + off + in;
    unsigned char *got = malloc(outb);
    if (kind == 0) dit_dequant_row(dt, src, (float *)got, ne);
    else {
      float *x = malloc(fb);
      memcpy(x, src, fb);
      dit_quant_row(dt, x, got, ne);
      free(x);
    }
    size_t bad = 0;
    while (bad < outb && (got[bad] == want[bad] || (kind == 0 && both_nan(got, want, bad)))) bad++;
    CHECK_MSG(bad == outb, "%s %s case %u: differs from ggml at byte %zu of %zu", kind ? "quantize" : "dequantize",
              dit_dtype_name(dt), cs, bad, outb);
    free(got);
    seen[kind]++;
    if (kind == 0 && cs == 0) types_seen++;
    off += in + outb;
  }
  printf("ggml vectors: %u dequantization and %u quantization records, %d types, all bit-identical\n", seen[0],
         seen[1], types_seen);
  CHECK(seen[0] > 0 && seen[1] > 0 && types_seen == N_TYPES && off == (size_t)len);
  free(buf);
}

static float rnd(uint64_t *s) { return (float)((double)(dit_splitmix64(++*s) >> 40) / (double)(1u << 24)) * 2 - 1; }

/* Quantize then dequantize random rows: the error stays within each type's step. */
static void test_round_trip(const dt_args *a) {
  (void)a;
  /* max |x - deq(q(x))| for x uniform in [-1, 1): half a step of each type (Q4_0 / Q5_0: a
   * whole step where the symmetric range saturates on the side opposite the maximum); the
   * K types' fitted scales, a little more */
  static const double bound[N_TYPES] = {0.13, 0.07, 0.065, 0.035, 0.005, 0.35, 0.25, 0.08, 0.04, 0.02};
  const int n = 1024;
  float x[1024], y[1024];
  unsigned char q[1024 / 32 * 34];
  uint64_t seed = 7;
  for (int t = 0; t < N_TYPES; t++) {
    for (int i = 0; i < n; i++) x[i] = rnd(&seed);
    dit_quant_row(all_types[t], x, q, n);
    dit_dequant_row(all_types[t], q, y, n);
    double worst = 0;
    for (int i = 0; i < n; i++) worst = fmax(worst, fabs((double)x[i] - y[i]));
    printf("%s round trip: max error %.4f (bound %.3f)\n", dit_dtype_name(all_types[t]), worst, bound[t]);
    CHECK_MSG(worst <= bound[t], "%s round trip error %g > %g", dit_dtype_name(all_types[t]), worst, bound[t]);
  }
}

#if defined(DIT_CPU_X86)
/* The AVX-512 dequantization equals the portable one bit for bit (random blocks, so odd
 * scales, NaN and Inf included). */
/* Every fp8 code (and a masked tail) through the AVX-512 conversion: the scalar value (any
 * NaN for a NaN), and that value in bf16. */
static void check_avx512_fp8(void) {
  uint8_t codes[256 + 13];
  float y1[269], y2[269];
  uint16_t h[269];
  for (int i = 0; i < 269; i++) codes[i] = (uint8_t)(i * 7);
  for (int e = 0; e < 2; e++) {
    const dit_dtype t = e ? DIT_F8_E5M2 : DIT_F8_E4M3;
    dit_dequant_row(t, codes, y1, 269);
    cpu_dequant_row_avx512(t, codes, y2, 269);
    cpu_dequant_row_bf16_avx512(t, codes, h, 269);
    int bad = 0;
    for (int i = 0; i < 269; i++) {
      bad += isnan(y1[i]) ? !isnan(y2[i]) : memcmp(&y1[i], &y2[i], 4) != 0;
      bad += isnan(y1[i]) ? !isnan(dit_bf16_to_f32(h[i])) : dit_bf16_to_f32(h[i]) != y1[i];
    }
    CHECK_MSG(!bad, "%s: %d AVX-512 conversions differ from the scalar ones", dit_dtype_name(t), bad);
  }
}

static void test_avx512(const dt_args *a) {
  (void)a;
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512bf16")) {
    printf("no AVX-512 with BF16 here (the dequantization kernels' target): skipping their check\n");
    return;
  }
  uint64_t seed = 99;
  unsigned char blk[8 * 210];
  float y1[2048], y2[2048];
  uint16_t h[2048];
  check_avx512_fp8();
  for (int t = 0; t < N_TYPES; t++) {
    const int n = (int)dit_dtype_block_elems(all_types[t]) * 8;
    for (int rep = 0; rep < 50; rep++) {
      for (size_t i = 0; i < sizeof blk; i++) blk[i] = (unsigned char)dit_splitmix64(++seed);
      dit_dequant_row(all_types[t], blk, y1, n);
      cpu_dequant_row_avx512(all_types[t], blk, y2, n);
      if (memcmp(y1, y2, (size_t)n * 4)) {
        CHECK_MSG(0, "%s: AVX-512 dequantization differs from the portable one", dit_dtype_name(all_types[t]));
        break;
      }
      /* the bf16 rows the GEMM packs from: the same values rounded to nearest even */
      cpu_dequant_row_bf16_avx512(all_types[t], blk, h, n);
      int bad = 0;
      for (int i = 0; i < n && !bad; i++)
        bad = isnan(y1[i]) ? !isnan(dit_bf16_to_f32(h[i])) : h[i] != dit_f32_to_bf16(y1[i]);
      if (bad) {
        CHECK_MSG(0, "%s: AVX-512 bf16 dequantization differs from the rounded portable one",
                  dit_dtype_name(all_types[t]));
        break;
      }
    }
  }
}
#endif

/* linear(x, Wq) against linear(x, dequant(Wq) as F32) on each kernel path: identical; with
 * a per-tensor scale (fp8), to fp32 rounding (the scale multiplies the sums). K: whole blocks,
 * or for fp8 any length (odd K: masked tails). */
static void check_linear(dit_backend *be, dit_dtype dt, const char *label, int64_t K, float scale) {
  /* N: not a multiple of the panels; M: packed and streamed sizes; K = 1280: two k blocks of
   * the bf16 path (512) and a shorter tail, so blocks are read at an offset into each row */
  const int64_t M = 70, N = 45;
  uint64_t seed = 1234, rb;
  dit_dtype_row_bytes(dt, K, &rb);
  float *w = malloc(sizeof(float) * N * K), *x = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * N);
  float *y1 = malloc(sizeof(float) * M * N), *y2 = malloc(sizeof(float) * M * N);
  unsigned char *wq = malloc((size_t)(rb * N));
  for (int64_t i = 0; i < N * K; i++) w[i] = rnd(&seed) * 0.1f;
  for (int64_t i = 0; i < M * K; i++) x[i] = rnd(&seed);
  for (int64_t i = 0; i < N; i++) b[i] = rnd(&seed);
  for (int64_t r = 0; r < N; r++) dit_quant_row(dt, w + r * K, wq + r * rb, K);
  for (int64_t r = 0; r < N; r++) dit_dequant_row(dt, wq + r * rb, w + r * K, K);
  for (int64_t i = 0; i < N * K; i++) w[i] *= scale;
  dit_tensor tx = dit_tensor_2d(DIT_F32, x, M, K), tb = dit_tensor_1d(DIT_F32, b, N);
  dit_tensor twq = dit_tensor_2d(dt, wq, N, K), twf = dit_tensor_2d(DIT_F32, w, N, K);
  twq.scale = scale;
  for (int64_t m = 1; m <= M; m += M - 1) { /* one row (small-M path) and all rows */
    tx.shape[0] = m;
    dit_tensor ty1 = dit_tensor_2d(DIT_F32, y1, m, N), ty2 = dit_tensor_2d(DIT_F32, y2, m, N);
    dit_error err = {0};
    CHECK_MSG(dit_op_linear(be, &ty1, &tx, &twq, &tb, DIT_ACT_NONE, &err) == DIT_OK, "%s", err.msg);
    CHECK_MSG(dit_op_linear(be, &ty2, &tx, &twf, &tb, DIT_ACT_NONE, &err) == DIT_OK, "%s", err.msg);
    double e = dt_rel_err(y1, y2, (size_t)(m * N));
    CHECK_MSG(scale == 1.0f ? e < 1e-6 : e < 1e-5, "%s %s K=%lld M=%lld: quantized linear differs from its F32 "
              "dequantization (rel %g)", label, dit_dtype_name(dt), (long long)K, (long long)m, e);
  }
  /* embedding rows of the quantized table are its dequantized rows */
  int32_t ids[3] = {0, 44, 7};
  float *emb = malloc(sizeof(float) * 3 * (size_t)K);
  dit_tensor tid = dit_tensor_1d(DIT_I32, ids, 3), te = dit_tensor_2d(DIT_F32, emb, 3, K);
  dit_error err = {0};
  CHECK_MSG(dit_op_embedding(be, &te, &twq, &tid, &err) == DIT_OK, "%s", err.msg);
  for (int i = 0; i < 3; i++) CHECK(!memcmp(emb + i * K, w + ids[i] * K, K * sizeof(float)));
  free(w), free(x), free(b), free(y1), free(y2), free(wq), free(emb);
}

/* linear(x, Wq with a low-rank term a [R, K], b [N, R]) against linear(x, dequant(Wq) * scale +
 * b a as F32): the term runs as two small GEMMs beside the quantized one, before the bias and
 * the activation (LoRA on quantized weights); a term that does not fit W is refused. fp32
 * precision: to fp32 rounding; bf16 precision rounds W + b a once against W, a, b and x a^T
 * apiece, so to bf16 rounding (eps 2^-8). */
static void check_linear_lowrank(dit_backend *be, dit_dtype dt, const char *label, bool bf16, float scale) {
  const int64_t M = 37, N = 45, K = 256, R = 5;
  uint64_t seed = 99, rb;
  dit_dtype_row_bytes(dt, K, &rb);
  float *w = malloc(sizeof(float) * N * K), *x = malloc(sizeof(float) * M * K), *bias = malloc(sizeof(float) * N);
  float *a = malloc(sizeof(float) * R * K), *b = malloc(sizeof(float) * N * R);
  float *y1 = malloc(sizeof(float) * M * N), *y2 = malloc(sizeof(float) * M * N);
  unsigned char *wq = malloc((size_t)(rb * N));
  for (int64_t i = 0; i < N * K; i++) w[i] = rnd(&seed) * 0.1f;
  for (int64_t i = 0; i < M * K; i++) x[i] = rnd(&seed);
  for (int64_t i = 0; i < N; i++) bias[i] = rnd(&seed);
  for (int64_t i = 0; i < R * K; i++) a[i] = rnd(&seed) * 0.3f;
  for (int64_t i = 0; i < N * R; i++) b[i] = rnd(&seed) * 0.3f;
  for (int64_t r = 0; r < N; r++) dit_quant_row(dt, w + r * K, wq + r * rb, K);
  for (int64_t r = 0; r < N; r++) dit_dequant_row(dt, wq + r * rb, w + r * K, K);
  for (int64_t n = 0; n < N; n++)
    for (int64_t k = 0; k < K; k++) {
      double d = 0;
      for (int64_t q = 0; q < R; q++) d += (double)b[n * R + q] * a[q * K + k];
      w[n * K + k] = (float)(w[n * K + k] * scale + d);
    }
  const dit_lowrank L = {dit_tensor_2d(DIT_F32, a, R, K), dit_tensor_2d(DIT_F32, b, N, R)};
  dit_tensor tx = dit_tensor_2d(DIT_F32, x, M, K), tb = dit_tensor_1d(DIT_F32, bias, N);
  dit_tensor twq = dit_tensor_2d(dt, wq, N, K), twf = dit_tensor_2d(DIT_F32, w, N, K);
  twq.scale = scale, twq.lowrank = &L;
  dit_tensor ty1 = dit_tensor_2d(DIT_F32, y1, M, N), ty2 = dit_tensor_2d(DIT_F32, y2, M, N);
  dit_error err = {0};
  CHECK_MSG(dit_op_linear(be, &ty1, &tx, &twq, &tb, DIT_ACT_GELU, &err) == DIT_OK, "%s", err.msg);
  CHECK_MSG(dit_op_linear(be, &ty2, &tx, &twf, &tb, DIT_ACT_GELU, &err) == DIT_OK, "%s", err.msg);
  double e = dt_rel_err(y1, y2, (size_t)(M * N));
  CHECK_MSG(e < (bf16 ? 8e-3 : 1e-5), "%s %s: quantized linear + low-rank term differs from the merged F32 weight "
            "(rel %g)", label, dit_dtype_name(dt), e);
  dit_lowrank bad = L;
  bad.b.shape[0] = N - 1;
  twq.lowrank = &bad;
  CHECK(dit_op_linear(be, &ty1, &tx, &twq, &tb, DIT_ACT_NONE, &err) == DIT_ERR_INVALID_ARG &&
        strstr(err.msg, "low-rank"));
  free(w), free(x), free(bias), free(a), free(b), free(y1), free(y2), free(wq);
}

static void test_cpu_ops(const dt_args *a) {
  (void)a;
  dit_backend *be = NULL;
  dit_error err = {0};
  if (dit_backend_cpu_create(2, &be, &err) != DIT_OK) {
    CHECK_MSG(0, "%s", err.msg);
    return;
  }
  static const struct {
    bool simd;
    dit_cpu_precision p;
    const char *label;
  } paths[] = {{false, DIT_CPU_PRECISION_FP32, "portable fp32"}, {true, DIT_CPU_PRECISION_FP32, "simd fp32"},
               {false, DIT_CPU_PRECISION_BF16, "portable bf16"}, {true, DIT_CPU_PRECISION_BF16, "simd bf16"}};
  for (size_t k = 0; k < sizeof paths / sizeof *paths; k++) {
    dit_cpu_set_simd(be, paths[k].simd);
    dit_backend_cpu_set_precision(be, paths[k].p, &err);
    for (int t = 0; t < N_TYPES; t++) check_linear(be, all_types[t], paths[k].label, 1280, 1.0f);
    const bool bf = paths[k].p == DIT_CPU_PRECISION_BF16;
    check_linear_lowrank(be, DIT_Q8_0, paths[k].label, bf, 1.0f);
    check_linear_lowrank(be, DIT_Q4_K, paths[k].label, bf, 1.0f);
    check_linear_lowrank(be, DIT_F8_E4M3, paths[k].label, bf, 0.0625f);
    for (int64_t K = 1280; K >= 135; K -= 1145) { /* fp8 with a scale, and with an odd K */
      check_linear(be, DIT_F8_E4M3, paths[k].label, K, 0.0625f);
      check_linear(be, DIT_F8_E5M2, paths[k].label, K, 3.0f);
    }
  }
  /* a row that is not whole blocks is refused by name */
  unsigned char q[64] = {0};
  float xf[48] = {0}, yf[2] = {0};
  dit_tensor tw = dit_tensor_2d(DIT_Q8_0, q, 1, 48), tx = dit_tensor_2d(DIT_F32, xf, 1, 48),
             ty = dit_tensor_2d(DIT_F32, yf, 1, 1);
  CHECK(dit_op_linear(be, &ty, &tx, &tw, NULL, DIT_ACT_NONE, &err) == DIT_ERR_INVALID_ARG && strstr(err.msg, "blocks"));
  dit_backend_free(be);
}

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_ggml_vectors, test_round_trip,
#if defined(DIT_CPU_X86)
                                                   test_avx512,
#endif
                                                   test_cpu_ops};
  return dt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}

/* Benchmark of the CPU linear op (bf16 weights, fp32 compute) against OpenBLAS sgemm on
 * the same shapes (weights converted to fp32 up front for OpenBLAS, which cannot read
 * bf16), and against a measured fp32 FMA peak of this machine. Prints GFLOP/s, the best
 * and median of several runs. Usage:
 *   bench_linear [--reps N] [--threads T] [--portable] [--bf16] [--no-blas] [--shape M,K,N]...
 * --bf16: the bf16-compute precision (% of peak then relative to twice the fp32 FMA peak,
 * the vdpbf16ps rate). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h"
#include "core/timer.h"
#include "bench_util.h"

#ifdef DIT_HAVE_OPENBLAS
#include <cblas.h>
#endif

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

enum { PEAK_AVX512 = 0, PEAK_BF16 = 1, PEAK_AVX2 = 2, PEAK_NEON = 3 };

#if defined(__x86_64__)
#include <immintrin.h>
/* 24 independent zmm chains, FMA (bf16 false: the most one core can issue, no memory
 * traffic) or vdpbf16ps (64 flop each: the bf16 dot-product peak); returns their sum so
 * the work is not optimized away. bf is a constant in each caller. */
__attribute__((target("avx512f,avx512bf16"), always_inline)) static inline float chains(bool bf, long iters,
                                                                                      float seed) {
  __m512 acc[24], m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
  __m512bh p = (__m512bh)_mm512_set1_epi32(0x3f803f80), q = (__m512bh)_mm512_set1_epi32(0x33803380);
  for (int i = 0; i < 24; i++) acc[i] = _mm512_set1_ps(seed + (float)i);
  for (long it = 0; it < iters; it++) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; i++) acc[i] = bf ? _mm512_dpbf16_ps(acc[i], p, q) : _mm512_fmadd_ps(acc[i], m, a);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 24; i++) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}
__attribute__((target("avx512f,avx512bf16"), noipa)) static float fma_loop(long iters, float seed) {
  return chains(false, iters, seed);
}
__attribute__((target("avx512f,avx512bf16"), noipa)) static float dp_loop(long iters, float seed) {
  return chains(true, iters, seed);
}

/* The same with 12 ymm chains: the fp32 FMA peak of 256-bit vectors (the AVX2 path's). */
__attribute__((target("avx2,fma"), noipa)) static float fma_loop_avx2(long iters, float seed) {
  __m256 acc[12], m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < 12; i++) acc[i] = _mm256_set1_ps(seed + (float)i);
  for (long it = 0; it < iters; it++) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) acc[i] = _mm256_fmadd_ps(acc[i], m, a);
  }
  __m256 s = acc[0];
  for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, acc[i]);
  float v[8];
  _mm256_storeu_ps(v, s);
  return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}

/* One thread's peak loop of kind (its result keeps the work) and its flop per iteration. */
static float peak_loop(int kind, long iters, float seed) {
  return kind == PEAK_BF16 ? dp_loop(iters, seed) : kind == PEAK_AVX2 ? fma_loop_avx2(iters, seed) : fma_loop(iters, seed);
}
static double peak_flop_per_iter(int kind) { return kind == PEAK_AVX2 ? 12 * 8 * 2 : 24 * 16 * (kind == PEAK_BF16 ? 4 : 2); }
/* The fp32 FMA peak kind of the vectors the kernel path uses (an AVX-512 machine's AVX2 path:
 * the ymm peak); -1 where this machine has neither. */
static int peak_kind(const char *isa) {
  __builtin_cpu_init();
  if (!strcmp(isa, "avx2") || !__builtin_cpu_supports("avx512f"))
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? PEAK_AVX2 : -1;
  return PEAK_AVX512;
}
#elif defined(__aarch64__)
#include <arm_neon.h>
/* 24 independent q-register FMA chains: the fp32 NEON peak (the NEON path's). */
__attribute__((noipa)) static float fma_loop_neon(long iters, float seed) {
  float32x4_t acc[24], m = vdupq_n_f32(0.999999f), a = vdupq_n_f32(1e-7f);
  for (int i = 0; i < 24; i++) acc[i] = vdupq_n_f32(seed + (float)i);
  for (long it = 0; it < iters; it++) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; i++) acc[i] = vfmaq_f32(a, acc[i], m);
  }
  float32x4_t s = acc[0];
  for (int i = 1; i < 24; i++) s = vaddq_f32(s, acc[i]);
  return vaddvq_f32(s);
}
static float peak_loop(int kind, long iters, float seed) { return kind == PEAK_NEON ? fma_loop_neon(iters, seed) : 0; }
static double peak_flop_per_iter(int kind) { return kind == PEAK_NEON ? 24 * 4 * 2 : 0; }
static int peak_kind(const char *isa) { return strcmp(isa, "neon") ? -1 : PEAK_NEON; }
#else
static float peak_loop(int kind, long iters, float seed) { return 0; }
static double peak_flop_per_iter(int kind) { return 0; }
static int peak_kind(const char *isa) { return -1; }
#endif

/* Measured peak over nt threads, GFLOP/s, of a loop kind this machine has (fp32 FMA on zmm,
 * ymm or NEON q registers, or vdpbf16ps); each thread's rate over its own CPU time (so other
 * processes sharing the cores do not lower it), summed; best of 5. 0 for kind -1. */
static double fma_peak_of(int nt, int kind) {
  const long iters = 20000000;
  double best = 0;
  for (int r = 0; kind >= 0 && r < 5; r++) {
    double total = 0;
#pragma omp parallel num_threads(nt) reduction(+ : total)
    {
      struct timespec a, b;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
      volatile float v = peak_loop(kind, iters, (float)omp_get_thread_num());
      (void)v;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
      double dt = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
      total += (double)iters * peak_flop_per_iter(kind) / dt / 1e9;
    }
    if (total > best) best = total;
  }
  return best;
}
/* The fp32 FMA peak of the vectors the kernel path isa uses (0 where unknown). */
static double fma_peak(int nt, const char *isa) { return fma_peak_of(nt, peak_kind(isa)); }

/* t: wall seconds per run; c: process CPU seconds per run. On a shared machine the
 * CPU-time figure (flop per CPU-second times the thread count) is what the code would
 * reach with the cores to itself; the wall figure is what it got. */
static void report(const char *what, double flop, double *t, double *c, int reps, double peak, int nt) {
  qsort(t, (size_t)reps, sizeof(double), cmp_d);
  qsort(c, (size_t)reps, sizeof(double), cmp_d);
  double best = flop / t[0] / 1e9, med = flop / t[reps / 2] / 1e9, cbest = flop / (c[0] / nt) / 1e9;
  printf("  %-22s wall best %7.1f GFLOP/s (%5.1f%% of peak) median %7.1f | cpu-time best %7.1f (%5.1f%%)\n",
         what, best, peak > 0 ? 100 * best / peak : 0, med, cbest, peak > 0 ? 100 * cbest / peak : 0);
}

int main(int argc, char **argv) {
  int reps = 5, threads = 0, portable = 0, blas = 1, nshapes = 0, bf16 = 0;
  long shapes[16][3];
  for (int i = 1; i < argc; i++) {
    if (bench_opt_int(argc, argv, &i, "--reps", &reps) || bench_opt_int(argc, argv, &i, "--threads", &threads))
      continue;
    if (!strcmp(argv[i], "--portable")) portable = 1;
    else if (!strcmp(argv[i], "--bf16")) bf16 = 1;
    else if (!strcmp(argv[i], "--no-blas")) blas = 0;
    else if (!strcmp(argv[i], "--shape") && i + 1 < argc && nshapes < 16) {
      if (sscanf(argv[++i], "%ld,%ld,%ld", &shapes[nshapes][0], &shapes[nshapes][1], &shapes[nshapes][2]) == 3)
        nshapes++;
    } else {
      fprintf(stderr, "usage: %s [--reps N] [--threads T] [--portable] [--bf16] [--no-blas] [--shape M,K,N]...\n", argv[0]);
      return 2;
    }
  }
  if (reps < 1 || reps > 100) reps = 5;
  if (nshapes == 0) {
    long def[4][3] = {{4224, 3840, 10240}, {1024, 3840, 3840}, {256, 64, 256}, {4096, 64, 192}};
    memcpy(shapes, def, sizeof def);
    nshapes = 4;
  }
  dit_backend *be = NULL;
  dit_error err = {0};
  if (dit_backend_cpu_create(threads, &be, &err) != DIT_OK) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  bool simd = dit_cpu_set_simd(be, !portable);
  const char *isa = simd ? dit_cpu_isa_name(be) : "portable";
  double peak = fma_peak(be->n_threads, isa);
  printf("threads %d, kernel path %s, measured fp32 FMA peak %.1f GFLOP/s (%s vectors)\n", be->n_threads,
         simd ? isa : "portable C", peak, !strcmp(isa, "avx2") ? "256-bit" : "the widest");
  if (bf16) {
    if (dit_backend_cpu_set_precision(be, DIT_CPU_PRECISION_BF16, &err) != DIT_OK) return 1;
    double dp = fma_peak_of(be->n_threads, PEAK_BF16);
    printf("bf16 compute: measured vdpbf16ps peak %.1f GFLOP/s; %% of peak below relative to 2x the fp32 FMA "
           "peak (%.1f GFLOP/s), the nominal bf16 rate\n", dp, 2 * peak);
    peak *= 2;
  }
#ifdef DIT_HAVE_OPENBLAS
  openblas_set_num_threads(be->n_threads);
#else
  (void)blas; /* nothing to compare with in this build */
#endif
  for (int s = 0; s < nshapes; s++) {
    long M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
    double flop = 2.0 * (double)M * (double)K * (double)N;
    float *x = malloc(sizeof(float) * (size_t)(M * K)), *y = malloc(sizeof(float) * (size_t)(M * N));
    uint16_t *w = malloc(2 * (size_t)(N * K));
    if (!x || !y || !w) return 1;
    uint64_t r = 88172645463325252ull;
    for (long i = 0; i < M * K; i++) r ^= r << 13, r ^= r >> 7, r ^= r << 17, x[i] = (float)(r >> 40) / 16777216.0f - 0.5f;
    for (long i = 0; i < N * K; i++)
      r ^= r << 13, r ^= r >> 7, r ^= r << 17, w[i] = dit_f32_to_bf16((float)(r >> 40) / 16777216.0f - 0.5f);
    printf("M=%ld K=%ld N=%ld: %.1f GFLOP per call\n", M, K, N, flop / 1e9);
    dit_tensor tx = dit_tensor_2d(DIT_F32, x, M, K), ty = dit_tensor_2d(DIT_F32, y, M, N);
    dit_tensor tw = dit_tensor_2d(DIT_BF16, w, N, K);
    double t[100], c[100];
    int rr = flop < 1e9 ? reps * 10 : reps;
    if (rr > 100) rr = 100;
    dit_op_linear(be, &ty, &tx, &tw, NULL, DIT_ACT_NONE, &err); /* warm-up */
    for (int i = 0; i < rr; i++) {
      double t0 = bench_clock(CLOCK_MONOTONIC), c0 = bench_clock(CLOCK_PROCESS_CPUTIME_ID);
      dit_op_linear(be, &ty, &tx, &tw, NULL, DIT_ACT_NONE, &err);
      t[i] = bench_clock(CLOCK_MONOTONIC) - t0, c[i] = bench_clock(CLOCK_PROCESS_CPUTIME_ID) - c0;
    }
    report("ditrun linear (bf16 w)", flop, t, c, rr, peak, be->n_threads);
#ifdef DIT_HAVE_OPENBLAS
    if (blas) {
      float *w32 = malloc(sizeof(float) * (size_t)(N * K)), *y2 = malloc(sizeof(float) * (size_t)(M * N));
      if (!w32 || !y2) return 1;
      dit_convert_to_f32(w32, w, DIT_BF16, (size_t)(N * K));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, x, (int)K, w32, (int)K,
                  0.0f, y2, (int)N);
      double md = 0, mr = 0;
      for (long i = 0; i < M * N; i++) {
        double d = fabs((double)y[i] - y2[i]);
        md = d > md ? d : md;
        mr = fabs(y2[i]) > mr ? fabs(y2[i]) : mr;
      }
      for (int i = 0; i < rr; i++) {
        double t0 = bench_clock(CLOCK_MONOTONIC), c0 = bench_clock(CLOCK_PROCESS_CPUTIME_ID);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, x, (int)K, w32, (int)K,
                    0.0f, y2, (int)N);
        t[i] = bench_clock(CLOCK_MONOTONIC) - t0, c[i] = bench_clock(CLOCK_PROCESS_CPUTIME_ID) - c0;
      }
      report("OpenBLAS sgemm (f32 w)", flop, t, c, rr, peak, be->n_threads);
      printf("  max |ditrun - openblas| / max |openblas| = %.2e; fp32 weight copy for OpenBLAS: %.1f MiB\n",
             mr > 0 ? md / mr : md, (double)N * K * 4 / 1048576.0);
      free(w32), free(y2);
    }
#endif
    free(x), free(y), free(w);
  }
  dit_backend_free(be);
  return 0;
}

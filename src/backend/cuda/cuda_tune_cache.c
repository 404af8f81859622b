/* The CUDA backend's persisted tuning choices (issue 22): the GEMM algorithm and the cuDNN
 * conv engine each tuned shape won are kept in the tuning cache file (core/tune_cache.h), so a
 * second process on the same GPU skips the timing. A key names the GPU (name, compute
 * capability, SM count), the driver, CUDA runtime and cuBLASLt versions, then the choice's
 * own key ("gemm ...", or "conv ..." with the cuDNN version): a changed library or card misses and tunes
 * again. A stored choice is only taken when it is one of the candidates the library offers
 * now (the tuner's own rule: tuning never changes a result); the file is written once, when
 * the backend is freed, and a failure to read or write it is only reported under
 * DIT_CUDA_GEMM_TUNE_LOG=1 (tuning again is the worst it costs). */
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "core/tune_cache.h"

void cu_tc_open(cu_impl *im) {
  if (!im->opts.tune_cache || !im->opts.tune_cache_path[0]) return;
  struct cudaDeviceProp pr;
  int drv = 0, rt = 0;
  if (cudaGetDeviceProperties(&pr, im->device) != cudaSuccess || cudaDriverGetVersion(&drv) != cudaSuccess ||
      cudaRuntimeGetVersion(&rt) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  snprintf(im->tc_prefix, sizeof im->tc_prefix, "%.64s|cc%d.%d|sm%d|drv%d|rt%d|lt%zu|", pr.name, pr.major, pr.minor,
           pr.multiProcessorCount, drv, rt, cublasLtGetVersion());
  dit_error e;
  if (dit_tune_cache_open(im->opts.tune_cache_path, &im->tcache, &e) != DIT_OK) {
    im->tcache = NULL;
    if (im->opts.cuda_gemm_tune_log) fprintf(stderr, "ditrun: tuning cache: %s\n", e.msg);
    return;
  }
  const char *note = dit_tune_cache_note(im->tcache);
  if (note && im->opts.cuda_gemm_tune_log) fprintf(stderr, "ditrun: %s\n", note);
}

/* prefix + what into key; false when it does not fit. */
static bool full_key(const cu_impl *im, const char *what, char *key, size_t len, size_t *klen) {
  int n = snprintf(key, len, "%s%s", im->tc_prefix, what);
  if (n < 0 || (size_t)n >= len || (size_t)n > DIT_TUNE_CACHE_MAX_KEY) return false;
  *klen = (size_t)n;
  return true;
}

bool cu_tc_get(const cu_impl *im, const char *what, void *val, size_t len) {
  char key[DIT_TUNE_CACHE_MAX_KEY + 1];
  size_t klen = 0, vlen = 0;
  if (!im->tcache || !full_key(im, what, key, sizeof key, &klen)) return false;
  return dit_tune_cache_get(im->tcache, key, klen, val, len, &vlen) && vlen == len;
}

void cu_tc_put(cu_impl *im, const char *what, const void *val, size_t len) {
  char key[DIT_TUNE_CACHE_MAX_KEY + 1];
  size_t klen = 0;
  if (!im->tcache || !full_key(im, what, key, sizeof key, &klen)) return;
  dit_error e;
  if (dit_tune_cache_put(im->tcache, key, klen, val, len, &e) != DIT_OK && im->opts.cuda_gemm_tune_log)
    fprintf(stderr, "ditrun: tuning cache: %s\n", e.msg);
}

void cu_tc_close(cu_impl *im) {
  if (im->opts.cuda_gemm_tune_log && im->tc_timed + im->tc_cached)
    fprintf(stderr, "ditrun: cuda tuning: %d shapes timed (%.3f s), %d taken from the tuning cache file\n",
            im->tc_timed, im->tc_seconds, im->tc_cached);
  if (!im->tcache) return;
  dit_error e;
  if (dit_tune_cache_save(im->tcache, &e) != DIT_OK && im->opts.cuda_gemm_tune_log)
    fprintf(stderr, "ditrun: tuning cache not saved: %s\n", e.msg);
  dit_tune_cache_free(im->tcache);
  im->tcache = NULL;
}

/* Device helpers of the cuDNN attention path (cudnn_sdpa.c). Key mask to per-item key lengths
 * for cuDNN's padding mask: one block per batch item finds the first masked key and the last
 * valid one; a mask that is not a prefix of valid keys (or has none) raises a flag the host
 * reads after a sync. And a BF16 difference reduction for checking a new plan's first output. */
#include <stdint.h>

#include <cuda_runtime.h>

/* declared in cudnn_sdpa.h (not included: it pulls in C-only headers) */
extern "C" cudaError_t cuk_mask_seqlen(const uint8_t *mask, int64_t B, int64_t Sk, int64_t Sq, int32_t *seq_q,
                                       int32_t *seq_kv, int *bad, cudaStream_t s);
extern "C" cudaError_t cuk_bf16_diff(const void *a, const void *b, int64_t n, double *acc, cudaStream_t s);

__global__ void k_mask_seqlen(const uint8_t *mask, int64_t Sk, int32_t Sq, int32_t *seq_q, int32_t *seq_kv,
                              int *bad) {
  __shared__ int first_zero, last_one;
  const int64_t b = blockIdx.x;
  const uint8_t *m = mask + b * Sk;
  if (threadIdx.x == 0) {
    first_zero = (int)Sk;
    last_one = -1;
  }
  __syncthreads();
  int fz = (int)Sk, lo = -1;
  for (int64_t j = threadIdx.x; j < Sk; j += blockDim.x) {
    if (m[j]) lo = (int)j;
    else if ((int)j < fz) fz = (int)j;
  }
  atomicMin(&first_zero, fz);
  atomicMax(&last_one, lo);
  __syncthreads();
  if (threadIdx.x == 0) {
    int len = first_zero;
    if (len == 0 || last_one >= first_zero) atomicOr(bad, 1);
    seq_kv[b] = len > 0 ? len : 1;
    seq_q[b] = Sq;
  }
}

extern "C" cudaError_t cuk_mask_seqlen(const uint8_t *mask, int64_t B, int64_t Sk, int64_t Sq, int32_t *seq_q,
                                       int32_t *seq_kv, int *bad, cudaStream_t s) {
  if (B <= 0 || Sk <= 0 || Sk > INT32_MAX || Sq > INT32_MAX || B > INT32_MAX) return cudaErrorInvalidValue;
  k_mask_seqlen<<<(unsigned)B, 256, 0, s>>>(mask, Sk, (int32_t)Sq, seq_q, seq_kv, bad);
  return cudaGetLastError();
}

/* acc[0] += sum (a - b)^2, acc[1] += sum b^2, acc[2] += non-finite count of a; a, b BF16. */
__global__ void k_bf16_diff(const unsigned short *a, const unsigned short *b, int64_t n, double *acc) {
  float se = 0.f, sb = 0.f, nf = 0.f;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float x = __uint_as_float((unsigned)a[i] << 16), y = __uint_as_float((unsigned)b[i] << 16);
    if (!isfinite(x)) {
      nf += 1.f;
      continue;
    }
    se += (x - y) * (x - y);
    sb += y * y;
  }
  for (int o = 16; o > 0; o >>= 1) {
    se += __shfl_down_sync(0xffffffffu, se, o);
    sb += __shfl_down_sync(0xffffffffu, sb, o);
    nf += __shfl_down_sync(0xffffffffu, nf, o);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&acc[0], (double)se);
    atomicAdd(&acc[1], (double)sb);
    atomicAdd(&acc[2], (double)nf);
  }
}

extern "C" cudaError_t cuk_bf16_diff(const void *a, const void *b, int64_t n, double *acc, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 1024) blocks = 1024;
  k_bf16_diff<<<(unsigned)blocks, 256, 0, s>>>((const unsigned short *)a, (const unsigned short *)b, n, acc);
  return cudaGetLastError();
}

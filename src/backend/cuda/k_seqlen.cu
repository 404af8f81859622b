/* Key-mask to per-item key lengths for cuDNN's padding mask (cudnn_sdpa.c): one block per
 * batch item finds the first masked key and the last valid one; a mask that is not a prefix
 * of valid keys (or has none) raises a flag the host reads after a sync. */
#include <stdint.h>

#include <cuda_runtime.h>

/* declared in cudnn_sdpa.h (not included: it pulls in C-only headers) */
extern "C" cudaError_t cuk_mask_seqlen(const uint8_t *mask, int64_t B, int64_t Sk, int64_t Sq, int32_t *seq_q,
                                       int32_t *seq_kv, int *bad, cudaStream_t s);

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

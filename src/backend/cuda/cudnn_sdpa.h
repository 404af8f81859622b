/* Attention through cuDNN's fused flash SDPA (backend graph API, plain C), used by the CUDA
 * backend's attention op when it can express the call: BF16 q/k/v/out, no mask, or a key
 * mask whose valid keys are a prefix of every batch item (cuDNN's padding mask with per-item
 * key lengths), optionally causal without a mask. cuDNN is loaded at run time (dlopen of
 * libcudnn.so.9), so a machine without it, or a graph cuDNN refuses, falls back to our own
 * kernel. Plans are built once per shape (heuristics, first engine that finalizes), checked on
 * their first call against our kernel (dropped if they disagree), and cached.
 * Env: DIT_CUDA_CUDNN=0 (off), DIT_CUDA_CUDNN_VERIFY=0, DIT_CUDA_CUDNN_VERBOSE=0|1|2. */
#ifndef DIT_CUDNN_SDPA_H
#define DIT_CUDNN_SDPA_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_internal.h" /* cu_attn_strides */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cu_sdpa cu_sdpa;

/* Counters and the last diagnostic, for tests and debugging. */
typedef struct cu_sdpa_info {
  bool loaded;         /* the library and a handle are ready */
  long version;        /* cudnnGetVersion() of the loaded library, 0 if none */
  long calls;          /* attention calls run by cuDNN */
  long fallbacks;      /* calls handed back to our kernel (unsupported or failed) */
  int n_plans;         /* cached shapes (including refused ones) */
  const char *message; /* last failure or note ("" if none); owned by the state */
} cu_sdpa_info;

/* Tries to run attention with cuDNN on stream st. *done is set when the work was enqueued;
 * otherwise the caller runs its own kernel (the reason is kept in the state's message).
 * *state is created on first use (NULL in, owned by the caller, freed by cu_sdpa_destroy).
 * q [B,Sq,Hq,D], k/v [B,Sk,Hkv,D], out like q, all BF16 on the device, 16-byte aligned,
 * with element strides `strides` (batch, sequence, head; unit head-dim stride; plans are cached per
 * strides too); mask: device U8 [B,Sk] or NULL. Errors are returned only for failures that leave the
 * stream unusable (a failed kernel launch). A mask whose valid keys are not a prefix (or
 * are empty) is detected on the device and reported by cu_sdpa_check after a sync. */
dit_status cu_sdpa_attention(cu_sdpa **state, cudaStream_t st, const dit_run_opts *o, void *out, const void *q,
                             const void *k,
                             const void *v, const uint8_t *mask, int64_t B, int64_t Sq, int64_t Sk, int64_t Hq,
                             int64_t Hkv, int64_t D, const cu_attn_strides *strides, float scale, bool causal,
                             bool *done, dit_error *err);
/* After a stream sync: fails if a key mask given to cuDNN since the last check was not a
 * prefix mask (the affected outputs are wrong); clears the flag. NULL state: DIT_OK. */
dit_status cu_sdpa_check(cu_sdpa *s, dit_error *err);
cu_sdpa_info cu_sdpa_get_info(const cu_sdpa *s);
/* Times one of the state's device buffers (workspace, stats, lengths) was (re)allocated;
 * 0 for NULL. Captured graphs hold those addresses (cuda_graph.c). */
long cu_sdpa_moves(const cu_sdpa *s);
void cu_sdpa_destroy(cu_sdpa *s);

/* k_seqlen.cu: per batch item b, seq_kv[b] = length of the prefix of nonzero mask bytes
 * (at least 1), seq_q[b] = Sq; *bad |= 1 when the mask is not such a prefix or is empty. */
cudaError_t cuk_mask_seqlen(const uint8_t *mask, int64_t B, int64_t Sk, int64_t Sq, int32_t *seq_q,
                            int32_t *seq_kv, int *bad, cudaStream_t s);
/* k_seqlen.cu: acc[0] += sum (a - b)^2, acc[1] += sum b^2, acc[2] += count of non-finite a
 * (a, b: n BF16 values; acc: 3 device doubles). */
cudaError_t cuk_bf16_diff(const void *a, const void *b, int64_t n, double *acc, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif

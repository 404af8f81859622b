/* conv2d forward through cuDNN's backend graph API (cudnn_conv.c), tried first by the CUDA
 * backend's conv2d (cuda_gemm.c) when the cuDNN switch is on (DIT_CUDA_CUDNN=0: off). It
 * shares the library and handle that the attention path loads (cudnn_lib.h). A call cuDNN
 * cannot take (dtypes, alignment, a refused shape, no library) is left to the caller's
 * im2col + GEMM path. Env: DIT_CUDA_CUDNN_CONV_LAYOUT=nchw|nhwc (only that layout),
 * DIT_CUDA_CUDNN_CONV_TUNE=0 (the heuristic's first engine, untimed). */
#ifndef DIT_CUDNN_CONV_H
#define DIT_CUDNN_CONV_H

#include <stdbool.h>

#include "backend/backend.h"
#include "backend/cuda/cudnn_sdpa.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Counters and the last diagnostic of the conv state, for tests and debugging. */
typedef struct cu_conv_info {
  bool loaded;         /* the conv state exists (cuDNN loaded) */
  long version;        /* cuDNN version, 0 if none */
  long calls;          /* convs run by cuDNN */
  long fallbacks;      /* convs meant for cuDNN but left to im2col (refused shape, failure) */
  int n_plans;         /* cached shapes, refused ones included */
  const char *message; /* last note ("" if none); owned by the state */
} cu_conv_info;

/* Tries y = conv2d(x, w, stride, pad) (+ b[Co]) with cuDNN on the backend's stream; *done is set
 * when the work was enqueued, otherwise the caller runs its own path. Arguments are already
 * checked by the caller (4-D contiguous CUDA tensors, y's shape). Takes x BF16 (w converted to
 * BF16 if needed) or x F32 with BF16/F16 w (x converted to w's dtype, as the im2col path does);
 * F32 x with F32 w keeps its fp32 arithmetic and is left to the caller. y: F32, BF16 or F16.
 * Returns an error only for failures that leave the stream unusable (a failed kernel launch,
 * a failed allocation of the backend's scratch). */
dit_status cu_cudnn_conv2d(dit_backend *be, dit_tensor *y, const dit_tensor *x, const dit_tensor *w,
                           const dit_tensor *b, int stride, int pad, bool *done, dit_error *err);
/* The conv counters of the backend's cuDNN state (im->sdpa; NULL: nothing yet). */
cu_conv_info cu_conv_get_info(const cu_sdpa *s);

#ifdef __cplusplus
}
#endif

#endif

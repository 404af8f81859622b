/* The cuDNN library as the CUDA backend's cuDNN users share it: the entry points resolved with
 * dlsym (one table), and the one handle on the backend's stream. cudnn_sdpa.c loads the
 * library and owns the handle (in its state, im->sdpa); other users (cudnn_conv.c) borrow them
 * through cu_sdpa_shared and keep their own state in a slot of the attention state, which
 * destroys it (cu_conv_destroy) before the handle. Only for builds with cuDNN's headers. */
#ifndef DIT_CUDNN_LIB_H
#define DIT_CUDNN_LIB_H

#ifdef DIT_HAVE_CUDNN

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cudnn_graph.h>
#include <cuda_runtime_api.h>

#include "core/error.h"
#include "core/options.h"

#include "backend/cuda/cudnn_sdpa.h"

/* The entry points we use, resolved with dlsym. */
typedef struct cudnn_api {
  size_t (*GetVersion)(void);
  const char *(*GetErrorString)(cudnnStatus_t);
  void (*GetLastErrorString)(char *, size_t); /* cuDNN >= 9.0; may be NULL */
  cudnnStatus_t (*Create)(cudnnHandle_t *);
  cudnnStatus_t (*Destroy)(cudnnHandle_t);
  cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t);
  cudnnStatus_t (*CreateDesc)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
  cudnnStatus_t (*DestroyDesc)(cudnnBackendDescriptor_t);
  cudnnStatus_t (*Finalize)(cudnnBackendDescriptor_t);
  cudnnStatus_t (*SetAttr)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                           int64_t, const void *);
  cudnnStatus_t (*GetAttr)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                           cudnnBackendAttributeType_t, int64_t, int64_t *, void *);
  cudnnStatus_t (*Execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
} cudnn_api;

/* What a second user borrows: valid until cu_sdpa_destroy. */
typedef struct cu_cudnn {
  const cudnn_api *api;
  cudnnHandle_t h; /* bound to the backend's stream */
  cudaStream_t stream;
  size_t version;
  int log; /* stderr lines: 0 none, 1 fallbacks, 2 also plans (DIT_CUDA_CUDNN_VERBOSE) */
} cu_cudnn;

typedef struct cu_conv cu_conv; /* cudnn_conv.c */

/* Creates *state on first use (loading cuDNN, creating the handle on stream st), as the first
 * attention call would. false, with the reason in *why (owned by the state), when cuDNN cannot
 * be used; *out is filled otherwise. */
bool cu_sdpa_shared(cu_sdpa **state, cudaStream_t st, const dit_run_opts *o, cu_cudnn *out, const char **why);
/* Diagnostics both users keep: the last event in a message buffer (msg, n bytes), printed as
 * one stderr line when it changes which kernel runs. */
void cu_cdn_note(char *msg, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prints "ditrun: msg" at log level >= 1 for a fallback (adding " (using <instead>)"), >= 2
 * for a plan. */
void cu_cdn_log(int log, const char *msg, bool fallback, const char *instead);
/* Records "<who>: <what>: <call> failed: <status string> (<code>); cuDNN: <last error>" in msg
 * and err; returns DIT_ERR_UNSUPPORTED (the caller falls back). */
dit_status cu_cdn_fail(const cudnn_api *api, cudnnStatus_t st, const char *who, const char *call, const char *what,
                       char *msg, size_t n, dit_error *err);

/* The conv state kept in the attention state (NULL until set); destroyed with it. */
cu_conv **cu_sdpa_conv_slot(cu_sdpa *s);
const cu_conv *cu_sdpa_conv_get(const cu_sdpa *s);
/* cudnn_conv.c: frees the conv state's plans (while the handle still lives). NULL: nothing. */
void cu_conv_destroy(cu_conv *c);

#endif /* DIT_HAVE_CUDNN */

#endif

/* Graph capture for the CUDA backend: the backend's stream is captured into a CUDA graph
 * (thread-local capture mode, so a stray synchronizing call fails the capture instead of
 * hanging or racing), instantiated once and launched on the same stream. A graph records
 * device addresses, including the backend's own buffers (conversion scratch, cuDNN
 * workspace); when one of those moves, graphs captured before are stale and their launch
 * answers DIT_ERR_UNSUPPORTED so the caller runs the ops and records them again.
 * DIT_CUDA_GRAPHS=0 turns capture off. */
#include <stdlib.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cudnn_sdpa.h"

typedef struct cu_graph {
  cudaGraphExec_t exec;
  uint64_t moves; /* backend buffer moves when it was captured */
} cu_graph;

static uint64_t moves_now(const cu_impl *im) { return im->moves + (uint64_t)cu_sdpa_moves(im->sdpa); }

static dit_status cu_capture_begin(dit_backend *be, dit_error *err) {
  cu_impl *im = cu_im(be);
  if (!im->graphs) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "cuda capture: turned off (DIT_CUDA_GRAPHS=0)");
  if (im->capturing) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "cuda capture: already capturing");
  DIT_TRY(cu_check(cudaStreamBeginCapture(im->stream, cudaStreamCaptureModeThreadLocal), "cuda capture",
                   "cudaStreamBeginCapture", err));
  im->capturing = true;
  im->capture_moves = moves_now(im);
  return DIT_OK;
}

static dit_status cu_capture_end(dit_backend *be, bool keep, void **graph, dit_error *err) {
  cu_impl *im = cu_im(be);
  *graph = NULL;
  if (!im->capturing) return dit_errorf(err, DIT_ERR_INVALID_ARG, "cuda capture: not capturing");
  im->capturing = false;
  cudaGraph_t g = NULL;
  cudaError_t e = cudaStreamEndCapture(im->stream, &g);
  if (e != cudaSuccess) {
    cudaGetLastError(); /* an op that cannot be captured invalidated it: not sticky */
    if (g) cudaGraphDestroy(g);
    return cu_check(e, "cuda capture", "cudaStreamEndCapture", err);
  }
  if (!keep) {
    cudaGraphDestroy(g);
    return DIT_OK;
  }
  if (moves_now(im) != im->capture_moves) {
    cudaGraphDestroy(g);
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "cuda capture: a backend buffer moved during the capture");
  }
  cu_graph *cg = calloc(1, sizeof *cg);
  if (!cg) {
    cudaGraphDestroy(g);
    return dit_errorf(err, DIT_ERR_NOMEM, "cuda capture: out of memory");
  }
  e = cudaGraphInstantiate(&cg->exec, g, 0);
  cudaGraphDestroy(g);
  if (e != cudaSuccess) {
    cudaGetLastError();
    free(cg);
    return cu_check(e, "cuda capture", "cudaGraphInstantiate", err);
  }
  cg->moves = im->capture_moves;
  *graph = cg;
  return DIT_OK;
}

static dit_status cu_graph_launch(dit_backend *be, void *graph, dit_error *err) {
  cu_impl *im = cu_im(be);
  cu_graph *cg = graph;
  if (!cg) return dit_errorf(err, DIT_ERR_INVALID_ARG, "cuda graph launch: no graph");
  if (!im->graphs || cg->moves != moves_now(im))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "cuda graph launch: stale (a backend buffer moved)");
  return cu_check(cudaGraphLaunch(cg->exec, im->stream), "cuda graph launch", "cudaGraphLaunch", err);
}

static void cu_graph_free(dit_backend *be, void *graph) {
  (void)be;
  cu_graph *cg = graph;
  if (!cg) return;
  cudaGraphExecDestroy(cg->exec);
  free(cg);
}

void cu_register_graph_ops(dit_backend_ops *ops) {
  ops->capture_begin = cu_capture_begin;
  ops->capture_end = cu_capture_end;
  ops->graph_launch = cu_graph_launch;
  ops->graph_free = cu_graph_free;
}

/* Device timers for the CUDA backend: marks are CUDA events recorded on the backend's
 * stream (created on first use, kept for reuse until the backend goes), so a profiler can
 * time each op by the events around it without synchronizing between ops. */
#include <stdlib.h>

#include "backend/cuda/cuda_internal.h"

#define CU_MAX_MARKS (1 << 20)

static dit_status cu_timer_mark(dit_backend *be, int *id, dit_error *err) {
  cu_impl *im = cu_im(be);
  *id = -1;
  if (im->n_marks == im->cap_marks) {
    if (im->cap_marks >= CU_MAX_MARKS)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "cuda timer: more than %d marks since the last reset", CU_MAX_MARKS);
    int cap = im->cap_marks ? 2 * im->cap_marks : 1024;
    cudaEvent_t *ev = realloc(im->marks, (size_t)cap * sizeof *ev);
    if (!ev) return dit_errorf(err, DIT_ERR_NOMEM, "cuda timer: out of memory");
    im->marks = ev;
    for (; im->cap_marks < cap; im->cap_marks++)
      DIT_TRY(cu_check(cudaEventCreate(&im->marks[im->cap_marks]), "cuda timer", "cudaEventCreate", err));
  }
  DIT_TRY(cu_check(cudaEventRecord(im->marks[im->n_marks], im->stream), "cuda timer", "cudaEventRecord", err));
  *id = im->n_marks++;
  return DIT_OK;
}

static dit_status cu_timer_ms(dit_backend *be, int a, int b, double *ms, dit_error *err) {
  cu_impl *im = cu_im(be);
  *ms = 0;
  if (a < 0 || b < 0 || a >= im->n_marks || b >= im->n_marks)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "cuda timer: marks %d, %d (%d recorded)", a, b, im->n_marks);
  DIT_TRY(cu_check(cudaEventSynchronize(im->marks[b]), "cuda timer", "cudaEventSynchronize", err));
  float f = 0;
  DIT_TRY(cu_check(cudaEventElapsedTime(&f, im->marks[a], im->marks[b]), "cuda timer", "cudaEventElapsedTime", err));
  *ms = f;
  return DIT_OK;
}

static void cu_timer_reset(dit_backend *be) { cu_im(be)->n_marks = 0; }

void cu_timer_destroy(cu_impl *im) {
  for (int i = 0; i < im->cap_marks; i++) cudaEventDestroy(im->marks[i]);
  free(im->marks);
  im->marks = NULL;
  im->n_marks = im->cap_marks = 0;
}

void cu_register_timer_ops(dit_backend_ops *ops) {
  ops->timer_mark = cu_timer_mark;
  ops->timer_ms = cu_timer_ms;
  ops->timer_reset = cu_timer_reset;
}

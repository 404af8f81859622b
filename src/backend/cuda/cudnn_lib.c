/* Diagnostics shared by the cuDNN users of the CUDA backend (cudnn_lib.h). */
#ifdef DIT_HAVE_CUDNN

#include <stdarg.h>
#include <stdio.h>

#include "backend/cuda/cudnn_lib.h"

void cu_cdn_note(char *msg, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, n, fmt, ap);
  va_end(ap);
}

void cu_cdn_log(int log, const char *msg, bool fallback, const char *instead) {
  if (log >= (fallback ? 1 : 2)) fprintf(stderr, "ditrun: %s%s%s%s\n", msg, fallback ? " (using " : "",
                                         fallback ? instead : "", fallback ? ")" : "");
}

dit_status cu_cdn_fail(const cudnn_api *api, cudnnStatus_t st, const char *who, const char *call, const char *what,
                       char *msg, size_t n, dit_error *err) {
  char last[512] = "";
  if (api->GetLastErrorString) api->GetLastErrorString(last, sizeof last);
  const char *es = api->GetErrorString ? api->GetErrorString(st) : "?";
  cu_cdn_note(msg, n, "%s: %s: %s failed: %s (%d)%s%s", who, what, call, es ? es : "?", (int)st,
              last[0] ? "; cuDNN: " : "", last);
  return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s", msg);
}

#endif /* DIT_HAVE_CUDNN */

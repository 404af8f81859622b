/* Error messages and status names (see error.h). */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

dit_status dit_errorf(dit_error *e, dit_status s, const char *fmt, ...) {
  if (!e) return s;
  e->status = s;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return s;
}

void dit_error_prefix(dit_error *e, const char *fmt, ...) {
  if (!e) return;
  char pre[DIT_ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pre, sizeof pre, fmt, ap);
  va_end(ap);
  char tmp[2 * DIT_ERROR_MSG_MAX + 2]; /* the result is cut to the message size */
  snprintf(tmp, sizeof tmp, "%s: %s", pre, e->msg);
  snprintf(e->msg, sizeof e->msg, "%.*s", DIT_ERROR_MSG_MAX - 1, tmp);
}

void dit_error_clear(dit_error *e) {
  if (!e) return;
  e->status = DIT_OK;
  e->msg[0] = 0;
}

const char *dit_status_str(dit_status s) {
  switch (s) {
    case DIT_OK: return "ok";
    case DIT_ERR_INVALID_ARG: return "invalid argument";
    case DIT_ERR_FORMAT: return "bad input";
    case DIT_ERR_IO: return "i/o error";
    case DIT_ERR_NOMEM: return "out of memory";
    case DIT_ERR_UNSUPPORTED: return "unsupported";
    case DIT_ERR_NUMERIC: return "numeric error";
    case DIT_ERR_INTERNAL: return "internal error";
    case DIT_ERR_CANCELLED: return "cancelled";
  }
  return "unknown status";
}

int dit_status_exit_code(dit_status s) {
  switch (s) {
    case DIT_OK: return 0;
    case DIT_ERR_INVALID_ARG:
    case DIT_ERR_FORMAT:
    case DIT_ERR_UNSUPPORTED: return 2;
    default: return 1;
  }
}

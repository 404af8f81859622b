/* Error reporting inside the library: a fallible function takes a dit_error* and, on
 * failure, fills it with a status and a message naming what was wrong and where, then
 * returns that status. Callers add context with dit_error_prefix. */
#ifndef DIT_CORE_ERROR_H
#define DIT_CORE_ERROR_H

#include "ditrun.h"

#define DIT_ERROR_MSG_MAX 1024

typedef struct dit_error {
  dit_status status;
  char msg[DIT_ERROR_MSG_MAX];
} dit_error;

/* Sets *e (if non-NULL) to status s with a printf-style message; returns s. */
dit_status dit_errorf(dit_error *e, dit_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prepends "context: " to e's message (keeps its status). */
void dit_error_prefix(dit_error *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dit_error_clear(dit_error *e);

/* Propagate a failure: DIT_TRY(f(..., err)) returns the status when it is not DIT_OK. */
#define DIT_TRY(expr)                         \
  do {                                        \
    dit_status dit_try_s_ = (expr);           \
    if (dit_try_s_ != DIT_OK) return dit_try_s_; \
  } while (0)

/* The end of a constructor that built obj with status s: on failure frees obj with
 * free_fn(obj) and returns s (leaving *out as it was: constructors set it to NULL first);
 * on success hands obj to *out and returns DIT_OK. */
#define DIT_HAND_OVER(s, obj, out, free_fn) \
  do {                                      \
    if ((s) != DIT_OK) {                    \
      free_fn(obj);                         \
      return (s);                           \
    }                                       \
    *(out) = (obj);                         \
    return DIT_OK;                          \
  } while (0)

#endif

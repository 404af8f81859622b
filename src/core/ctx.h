/* The engine context (dit_ctx): settings, the log sink and the last error. Everything
 * that would otherwise be global state lives here. */
#ifndef DIT_CORE_CTX_H
#define DIT_CORE_CTX_H

#include "core/error.h"
#include "core/options.h"
#include "ditrun.h"

struct dit_ctx {
  dit_ctx_params params; /* n_threads resolved to >= 1 */
  dit_error err;         /* last failure of a public call */
  dit_run_opts opts;     /* run-time switches: defaults, then the environment (core/options.h) */
};

/* Logs a printf-style message through the context's callback (or stderr). ctx may be
 * NULL (then WARN and above go to stderr). */
void dit_log(const dit_ctx *ctx, dit_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Stores e in ctx as the last error and returns its status (public-call epilogue). */
dit_status dit_ctx_fail(dit_ctx *ctx, const dit_error *e);

#endif

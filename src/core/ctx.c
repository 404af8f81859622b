/* Engine context and logging (see ctx.h). */
#include "core/ctx.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpus.h"

void dit_ctx_params_default(dit_ctx_params *p) {
  memset(p, 0, sizeof *p);
  p->log_level = DIT_LOG_WARN;
}

dit_status dit_ctx_create(const dit_ctx_params *p, dit_ctx **out) {
  *out = NULL;
  dit_ctx *c = calloc(1, sizeof *c);
  if (!c) return DIT_ERR_NOMEM;
  if (p)
    c->params = *p;
  else
    dit_ctx_params_default(&c->params);
  if (c->params.n_threads <= 0) c->params.n_threads = dit_cpu_count();
  dit_run_opts_default(&c->opts);
  dit_run_opts_from_env(&c->opts);
  *out = c;
  return DIT_OK;
}

void dit_ctx_free(dit_ctx *ctx) { free(ctx); }

const char *dit_ctx_last_error(const dit_ctx *ctx) { return ctx ? ctx->err.msg : ""; }

dit_status dit_ctx_fail(dit_ctx *ctx, const dit_error *e) {
  if (ctx && e && e != &ctx->err) ctx->err = *e;
  return e ? e->status : DIT_ERR_INTERNAL;
}

void dit_log(const dit_ctx *ctx, dit_log_level level, const char *fmt, ...) {
  dit_log_level max = ctx ? ctx->params.log_level : DIT_LOG_WARN;
  if (level > max) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (ctx && ctx->params.log) {
    ctx->params.log(ctx->params.log_user, level, msg);
  } else {
    static const char *names[] = {"error", "warning", "info", "debug"};
    fprintf(stderr, "ditrun: %s: %s\n", names[level], msg);
  }
}

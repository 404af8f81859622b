/* `ditrun info --system` (see ditrun.h): what this machine gives ditrun: the CPU, its vector
 * extensions, the GEMM kernel path the CPU backend takes (and DIT_CPU_ISA's say), the
 * thread count, and the CUDA devices of a CUDA build. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include "backend/backend.h"
#include "core/ctx.h"

/* The "model name" line of /proc/cpuinfo into buf ("unknown" without one). */
static void cpu_model(char *buf, size_t len) {
  snprintf(buf, len, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    const char *c = strchr(line, ':');
    if (strncmp(line, "model name", 10) || !c) continue;
    c += 1 + (c[1] == ' ');
    snprintf(buf, len, "%.*s", (int)strcspn(c, "\n"), c);
    break;
  }
  fclose(f);
}

static void print_features(FILE *out) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  const struct {
    const char *name;
    bool has;
  } f[] = {{"sse4.2", __builtin_cpu_supports("sse4.2")},     {"avx", __builtin_cpu_supports("avx")},
           {"avx2", __builtin_cpu_supports("avx2")},         {"fma", __builtin_cpu_supports("fma")},
           {"avx512f", __builtin_cpu_supports("avx512f")},   {"avx512bw", __builtin_cpu_supports("avx512bw")},
           {"avx512vl", __builtin_cpu_supports("avx512vl")}, {"avx512bf16", __builtin_cpu_supports("avx512bf16")}};
  fprintf(out, "  vector extensions:");
  for (size_t i = 0; i < sizeof f / sizeof *f; i++)
    if (f[i].has) fprintf(out, " %s", f[i].name);
  fprintf(out, "\n");
#elif defined(__aarch64__) && defined(__linux__)
  const unsigned long h = getauxval(AT_HWCAP), h2 = getauxval(AT_HWCAP2);
  const struct {
    const char *name;
    bool has;
  } f[] = {{"asimd", h & HWCAP_ASIMD},   {"asimdhp", h & HWCAP_ASIMDHP}, {"asimddp", h & HWCAP_ASIMDDP},
           {"sve", h & HWCAP_SVE},       {"bf16", h2 & HWCAP2_BF16},     {"i8mm", h2 & HWCAP2_I8MM}};
  fprintf(out, "  vector extensions:");
  for (size_t i = 0; i < sizeof f / sizeof *f; i++)
    if (f[i].has) fprintf(out, " %s", f[i].name);
  fprintf(out, "\n");
#else
  fprintf(out, "  vector extensions: (neither an x86-64 nor an AArch64 build; the portable kernels run)\n");
#endif
}

dit_status dit_system_print(dit_ctx *ctx, FILE *out) {
  dit_error err = {0};
  if (!ctx || !out) {
    dit_errorf(&err, DIT_ERR_INVALID_ARG, "dit_system_print: context and output are required");
    return ctx ? dit_ctx_fail(ctx, &err) : DIT_ERR_INVALID_ARG;
  }
  char model[256];
  cpu_model(model, sizeof model);
  fprintf(out, "cpu: %s, %d threads used\n", model, ctx->params.n_threads);
  print_features(out);
  const char *want = getenv("DIT_CPU_ISA");
  dit_backend *be = NULL;
  dit_status s = dit_backend_cpu_create(ctx->params.n_threads, &be, &err);
  if (s == DIT_OK) {
    if (want && *want) fprintf(out, "  GEMM kernel path: %s (DIT_CPU_ISA=%s)\n", dit_cpu_isa_name(be), want);
    else
      fprintf(out, "  GEMM kernel path: %s (the best this CPU has; DIT_CPU_ISA forces one of: %s)\n",
              dit_cpu_isa_name(be), dit_cpu_isa_names());
    dit_backend_free(be);
  }
#ifdef DIT_HAVE_CUDA
  const int n = dit_cuda_device_count();
  fprintf(out, "cuda: built in, %d device%s visible\n", n, n == 1 ? "" : "s");
#else
  fprintf(out, "cuda: not built (no CUDA toolkit when this build was configured)\n");
#endif
  return s == DIT_OK ? DIT_OK : dit_ctx_fail(ctx, &err);
}

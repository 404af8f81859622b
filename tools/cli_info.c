/* `ditrun info [--tensors] PATH`: prints what a model folder, component folder or
 * weights file holds, after validating it; `ditrun info --system`: what this machine gives
 * ditrun (CPU kernel path, CUDA devices). Exit 0 ok, 2 bad input, 1 I/O failure. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_args.h"
#include "ditrun.h"

static void info_usage(FILE *f) {
  fprintf(f,
          "usage: ditrun info [--tensors] PATH\n"
          "       ditrun info --system\n"
          "  PATH       a diffusers model folder (model_index.json), a component folder,\n"
          "             a PNG made by ditrun generate (its generation parameters),\n"
          "             a .safetensors file, a .safetensors.index.json file or a .gguf file\n"
          "             (its metadata too)\n"
          "  --tensors  also list every tensor: name, dtype, shape, bytes\n"
          "  --system   this machine: the CPU, its vector extensions, the GEMM kernel path\n"
          "             ditrun takes (DIT_CPU_ISA forces one: portable, avx2, avx512,\n"
          "             avx512bf16 on x86-64; portable, neon on AArch64),\n"
          "             threads, CUDA devices\n");
}

int cli_info_parse(int argc, char **argv, cli_info_opts *o) {
  memset(o, 0, sizeof *o);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      info_usage(stdout);
      return 1;
    } else if (!strcmp(argv[i], "--tensors")) {
      o->flags |= DIT_INFO_TENSORS;
    } else if (!strcmp(argv[i], "--system")) {
      o->system = true;
    } else if (argv[i][0] == '-' && argv[i][1]) {
      fprintf(stderr, "ditrun info: unknown option '%s'\n", argv[i]);
      info_usage(stderr);
      return 2;
    } else if (o->path) {
      fprintf(stderr, "ditrun info: more than one PATH ('%s' and '%s')\n", o->path, argv[i]);
      return 2;
    } else {
      o->path = argv[i];
    }
  }
  if (o->system && !o->path) return 0;
  if (o->system) {
    fprintf(stderr, "ditrun info: --system takes no PATH ('%s')\n", o->path);
    return 2;
  }
  if (!o->path || !*o->path) {
    if (o->path) fprintf(stderr, "ditrun info: PATH is empty\n");
    info_usage(stderr);
    return 2;
  }
  return 0;
}

int cli_info(int argc, char **argv) {
  cli_info_opts o;
  int code;
  dit_ctx *ctx = cli_start("info", cli_info_parse(argc, argv, &o), 0, &code);
  if (!ctx) return code;
  dit_status s = o.system ? dit_system_print(ctx, stdout) : dit_info_print_ex(ctx, o.path, o.flags, stdout);
  fflush(stdout);
  if (s != DIT_OK) fprintf(stderr, "ditrun info: %s: %s\n", dit_status_str(s), dit_ctx_last_error(ctx));
  dit_ctx_free(ctx);
  return dit_status_exit_code(s);
}

/* `ditrun quantize -m DIR [--component C] --type T -o OUT.gguf`: one component of a model
 * folder as a GGUF file, or for fp8 a scaled fp8 safetensors file (see dit_quantize). Exit 0
 * ok, 1 runtime failure, 2 bad input. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli_args.h"
#include "ditrun.h"

static void quantize_usage(FILE *f) {
  fprintf(f,
          "usage: ditrun quantize -m DIR --type T -o OUT.gguf [options]\n"
          "  -m, --model DIR      a diffusers model folder\n"
          "  --component C        transformer (default) or text_encoder\n"
          "  --type T             weight matrices as q8_0, q6_k, q5_k, q5_1, q5_0, q4_k, q4_1, q4_0, q3_k,\n"
          "                       q2_k (ggml's block types), bf16 or f32; or f8_e4m3 (fp8) / f8_e5m2 with a\n"
          "                       scale per tensor (ComfyUI's scaled fp8), written as .safetensors\n"
          "  -o, --output PATH    the GGUF (fp8: .safetensors) file to write\n"
          "  --overwrite          replace PATH if it exists\n"
          "  --threads N          CPU threads (default: the CPUs this process may use)\n"
          "  -q, --quiet          no progress\n"
          "Names follow the family's GGUF files elsewhere (Z-Image: the original checkpoint's;\n"
          "Qwen3: llama.cpp's). Then: ditrun generate -m DIR --diffusion-model OUT.gguf ...\n");
}

typedef struct cli_q_opts {
  dit_quantize_params p;
  int threads;
  bool quiet, have_type;
} cli_q_opts;

static int parse(int argc, char **argv, cli_q_opts *o) {
  memset(o, 0, sizeof *o);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      quantize_usage(stdout);
      return 1;
    } else if (!strcmp(a, "--overwrite")) {
      o->p.overwrite = 1;
    } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
      o->quiet = true;
    } else if (!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--component") || !strcmp(a, "--type") ||
               !strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "--threads")) {
      if (!v) {
        fprintf(stderr, "ditrun quantize: %s needs a value\n", a);
        return 2;
      }
      i++;
      if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->p.model_dir = v;
      else if (!strcmp(a, "--component")) o->p.component = v;
      else if (!strcmp(a, "-o") || !strcmp(a, "--output")) o->p.output = v;
      else if (!strcmp(a, "--type")) {
        if (!cli_parse_wtype("quantize", "--type", v, false, &o->p.type)) return 2;
        o->have_type = true;
      } else if (!cli_parse_int("quantize", "--threads", v, 1, 1024, &o->threads)) {
        return 2;
      }
    } else {
      fprintf(stderr, "ditrun quantize: unknown argument '%s'\n", a);
      quantize_usage(stderr);
      return 2;
    }
  }
  if (!o->p.model_dir || !o->p.output || !o->have_type) {
    fprintf(stderr, "ditrun quantize: -m DIR, --type T and -o OUT.gguf are required\n");
    quantize_usage(stderr);
    return 2;
  }
  if (o->p.component && strcmp(o->p.component, "transformer") && strcmp(o->p.component, "text_encoder")) {
    fprintf(stderr, "ditrun quantize: --component: '%s' is not transformer or text_encoder\n", o->p.component);
    return 2;
  }
  return 0;
}

static void on_tensor(void *user, size_t i, size_t n, const char *name) {
  (void)name;
  if (*(const bool *)user) fprintf(stderr, "\rquantize: tensor %zu/%zu", i + 1, n);
}

int cli_quantize(int argc, char **argv) {
  cli_q_opts o;
  int code;
  int parsed = parse(argc, argv, &o);
  dit_ctx *ctx = cli_start("quantize", parsed, o.threads, &code);
  if (!ctx) return code;
  bool show = !o.quiet && isatty(2);
  o.p.on_tensor = on_tensor;
  o.p.user = &show;
  dit_status s = dit_quantize(ctx, &o.p);
  if (show) fputc('\n', stderr);
  if (s != DIT_OK) fprintf(stderr, "ditrun quantize: %s: %s\n", dit_status_str(s), dit_ctx_last_error(ctx));
  else if (!o.quiet) printf("%s\n", o.p.output);
  dit_ctx_free(ctx);
  return dit_status_exit_code(s);
}

/* `ditrun plan`: what a `ditrun generate` with the same options would take, before it runs:
 * per stage the weights, activations and FLOPs, and the run's peak memory (dit_model_plan). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_args.h"
#include "ditrun.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: ditrun plan -m DIR [generate's options] [--json]\n"
          "  What `ditrun generate` with the same options would take, without running it: for each\n"
          "  stage (text encoder, transformer steps, VAE decode) the component's weights as stored,\n"
          "  the memory the stage allocates beyond them, its FLOPs, and the memory in use; then the\n"
          "  run's peak. From the folder's configs and the weight files' headers: components are\n"
          "  mapped, never run. One image loads each component for its stage only; -b N > 1 keeps\n"
          "  them all.\n"
          "  So far the CPU only; LoRAs and image inputs (image-to-image, reference images,\n"
          "  image-to-video) are not planned yet.\n"
          "      --max-memory SIZE  what generate would change to fit SIZE (24G, 512M), or why it cannot\n"
          "      --json             one JSON object on stdout\n"
          "  Sizes, steps, prompt, guidance, --vae-tile, --max-seq-len, --threads: as `ditrun generate --help`.\n");
}

static double gib(size_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

/* "1.23 GiB" / "45.6 MiB" into buf. */
static const char *size_str(size_t b, char *buf, size_t len) {
  if (b >= (size_t)1 << 30) snprintf(buf, len, "%.2f GiB", gib(b));
  else snprintf(buf, len, "%.1f MiB", (double)b / (1024.0 * 1024.0));
  return buf;
}

static void print_text(const dit_plan *pl) {
  char a[32], b[32], c[32];
  printf("ditrun plan: %s, %dx%d", pl->family, pl->width, pl->height);
  if (pl->frames) printf(", %d frames", pl->frames);
  printf(", %d steps (batch %d), %d prompt tokens, %s; %s\n", pl->steps, pl->batch, pl->text_tokens,
         pl->device == DIT_DEVICE_CPU ? "CPU" : "CUDA",
         pl->keep ? "components kept loaded" : "each component loaded for its stage only");
  printf("  %-14s %-12s %-26s %-12s %-12s %s\n", "stage", "runs", "weights (stored)", "allocates", "in use",
         "GFLOP");
  for (int i = 0; i < pl->n_stages; i++) {
    const dit_plan_stage *s = &pl->stage[i];
    char w[96];
    snprintf(w, sizeof w, "%s %s", size_str(s->weight_bytes, a, sizeof a), s->weight_dtypes);
    printf("  %-14s %-12d %-26.26s %-12s %-12s %.1f\n", s->name, s->runs, w, size_str(s->act_bytes, b, sizeof b),
           size_str(s->peak_bytes, c, sizeof c), s->flops * 1e-9);
  }
  printf("  peak %s during the %s (of it %s is this process before any model loads); %.1f GFLOP in all\n",
         size_str(pl->peak_bytes, a, sizeof a), pl->n_stages ? pl->stage[pl->peak_stage].name : "-",
         size_str(pl->base_bytes, b, sizeof b), pl->flops * 1e-9);
  if (pl->start_peak_bytes > pl->peak_bytes)
    printf("  the process peaks higher, at %s, while it loads its libraries (before any model)\n",
           size_str(pl->start_peak_bytes, a, sizeof a));
}

static void print_json(const dit_plan *pl) {
  printf("{\"family\": \"%s\", \"device\": \"%s\", \"width\": %d, \"height\": %d, \"frames\": %d, \"steps\": %d, "
         "\"batch\": %d, \"text_tokens\": %d, \"keep\": %u, \"base_bytes\": %zu, \"peak_bytes\": %zu, "
         "\"start_peak_bytes\": %zu, \"process_peak_bytes\": %zu, \"peak_stage\": %d, \"flops\": %.6g, \"stages\": [",
         pl->family, pl->device == DIT_DEVICE_CPU ? "cpu" : "cuda", pl->width, pl->height, pl->frames, pl->steps,
         pl->batch, pl->text_tokens, pl->keep, pl->base_bytes, pl->peak_bytes, pl->start_peak_bytes,
         pl->peak_bytes > pl->start_peak_bytes ? pl->peak_bytes : pl->start_peak_bytes, pl->peak_stage, pl->flops);
  for (int i = 0; i < pl->n_stages; i++) {
    const dit_plan_stage *s = &pl->stage[i];
    printf("%s{\"name\": \"%s\", \"component\": \"%s\", \"weight_bytes\": %zu, \"resident_weight_bytes\": %zu, "
           "\"weight_dtypes\": \"%s\", \"act_bytes\": %zu, \"act_kept_bytes\": %zu, \"peak_bytes\": %zu, "
           "\"flops\": %.6g, \"runs\": %d}",
           i ? ", " : "", s->name, s->component, s->weight_bytes, s->resident_weight_bytes, s->weight_dtypes,
           s->act_bytes, s->act_kept_bytes, s->peak_bytes, s->flops, s->runs);
  }
  printf("]}\n");
}

int cli_plan(int argc, char **argv) {
  bool json = false;
  char **av = calloc((size_t)argc + 1, sizeof *av);
  if (!av) {
    fprintf(stderr, "ditrun plan: out of memory\n");
    return 1;
  }
  int ac = 0;
  for (int i = 0; i < argc; i++) {
    if (i > 0 && !strcmp(argv[i], "--json")) json = true;
    else if (i > 0 && (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))) {
      usage(stdout);
      free(av);
      return 0;
    }
    else av[ac++] = argv[i];
  }
  cli_gen_opts o;
  int r = cli_generate_parse(ac, av, &o), code;
  free(av);
  if (r == 0 && !o.p.model_dir) {
    fprintf(stderr, "ditrun plan: -m MODEL_DIR is required\n");
    r = 2;
  }
  dit_ctx *ctx = cli_start("plan", r, o.threads, &code);
  if (!ctx) return code;
  dit_model_opts mo;
  cli_model_opts(&o, &mo);
  mo.loras = NULL, mo.n_loras = 0; /* not planned yet */
  dit_plan pl;
  char what[256] = "";
  /* with --max-memory: what generate would choose to fit it */
  dit_status s = o.max_memory ? dit_model_plan_fit(ctx, &o.p, &mo, o.max_memory, &pl, what, sizeof what)
                              : dit_model_plan(ctx, &o.p, &mo, &pl);
  if (s == DIT_OK && what[0] && !json) printf("ditrun plan: %s\n", what);
  if (s == DIT_OK) {
    if (json) print_json(&pl);
    else print_text(&pl);
  } else {
    fprintf(stderr, "ditrun plan: %s\n", dit_ctx_last_error(ctx));
  }
  code = dit_status_exit_code(s);
  dit_ctx_free(ctx);
  return code;
}

/* `ditrun generate`: prompt to PNG. Parses options strictly (bad usage exits 2 before
 * any work), checks the output path up front so a long run cannot end in a refused
 * write, shows progress on stderr, and prints a per-stage timing summary. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cli_args.h"
#include "ditrun.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: ditrun generate -m MODEL_DIR -p PROMPT [options]\n"
          "  -m, --model DIR        diffusers model folder (model_index.json)\n"
          "  -p, --prompt TEXT      what to draw (UTF-8)\n"
          "  -n, --negative TEXT    negative prompt (used when guidance > 0)\n"
          "  -W, --width N          image width in pixels (default: the model family's)\n"
          "  -H, --height N         image height in pixels\n"
          "      --steps N          denoising steps (default: the family's)\n"
          "      --guidance G       classifier-free guidance scale (0 = off)\n"
          "      --cfg-truncation X Z-Image: guidance off once (1000-t)/1000 > X (default 1)\n"
          "      --cfg-normalization X  Z-Image: cap |guided| at X * |cond| (default 0 = off)\n"
          "      --seed S           random seed, any unsigned 64-bit integer (default 42)\n"
          "      --rng torch-cpu    noise generator (torch's CPU generator, bit for bit)\n"
          "      --max-seq-len N    prompt tokens after the chat template (default 512)\n"
          "      --text-rope-bf16   round the text encoder's RoPE frequencies to bf16, as a reference\n"
          "                         run does whose encoder was cast with .to(torch.bfloat16)\n"
          "  -o, --output PATH      PNG to write (default output.png)\n"
          "      --overwrite        replace PATH if it exists\n"
          "      --vae-tile N       decode the VAE in tiles of N latent pixels (0 = whole)\n"
          "      --threads N        CPU threads (default: all cores)\n"
          "      --device cpu|cuda  where to run (default cpu)\n"
          "      --cpu-precision P  CPU linear layers: fp32 (default, exact) or bf16 (bf16 products, fp32 sums)\n"
          "      --progress         show progress even when stderr is not a terminal\n"
          "  -q, --quiet            print only errors\n");
}

typedef struct progress {
  bool show, tty;
  double last_draw, elapsed;
} progress;

static void on_step(void *user, int step, int total, const float *lat, size_t n, double secs) {
  (void)lat;
  (void)n;
  progress *pr = user;
  pr->elapsed += secs;
  if (!pr->show) return;
  bool last = step + 1 == total;
  if (!last && pr->elapsed - pr->last_draw < 1.0) return;
  pr->last_draw = pr->elapsed;
  double per = pr->elapsed / (step + 1);
  double eta = per * (total - step - 1);
  fprintf(stderr, "%sstep %d/%d  %.2f s/it  ETA %.1f s%s", pr->tty ? "\r\033[K" : "", step + 1, total, per, eta,
          pr->tty && !last ? "" : "\n");
  fflush(stderr);
}

/* Output path checks before any work: not a directory, parent exists, no silent overwrite. */
static bool check_output(const char *path, bool overwrite) {
  struct stat st;
  if (!*path) {
    fprintf(stderr, "ditrun generate: --output: empty path\n");
    return false;
  }
  /* a dangling symlink is a name that exists too (the writer would refuse it only after
   * the whole run) */
  if (stat(path, &st) != 0 && lstat(path, &st) == 0 && !overwrite) {
    fprintf(stderr, "ditrun generate: --output: %s exists (a dangling symlink; use --overwrite to replace it)\n",
            path);
    return false;
  }
  if (stat(path, &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      fprintf(stderr, "ditrun generate: --output: %s is a directory\n", path);
      return false;
    }
    if (!overwrite) {
      fprintf(stderr, "ditrun generate: --output: %s exists (use --overwrite to replace it)\n", path);
      return false;
    }
    if (!S_ISREG(st.st_mode)) {
      fprintf(stderr, "ditrun generate: --output: %s is not a regular file\n", path);
      return false;
    }
  }
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash == dir) dir[1] = 0;
  else if (slash) *slash = 0;
  else snprintf(dir, sizeof dir, ".");
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    fprintf(stderr, "ditrun generate: --output: folder %s does not exist\n", dir);
    return false;
  }
  return true;
}

int cli_generate_parse(int argc, char **argv, cli_gen_opts *o) {
  memset(o, 0, sizeof *o);
  dit_gen_params_default(&o->p);
  o->p.seed = 42;
  o->out = "output.png";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    bool m = false, bad = false;
#define OPT(s, l) (v = cli_opt_value(argc, argv, &i, s, l, &m, &bad), m)
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 1; }
    else if (!strcmp(a, "--overwrite")) o->overwrite = true;
    else if (!strcmp(a, "--progress")) o->force_progress = true;
    else if (!strcmp(a, "--text-rope-bf16")) o->p.text_rope_bf16 = 1;
    else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) o->quiet = true;
    else if (OPT("-m", "--model")) { if (!bad) o->p.model_dir = v; }
    else if (OPT("-p", "--prompt")) { if (!bad) o->p.prompt = v; }
    else if (OPT("-n", "--negative")) { if (!bad) o->p.negative_prompt = v; }
    else if (OPT("-o", "--output")) { if (!bad) o->out = v; }
    else if (OPT("-W", "--width")) { if (!bad && !cli_parse_int("generate", "--width", v, 1, 16384, &o->p.width)) return 2; }
    else if (OPT("-H", "--height")) { if (!bad && !cli_parse_int("generate", "--height", v, 1, 16384, &o->p.height)) return 2; }
    else if (OPT(NULL, "--steps")) { if (!bad && !cli_parse_int("generate", "--steps", v, 1, 1000, &o->p.steps)) return 2; }
    else if (OPT(NULL, "--guidance")) {
      if (!bad && !cli_parse_double("generate", "--guidance", v, -1000, 1000, &o->p.guidance)) return 2;
      o->p.guidance_set = 1;
    }
    else if (OPT(NULL, "--cfg-truncation")) { if (!bad && !cli_parse_double("generate", "--cfg-truncation", v, -1e6, 1e6, &o->p.cfg_truncation)) return 2; }
    else if (OPT(NULL, "--cfg-normalization")) { if (!bad && !cli_parse_double("generate", "--cfg-normalization", v, 0, 1e6, &o->p.cfg_normalization)) return 2; }
    else if (OPT(NULL, "--seed")) { if (!bad && !cli_parse_u64("generate", "--seed", v, &o->p.seed)) return 2; }
    else if (OPT(NULL, "--max-seq-len")) { if (!bad && !cli_parse_int("generate", "--max-seq-len", v, 1, 32768, &o->p.max_sequence_length)) return 2; }
    else if (OPT(NULL, "--vae-tile")) { if (!bad && !cli_parse_int("generate", "--vae-tile", v, 0, 4096, &o->p.vae_tile)) return 2; }
    else if (OPT(NULL, "--threads")) { if (!bad && !cli_parse_int("generate", "--threads", v, 1, 1024, &o->threads)) return 2; }
    else if (OPT(NULL, "--rng")) {
      if (!bad && strcmp(v, "torch-cpu")) {
        fprintf(stderr, "ditrun generate: --rng: '%s' is not supported (supported: torch-cpu; philox is not implemented yet)\n", v);
        return 2;
      }
    }
    else if (OPT(NULL, "--device")) {
      if (!bad && !strcmp(v, "cpu")) o->p.device = DIT_DEVICE_CPU;
      else if (!bad && !strcmp(v, "cuda")) o->p.device = DIT_DEVICE_CUDA;
      else if (!bad) { fprintf(stderr, "ditrun generate: --device: '%s' is not cpu or cuda\n", v); return 2; }
    }
    else if (OPT(NULL, "--cpu-precision")) {
      if (!bad && !strcmp(v, "fp32")) o->p.cpu_precision = DIT_CPU_PRECISION_FP32;
      else if (!bad && !strcmp(v, "bf16")) o->p.cpu_precision = DIT_CPU_PRECISION_BF16;
      else if (!bad) { fprintf(stderr, "ditrun generate: --cpu-precision: '%s' is not fp32 or bf16\n", v); return 2; }
    }
    else { fprintf(stderr, "ditrun generate: unknown option '%s' (see ditrun generate --help)\n", a); return 2; }
#undef OPT
    if (bad) { fprintf(stderr, "ditrun generate: %s needs a value\n", a); return 2; }
  }
  if (!o->p.model_dir || !*o->p.model_dir) { fprintf(stderr, "ditrun generate: -m MODEL_DIR is required (and not empty)\n"); return 2; }
  if (!o->p.prompt) { fprintf(stderr, "ditrun generate: -p PROMPT is required\n"); return 2; }
  return 0;
}

static void print_summary(const dit_gen_stats *st) {
  fprintf(stderr,
          "text encode %.2f s | load %.2f s | %d steps %.2f s (%.2f s/step) | VAE decode %.2f s | total %.2f s | "
          "peak RSS %.0f MiB\n",
          st->encode_seconds, st->load_seconds, st->steps, st->denoise_seconds,
          st->steps ? st->denoise_seconds / st->steps : 0.0, st->decode_seconds, st->total_seconds,
          (double)st->peak_rss_bytes / (1024.0 * 1024.0));
}

int cli_generate(int argc, char **argv) {
  cli_gen_opts o;
  int r = cli_generate_parse(argc, argv, &o);
  if (r) return r == 1 ? 0 : 2;
  if (!check_output(o.out, o.overwrite)) return 2;
  dit_ctx_params cp;
  dit_ctx_params_default(&cp);
  cp.n_threads = o.threads;
  dit_ctx *ctx = NULL;
  if (dit_ctx_create(&cp, &ctx) != DIT_OK) {
    fprintf(stderr, "ditrun generate: out of memory\n");
    return 1;
  }
  dit_gen_defaults d;
  dit_status s = dit_gen_defaults_for(ctx, o.p.model_dir, &d);
  if (s == DIT_OK && ((o.p.width && o.p.width % d.size_multiple) || (o.p.height && o.p.height % d.size_multiple))) {
    fprintf(stderr, "ditrun generate: width and height must be multiples of %d for this model (got %dx%d)\n",
            d.size_multiple, o.p.width ? o.p.width : d.width, o.p.height ? o.p.height : d.height);
    dit_ctx_free(ctx);
    return 2;
  }
  progress pr = {.show = !o.quiet && (o.force_progress || isatty(2)), .tty = isatty(2) != 0};
  o.p.on_step = on_step;
  o.p.user = &pr;
  dit_image img = {0};
  dit_gen_stats st;
  if (s == DIT_OK) s = dit_generate(ctx, &o.p, &img, &st);
  if (s == DIT_OK) {
    char size[64], params[1024];
    snprintf(size, sizeof size, "%dx%d", img.width, img.height);
    snprintf(params, sizeof params, "model: %s, size: %s, steps: %d, guidance: %g, seed: %llu, rng: torch-cpu, ditrun %s",
             o.p.model_dir, size, st.steps, o.p.guidance_set ? o.p.guidance : d.guidance,
             (unsigned long long)o.p.seed, DITRUN_VERSION);
    const char *keys[] = {"prompt", "negative_prompt", "parameters"};
    const char *vals[] = {o.p.prompt, o.p.negative_prompt ? o.p.negative_prompt : "", params};
    s = dit_image_save_png(ctx, &img, o.out, keys, vals, 3, o.overwrite);
  }
  int code = dit_status_exit_code(s);
  if (s != DIT_OK) {
    fprintf(stderr, "ditrun generate: %s\n", dit_ctx_last_error(ctx));
  } else {
    if (!o.quiet) print_summary(&st);
    printf("%s\n", o.out);
  }
  dit_image_free(&img);
  dit_ctx_free(ctx);
  return code;
}

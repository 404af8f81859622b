/* The planner (dit_model_plan, `ditrun plan`) against what a generate really holds: for the
 * shipped model and the Z-Image, FLUX.2 [klein], FLUX.1 [dev] and Krea 2 fixtures at 128x128
 * and 512x512, MiniMax-H3's (a clip of 124 frames with sound at 256x128 and 512x256) and LTX-2's
 * and LTX-2.3's (clips of 9 frames at 64x32 and of 49 frames at 512x256, 2 steps, with sound), each
 * stage's predicted memory in use against the process's resident peak measured during that
 * stage of a real generate (VmHWM, reset at every stage start through /proc/self/clear_refs),
 * within 15% as the planner's promise says; fitting a run to a limit
 * (--max-memory); the refusals; the CLI. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ditrun.h"
#include "support/testing.h"

#define TOLERANCE 0.15

/* Whether the memory measured can be compared with the plan: not under AddressSanitizer, which
 * adds redzones, shadow and a quarantine of freed memory (the plans and runs still go through
 * it, for its leak and error checks). */
#ifdef DT_ASAN
static const bool measured = false;
#else
static const bool measured = true;
#endif

/* The process's resident peak since the last reset (bytes), and a reset; 0 / false where
 * /proc does not offer them. */
static size_t hwm_bytes(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) kb = strtoull(line + 6, NULL, 10);
  fclose(f);
  return kb * 1024;
}

static bool hwm_reset(void) {
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  bool ok = fputs("5", f) >= 0;
  return fclose(f) == 0 && ok;
}

/* Peaks of the generate's stages as the plan names them: text encoder, transformer (from
 * "denoising" on), VAE decode. */
typedef struct stage_peaks {
  int at;          /* the stage running: -1 before the first */
  size_t peak[3];
} stage_peaks;

static void close_stage(stage_peaks *s) {
  if (s->at >= 0) s->peak[s->at] = hwm_bytes();
  hwm_reset();
}

static void on_stage(void *user, const char *stage) {
  stage_peaks *s = user;
  static const char *const names[3] = {"text encoder", "denoising", "VAE decode"};
  for (int i = 0; i < 3; i++)
    if (!strcmp(stage, names[i])) {
      close_stage(s);
      s->at = i;
    }
}

/* A context and the parameters of a size x size image of the model in dir. */
static dit_ctx *start(const char *dir, int size, dit_gen_params *p) {
  dit_ctx *ctx = NULL;
  dit_ctx_params cp;
  dit_ctx_params_default(&cp);
  CHECK(dit_ctx_create(&cp, &ctx) == DIT_OK);
  dit_gen_params_default(p);
  p->model_dir = dir;
  p->prompt = "a red circle on a blue square";
  p->width = p->height = size;
  return ctx;
}

/* A case in a child process of its own (forked before this process starts any thread), so
 * the memory one case frees stays out of the next one's measurements, as in a fresh
 * `ditrun generate`; its checks count as one here. */
typedef struct child_case {
  const char *dir, *tmp;
  int size;
  int width, frames; /* a clip (frames > 0): width x size, frames */
  int max_seq;       /* the text encoder's sequence (0: the model's) */
  int vae_tile;      /* --vae-tile (0: untiled) */
} child_case;

static void in_child(void (*fn)(const child_case *), const child_case *c) {
  fflush(stdout);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    dt_passed = dt_failed = 0; /* the child's own checks: a failure before the fork is the parent's to report */
    fn(c);
    fflush(stdout);
    _exit(dt_failed ? 1 : 0);
  }
  int st = 0;
  CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
  CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s at %d: the case failed (above)", c->dir, c->size);
}

/* The generate the plan describes, measured stage by stage (sp): an image through dit_generate, or a clip
 * through a model loaded with nothing kept, as dit_model_plan assumes without options. */
static dit_status measured_run(dit_ctx *ctx, dit_gen_params *p, stage_peaks *sp) {
  p->on_stage = on_stage;
  p->user = sp;
  dit_status s;
  CHECK(hwm_reset());
  if (p->frames > 0) {
    dit_model_opts o;
    dit_model_opts_default(&o);
    o.keep = 0;
    dit_model *m = NULL;
    dit_clip clip = {0};
    s = dit_model_load(ctx, p->model_dir, &o, &m);
    if (s == DIT_OK) s = dit_model_generate_clip(m, p, &clip, NULL);
    close_stage(sp);
    dit_clip_free(&clip);
    dit_model_free(m);
  } else {
    dit_image img;
    s = dit_generate(ctx, p, &img, NULL);
    close_stage(sp);
    if (s == DIT_OK) dit_image_free(&img);
  }
  CHECK_MSG(s == DIT_OK, "%s", dit_ctx_last_error(ctx));
  return s;
}

static void check_model(const child_case *c) {
  const char *dir = c->dir;
  const int size = c->size;
  dit_gen_params p;
  dit_ctx *ctx = start(dir, size, &p);
  if (c->frames > 0) p.width = c->width, p.frames = c->frames, p.steps = 2;
  p.max_sequence_length = c->max_seq, p.vae_tile = c->vae_tile;
  dit_plan pl;
  dit_status s = dit_model_plan(ctx, &p, NULL, &pl);
  CHECK_MSG(s == DIT_OK, "%s %d: %s", dir, size, dit_ctx_last_error(ctx));
  if (s != DIT_OK) {
    dit_ctx_free(ctx);
    return;
  }
  CHECK(pl.n_stages == 3 && pl.width == p.width && pl.height == size && pl.steps > 0 && pl.text_tokens > 0);
  CHECK(pl.stage[1].runs == pl.steps && pl.stage[1].flops > 0 && pl.flops >= pl.stage[1].flops);
  CHECK(pl.frames == c->frames);
  stage_peaks sp = {.at = -1};
  s = measured_run(ctx, &p, &sp);
  size_t measured_peak = 0;
  for (int i = 0; i < 3 && s == DIT_OK; i++) {
    const dit_plan_stage *st = &pl.stage[i];
    const double pred = (double)st->peak_bytes, got = (double)sp.peak[i];
    printf("  %s %dx%d%s %-12s predicted %7.1f MiB (base %.1f + weights %.1f + allocates %.1f), measured %7.1f MiB "
           "(%+.1f%%)\n", strrchr(dir, '/') + 1, p.width, size, c->vae_tile ? " tiled" : "", st->name, pred / 1048576, pl.base_bytes / 1048576.0,
           st->weight_bytes / 1048576.0, st->act_bytes / 1048576.0, got / 1048576, 100 * (pred - got) / got);
    CHECK_MSG(!measured || (got > 0 && pred > (1 - TOLERANCE) * got && pred < (1 + TOLERANCE) * got),
              "%s at %d: stage %s predicted %.1f MiB, measured %.1f MiB", dir, size, st->name, pred / 1048576,
              got / 1048576);
    if (sp.peak[i] > measured_peak) measured_peak = sp.peak[i];
  }
  CHECK_MSG(!measured ||
                (pl.peak_bytes > (1 - TOLERANCE) * measured_peak && pl.peak_bytes < (1 + TOLERANCE) * measured_peak),
            "%s at %d: peak predicted %zu, measured %zu", dir, size, pl.peak_bytes, measured_peak);
  dit_ctx_free(ctx);
}

static void test_peaks(const dt_args *a) {
  if (!hwm_reset()) {
    printf("  (this system has no /proc/self/clear_refs: the measured side cannot be taken; skipped)\n");
    return;
  }
  char dirs[5][4096];
  dt_path(dirs[0], sizeof dirs[0], a->src, "models/shapes-128");
  static const char *const fixtures[4] = {"models/zimage-tiny", "models/flux2-klein-tiny", "models/flux1-dev-tiny",
                                          "models/krea2-turbo-tiny"};
  for (int d = 0; d < 4; d++) dt_path(dirs[d + 1], sizeof dirs[d + 1], a->data, fixtures[d]);
  const int sizes[2] = {128, 512};
  for (int d = 0; d < 5; d++)
    for (int i = 0; i < 2; i++) in_child(check_model, &(child_case){dirs[d], a->tmp, sizes[i], 0, 0, 0, 0});
  /* a clip with sound: MiniMax-H3's tiny fixture, 124 frames at 256x128 and 512x256 (the video VAE in tiles) */
  char h3[4096];
  dt_path(h3, sizeof h3, a->data, "models/minimax-h3-tiny");
  in_child(check_model, &(child_case){h3, a->tmp, 128, 256, 124, 0, 0});
  in_child(check_model, &(child_case){h3, a->tmp, 256, 512, 124, 0, 0});
  /* LTX-2 and 2.3 (tiny Gemma 3 with a window of 64 tokens: prompts of 64), a short clip and a longer, larger one */
  static const char *const ltx[2] = {"models/ltx2-tiny", "models/ltx23-tiny"};
  for (int d = 0; d < 2; d++) {
    char dir[4096];
    dt_path(dir, sizeof dir, a->data, ltx[d]);
    in_child(check_model, &(child_case){dir, a->tmp, 32, 64, 9, 64, 0});
    in_child(check_model, &(child_case){dir, a->tmp, 256, 512, 49, 64, 0});
  }
  /* LTX-2's video VAE in tiles of 8 latents, windows of 16 frames: tiles, rows and windows blended on the host */
  char l2[4096];
  dt_path(l2, sizeof l2, a->data, ltx[0]);
  in_child(check_model, &(child_case){l2, a->tmp, 256, 512, 49, 64, 8});
}

/* Fitting (in a child, as test_peaks): a limit halfway between the smallest plan and the run
 * as asked makes the fit tile the VAE; the run then stays within the limit and its picture is
 * at least 40 dB from the untiled one. */
static void fit_case(const child_case *c) {
  const char *dir = c->dir, *tmp = c->tmp;
  dit_gen_params p;
  dit_ctx *ctx = start(dir, c->size, &p);
  dit_model_opts o;
  dit_model_opts_default(&o);
  o.keep = 0;
  dit_plan whole, small, pl;
  CHECK(dit_model_plan(ctx, &p, &o, &whole) == DIT_OK);
  dit_gen_params q = p;
  q.vae_tile = 32;
  CHECK(dit_model_plan(ctx, &q, &o, &small) == DIT_OK);
  /* what each plan adds to the process (each plan's base is what the process holds as it begins) */
  const size_t small_run = small.peak_bytes - small.base_bytes, whole_run = whole.peak_bytes - whole.base_bytes;
  CHECK_MSG(small_run < whole_run, "tiles of 32 plan %zu, whole %zu", small_run, whole_run);
  char what[256];
  /* a limit the run fits as asked changes nothing */
  q = p;
  CHECK(dit_model_plan_fit(ctx, &q, &o, 2 * whole.peak_bytes, &pl, what, sizeof what) == DIT_OK);
  CHECK(q.vae_tile == 0 && what[0] == 0 && pl.n_stages == 3);
  /* too small for anything: refused with the smallest limit that would do */
  CHECK(dit_model_plan_fit(ctx, &q, &o, small.peak_bytes / 2, &pl, what, sizeof what) == DIT_ERR_INVALID_ARG);
  CHECK_MSG(strstr(dit_ctx_last_error(ctx), "at least") != NULL, "%s", dit_ctx_last_error(ctx));
  /* the smallest found */
  CHECK_MSG(q.vae_tile > 0 && pl.n_stages == 3 && pl.peak_bytes - pl.base_bytes < small_run + (4u << 20),
            "tile %d, %zu vs %zu", q.vae_tile, pl.peak_bytes - pl.base_bytes, small_run);
  /* in between: tiled, within the limit, measured (under ASan what the process holds grows from plan
   * to plan, so the choice is not asserted there: the calls still go through it) */
  const size_t limit = (size_t)(1.05 * (double)(small.peak_bytes + whole.peak_bytes) / 2);
  q = p;
  const dit_status fs = dit_model_plan_fit(ctx, &q, &o, limit, &pl, what, sizeof what);
  CHECK(!measured || fs == DIT_OK);
  CHECK_MSG(q.vae_tile > 0 && (!measured || (strstr(what, "tiles of") && pl.peak_bytes * 1.05 <= limit)),
            "tile %d: %s", q.vae_tile, what);
  dit_image tiled, whole_img;
  CHECK(hwm_reset());
  CHECK(dit_generate(ctx, &q, &tiled, NULL) == DIT_OK);
  const size_t got = hwm_bytes();
  printf("  %s: --max-memory %.1f MiB chose tiles of %d: planned %.1f MiB, measured %.1f MiB (%.1f MiB as asked)\n",
         strrchr(dir, '/') + 1, limit / 1048576.0, q.vae_tile, pl.peak_bytes / 1048576.0, got / 1048576.0,
         whole.peak_bytes / 1048576.0);
  CHECK_MSG(!measured || got <= limit, "measured %zu over the limit %zu", got, limit);
  CHECK(dit_generate(ctx, &p, &whole_img, NULL) == DIT_OK);
  char fa[4096], fb[4096];
  dt_path(fa, sizeof fa, tmp, "fit_tiled.png");
  dt_path(fb, sizeof fb, tmp, "fit_whole.png");
  CHECK(dit_image_save_png(ctx, &tiled, fa, NULL, NULL, 0, 1) == DIT_OK);
  CHECK(dit_image_save_png(ctx, &whole_img, fb, NULL, NULL, 0, 1) == DIT_OK);
  dit_image_metrics mt;
  CHECK(dit_compare_png(ctx, fa, fb, &mt) == DIT_OK);
  printf("  tiled against whole: PSNR %.1f dB\n", mt.psnr);
  CHECK_MSG(mt.psnr >= 40.0, "PSNR %.2f dB", mt.psnr);
  dit_image_free(&tiled);
  dit_image_free(&whole_img);
  dit_ctx_free(ctx);
}

static void test_fit(const dt_args *a) {
  if (!hwm_reset()) return;
  char dir[4096];
  dt_path(dir, sizeof dir, a->src, "models/shapes-128");
  in_child(fit_case, &(child_case){dir, a->tmp, 512, 0, 0, 0, 0});
}

static void test_refusals(const dt_args *a) {
  dit_ctx *ctx = NULL;
  dit_ctx_params cp;
  dit_ctx_params_default(&cp);
  CHECK(dit_ctx_create(&cp, &ctx) == DIT_OK);
  char dir[4096];
  dt_path(dir, sizeof dir, a->src, "models/shapes-128");
  dit_gen_params p;
  dit_gen_params_default(&p);
  p.model_dir = dir;
  dit_model_opts o;
  dit_model_opts_default(&o);
  o.device = DIT_DEVICE_CUDA;
  dit_plan pl;
  CHECK(dit_model_plan(ctx, &p, &o, &pl) == DIT_ERR_UNSUPPORTED);
  CHECK(strstr(dit_ctx_last_error(ctx), "CPU") != NULL);
  /* LTX-2: image-to-video is not planned yet, and says so; its video VAE in tiles plans less for the decode;
   * frame counts and prompt lengths the model refuses are refused */
  dt_path(dir, sizeof dir, a->data, "models/ltx2-tiny");
  p.prompt = "x";
  p.width = 512, p.height = 256, p.frames = 49, p.steps = 2, p.max_sequence_length = 64;
  uint8_t px[16 * 16 * 3] = {0};
  const dit_image img = {16, 16, px};
  p.init_image = &img;
  CHECK(dit_model_plan(ctx, &p, NULL, &pl) == DIT_ERR_UNSUPPORTED);
  CHECK_MSG(strstr(dit_ctx_last_error(ctx), "image-to-video is not planned yet") != NULL, "%s", dit_ctx_last_error(ctx));
  p.init_image = NULL;
  dit_plan lx[2];
  for (int k = 0; k < 2; k++) {
    p.vae_tile = k ? 8 : 0;
    CHECK_MSG(dit_model_plan(ctx, &p, NULL, &lx[k]) == DIT_OK, "%s", dit_ctx_last_error(ctx));
  }
  CHECK(lx[0].n_stages == 3 && lx[1].n_stages == 3 && lx[1].stage[2].act_bytes < lx[0].stage[2].act_bytes &&
        lx[1].stage[1].act_bytes == lx[0].stage[1].act_bytes && lx[0].stage[0].runs == 2 && lx[0].text_tokens == 64);
  printf("  ltx2 512x256x49: the VAE decode allocates %.1f MiB in tiles of 8 latents, %.1f MiB untiled\n",
         lx[1].stage[2].act_bytes / 1048576.0, lx[0].stage[2].act_bytes / 1048576.0);
  p.frames = 48;
  CHECK(dit_model_plan(ctx, &p, NULL, &pl) == DIT_ERR_INVALID_ARG);
  p.frames = 49, p.max_sequence_length = 0; /* 1024 tokens: beyond the tiny Gemma 3's positions */
  CHECK(dit_model_plan(ctx, &p, NULL, &pl) == DIT_ERR_INVALID_ARG);
  CHECK_MSG(strstr(dit_ctx_last_error(ctx), "1024 tokens") != NULL, "%s", dit_ctx_last_error(ctx));
  p.width = p.height = 0, p.frames = 0, p.steps = 0, p.vae_tile = 0;
  /* MiniMax-H3's video VAE in smaller tiles (--vae-tile, latent pixels) plans less for its decode; frame counts
   * the VAE does not take are refused */
  dt_path(dir, sizeof dir, a->data, "models/minimax-h3-tiny");
  p.width = 512, p.height = 256, p.frames = 124, p.steps = 2;
  dit_plan h3[2];
  for (int k = 0; k < 2; k++) {
    p.vae_tile = k ? 16 : 0;
    CHECK_MSG(dit_model_plan(ctx, &p, NULL, &h3[k]) == DIT_OK, "%s", dit_ctx_last_error(ctx));
  }
  CHECK(h3[0].n_stages == 3 && h3[1].n_stages == 3 && h3[1].stage[2].act_bytes < h3[0].stage[2].act_bytes &&
        h3[1].stage[1].act_bytes == h3[0].stage[1].act_bytes);
  /* its text encoder streams its layers: fewer of its weights resident than stored; the others all */
  CHECK(h3[0].stage[0].resident_weight_bytes < h3[0].stage[0].weight_bytes &&
        h3[0].stage[1].resident_weight_bytes == h3[0].stage[1].weight_bytes);
  printf("  minimax-h3 512x256: the VAE decode allocates %.1f MiB in tiles of 64 px, %.1f MiB in the pipeline's\n",
         h3[1].stage[2].act_bytes / 1048576.0, h3[0].stage[2].act_bytes / 1048576.0);
  p.frames = 100;
  CHECK(dit_model_plan(ctx, &p, NULL, &h3[0]) == DIT_ERR_INVALID_ARG);
  p.frames = 0, p.vae_tile = 0, p.steps = 0;
  /* sizes the model refuses are refused by the plan too */
  dt_path(dir, sizeof dir, a->src, "models/shapes-128");
  p.width = 120;
  CHECK(dit_model_plan(ctx, &p, NULL, &pl) == DIT_ERR_INVALID_ARG);
  /* keeping everything: the kept transformer's activations stay through the VAE decode */
  p.width = 128;
  dit_model_opts_default(&o);
  CHECK(dit_model_plan(ctx, &p, &o, &pl) == DIT_OK);
  CHECK(pl.keep == DIT_KEEP_ALL && pl.n_stages == 3);
  size_t all = 0;
  for (int i = 0; i < pl.n_stages; i++) all += pl.stage[i].weight_bytes;
  CHECK(pl.stage[2].peak_bytes == pl.base_bytes + all + pl.stage[1].act_kept_bytes + pl.stage[2].act_bytes);
  dit_ctx_free(ctx);
}

static void test_cli(const dt_args *a) {
  char cli[4096], dir[4096], log[4096], cmd[16384], out[8192];
  dt_path(cli, sizeof cli, a->bin, "ditrun");
  dt_path(dir, sizeof dir, a->src, "models/shapes-128");
  dt_path(log, sizeof log, a->tmp, "plan.log");
  snprintf(cmd, sizeof cmd, "'%s' plan -m '%s' -W 256 -H 256 --steps 4 --json", cli, dir);
  CHECK(dt_run_output(cmd, log, out, sizeof out) == 0);
  CHECK_MSG(strstr(out, "\"family\": \"zimage\"") && strstr(out, "\"steps\": 4") && strstr(out, "\"width\": 256") &&
                strstr(out, "\"name\": \"VAE decode\""),
            "%s", out);
  snprintf(cmd, sizeof cmd, "'%s' plan -m '%s' -W 256 -H 256", cli, dir);
  CHECK(dt_run_output(cmd, log, out, sizeof out) == 0);
  CHECK_MSG(strstr(out, "transformer") && strstr(out, "peak"), "%s", out);
  snprintf(cmd, sizeof cmd, "'%s' plan --help", cli);
  CHECK(dt_run_output(cmd, log, out, sizeof out) == 0 && strstr(out, "--json"));
  snprintf(cmd, sizeof cmd, "'%s' plan -W 256", cli);
  CHECK(dt_run_output(cmd, log, out, sizeof out) == 2);
  snprintf(cmd, sizeof cmd, "'%s' plan -m '%s' --steps 0", cli, dir);
  CHECK(dt_run_output(cmd, log, out, sizeof out) == 2 && strstr(out, "ditrun plan: --steps"));
  snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' -p x -W 256 -H 256 --max-memory 1K -o '%s/no.png'", cli, dir, a->tmp);
  CHECK(dt_run_output(cmd, log, out, sizeof out) == 2 && strstr(out, "does not fit") && strstr(out, "at least"));
  snprintf(cmd, sizeof cmd, "'%s' plan -m '%s' --max-memory 12X", cli, dir);
  CHECK(dt_run_output(cmd, log, out, sizeof out) == 2 && strstr(out, "is not a size"));
  snprintf(cmd, sizeof cmd, "'%s' plan -m '%s' --device cuda", cli, dir);
  CHECK(dt_run_output(cmd, log, out, sizeof out) != 0 && strstr(out, "only the CPU"));
}

int main(int argc, char **argv) {
  void (*const cases[])(const dt_args *) = {test_peaks, test_fit, test_refusals, test_cli};
  return dt_main(argc, argv, cases, sizeof cases / sizeof *cases);
}

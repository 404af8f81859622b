/* `ditrun generate`: prompt to PNG. Parses options strictly (bad usage exits 2 before
 * any work), checks the output path up front so a long run cannot end in a refused
 * write, shows progress on stderr, and prints a per-stage timing summary. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cli_args.h"
#include "cli_signals.h"
#include "cli_gen_out.h"
#ifdef DIT_HAVE_FFMPEG
#include <libavutil/log.h>
#endif
#include "ditrun.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: ditrun generate -m MODEL_DIR -p PROMPT [options]\n"
          "  -m, --model DIR        diffusers model folder (model_index.json); may be left out with\n"
          "                         --diffusion-model FILE of Z-Image-Turbo or FLUX.1 (ditrun's models/\n"
          "                         folder for it gives configs and tokenizers)\n"
          "  -p, --prompt TEXT      what to draw (UTF-8; default: the model's sample prompt, if it has one)\n"
          "  -n, --negative TEXT    negative prompt (used when guidance > 0)\n"
          "  -W, --width N          image width in pixels (default: the model's, from its ditrun.json,\n"
          "                         else its family's)\n"
          "  -H, --height N         image height in pixels\n"
          "      --steps N          denoising steps (default: the family's)\n"
          "      --guidance G       classifier-free guidance scale (0 = off)\n"
          "      --cfg-truncation X Z-Image: guidance off once (1000-t)/1000 > X (default 1)\n"
          "      --cfg-normalization X  Z-Image: cap |guided| at X * |cond| (default 0 = off)\n"
          "      --seed S           random seed, any unsigned 64-bit integer (default 42); -1 draws one\n"
          "                         at random and prints it\n"
          "  -b, --batch-count N    N images with seeds S, S+1, ... written as PATH-1.png ... PATH-N.png\n"
          "      --rng torch-cpu    noise generator (torch's CPU generator, bit for bit)\n"
          "      --max-seq-len N    prompt tokens after the chat template (default 512; LTX-2: 1024)\n"
          "      --text-rope-bf16   round the text encoder's RoPE frequencies to bf16, as a reference\n"
          "                         run does whose encoder was cast with .to(torch.bfloat16)\n"
          "  -o, --output PATH      PNG to write (default output.png); a video model (LTX-2): NAME.mp4 (default\n"
          "                         output.mp4; H.264 + AAC), or a new folder of PNG frames and audio.wav\n"
          "      --frames N         video models: frames (1 + a multiple of 8; default 121)\n"
          "      --fps F            video models: frames per second (default 24)\n"
          "      --overwrite        replace PATH if it exists\n"
          "      --vae-tile N       decode (and encode) the VAE in tiles of N latent pixels (0 = whole); LTX-2:\n"
          "                         diffusers' tiling, N x N tiles every N - N/8 and windows of 16 frames every 8\n"
          "      --max-memory SIZE  keep the run within SIZE of memory (24G, 512M): from its plan (`ditrun plan`),\n"
          "                         load each component for its stage only, then tile the VAE, as needed; exit 2\n"
          "                         with the smallest size that fits when none does. Without it the machine's\n"
          "                         available memory is the limit the run is fitted to (the image families on\n"
          "                         the CPU so far)\n"
          "  -i, --init-image FILE  image-to-image (Z-Image): start from this PNG/JPEG instead of noise; the size\n"
          "                         defaults to its own, floored to the model's multiple. LTX-2: image-to-video,\n"
          "                         the clip's first frame (resized to the clip's size)\n"
          "      --image-crf N      LTX-2 image-to-video: re-compress the image as one H.264 frame at CRF N first, as\n"
          "                         the model was trained (default 33; 0 = not at all)\n"
          "      --strength S       with --init-image: how much of it is redrawn, 0 < S <= 1 (default 0.6)\n"
          "  -r, --ref-image FILE   reference image for editing (FLUX.2 [klein]; repeat for more, up to 8); the\n"
          "                         size defaults to the first one's\n"
          "      --lora FILE[:S]    merge a LoRA into the transformer, scaled by S (default 1; repeat for more):\n"
          "                         diffusers/PEFT, kohya or original-names (ComfyUI, AI-Toolkit) files\n"
          "      --diffusion-model FILE  a single weights file for the transformer (e.g. BFL's flux1-dev.safetensors)\n"
          "      --vae FILE         a single weights file for the VAE (e.g. ae.safetensors)\n"
          "      --text-encoder FILE  a single weights file for the text encoder (Qwen3: e.g. a llama.cpp GGUF)\n"
          "      --clip-l FILE      a single weights file for CLIP-L (text_encoder, e.g. clip_l.safetensors)\n"
          "      --t5xxl FILE       a single weights file for T5-XXL (text_encoder_2, e.g. t5xxl_fp16.safetensors)\n"
          "                         (the folder still gives configs, tokenizers and the scheduler)\n"
          "      --threads N        CPU threads (default: the CPUs this process may use)\n"
          "      --device cpu|cuda  where to run (default cpu)\n"
          "      --cpu-precision P  CPU linear layers: fp32 (default, exact) or bf16 (bf16 products, fp32 sums)\n"
          "      --precision P      cuda: the transformer's GEMMs in bf16 (default, faithful) or fp8 (faster:\n"
          "                         e4m3 weights with a per-tensor scale, activations quantized per token)\n"
          "      --progress         show progress even when stderr is not a terminal\n"
          "  -q, --quiet            print only errors\n"
          "examples:\n"
          "  ditrun generate -m models/shapes-128 -p \"a green triangle on a white background\" -o t.png\n"
          "  ditrun generate -m Z-Image-Turbo -p \"a red fox in the snow, 35mm photo\" --seed -1 -o fox.png\n"
          "  ditrun generate -m FLUX.2-klein-4B -p \"a lighthouse at dusk\" -W 768 -H 512 -b 4 --device cuda -o l.png\n"
          "  ditrun generate -m Z-Image-Turbo -i photo.jpg --strength 0.5 -p \"an oil painting\" -o paint.png\n"
          "  ditrun generate -m FLUX.2-klein-4B -r cat.png -p \"the cat wearing a red scarf\" -o scarf.png\n"
          "  ditrun generate -m LTX-2 -p \"a red fox trots through fresh snow\" --device cuda -o fox.mp4\n"
          "  ditrun generate -m models/flux1-dev --diffusion-model flux1-dev.safetensors --vae ae.safetensors \\\n"
          "    --clip-l clip_l.safetensors --t5xxl t5xxl_fp16.safetensors -p \"a red fox\" --device cuda -o fox.png\n");
}

/* Every option generate accepts, for the closest-name hint (test_cli_generate checks that
 * each is accepted). */
static const char *const gen_options[] = {
    "--model", "--prompt", "--negative", "--width", "--height", "--steps", "--guidance", "--cfg-truncation",
    "--cfg-normalization", "--seed", "--batch-count", "--rng", "--max-seq-len", "--text-rope-bf16", "--output",
    "--overwrite", "--frames", "--fps", "--vae-tile", "--max-memory", "--lora", "--threads", "--device", "--cpu-precision", "--precision", "--progress", "--quiet", "--help",
    "--diffusion-model", "--vae", "--text-encoder", "--clip-l", "--t5xxl", "--init-image", "--strength", "--image-crf", "--ref-image"};

/* The single-file options and the components they stand for. */
static const char *const file_opts[][2] = {
    {"--diffusion-model", "transformer"}, {"--vae", "vae"}, {"--text-encoder", "text_encoder"},
    {"--clip-l", "text_encoder"}, {"--t5xxl", "text_encoder_2"}};

/* The --diffusion-model file, or NULL. */
static const char *transformer_file(const cli_gen_opts *o) {
  for (int j = 0; j < o->p.n_files; j++)
    if (!strcmp(o->files[j].component, "transformer")) return o->files[j].path;
  return NULL;
}

/* A single-file option at argv[*i]: recorded (the last one for a component wins); false
 * when argv[*i] is none of them. */
static bool file_opt(int argc, char **argv, int *i, cli_gen_opts *o, bool *bad) {
  for (size_t k = 0; k < sizeof file_opts / sizeof *file_opts; k++) {
    bool m = false;
    const char *v = cli_opt_value(argc, argv, i, NULL, file_opts[k][0], &m, bad);
    if (!m) continue;
    if (*bad) return true;
    int j = 0;
    while (j < o->p.n_files && strcmp(o->files[j].component, file_opts[k][1])) j++;
    o->files[j].component = file_opts[k][1];
    o->files[j].path = v;
    if (j == o->p.n_files) o->p.n_files++;
    o->p.files = o->files;
    return true;
  }
  return false;
}

/* --lora FILE[:SCALE] (cli_parse_lora), up to DIT_MAX_LORAS. */
static bool lora_opt(cli_gen_opts *o, const char *v) {
  if (o->p.n_loras == DIT_MAX_LORAS) {
    fprintf(stderr, "ditrun generate: --lora: at most %d LoRAs\n", DIT_MAX_LORAS);
    return false;
  }
  int k = o->p.n_loras;
  if (!cli_parse_lora("generate", v, o->lora_paths[k], sizeof o->lora_paths[k], &o->loras[k])) return false;
  o->p.n_loras++;
  o->p.loras = o->loras;
  return true;
}

typedef struct progress {
  bool show, tty;
  double last_draw, elapsed;
  double start; /* when the generate began (cli_now) */
} progress;

/* A stage of the generate begins (the denoising has its own step lines): its name and the
 * time since the start, so a long run says what it is doing. */
static void on_stage(void *user, const char *stage) {
  progress *pr = user;
  if (!pr->show || !strcmp(stage, "denoising")) return;
  fprintf(stderr, "%s ... (%.1f s)\n", stage, cli_now() - pr->start);
  fflush(stderr);
}

static int on_step(void *user, int step, int total, const float *lat, size_t n, double secs) {
  (void)lat;
  (void)n;
  progress *pr = user;
  pr->elapsed += secs;
  if (!pr->show) return 0;
  bool last = step + 1 == total;
  if (!last && pr->elapsed - pr->last_draw < 1.0) return 0;
  pr->last_draw = pr->elapsed;
  double per = pr->elapsed / (step + 1);
  double eta = per * (total - step - 1);
  fprintf(stderr, "%sstep %d/%d  %.2f s/it  ETA %.1f s%s", pr->tty ? "\r\033[K" : "", step + 1, total, per, eta,
          pr->tty && !last ? "" : "\n");
  fflush(stderr);
  return 0;
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
  const char *cmd = argv[0]; /* "generate", or "plan", which takes the same options */
  memset(o, 0, sizeof *o);
  dit_gen_params_default(&o->p);
  o->p.seed = 42;
  o->out = "output.png";
  o->batch = 1;
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
    else if (OPT("-o", "--output")) { if (!bad) o->out = v, o->out_set = true; }
    else if (OPT(NULL, "--frames")) { if (!bad && !cli_parse_int(cmd, "--frames", v, 1, 100000, &o->p.frames)) return 2; }
    else if (OPT(NULL, "--fps")) {
      if (!bad && !cli_parse_double(cmd, "--fps", v, 0, 1000, &o->p.fps)) return 2;
      if (!bad && !(o->p.fps > 0)) { fprintf(stderr, "ditrun %s: --fps must be above 0\n", cmd); return 2; }
    }
    else if (OPT("-W", "--width")) { if (!bad && !cli_parse_int(cmd, "--width", v, 1, 16384, &o->p.width)) return 2; }
    else if (OPT("-H", "--height")) { if (!bad && !cli_parse_int(cmd, "--height", v, 1, 16384, &o->p.height)) return 2; }
    else if (OPT(NULL, "--steps")) { if (!bad && !cli_parse_int(cmd, "--steps", v, 1, 1000, &o->p.steps)) return 2; }
    else if (OPT(NULL, "--guidance")) {
      if (!bad && !cli_parse_double(cmd, "--guidance", v, -1000, 1000, &o->p.guidance)) return 2;
      o->p.guidance_set = 1;
    }
    else if (OPT(NULL, "--cfg-truncation")) { if (!bad && !cli_parse_double(cmd, "--cfg-truncation", v, -1e6, 1e6, &o->p.cfg_truncation)) return 2; }
    else if (OPT(NULL, "--cfg-normalization")) { if (!bad && !cli_parse_double(cmd, "--cfg-normalization", v, 0, 1e6, &o->p.cfg_normalization)) return 2; }
    else if (OPT(NULL, "--seed")) {
      if (!bad && !strcmp(v, "-1")) o->random_seed = true;
      else if (!bad && !cli_parse_u64(cmd, "--seed", v, &o->p.seed)) return 2;
      else o->random_seed = false;
    }
    else if (OPT("-b", "--batch-count")) { if (!bad && !cli_parse_int(cmd, "--batch-count", v, 1, 10000, &o->batch)) return 2; }
    else if (OPT(NULL, "--max-seq-len")) { if (!bad && !cli_parse_int(cmd, "--max-seq-len", v, 1, 32768, &o->p.max_sequence_length)) return 2; }
    else if (OPT(NULL, "--lora")) { if (!bad && !lora_opt(o, v)) return 2; }
    else if (OPT("-i", "--init-image")) { if (!bad) o->init_path = v; }
    else if (OPT(NULL, "--strength")) {
      if (!bad && !cli_parse_double(cmd, "--strength", v, 0, 1, &o->p.strength)) return 2;
      if (!bad && !(o->p.strength > 0)) { fprintf(stderr, "ditrun %s: --strength must be above 0\n", cmd); return 2; }
      o->strength_set = true;
    }
    else if (OPT(NULL, "--image-crf")) { /* as diffusers: 0 = no re-compression */
      if (!bad && !cli_parse_int(cmd, "--image-crf", v, 0, 51, &o->p.image_crf)) return 2;
      if (!bad && o->p.image_crf == 0) o->p.image_crf = -1;
      o->image_crf_set = true;
    }
    else if (OPT("-r", "--ref-image")) {
      if (!bad && o->p.n_ref_images == DIT_MAX_REF_IMAGES) {
        fprintf(stderr, "ditrun %s: --ref-image: at most %d reference images\n", cmd, DIT_MAX_REF_IMAGES);
        return 2;
      }
      if (!bad) o->ref_paths[o->p.n_ref_images++] = v;
    }
    else if (OPT(NULL, "--vae-tile")) { if (!bad && !cli_parse_int(cmd, "--vae-tile", v, 0, 4096, &o->p.vae_tile)) return 2; }
    else if (OPT(NULL, "--max-memory")) { if (!bad && !cli_parse_size(cmd, "--max-memory", v, &o->max_memory)) return 2; }
    else if (OPT(NULL, "--threads")) { if (!bad && !cli_parse_int(cmd, "--threads", v, 1, 1024, &o->threads)) return 2; }
    else if (OPT(NULL, "--rng")) {
      if (!bad && strcmp(v, "torch-cpu")) {
        fprintf(stderr, "ditrun %s: --rng: '%s' is not supported (supported: torch-cpu; philox is not implemented yet)\n", cmd, v);
        return 2;
      }
    }
    else if (OPT(NULL, "--device")) {
      static const char *const devices[] = {"cpu", "cuda"}; /* index: dit_device_kind */
      int k = bad ? 0 : cli_parse_choice(cmd, "--device", v, devices, 2);
      if (k < 0) return 2;
      if (!bad) o->p.device = (dit_device_kind)k;
    }
    else if (OPT(NULL, "--cpu-precision")) { if (!bad && !cli_parse_cpu_precision(cmd, v, &o->p.cpu_precision)) return 2; }
    else if (OPT(NULL, "--precision")) { if (!bad && !cli_parse_gpu_precision(cmd, v, &o->p.gpu_precision)) return 2; }
    else if (file_opt(argc, argv, &i, o, &bad)) {}
    else { cli_unknown_option(cmd, a, gen_options, sizeof gen_options / sizeof *gen_options); return 2; }
#undef OPT
    if (bad) { fprintf(stderr, "ditrun %s: %s needs a value\n", cmd, a); return 2; }
  }
  o->keep = o->batch > 1 ? DIT_KEEP_ALL : 0; /* a batch keeps the model; one image loads each part for its stage */
  if (o->p.model_dir && !*o->p.model_dir) { fprintf(stderr, "ditrun %s: -m MODEL_DIR is empty\n", cmd); return 2; }
  if (!o->p.model_dir && !transformer_file(o)) {
    fprintf(stderr, "ditrun %s: -m MODEL_DIR is required (or --diffusion-model FILE of a model ditrun ships "
                    "the folder for: Z-Image-Turbo, FLUX.1)\n", cmd);
    return 2;
  }
  if (o->strength_set && !o->init_path) { fprintf(stderr, "ditrun %s: --strength needs --init-image\n", cmd); return 2; }
  if (o->image_crf_set && !o->init_path) { fprintf(stderr, "ditrun %s: --image-crf needs --init-image\n", cmd); return 2; }
  if (o->p.gpu_precision == DIT_GPU_PRECISION_FP8 && o->p.device != DIT_DEVICE_CUDA) {
    fprintf(stderr, "ditrun %s: --precision fp8 needs --device cuda (on the CPU: --cpu-precision bf16)\n", cmd);
    return 2;
  }
  if (o->init_path && o->p.n_ref_images) {
    fprintf(stderr, "ditrun %s: --init-image and --ref-image do not go together (image-to-image or editing)\n", cmd);
    return 2;
  }
  return 0;
}

/* Reads --init-image and every --ref-image (before the model loads: a bad file fails fast). */
static bool read_images(dit_ctx *ctx, cli_gen_opts *o) {
  if (o->init_path) {
    if (dit_image_load(ctx, o->init_path, 0, &o->init) != DIT_OK) {
      fprintf(stderr, "ditrun generate: --init-image: %s\n", dit_ctx_last_error(ctx));
      return false;
    }
    o->p.init_image = &o->init;
  }
  for (int i = 0; i < o->p.n_ref_images; i++)
    if (dit_image_load(ctx, o->ref_paths[i], 0, &o->refs[i]) != DIT_OK) {
      fprintf(stderr, "ditrun generate: --ref-image: %s\n", dit_ctx_last_error(ctx));
      return false;
    }
  if (o->p.n_ref_images) o->p.ref_images = o->refs;
  return true;
}

static void free_images(cli_gen_opts *o) {
  dit_image_free(&o->init);
  for (int i = 0; i < DIT_MAX_REF_IMAGES; i++) dit_image_free(&o->refs[i]);
}

static void print_summary(const dit_gen_stats *st) {
  fprintf(stderr,
          "text encode %.2f s | load %.2f s | %d steps %.2f s (%.2f s/step) | VAE decode %.2f s | total %.2f s | "
          "peak RSS %.0f MiB\n",
          st->encode_seconds, st->load_seconds, st->steps, st->denoise_seconds,
          st->steps ? st->denoise_seconds / st->steps : 0.0, st->decode_seconds, st->total_seconds,
          (double)st->peak_rss_bytes / (1024.0 * 1024.0));
}

/* Says on stderr what the run will use where the user left it to the model: the size, steps
 * and guidance, and where they came from. */
static void print_choice(const cli_gen_opts *o, const dit_gen_defaults *d) {
  const int w = o->p.width ? o->p.width : d->width, h = o->p.height ? o->p.height : d->height;
  if ((!o->p.width || !o->p.height) && (o->init_path || o->p.n_ref_images) && !d->frames) {
    fprintf(stderr, "ditrun generate: size from the %s image, %d steps%s\n", o->init_path ? "init" : "first reference",
            o->p.steps ? o->p.steps : d->steps, o->init_path ? " (a share of them, by --strength)" : "");
    return;
  }
  const int steps = o->p.steps ? o->p.steps : d->steps;
  const double g = o->p.guidance_set ? o->p.guidance : d->guidance;
  unsigned from = 0;
  if (!o->p.width) from |= d->from_model_file & DIT_DEFAULT_WIDTH;
  if (!o->p.height) from |= d->from_model_file & DIT_DEFAULT_HEIGHT;
  if (!o->p.steps) from |= d->from_model_file & DIT_DEFAULT_STEPS;
  if (!o->p.guidance_set) from |= d->from_model_file & DIT_DEFAULT_GUIDANCE;
  char clip[64] = "";
  if (d->frames)
    snprintf(clip, sizeof clip, ", %d frames at %g fps", o->p.frames ? o->p.frames : d->frames,
             o->p.fps > 0 ? o->p.fps : d->fps);
  fprintf(stderr, "ditrun generate: %dx%d%s, %d steps, guidance %g (%s%s%s)\n", w, h, clip, steps, g,
          from ? "defaults from " : "the ", from ? o->p.model_dir : d->family, from ? "/ditrun.json" : " family's defaults");
}

static bool check_outputs(const cli_gen_opts *o);

static bool ends_with(const char *s, const char *suffix) {
  const size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcasecmp(s + n - k, suffix);
}

/* --frames / --fps against the model: a video model's (d->frames > 0) output is NAME.mp4 (the
 * default output.mp4) or a frames folder; an image model takes neither option. */
static bool video_opts_ok(cli_gen_opts *o, const dit_gen_defaults *d) {
  if (!d->frames) {
    if (o->p.frames || o->p.fps || o->image_crf_set) {
      fprintf(stderr, "ditrun generate: --frames / --fps / --image-crf: %s makes images\n", d->family);
      return false;
    }
    return true;
  }
  if (o->strength_set) {
    fprintf(stderr, "ditrun generate: --strength: %s keeps the --init-image as the clip's first frame\n", d->family);
    return false;
  }
  const int f = o->p.frames ? o->p.frames : d->frames, k = d->frames_multiple > 0 ? d->frames_multiple : 1;
  const int off = d->frames_offset > 0 ? d->frames_offset : 1, below = f < off ? off : (f - off) / k * k + off;
  if (f < off || (f - off) % k) {
    fprintf(stderr, "ditrun generate: --frames %d: this model takes %d + a multiple of %d frames (%d or %d)\n", f, off,
            k, below, below + k);
    return false;
  }
  if (ends_with(o->out, ".png") || ends_with(o->out, ".jpg")) {
    fprintf(stderr, "ditrun generate: --output %s: %s makes videos: -o NAME.mp4, or a new folder for PNG frames\n",
            o->out, d->family);
    return false;
  }
  if (!o->out_set) {
    o->out = "output.mp4";
    if (!check_outputs(o)) return false;
  }
#ifdef DIT_HAVE_FFMPEG
  av_log_set_level(AV_LOG_ERROR); /* FFmpeg's encoders print banners at its default level */
#endif
  return true;
}

/* Checks every output path of the batch before any work. */
static bool check_outputs(const cli_gen_opts *o) {
  char path[4096];
  for (int i = 0; i < o->batch; i++) {
    if (!cli_batch_path(o->out, o->batch, i, path, sizeof path)) {
      fprintf(stderr, "ditrun generate: --output: path too long\n");
      return false;
    }
    if (!check_output(path, o->overwrite)) return false;
  }
  return true;
}

/* Makes image i of the batch with the loaded model and writes it; returns a dit_status. */
static dit_status generate_one(dit_ctx *ctx, dit_model *model, cli_gen_opts *o, const dit_gen_defaults *d,
                               uint64_t seed0, int i, progress *pr) {
  char path[4096];
  cli_batch_path(o->out, o->batch, i, path, sizeof path);
  o->p.seed = seed0 + (uint64_t)i;
  if (o->batch > 1 && !o->quiet) fprintf(stderr, "image %d/%d, seed %llu\n", i + 1, o->batch, (unsigned long long)o->p.seed);
  *pr = (progress){.show = pr->show, .tty = pr->tty, .start = cli_now()};
  dit_image img = {0};
  dit_gen_stats st;
  dit_status s = dit_model_generate(model, &o->p, &img, &st);
  if (s == DIT_OK) {
    char *params = cli_gen_infotext(&o->p, d, &img, st.steps);
    const char *keys[] = {"parameters", "prompt", "negative_prompt"};
    const char *vals[] = {params, o->p.prompt, o->p.negative_prompt ? o->p.negative_prompt : ""};
    cli_signals_hold(o->signals);
    s = params ? dit_image_save_png(ctx, &img, path, keys, vals, 3, o->overwrite) : DIT_ERR_NOMEM;
    cli_signals_release(o->signals);
    free(params);
    if (s == DIT_OK) {
      if (!o->quiet) print_summary(&st);
      printf("%s\n", path);
      fflush(stdout);
    }
  }
  dit_image_free(&img);
  return s;
}

/* Makes clip i of the batch with the loaded video model and writes it (MP4 or a frames folder). */
static dit_status generate_clip_one(dit_ctx *ctx, dit_model *model, cli_gen_opts *o, uint64_t seed0, int i,
                                    progress *pr) {
  char path[4096];
  cli_batch_path(o->out, o->batch, i, path, sizeof path);
  o->p.seed = seed0 + (uint64_t)i;
  if (o->batch > 1 && !o->quiet) fprintf(stderr, "clip %d/%d, seed %llu\n", i + 1, o->batch, (unsigned long long)o->p.seed);
  *pr = (progress){.show = pr->show, .tty = pr->tty, .start = cli_now()};
  dit_clip clip = {0};
  dit_gen_stats st;
  dit_status s = dit_model_generate_clip(model, &o->p, &clip, &st);
  if (s == DIT_OK) { /* an MP4's encoding takes seconds at real sizes: no signal leaves its temporary */
    cli_signals_hold(o->signals);
    s = dit_clip_save(ctx, &clip, path, o->overwrite);
    cli_signals_release(o->signals);
  }
  if (s == DIT_OK) {
    if (!o->quiet) {
      print_summary(&st);
      fprintf(stderr, "%d frames of %dx%d at %g fps", clip.n_frames, clip.width, clip.height, clip.fps);
      if (clip.channels)
        fprintf(stderr, ", sound %.2f s (%d ch, %d Hz)", (double)clip.n_samples / clip.sample_rate, clip.channels,
                clip.sample_rate);
      fprintf(stderr, "\n");
    }
    printf("%s\n", path);
    fflush(stdout);
  }
  dit_clip_free(&clip);
  return s;
}

void cli_model_opts(const cli_gen_opts *o, dit_model_opts *mo) {
  dit_model_opts_default(mo);
  mo->device = o->p.device;
  mo->cpu_precision = o->p.cpu_precision;
  mo->gpu_precision = o->p.gpu_precision;
  mo->keep = o->keep;
  mo->files = o->p.files;
  mo->n_files = o->p.n_files;
  mo->loras = o->p.loras;
  mo->n_loras = o->p.n_loras;
}

/* Fits the run to --max-memory, or to the machine's available memory when none was given
 * (dit_model_plan_fit): VAE tiling or releasing components as the plan needs. False (the
 * exit code in *code) only when a given limit cannot be met or its plan fails. */
static bool fit_memory(dit_ctx *ctx, cli_gen_opts *o, int *code) {
  dit_model_opts mo;
  cli_model_opts(o, &mo);
  dit_plan pl;
  char what[256];
  dit_status s = dit_model_plan_fit(ctx, &o->p, &mo, o->max_memory, &pl, what, sizeof what);
  if (s != DIT_OK && o->max_memory) {
    fprintf(stderr, "ditrun generate: --max-memory: %s\n", dit_ctx_last_error(ctx));
    *code = dit_status_exit_code(s);
    return false;
  }
  o->keep = mo.keep; /* and o->p.vae_tile, set by the fit */
  if (s == DIT_OK && what[0] && !o->quiet) fprintf(stderr, "ditrun generate: %s\n", what);
  if (s == DIT_ERR_INVALID_ARG && pl.n_stages > 0) /* no limit given: a warning, the run goes on */
    fprintf(stderr, "ditrun generate: warning: %s (this machine's available memory; it may swap or be stopped)\n",
            dit_ctx_last_error(ctx));
  return true;
}

/* Loads the model (kept resident for a batch; one image loads each component only for its
 * stage, which keeps the peak memory lowest) and makes the images. */
static dit_status run_batch(dit_ctx *ctx, cli_gen_opts *o, const dit_gen_defaults *d, uint64_t seed0) {
  dit_model_opts mo;
  cli_model_opts(o, &mo);
  dit_model *model = NULL;
  double t0 = cli_now();
  dit_status s = dit_model_load(ctx, o->p.model_dir, &mo, &model);
  if (s == DIT_OK && o->batch > 1 && !o->quiet)
    fprintf(stderr, "ditrun generate: model loaded in %.2f s (kept for the %d images)\n", cli_now() - t0,
            o->batch);
  progress pr = {.show = !o->quiet && (o->force_progress || isatty(2)), .tty = isatty(2) != 0};
  o->p.on_step = on_step;
  o->p.on_stage = on_stage;
  o->p.user = &pr;
  for (int i = 0; s == DIT_OK && i < o->batch; i++)
    s = d->frames ? generate_clip_one(ctx, model, o, seed0, i, &pr) : generate_one(ctx, model, o, d, seed0, i, &pr);
  dit_model_free(model);
  return s;
}

int cli_generate(int argc, char **argv) {
  cli_gen_opts o;
  int r = cli_generate_parse(argc, argv, &o), code;
  if (r == 0 && !check_outputs(&o)) r = 2;
  cli_signals sig;
  if (r == 0) cli_signals_start(&sig); /* before the context starts any thread */
  o.signals = &sig;
  dit_ctx *ctx = cli_start("generate", r, o.threads, &code);
  if (!ctx) return code;
  dit_gen_defaults d;
  char guessed[4096];
  dit_status s = DIT_OK;
  if (!o.p.model_dir) { /* single files alone: the folder ditrun ships for their model */
    s = dit_model_dir_for_file(ctx, transformer_file(&o), guessed, sizeof guessed);
    if (s == DIT_OK) o.p.model_dir = guessed;
    if (s == DIT_OK && !o.quiet)
      fprintf(stderr, "ditrun generate: no -m: using %s (configs and tokenizers for %s)\n", guessed,
              transformer_file(&o));
  }
  if (s == DIT_OK) s = dit_gen_defaults_for(ctx, o.p.model_dir, &d);
  code = 2;
  if (s == DIT_OK && ((o.p.width && o.p.width % d.size_multiple) || (o.p.height && o.p.height % d.size_multiple))) {
    fprintf(stderr, "ditrun generate: width and height must be multiples of %d for this model (got %dx%d)\n",
            d.size_multiple, o.p.width ? o.p.width : d.width, o.p.height ? o.p.height : d.height);
    goto done;
  }
  if (s == DIT_OK && !video_opts_ok(&o, &d)) goto done;
  if (s == DIT_OK && !o.p.prompt) {
    if (!d.prompt[0]) {
      fprintf(stderr, "ditrun generate: -p PROMPT is required (this model has no sample prompt)\n");
      goto done;
    }
    o.p.prompt = d.prompt;
    if (!o.quiet) fprintf(stderr, "ditrun generate: prompt (the model's sample): \"%s\"\n", d.prompt);
  }
  if (s == DIT_OK && !read_images(ctx, &o)) goto done;
  if (s == DIT_OK && !o.quiet) print_choice(&o, &d);
  uint64_t seed0 = o.p.seed;
  if (s == DIT_OK && o.random_seed) {
    if (!cli_random_seed(&seed0)) {
      fprintf(stderr, "ditrun generate: --seed -1: the OS gave no random bytes\n");
      code = 1;
      goto done;
    }
    fprintf(stderr, "ditrun generate: seed %llu (drawn at random; --seed %llu makes %s again)\n",
            (unsigned long long)seed0, (unsigned long long)seed0, o.batch > 1 ? "these images" : "this image");
  }
  if (s == DIT_OK && !fit_memory(ctx, &o, &code)) goto done;
  if (s == DIT_OK) s = run_batch(ctx, &o, &d, seed0);
  code = dit_status_exit_code(s);
  if (s != DIT_OK) fprintf(stderr, "ditrun generate: %s\n", dit_ctx_last_error(ctx));
done:
  free_images(&o);
  dit_ctx_free(ctx);
  return code;
}

/* `ditrun bench --arch zimage|flux2-klein-4b|... [--res 1024] [--text-len 128] [--device cpu|cuda] ...`: one
 * DiT forward at the real geometry with random weights made in memory; prints the time,
 * a GEMM / attention / elementwise split, FLOPs, TFLOP/s against a stated peak and peak
 * memory (--json: one JSON object). Strict parsing: bad usage exits 2 before any work. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_args.h"
#include "ditrun.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: ditrun bench [--arch NAME] [options]\n"
          "  --arch NAME        model architecture (default zimage):");
  const char *name, *family;
  for (size_t k = 0; dit_bench_arch_get(k, &name, &family, NULL); k++)
    fprintf(f, "%s%s (%s)", k ? ", " : " ", name, family);
  fprintf(f, "\n"
          "  --res PX           square image side in pixels, multiple of 16 (default 1024; minimax-h3: of 32,\n"
          "                     one latent frame of (PX/32)^2 video rows, no audio); video models (ltx2, ltx23)\n"
          "                     take WxH, e.g. 768x512 (multiples of 32)\n"
          "  --frames N         video models: frames of the clip at 24 fps, 1 + a multiple of 8 (default 121)\n"
          "  --text-len N       caption tokens (default: the pipeline's, 128 for zimage, 512 for flux2-klein-*,\n"
          "                     flux1-*, krea2 and minimax-h3, 1024 for ltx2*)\n"
          "  --ref-res PX       flux2-klein-*: a PX x PX reference image in the sequence, as an edit runs\n"
          "  --device D         cpu (default) or cuda (cuda:N picks GPU N)\n"
          "  --dtype T          weights (and GPU activations): bf16 (default) or f32, or ggml's block\n"
          "                     types q8_0, q6_k, q5_k, q5_1, q5_0, q4_k, q4_1, q4_0, q3_k, q2_k, or\n"
          "                     f8_e4m3 (or fp8) / f8_e5m2 with a per-tensor scale (weights quantized from the\n"
          "                     same random values; GPU activations bf16)\n"
          "  --iters N          timed forwards, the median is reported (default 5)\n"
          "  --warmup N         untimed forwards first (default 1)\n"
          "  --no-profile       skip the op-by-op profiled run\n"
          "  --ref-bf16         (quantized --dtype or --precision fp8) then run bf16 weights of the same random\n"
          "                     values and report the output's relative error against them (--e2e with fp8:\n"
          "                     the latents' error after each step and the decoded image's)\n"
          "  --peak TFLOPS      the peak to compare against (default: the device's, printed)\n"
          "  --seed N           random weights and inputs (default 42)\n"
          "  --threads N        CPU threads (default: the CPUs this process may use)\n"
          "  --cpu-precision P  CPU linear layers: fp32 (default) or bf16 (bf16 x bf16 products, fp32 sums)\n"
          "  --precision P      cuda: the transformer blocks' GEMMs in bf16 (default) or fp8 (e4m3 weights\n"
          "                     with a per-tensor scale, activations quantized per token, fp32 sums)\n"
          "  --json             print one JSON object instead of the table\n"
          "  --e2e STEPS        zimage only: one whole image instead of one forward: Qwen3-4B text encode,\n"
          "                     STEPS transformer forwards with Euler updates, VAE decode (random weights,\n"
          "                     all on --device), per-phase times\n"
          "  --vae              the VAE decoder alone (Flux / Z-Image AutoencoderKL) instead of a transformer:\n"
          "                     a --res image from a random latent, per-op profile and convolutions by shape\n"
          "  --dim N, --layers N, --refiners N, --heads N, --cap-dim N\n"
          "                     shrink the geometry (for tests; default: the real model); for\n"
          "                     flux2-klein-*: --layers = double blocks, --refiners = single blocks,\n"
          "                     --cap-dim = joint_attention_dim; ltx2*: --heads of each stream, --layers,\n"
          "                     --cap-dim = the text features' width; minimax-h3: --dim = hidden_size (the\n"
          "                     attention 4/3 as wide over --heads, heads a multiple of 8 wide, SwiGLU 8/3,\n"
          "                     time MLP dim -> dim/2), --layers, --refiners = token refiner blocks,\n"
          "                     --cap-dim = text_dim\n"
          "Weights are random (deterministic), created in memory: no files are read.\n");
}

typedef struct bench_opts {
  dit_bench_params p;
  int threads;
  bool json;
  int e2e; /* --e2e STEPS: end to end instead of one forward */
  bool vae; /* --vae: the VAE decoder alone */
} bench_opts;

/* The default caption length of an architecture of the bench table, -1 when unknown. */
static int arch_text_len(const char *arch) {
  const char *name;
  int tl;
  for (size_t k = 0; dit_bench_arch_get(k, &name, NULL, &tl); k++)
    if (!strcmp(name, arch)) return tl;
  return -1;
}

static bool parse_device(const char *v, dit_bench_params *p) {
  if (!strcmp(v, "cpu")) {
    p->device = DIT_DEVICE_CPU;
    return true;
  }
  if (!strcmp(v, "cuda")) {
    p->device = DIT_DEVICE_CUDA;
    return true;
  }
  if (!strncmp(v, "cuda:", 5) && cli_parse_int("bench", "--device", v + 5, 0, 1023, &p->cuda_device)) {
    p->device = DIT_DEVICE_CUDA;
    return true;
  }
  fprintf(stderr, "ditrun bench: --device: '%s' is not cpu, cuda or cuda:N\n", v);
  return false;
}

static bool parse_dtype(const char *v, dit_bench_params *p) {
  return cli_parse_wtype("bench", "--dtype", v, false, &p->dtype);
}

/* --res PX, or WxH (width res, height). */
static bool parse_res(const char *v, dit_bench_params *p) {
  const char *x = strchr(v, 'x');
  if (!x) return cli_parse_int("bench", "--res", v, 16, 8192, &p->res);
  char w[32];
  if ((size_t)(x - v) >= sizeof w) {
    fprintf(stderr, "ditrun bench: --res: '%s' is not PX or WxH\n", v);
    return false;
  }
  memcpy(w, v, (size_t)(x - v));
  w[x - v] = 0;
  return cli_parse_int("bench", "--res", w, 16, 8192, &p->res) &&
         cli_parse_int("bench", "--res", x + 1, 16, 8192, &p->height);
}

/* Returns 0 ok, 1 help printed, 2 bad usage. */
static int parse(int argc, char **argv, bench_opts *o) {
  memset(o, 0, sizeof *o);
  dit_bench_params_default(&o->p);
  o->p.text_len = 0; /* set by --text-len, else by the arch after parsing */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    bool m = false, bad = false;
    dit_bench_params *p = &o->p;
#define OPT(l) (v = cli_opt_value(argc, argv, &i, NULL, l, &m, &bad), m)
#define INT(l, lo, hi, dst) if (OPT(l)) { if (!bad && !cli_parse_int("bench", l, v, lo, hi, dst)) return 2; }
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 1; }
    else if (!strcmp(a, "--json")) o->json = true;
    else if (!strcmp(a, "--no-profile")) p->profile = 0;
    else if (!strcmp(a, "--ref-bf16")) p->ref_bf16 = 1;
    else if (!strcmp(a, "--vae")) o->vae = true;
    else if (OPT("--arch")) {
      if (!bad && arch_text_len(v) < 0) {
        fprintf(stderr, "ditrun bench: --arch: '%s' is not supported (supported:", v);
        const char *name;
        for (size_t k = 0; dit_bench_arch_get(k, &name, NULL, NULL); k++) fprintf(stderr, "%s %s", k ? "," : "", name);
        fprintf(stderr, ")\n");
        return 2;
      }
      if (!bad) p->arch = v; /* argv outlives the run */
    }
    else if (OPT("--device")) { if (!bad && !parse_device(v, p)) return 2; }
    else if (OPT("--dtype")) { if (!bad && !parse_dtype(v, p)) return 2; }
    else if (OPT("--cpu-precision")) { if (!bad && !cli_parse_cpu_precision("bench", v, &p->cpu_precision)) return 2; }
    else if (OPT("--precision")) { if (!bad && !cli_parse_gpu_precision("bench", v, &p->gpu_precision)) return 2; }
    else if (OPT("--seed")) { if (!bad && !cli_parse_u64("bench", "--seed", v, &p->seed)) return 2; }
    else if (OPT("--peak")) { if (!bad && !cli_parse_double("bench", "--peak", v, 1e-6, 1e6, &p->peak_tflops)) return 2; }
    else INT("--e2e", 1, 1000, &o->e2e)
    else if (OPT("--res")) { if (!bad && !parse_res(v, p)) return 2; }
    else INT("--frames", 1, 4096, &p->frames)
    else INT("--text-len", 1, 4096, &p->text_len)
    else INT("--ref-res", 16, 8192, &p->ref_res)
    else INT("--iters", 1, 10000, &p->iters)
    else INT("--warmup", 0, 10000, &p->warmup)
    else INT("--threads", 1, 1024, &o->threads)
    else INT("--dim", 1, 65536, &p->dim)
    else INT("--layers", 1, 1024, &p->n_layers)
    else INT("--refiners", 1, 1024, &p->n_refiner_layers)
    else INT("--heads", 1, 1024, &p->n_heads)
    else INT("--cap-dim", 1, 65536, &p->cap_feat_dim)
    else { fprintf(stderr, "ditrun bench: unknown option '%s' (see ditrun bench --help)\n", a); return 2; }
#undef INT
#undef OPT
    if (bad) { fprintf(stderr, "ditrun bench: %s needs a value\n", a); return 2; }
  }
  if (o->vae && o->e2e) {
    fprintf(stderr, "ditrun bench: --vae and --e2e are two different benchmarks: give one\n");
    return 2;
  }
  if (!o->p.text_len) o->p.text_len = arch_text_len(o->p.arch);
  if (o->p.res % 16 || o->p.height % 16) {
    fprintf(stderr, "ditrun bench: --res %dx%d is not a multiple of 16\n", o->p.res, o->p.height ? o->p.height : o->p.res);
    return 2;
  }
  return 0;
}

int cli_bench(int argc, char **argv) {
  bench_opts o;
  int r = parse(argc, argv, &o), code; /* parsed before o.threads is read */
  dit_ctx *ctx = cli_start("bench", r, o.threads, &code);
  if (!ctx) return code;
  dit_bench_result res;
  dit_bench_e2e_result e2e;
  dit_status s = o.e2e ? dit_bench_e2e_run(ctx, &o.p, o.e2e, &e2e)
                 : o.vae ? dit_bench_vae_run(ctx, &o.p, &res)
                         : dit_bench_run(ctx, &o.p, &res);
  if (s == DIT_OK) {
    if (o.e2e) dit_bench_e2e_print(&e2e, o.json, stdout);
    else dit_bench_print(&res, o.json, stdout);
    if (fflush(stdout) != 0) s = DIT_ERR_IO;
  } else {
    fprintf(stderr, "ditrun bench: %s: %s\n", dit_status_str(s), dit_ctx_last_error(ctx));
  }
  dit_ctx_free(ctx);
  return dit_status_exit_code(s);
}

/* `ditrun quantize` end to end on zimage-tiny: the transformer as a Q8_0 GGUF file (original
 * Z-Image names, q/k/v fused) and the text encoder as GGUF (llama.cpp names);
 * `generate --diffusion-model F.gguf --text-encoder T.gguf` then runs them: the text encoder
 * file (kept in bf16: its rows are not whole blocks) gives a byte-identical image, Q8_0
 * stays within 45 dB of the bf16 folder's image (measured: 52.6 dB). Q4_K on the shipped
 * model, whose rows are 256 wide (test_k_quant). Then scaled fp8 safetensors (e4m3, e5m2;
 * the text encoder too); bad invocations exit 2. FLUX.1 and FLUX.2 [klein] transformers are
 * written under BFL's names and load back (test_flux). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ditrun.h"
#include "fixture.h"
#include "testing.h"

static dt_cli_env g;
static char g_prompt[1024];

static int run(const char *args, char *msg, size_t len) {
  char cmd[9000], log[4200];
  snprintf(cmd, sizeof cmd, "'%s' %s", g.cli, args);
  snprintf(log, sizeof log, "%s/run.log", g.tmp);
  return dt_run_output(cmd, log, msg, len);
}

static int gen_in(const char *model, const char *prompt, const char *extra, const char *out) {
  char args[9000], msg[4096];
  snprintf(args, sizeof args, "generate -m '%s' -p '%s' -W 96 -H 128 --seed 42 --steps 4 -q -o '%s' %s", model,
           prompt, out, extra);
  int rc = run(args, msg, sizeof msg);
  if (rc) printf("generate %s: %s\n", extra, msg);
  return rc;
}

static int gen(const char *extra, const char *out) {
  char ex[9000];
  snprintf(ex, sizeof ex, "--guidance 0 %s", extra);
  return gen_in(g.model, g_prompt, ex, out);
}

static double psnr_of(const char *a, const char *b) {
  dit_ctx *ctx = NULL;
  dit_image_metrics m = {0};
  if (dit_ctx_create(NULL, &ctx) != DIT_OK) return -1;
  dit_status s = dit_compare_png(ctx, a, b, &m);
  dit_ctx_free(ctx);
  return s == DIT_OK ? m.psnr : -1;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The tensor lines of `ditrun info --tensors F` (name, dtype, shape), sorted, into out. */
static int tensor_list(const char *f, char *out, size_t len) {
  char args[4400], msg[65536];
  snprintf(args, sizeof args, "info '%s' --tensors", f);
  if (run(args, msg, sizeof msg)) return -1;
  char *lines[512];
  size_t n = 0;
  for (char *l = strtok(msg, "\n"); l && n < 512; l = strtok(NULL, "\n"))
    if (!strncmp(l, "  ", 2) && !strchr(l, ':')) lines[n++] = l;
  qsort(lines, n, sizeof *lines, cmp_str);
  size_t o = 0;
  out[0] = 0;
  for (size_t i = 0; i < n; i++) {
    char *sp = strrchr(lines[i], ']'); /* up to the shape, without the byte count */
    if (sp) sp[1] = 0;
    o += (size_t)snprintf(out + o, o < len ? len - o : 0, "%s\n", lines[i]);
  }
  return o < len ? 0 : -1;
}

/* K-quants take rows of 256: the shipped model (models/shapes-128, 256 wide; zimage-tiny is 128
 * wide) as Q4_K, its own image from its defaults within 40 dB of the bf16 folder's (measured
 * 47.7 dB, 29 Q4_K tensors). */
static void test_k_quant(const char *src) {
  char model[4200], ref[4400], f[4400], out[4400], args[9000], msg[65536], ex[4600];
  const char *prompt = "a green triangle on a white background";
  snprintf(model, sizeof model, "%s/models/shapes-128", src);
  snprintf(ref, sizeof ref, "%s/shapes-bf16.png", g.tmp);
  snprintf(f, sizeof f, "%s/shapes-q4_k.gguf", g.tmp);
  snprintf(out, sizeof out, "%s/shapes-q4_k.png", g.tmp);
  unlink(ref), unlink(out);
  snprintf(args, sizeof args, "generate -m '%s' -p '%s' --seed 1 -q -o '%s'", model, prompt, ref);
  CHECK_MSG(run(args, msg, sizeof msg) == 0, "shapes-128: %s", msg);
  snprintf(args, sizeof args, "quantize -m '%s' --type q4_k -o '%s' --overwrite -q", model, f);
  CHECK_MSG(run(args, msg, sizeof msg) == 0, "quantize shapes-128 q4_k: %s", msg);
  snprintf(args, sizeof args, "info '%s' --tensors", f);
  CHECK_MSG(run(args, msg, sizeof msg) == 0 && strstr(msg, " Q4_K "), "no Q4_K tensor in %s: %s", f, msg);
  snprintf(ex, sizeof ex, "generate -m '%s' -p '%s' --seed 1 -q -o '%s' --diffusion-model '%s'", model, prompt, out, f);
  CHECK_MSG(run(ex, msg, sizeof msg) == 0, "shapes-128 from its Q4_K file: %s", msg);
  double p = psnr_of(ref, out);
  printf("shapes-128 q4_k transformer: %.2f dB against the bf16 folder\n", p);
  CHECK_MSG(p >= 40.0 && p < 1e9, "shapes-128 q4_k image at %.2f dB", p);
}

/* FLUX.1 and FLUX.2 [klein]: written under BFL's names (the names and shapes of BFL-named
 * single files: FLUX.1's fixture, klein's made by dt_flux2_write_bfl), each loading back to the folder's image bit for bit (bf16) or
 * close to it (96x128, 4 steps: Q8_0 62.7 / 59.0 dB, F8_E4M3 54.7 / 52.2 dB). */
static void test_flux(const char *data) {
  static const struct {
    const char *name, *prompt;
  } models[] = {{"flux1-dev-tiny", "a red fox in the snow"}, {"flux2-klein-tiny", "a red fox in the snow"}};
  for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
    char model[4200], ref[4400], f[4400], out[4400], args[9000], msg[4096], ex[4600];
    snprintf(model, sizeof model, "%s/models/%s", data, models[i].name);
    snprintf(ref, sizeof ref, "%s/%s.png", g.tmp, models[i].name);
    unlink(ref);
    CHECK(gen_in(model, models[i].prompt, "", ref) == 0);
    static const struct {
      const char *type, *ext;
      double min_db; /* 0: the same image */
    } types[] = {{"bf16", "gguf", 0}, {"q8_0", "gguf", 50.0}, {"f8_e4m3", "safetensors", 42.0}};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
      snprintf(f, sizeof f, "%s/%s-%s.%s", g.tmp, models[i].name, types[t].type, types[t].ext);
      snprintf(args, sizeof args, "quantize -m '%s' --type %s -o '%s' --overwrite -q", model, types[t].type, f);
      CHECK_MSG(run(args, msg, sizeof msg) == 0, "quantize %s %s: %s", models[i].name, types[t].type, msg);
      if (t == 0) {
        char single[4400], *a = malloc(65536), *b = malloc(65536);
        if (strstr(models[i].name, "flux2")) { /* klein's BFL file, made by the suite's own table */
          char src[4400];
          snprintf(src, sizeof src, "%s/transformer/diffusion_pytorch_model.safetensors", model);
          snprintf(single, sizeof single, "%s/klein_bfl.safetensors", g.tmp);
          CHECK(dt_flux2_write_bfl(src, single, "") == 0);
        } else {
          snprintf(single, sizeof single, "%s/single/transformer.safetensors", model);
        }
        CHECK(a && b && tensor_list(f, a, 65536) == 0 && tensor_list(single, b, 65536) == 0);
        CHECK_MSG(a && b && !strcmp(a, b), "%s: ditrun's GGUF names differ from the BFL file's:\n%s---\n%s",
                  models[i].name, a ? a : "", b ? b : "");
        free(a);
        free(b);
        snprintf(args, sizeof args, "info '%s'", f);
        CHECK(run(args, msg, sizeof msg) == 0 && strstr(msg, "general.architecture: string = \"flux\""));
      }
      snprintf(out, sizeof out, "%s/%s-%s.png", g.tmp, models[i].name, types[t].type);
      unlink(out);
      snprintf(ex, sizeof ex, "--diffusion-model '%s'", f);
      CHECK(gen_in(model, models[i].prompt, ex, out) == 0);
      if (types[t].min_db == 0) {
        CHECK_MSG(dt_files_equal(ref, out), "%s %s: not the folder's image", models[i].name, types[t].type);
        continue;
      }
      double p = psnr_of(ref, out);
      printf("%s %s transformer: %.2f dB against the bf16 folder\n", models[i].name, types[t].type, p);
      CHECK_MSG(p >= types[t].min_db, "%s %s at %.2f dB", models[i].name, types[t].type, p);
    }
  }
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init_cli(argc, argv, &a, "zimage-tiny", false, &g);
  json_t *rj = dt_load_reference(g.model, NULL, 0);
  if (!rj) return dt_finish();
  snprintf(g_prompt, sizeof g_prompt, "%s", json_string_value(json_object_get(rj, "prompt")));
  json_decref(rj);
  char args[9000], msg[4096], ref[4200], out[4200], te[4200], f[4200];
  snprintf(ref, sizeof ref, "%s/bf16.png", g.tmp);
  unlink(ref);
  CHECK(gen("", ref) == 0);
  snprintf(te, sizeof te, "%s/te.gguf", g.tmp);
  snprintf(args, sizeof args, "quantize -m '%s' --component text_encoder --type q8_0 -o '%s' --overwrite -q", g.model, te);
  CHECK(run(args, msg, sizeof msg) == 0);
  /* the transformer as GGUF (original names) and as scaled fp8 safetensors (ComfyUI's) */
  static const struct {
    const char *type, *ext, *info, *needle;
    double min_db; /* measured: q8_0 52.6, e4m3 42.1, e5m2 34.9 (tiny random model) */
  } cases[] = {{"q8_0", "gguf", "--tensors", "Q8_0", 45.0},
               {"f8_e4m3", "safetensors", "", "F8_E4M3 x", 33.0},
               {"f8_e5m2", "safetensors", "", "F8_E5M2 x", 28.0}};
  char extra[9000];
  for (size_t t = 0; t < sizeof cases / sizeof *cases; t++) {
    const bool gguf = !strcmp(cases[t].ext, "gguf");
    snprintf(f, sizeof f, "%s/dit-%s.%s", g.tmp, cases[t].type, cases[t].ext);
    snprintf(args, sizeof args, "quantize -m '%s' --type %s -o '%s' --overwrite -q", g.model, cases[t].type, f);
    CHECK_MSG(run(args, msg, sizeof msg) == 0, "quantize %s: %s", cases[t].type, msg);
    snprintf(args, sizeof args, "info '%s' %s", f, cases[t].info);
    CHECK(run(args, msg, sizeof msg) == 0 && (!gguf || strstr(msg, "GGUF version 3")) && strstr(msg, cases[t].needle));
    snprintf(out, sizeof out, "%s/%s.png", g.tmp, cases[t].type);
    unlink(out);
    snprintf(extra, sizeof extra, "--diffusion-model '%s'", f);
    CHECK(gen(extra, out) == 0);
    double p = psnr_of(ref, out);
    printf("%s transformer: %.2f dB against the bf16 folder\n", cases[t].type, p);
    CHECK_MSG(p >= cases[t].min_db, "%s image at %.2f dB (>= %.0f expected)", cases[t].type, p, cases[t].min_db);
  }
  /* the text encoder from its GGUF (llama.cpp names, bf16 rows): the same image */
  snprintf(out, sizeof out, "%s/te.png", g.tmp);
  unlink(out);
  snprintf(extra, sizeof extra, "--text-encoder '%s'", te);
  CHECK(gen(extra, out) == 0);
  CHECK_MSG(dt_files_equal(ref, out), "the text encoder's GGUF gave a different image");
  /* the text encoder as fp8 too (its embedding table included) */
  char te8[4200];
  snprintf(te8, sizeof te8, "%s/te-f8.safetensors", g.tmp);
  snprintf(args, sizeof args, "quantize -m '%s' --component text_encoder --type f8_e4m3 -o '%s' --overwrite -q", g.model,
           te8);
  CHECK_MSG(run(args, msg, sizeof msg) == 0, "quantize text encoder f8_e4m3: %s", msg);
  snprintf(out, sizeof out, "%s/te-f8.png", g.tmp);
  unlink(out);
  snprintf(extra, sizeof extra, "--text-encoder '%s' --diffusion-model '%s/dit-f8_e4m3.safetensors'", te8, g.tmp);
  CHECK(gen(extra, out) == 0);
  double pt = psnr_of(ref, out);
  printf("f8_e4m3 text encoder and transformer: %.2f dB against the bf16 folder\n", pt);
  CHECK_MSG(pt >= 33.0, "f8_e4m3 text encoder + transformer image at %.2f dB (measured 41.7)", pt);
  /* bad invocations */
  snprintf(args, sizeof args, "quantize -m '%s' --type f8_e4m3 -o '%s/x.gguf'", g.model, g.tmp);
  CHECK_MSG(run(args, msg, sizeof msg) == 2 && strstr(msg, "safetensors"), "fp8 to GGUF: %s", msg);
  snprintf(args, sizeof args, "quantize -m '%s' --type q8_0 -o '%s/x.safetensors'", g.model, g.tmp);
  CHECK_MSG(run(args, msg, sizeof msg) == 2 && strstr(msg, "GGUF"), "q8_0 to safetensors: %s", msg);
  snprintf(args, sizeof args, "quantize -m '%s' --type q9_0 -o '%s/x.gguf'", g.model, g.tmp);
  CHECK(run(args, msg, sizeof msg) == 2 && strstr(msg, "q8_0"));
  snprintf(args, sizeof args, "quantize -m '%s' --type q8_0", g.model);
  CHECK(run(args, msg, sizeof msg) == 2);
  snprintf(args, sizeof args, "quantize -m '%s' --component vae --type q8_0 -o '%s/x.gguf'", g.model, g.tmp);
  CHECK(run(args, msg, sizeof msg) == 2);
  snprintf(args, sizeof args, "quantize -m '%s' --type q8_0 -o '%s'", g.model, te);
  CHECK_MSG(run(args, msg, sizeof msg) == 1 && strstr(msg, "exists"), "existing output: %s", msg);
  test_k_quant(a.src);
  test_flux(a.data);
  return dt_finish();
}

/* What `ditrun generate` decides and writes around the pixels, on the shipped model
 * (models/shapes-128):
 * - its ditrun.json defaults: no -W/-H/--steps gives 128x128 and says where that came from;
 *   "a C triangle on a white background" with no size, steps or seed shows a C triangle on
 *   white for C = green, red, blue, yellow (checked on the pixels);
 *   no -p draws the sample prompt; bad ditrun.json files stop with exit 2 naming the key;
 * - the PNG "parameters" text, read back by a reader that follows the web UIs' rules
 *   (the last line holds >= 3 pairs matched by their regular expression; quoted values are
 *   JSON strings; the prompt may span lines; "Negative prompt:" starts the negative), and
 *   `ditrun info` printing the same;
 * - --seed -1 (two runs, two seeds, each printed and recorded; the printed seed makes the same
 *   file again), -b N (seeds S..S+N-1, files equal to single runs), typo hints;
 * - dit_infotext_format/parse on their own (quoting, multi-line, round trip). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <limits.h>
#include <jansson.h>
#include <pcre2.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ditrun.h"
#include "testing.h"

static dt_cli_env g;

/* ---- a reader of the "parameters" text that follows the web UIs' rules ---------------- */
typedef struct webui_params {
  char prompt[4096], negative[4096];
  int n;
  char keys[32][64], values[32][1024];
} webui_params;

static const char *wp_get(const webui_params *w, const char *k) {
  for (int i = 0; i < w->n; i++)
    if (!strcmp(w->keys[i], k)) return w->values[i];
  return NULL;
}

static void append(char *dst, size_t cap, const char *s, size_t n) {
  size_t l = strlen(dst);
  if (l && l + 1 < cap) dst[l++] = '\n', dst[l] = 0;
  while (n && (*s == ' ' || *s == '\t')) s++, n--;
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--;
  if (l + n + 1 > cap) n = cap - l - 1;
  memcpy(dst + l, s, n);
  dst[l + n] = 0;
}

/* Finds the pairs of one line with the web UIs' expression; stores them when w. */
static int wp_pairs(pcre2_code *re, const char *line, webui_params *w) {
  pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
  size_t off = 0, len = strlen(line);
  int n = 0;
  while (off <= len && pcre2_match(re, (PCRE2_SPTR)line, len, off, 0, md, NULL) >= 0) {
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    if (w && w->n < 32) {
      snprintf(w->keys[w->n], sizeof w->keys[0], "%.*s", (int)(ov[3] - ov[2]), line + ov[2]);
      const char *v = line + ov[4];
      size_t vn = ov[5] - ov[4];
      json_error_t je;
      json_t *j = vn >= 2 && v[0] == '"' ? json_loadb(v, vn, JSON_DECODE_ANY, &je) : NULL;
      if (json_is_string(j)) snprintf(w->values[w->n], sizeof w->values[0], "%s", json_string_value(j));
      else snprintf(w->values[w->n], sizeof w->values[0], "%.*s", (int)vn, v);
      json_decref(j);
      w->n++;
    }
    n++;
    off = ov[1] > ov[0] ? ov[1] : ov[1] + 1;
  }
  pcre2_match_data_free(md);
  return n;
}

static void webui_parse(const char *text, webui_params *w) {
  memset(w, 0, sizeof *w);
  int ec;
  PCRE2_SIZE eo;
  pcre2_code *re = pcre2_compile((PCRE2_SPTR) "\\s*(\\w[\\w \\-/]+):\\s*(\"(?:\\\\.|[^\\\\\"])+\"|[^,]*)(?:,|$)",
                                 PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
  CHECK(re != NULL);
  if (!re) return;
  char *t = strdup(text);
  size_t n = strlen(t);
  while (n && (t[n - 1] == '\n' || t[n - 1] == ' ')) t[--n] = 0;
  char *last = strrchr(t, '\n');
  char *pl = last ? last + 1 : t;
  if (wp_pairs(re, pl, NULL) >= 3) {
    wp_pairs(re, pl, w);
    *pl = 0;
    if (last) *last = 0;
  }
  int neg = 0;
  for (char *line = t; line && *t;) {
    char *nl = strchr(line, '\n');
    size_t ln = nl ? (size_t)(nl - line) : strlen(line);
    const char *s = line;
    while (ln && *s == ' ') s++, ln--;
    if (ln >= 16 && !strncmp(s, "Negative prompt:", 16)) neg = 1, s += 16, ln -= 16;
    if (neg) append(w->negative, sizeof w->negative, s, ln);
    else append(w->prompt, sizeof w->prompt, s, ln);
    line = nl ? nl + 1 : NULL;
  }
  free(t);
  pcre2_code_free(re);
}

/* ---- helpers ----------------------------------------------------------------------------- */
/* The text chunk `key` of a PNG, malloc'd, or NULL. */
static char *chunk_text(const char *path, const char *key) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  char *out = NULL;
  if (setjmp(png_jmpbuf(png)) == 0) {
    png_init_io(png, f);
    png_read_info(png, info);
    png_textp t;
    int n = 0;
    png_get_text(png, info, &t, &n);
    for (int i = 0; i < n && !out; i++)
      if (!strcmp(t[i].key, key)) out = strdup(t[i].text);
  }
  png_destroy_read_struct(&png, &info, NULL);
  fclose(f);
  return out;
}

static int gen(const char *args, const char *log) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' %s", g.cli, g.model, args);
  return dt_run(cmd, log);
}

static unsigned long long seed_in_log(const char *log) {
  char buf[8192];
  if (dt_read_file(log, buf, sizeof buf) < 0) return 0;
  const char *p = strstr(buf, "seed ");
  while (p && !(p[5] >= '0' && p[5] <= '9')) p = strstr(p + 5, "seed ");
  return p ? strtoull(p + 5, NULL, 10) : 0;
}

static int file_has(const char *path, const char *needle) {
  static char buf[1 << 16];
  return dt_read_file(path, buf, sizeof buf) >= 0 && strstr(buf, needle) != NULL;
}

/* ---- the checks -------------------------------------------------------------------------- */
/* The shapes-128 palette (tools/train/shapes.py COLORS). */
static const struct { const char *name; int rgb[3]; } PALETTE[] = {
    {"red", {215, 40, 40}},     {"green", {40, 160, 60}},   {"blue", {40, 80, 215}},  {"yellow", {240, 205, 40}},
    {"purple", {135, 60, 175}}, {"orange", {240, 135, 30}}, {"white", {240, 240, 240}}, {"black", {30, 30, 30}}};
enum { N_PALETTE = sizeof PALETTE / sizeof *PALETTE };

static int nearest_color(const unsigned char *px) {
  int best = 0, bd = 1 << 30;
  for (int c = 0; c < N_PALETTE; c++) {
    int d = 0;
    for (int k = 0; k < 3; k++) d += (px[k] - PALETTE[c].rgb[k]) * (px[k] - PALETTE[c].rgb[k]);
    if (d < bd) bd = d, best = c;
  }
  return best;
}

/* "a C triangle on a white background", as a person would check it: the border is white, the
 * other pixels are mostly C, and they fill about half of their bounding box (a triangle; a
 * square fills all of it, a circle 79%). */
static void check_triangle(const char *png, int want) {
  int w = 0, h = 0, counts[N_PALETTE] = {0}, x0 = 1 << 30, y0 = 1 << 30, x1 = -1, y1 = -1, border_white = 0, border = 0;
  unsigned char *px = dt_read_png_rgb(png, &w, &h);
  CHECK_MSG(px && w == 128 && h == 128, "%s: %dx%d", png, w, h);
  if (!px) return;
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      int c = nearest_color(px + 3 * ((size_t)y * w + x));
      if (x == 0 || y == 0 || x == w - 1 || y == h - 1) {
        border++;
        border_white += c == 6;
        continue;
      }
      if (c == 6) continue;
      counts[c]++;
      if (c == want) {
        if (x < x0) x0 = x;
        if (x > x1) x1 = x;
        if (y < y0) y0 = y;
        if (y > y1) y1 = y;
      }
    }
  int others = 0;
  for (int c = 0; c < N_PALETTE; c++) others += c == want ? 0 : counts[c];
  const double box = x1 >= x0 ? (double)(x1 - x0 + 1) * (y1 - y0 + 1) : 0, fill = box > 0 ? counts[want] / box : 0;
  printf("%s: %d %s pixels, %d others, border %d/%d white, fill of its box %.2f\n", png, counts[want],
         PALETTE[want].name, others, border_white, border, fill);
  CHECK_MSG(border_white > border * 9 / 10, "%s: the background is not white", png);
  CHECK_MSG(counts[want] >= 60 && counts[want] > 4 * others, "%s: no %s shape (%d pixels, %d others)", png,
            PALETTE[want].name, counts[want], others);
  CHECK_MSG(fill > 0.35 && fill < 0.68, "%s: the %s shape fills %.2f of its box: not a triangle", png,
            PALETTE[want].name, fill);
  free(px);
}

/* The first command a newcomer types, for four colors: no size, steps or seed. */
static void test_first_prompts(void) {
  static const int colors[] = {1, 0, 2, 3}; /* green, red, blue, yellow */
  for (size_t i = 0; i < sizeof colors / sizeof *colors; i++) {
    char out[4096], args[8192];
    snprintf(out, sizeof out, "%s/first-%s.png", g.tmp, PALETTE[colors[i]].name);
    snprintf(args, sizeof args, "-p 'a %s triangle on a white background' -o '%s' --overwrite",
             PALETTE[colors[i]].name, out);
    CHECK(gen(args, NULL) == 0);
    check_triangle(out, colors[i]);
  }
}

static void test_defaults(void) {
  char out[4096], log[4096], args[8192];
  snprintf(out, sizeof out, "%s/defaults.png", g.tmp);
  snprintf(log, sizeof log, "%s/defaults.log", g.tmp);
  snprintf(args, sizeof args, "-p 'a green triangle on a white background' -o '%s' --overwrite", out);
  CHECK(gen(args, log) == 0);
  int w = 0, h = 0;
  unsigned char *px = dt_read_png_rgb(out, &w, &h);
  CHECK_MSG(px && w == 128 && h == 128, "no size given: %dx%d, want the model's 128x128", w, h);
  free(px);
  CHECK_MSG(file_has(log, "128x128, 8 steps, guidance 0 (defaults from") && file_has(log, "ditrun.json"),
            "generate does not say which size it chose and why");
  /* no -p: the sample prompt of ditrun.json */
  snprintf(args, sizeof args, "-o '%s' --overwrite", out);
  CHECK(gen(args, log) == 0);
  char path[4096], buf[8192];
  snprintf(path, sizeof path, "%s/ditrun.json", g.model);
  json_error_t je;
  json_t *j = json_load_file(path, 0, &je);
  const char *sample = json_string_value(json_object_get(j, "prompt"));
  char *prompt = chunk_text(out, "prompt");
  CHECK_MSG(sample && prompt && !strcmp(sample, prompt), "no -p: prompt '%s', want the sample '%s'",
            prompt ? prompt : "(none)", sample ? sample : "(none)");
  free(prompt);
  json_decref(j);
  /* an explicit size still wins */
  snprintf(args, sizeof args, "-p x -W 64 -H 96 --steps 2 -o '%s' --overwrite", out);
  CHECK(gen(args, log) == 0);
  px = dt_read_png_rgb(out, &w, &h);
  CHECK(px && w == 64 && h == 96);
  free(px);
  CHECK(dt_read_file(log, buf, sizeof buf) >= 0 && strstr(buf, "64x96, 2 steps"));
}

/* A model folder of symlinks to shapes-128's components plus the given ditrun.json. */
static void bad_defaults_case(const char *json, const char *want) {
  char dir[4096], p[4096], q[4096], log[4096], args[8192];
  snprintf(dir, sizeof dir, "%s/badmodel", g.tmp);
  mkdir(dir, 0777);
  static const char *const comps[] = {"model_index.json", "scheduler", "text_encoder", "tokenizer", "transformer", "vae"};
  for (size_t i = 0; i < sizeof comps / sizeof *comps; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, comps[i]);
    snprintf(q, sizeof q, "%s/%s", g.model, comps[i]);
    char *abs = realpath(q, NULL); /* the link must resolve from its own folder */
    if (abs) snprintf(q, sizeof q, "%s", abs);
    free(abs);
    unlink(p);
    CHECK(symlink(q, p) == 0);
  }
  snprintf(p, sizeof p, "%s/ditrun.json", dir);
  FILE *f = fopen(p, "w");
  if (f) fputs(json, f), fclose(f);
  snprintf(log, sizeof log, "%s/bad.log", g.tmp);
  snprintf(q, sizeof q, "%s/bad.png", g.tmp);
  unlink(q);
  snprintf(args, sizeof args, "'%s' generate -m '%s' -p x -o '%s'", g.cli, dir, q);
  int rc = dt_run(args, log);
  char buf[8192] = "";
  dt_read_file(log, buf, sizeof buf);
  CHECK_MSG(rc == 2 && strstr(buf, want) && strstr(buf, "ditrun.json"), "ditrun.json %s: rc %d, message: %s", json,
            rc, buf);
  struct stat st;
  CHECK_MSG(stat(q, &st) != 0, "a bad ditrun.json left an output file");
}

static void test_bad_defaults(void) {
  bad_defaults_case("{\"widht\": 128}", "unknown key \"widht\"");
  bad_defaults_case("{\"width\": 100, \"height\": 128}", "multiples of 16");
  bad_defaults_case("{\"steps\": 0}", "steps");
  bad_defaults_case("{\"guidance\": \"high\"}", "guidance");
  bad_defaults_case("{\"prompt\": \"\"}", "prompt");
  bad_defaults_case("[1, 2]", "not a JSON object");
  bad_defaults_case("{\"width\": 128,", "ditrun.json");
  bad_defaults_case("{\"_comment\": 1, \"width\": 128, \"width\": 64}", "duplicate");
}

static const char *const TRICKY_PROMPT = "a red circle, \"big\", on a\nwhite: background";
static const char *const TRICKY_NEG = "blurry, low quality: bad";

static void test_parameters_text(void) {
  char out[4096], log[4096], args[8192];
  snprintf(out, sizeof out, "%s/meta.png", g.tmp);
  snprintf(log, sizeof log, "%s/meta.log", g.tmp);
  snprintf(args, sizeof args, "-p \"$(printf 'a red circle, \"big\", on a\\nwhite: background')\" -n '%s' --seed 7 "
           "-o '%s' --overwrite", TRICKY_NEG, out);
  CHECK(gen(args, log) == 0);
  char *text = chunk_text(out, "parameters");
  CHECK_MSG(text != NULL, "no parameters chunk in %s", out);
  if (!text) return;
  webui_params w;
  webui_parse(text, &w);
  CHECK_MSG(!strcmp(w.prompt, TRICKY_PROMPT), "prompt read back as '%s'", w.prompt);
  CHECK_MSG(!strcmp(w.negative, TRICKY_NEG), "negative prompt read back as '%s'", w.negative);
  static const char *const want[][2] = {{"Steps", "8"},       {"Sampler", "Euler"},      {"CFG scale", "0"},
                                        {"Seed", "7"},        {"Size", "128x128"},       {"Model", "shapes-128"},
                                        {"RNG", "CPU"},       {"Version", "ditrun " DITRUN_VERSION}};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    const char *v = wp_get(&w, want[i][0]);
    CHECK_MSG(v && !strcmp(v, want[i][1]), "%s: '%s', want '%s'\n%s", want[i][0], v ? v : "(missing)", want[i][1],
              text);
  }
  /* the library's parser reads the same */
  dit_infotext it;
  CHECK(dit_infotext_parse(text, &it) == DIT_OK);
  CHECK(!strcmp(it.prompt, w.prompt) && !strcmp(it.negative_prompt, w.negative) && it.n_fields == w.n);
  for (int i = 0; i < it.n_fields && i < w.n; i++)
    CHECK_MSG(!strcmp(it.keys[i], w.keys[i]) && !strcmp(it.values[i], w.values[i]), "field %d: %s=%s vs %s=%s", i,
              it.keys[i], it.values[i], w.keys[i], w.values[i]);
  /* ditrun info prints them back */
  char cmd[8192], ilog[4096];
  snprintf(ilog, sizeof ilog, "%s/info.log", g.tmp);
  snprintf(cmd, sizeof cmd, "'%s' info '%s'", g.cli, out);
  CHECK(dt_run(cmd, ilog) == 0);
  CHECK(file_has(ilog, "image: ") && file_has(ilog, "(128x128 PNG)"));
  CHECK(file_has(ilog, "prompt: a red circle, \"big\", on a\nwhite: background\n"));
  CHECK(file_has(ilog, "negative prompt: blurry, low quality: bad\n"));
  for (int i = 0; i < it.n_fields; i++) {
    char line[2048];
    snprintf(line, sizeof line, "\n%s: %s\n", it.keys[i], it.values[i]);
    CHECK_MSG(file_has(ilog, line), "ditrun info does not print %s", line);
  }
  dit_infotext_free(&it);
  free(text);
}

static void test_random_seed(void) {
  char out[2][4096], log[2][4096], args[8192];
  unsigned long long seed[2];
  for (int i = 0; i < 2; i++) {
    snprintf(out[i], sizeof out[i], "%s/random%d.png", g.tmp, i);
    snprintf(log[i], sizeof log[i], "%s/random%d.log", g.tmp, i);
    snprintf(args, sizeof args, "-p 'a blue square on a black background' --seed -1 -o '%s' --overwrite", out[i]);
    CHECK(gen(args, log[i]) == 0);
    seed[i] = seed_in_log(log[i]);
    char *text = chunk_text(out[i], "parameters");
    webui_params w;
    webui_parse(text ? text : "", &w);
    const char *s = wp_get(&w, "Seed");
    CHECK_MSG(s && strtoull(s, NULL, 10) == seed[i], "printed seed %llu, recorded %s", seed[i], s ? s : "(none)");
    free(text);
  }
  CHECK_MSG(seed[0] != seed[1], "--seed -1 twice gave the same seed %llu", seed[0]);
  /* the printed seed makes the same file again */
  char again[4096];
  snprintf(again, sizeof again, "%s/random_again.png", g.tmp);
  snprintf(args, sizeof args, "-p 'a blue square on a black background' --seed %llu -o '%s' --overwrite", seed[1],
           again);
  CHECK(gen(args, NULL) == 0);
  CHECK_MSG(dt_files_equal(out[1], again), "--seed %llu did not give the same PNG again", seed[1]);
}

static void test_batch(void) {
  char out[4096], args[8192], one[4096], single[4096];
  snprintf(out, sizeof out, "%s/batch.png", g.tmp);
  for (int i = 1; i <= 3; i++) {
    snprintf(one, sizeof one, "%s/batch-%d.png", g.tmp, i);
    unlink(one);
  }
  snprintf(args, sizeof args, "-p 'two red circles on a blue background' -b 3 --seed 7 -o '%s'", out);
  CHECK(gen(args, NULL) == 0);
  for (int i = 0; i < 3; i++) {
    snprintf(one, sizeof one, "%s/batch-%d.png", g.tmp, i + 1);
    snprintf(single, sizeof single, "%s/single-%d.png", g.tmp, 7 + i);
    snprintf(args, sizeof args, "-p 'two red circles on a blue background' --seed %d -o '%s' --overwrite", 7 + i,
             single);
    CHECK(gen(args, NULL) == 0);
    CHECK_MSG(dt_files_equal(one, single), "%s differs from the single run with seed %d", one, 7 + i);
  }
  /* an existing file of the batch stops it before any work */
  snprintf(args, sizeof args, "-p x -b 3 --seed 7 -o '%s'", out);
  CHECK(gen(args, NULL) == 2);
}

static void test_typo_hints(void) {
  static const char *const cases[][2] = {
      {"--stpes 4", "did you mean '--steps'"}, {"--widht 64", "did you mean '--width'"},
      {"--seeed 1", "did you mean '--seed'"},  {"--guidence 2", "did you mean '--guidance'"},
      {"--negativ x", "did you mean '--negative'"}};
  char log[4096], args[8192];
  snprintf(log, sizeof log, "%s/typo.log", g.tmp);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    snprintf(args, sizeof args, "-p x %s -o '%s/typo.png'", cases[i][0], g.tmp);
    CHECK_MSG(gen(args, log) == 2 && file_has(log, cases[i][1]), "%s: no hint '%s'", cases[i][0], cases[i][1]);
  }
  snprintf(args, sizeof args, "-p x --zzzzzzzz -o '%s/typo.png'", g.tmp);
  CHECK(gen(args, log) == 2 && file_has(log, "unknown option '--zzzzzzzz'") && !file_has(log, "did you mean"));
  /* --help ends with examples */
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' generate --help", g.cli);
  CHECK(dt_run(cmd, log) == 0 && file_has(log, "examples:\n  ditrun generate -m"));
}

static void test_infotext_unit(void) {
  dit_infotext t = {.prompt = "line one\nline two", .negative_prompt = "a, b", .n_fields = 3,
                    .keys = {"Steps", "Note", "Size"}, .values = {"8", "x: y, \"z\"", "64x32"}};
  char *s = NULL;
  CHECK(dit_infotext_format(&t, &s) == DIT_OK);
  CHECK_MSG(s && !strcmp(s, "line one\nline two\nNegative prompt: a, b\nSteps: 8, Note: \"x: y, \\\"z\\\"\", Size: 64x32"),
            "formatted as: %s", s ? s : "(null)");
  dit_infotext r;
  CHECK(dit_infotext_parse(s, &r) == DIT_OK);
  CHECK(!strcmp(r.prompt, t.prompt) && !strcmp(r.negative_prompt, t.negative_prompt) && r.n_fields == 3);
  CHECK(r.n_fields == 3 && !strcmp(dit_infotext_get(&r, "Note"), "x: y, \"z\"") && !strcmp(r.values[2], "64x32"));
  dit_infotext_free(&r);
  free(s);
  /* a text whose last line has fewer than three pairs is all prompt */
  CHECK(dit_infotext_parse("a cat\nStyle: oil, Light: soft", &r) == DIT_OK);
  CHECK(r.n_fields == 0 && !strcmp(r.prompt, "a cat\nStyle: oil, Light: soft"));
  dit_infotext_free(&r);
  /* as another tool writes it */
  CHECK(dit_infotext_parse("masterpiece, 1girl\nNegative prompt: lowres\nSteps: 20, Sampler: DPM++ 2M, "
                           "CFG scale: 7, Seed: 123, Size: 512x768, Model: sd15, Lora hashes: \"a: 1, b: 2\"",
                           &r) == DIT_OK);
  CHECK(r.n_fields == 7 && !strcmp(dit_infotext_get(&r, "Sampler"), "DPM++ 2M") &&
        !strcmp(dit_infotext_get(&r, "Lora hashes"), "a: 1, b: 2") && !strcmp(r.negative_prompt, "lowres"));
  dit_infotext_free(&r);
  /* keys outside the format's rules are refused */
  dit_infotext bad = {.prompt = "x", .n_fields = 1, .keys = {"Bad,key"}, .values = {"1"}};
  CHECK(dit_infotext_format(&bad, &s) == DIT_ERR_INVALID_ARG && s == NULL);
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init_cli(argc, argv, &a, "shapes-128", true, &g);
  test_infotext_unit();
  test_defaults();
  test_first_prompts();
  test_bad_defaults();
  test_parameters_text();
  test_random_seed();
  test_batch();
  test_typo_hints();
  return dt_finish();
}

/* Tokenizer and chat template: every reference case of refs/tokenizer_cases.json gives
 * exactly the ids of the `tokenizers` library, long / odd prompts are handled, and
 * hand-made bad tokenizer.json files are rejected with a message naming the problem. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "io/json.h"
#include "pipeline/family.h"
#include "testing.h"
#include "text/chat.h"
#include "text/tok_internal.h"
#include "text/tokenizer.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Compares ids with a JSON array of integers; prints the first difference. */
static bool ids_equal(const int32_t *ids, size_t n, const json_t *ref, const char *what) {
  bool ok = n == json_array_size(ref);
  for (size_t i = 0; ok && i < n; i++) ok = ids[i] == json_integer_value(json_array_get(ref, i));
  if (!ok) {
    fprintf(stderr, "  %s: got %zu ids:", what, n);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n  expected %zu:", json_array_size(ref));
    for (size_t i = 0; i < json_array_size(ref) && i < 40; i++)
      fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(ref, i)));
    fputc('\n', stderr);
  }
  return ok;
}

/* Byte-level decode (inverse GPT-2 mapping) into a malloc'd buffer, for round trips. */
static char *decode(const dit_tokenizer *t, const int32_t *ids, size_t n, size_t *out_n) {
  int inv[512];
  for (int i = 0; i < 512; i++) inv[i] = -1;
  for (int b = 0; b < 256; b++) inv[tok_byte_to_cp((uint8_t)b)] = b;
  size_t cap = 16;
  for (size_t i = 0; i < n; i++) {
    size_t l = 0;
    dit_tok_token_str(t, ids[i], &l);
    cap += l;
  }
  char *o = malloc(cap);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    size_t l = 0;
    const uint8_t *s = (const uint8_t *)dit_tok_token_str(t, ids[i], &l);
    if (!s) continue;
    if (ids[i] >= 151643) { /* added tokens are emitted verbatim */
      memcpy(o + k, s, l);
      k += l;
      continue;
    }
    for (size_t j = 0; j < l;) {
      uint32_t cp = s[j] < 0x80 ? s[j] : ((uint32_t)(s[j] & 0x1f) << 6) | (s[j + 1] & 0x3f);
      j += s[j] < 0x80 ? 1 : 2;
      o[k++] = cp < 512 && inv[cp] >= 0 ? (char)inv[cp] : '?';
    }
  }
  *out_n = k;
  return o;
}

static void test_reference_cases(const dit_tokenizer *t, const json_t *cases) {
  const json_t *list = json_object_get(cases, "cases");
  CHECK(json_array_size(list) >= 20);
  int bad = 0;
  for (size_t i = 0; i < json_array_size(list); i++) {
    const json_t *c = json_array_get(list, i), *text = json_object_get(c, "text");
    int32_t *ids = NULL;
    size_t n = 0;
    dit_error e = {0};
    dit_status s = dit_tok_encode(t, json_string_value(text), json_string_length(text), &ids, &n, &e);
    char what[96];
    snprintf(what, sizeof what, "case %zu \"%.40s\"", i, json_string_value(text));
    bool ok = s == DIT_OK && ids_equal(ids, n, json_object_get(c, "ids"), what);
    if (!ok) bad++;
    CHECK_MSG(ok, "%s (%s)", what, e.msg);
    free(ids);
  }
  printf("reference cases: %zu, mismatches: %d\n", json_array_size(list), bad);
}

static void test_chat_cases(const dit_tokenizer *t, const json_t *cases) {
  const json_t *list = json_object_get(cases, "chat_template");
  CHECK(json_array_size(list) >= 6);
  for (size_t i = 0; i < json_array_size(list); i++) {
    const json_t *c = json_array_get(list, i);
    const json_t *prompt = json_object_get(c, "prompt"), *text = json_object_get(c, "text");
    dit_chat_style style =
        json_is_true(json_object_get(c, "enable_thinking")) ? DIT_CHAT_QWEN3_THINKING : DIT_CHAT_QWEN3_NO_THINKING;
    char *r = NULL;
    size_t rn = 0;
    dit_error e = {0};
    CHECK(dit_chat_render_n(style, json_string_value(prompt), json_string_length(prompt), &r, &rn, &e) == DIT_OK);
    CHECK_MSG(r && rn == json_string_length(text) && !memcmp(r, json_string_value(text), rn),
              "chat case %zu rendering differs: \"%s\"", i, r ? r : "");
    int32_t *ids = NULL;
    size_t n = 0;
    char what[64];
    snprintf(what, sizeof what, "chat case %zu", i);
    CHECK_MSG(dit_tok_encode(t, r, rn, &ids, &n, &e) == DIT_OK && ids_equal(ids, n, json_object_get(c, "ids"), what),
              "%s", what);
    free(ids);
    free(r);
  }
  char *r = NULL;
  dit_error e = {0};
  CHECK(dit_chat_render(DIT_CHAT_QWEN3_THINKING, NULL, &r, &e) == DIT_OK &&
        !strcmp(r, "<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n"));
  free(r);
  CHECK(dit_chat_render((dit_chat_style)7, "x", &r, &e) == DIT_ERR_INVALID_ARG && !r);
  CHECK(dit_family_find("ZImagePipeline") && dit_family_find("ZImagePipeline")->chat == DIT_CHAT_QWEN3_THINKING);
  CHECK(dit_family_find("Flux2KleinPipeline") &&
        dit_family_find("Flux2KleinPipeline")->chat == DIT_CHAT_QWEN3_NO_THINKING);
  CHECK(dit_family_find("StableDiffusionPipeline") == NULL);
}

/* The public API on both model folders: chat style from model_index.json. */
static void test_public_api(const dt_args *a, const json_t *cases) {
  const json_t *list = json_object_get(cases, "chat_template");
  static const char *const dirs[] = {"models/zimage-tiny", "models/flux2-klein-tiny"};
  for (int d = 0; d < 2; d++) {
    char path[1024];
    dt_path(path, sizeof path, a->data, dirs[d]);
    dit_ctx *ctx;
    CHECK(dit_ctx_create(NULL, &ctx) == DIT_OK);
    dit_tokenizer *tok = NULL;
    CHECK_MSG(dit_tokenizer_load(ctx, path, &tok) == DIT_OK, "%s", dit_ctx_last_error(ctx));
    if (!tok) {
      dit_ctx_free(ctx);
      continue;
    }
    CHECK(dit_tokenizer_vocab_size(tok) == 151669);
    for (size_t i = 0; i < json_array_size(list); i++) {
      const json_t *c = json_array_get(list, i), *prompt = json_object_get(c, "prompt");
      if (json_is_true(json_object_get(c, "enable_thinking")) != (d == 0)) continue;
      int32_t *ids = NULL;
      size_t n = 0;
      char what[64];
      snprintf(what, sizeof what, "%s chat case %zu", dirs[d], i);
      CHECK_MSG(dit_tokenizer_encode(ctx, tok, json_string_value(prompt), json_string_length(prompt), 1, &ids, &n) ==
                        DIT_OK &&
                    ids_equal(ids, n, json_object_get(c, "ids"), what),
                "%s", what);
      free(ids);
    }
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(dit_tokenizer_encode(ctx, tok, "Hello world", 11, 0, &ids, &n) == DIT_OK && n == 2 && ids[0] == 9707 &&
          ids[1] == 1879);
    free(ids);
    CHECK(dit_tokenizer_encode(ctx, tok, "ok\xff", 3, 1, &ids, &n) == DIT_ERR_INVALID_ARG && !ids && n == 0);
    CHECK_MSG(strstr(dit_ctx_last_error(ctx), "offset 2") != NULL, "%s", dit_ctx_last_error(ctx));
    dit_tokenizer_free(tok);
    if (d == 1) {
      dit_ctx_free(ctx);
      continue;
    }
    /* a tokenizer folder itself loads, but has no chat style */
    char tdir[1100];
    snprintf(tdir, sizeof tdir, "%s/tokenizer", path);
    CHECK(dit_tokenizer_load(ctx, tdir, &tok) == DIT_OK);
    CHECK(dit_tokenizer_encode(ctx, tok, "x", 1, 1, &ids, &n) == DIT_ERR_INVALID_ARG);
    CHECK(dit_tokenizer_encode(ctx, tok, "x", 1, 0, &ids, &n) == DIT_OK && n == 1);
    free(ids);
    dit_tokenizer_free(tok);
    CHECK(dit_tokenizer_load(ctx, a->tmp, &tok) != DIT_OK && !tok);
    dit_ctx_free(ctx);
  }
}

static void test_lookup(const dit_tokenizer *t) {
  CHECK(dit_tok_vocab_size(t) == 151669);
  CHECK(dit_tok_token_id(t, "<|endoftext|>") == 151643);
  CHECK(dit_tok_token_id(t, "<|im_start|>") == 151644);
  CHECK(dit_tok_token_id(t, "</think>") == 151668);
  CHECK(dit_tok_token_id(t, "Hello") == 9707);
  CHECK(dit_tok_token_id(t, "Ġworld") == 1879);
  CHECK(dit_tok_token_id(t, "no such token at all") == -1);
  CHECK(dit_tok_token_id(t, "") == -1);
  size_t l = 0;
  const char *s = dit_tok_token_str(t, 1879, &l);
  CHECK(s && l == 7 && !memcmp(s, "Ġworld", 7));
  CHECK(dit_tok_token_str(t, -1, &l) == NULL && dit_tok_token_str(t, 151669, &l) == NULL);
}

/* Builds a prompt of about `size` bytes from the reference texts (mixed scripts). */
static char *make_prompt(const json_t *cases, size_t size, size_t *n) {
  const json_t *list = json_object_get(cases, "cases");
  char *p = malloc(size + 4096);
  size_t k = 0;
  for (size_t i = 0; k < size; i++) {
    const json_t *text = json_object_get(json_array_get(list, i % json_array_size(list)), "text");
    memcpy(p + k, json_string_value(text), json_string_length(text));
    k += json_string_length(text);
    p[k++] = ' ';
  }
  *n = k;
  return p;
}

static void test_long_prompts(const dit_tokenizer *t, const json_t *cases) {
  size_t n;
  char *p = make_prompt(cases, 100000, &n);
  int32_t *ids = NULL;
  size_t m = 0;
  dit_error e = {0};
  double t0 = now_s();
  dit_status s = dit_tok_encode(t, p, n, &ids, &m, &e);
  double dt = now_s() - t0;
  printf("100 kB prompt (%zu bytes): %zu ids in %.3f s\n", n, m, dt);
  CHECK_MSG(s == DIT_OK, "%s", e.msg);
  CHECK_MSG(dt < 1.0, "100 kB prompt took %.3f s", dt);
  /* round trip: decoding gives the NFC form of the text; the reference texts hold one
   * decomposed "é" (e + U+0301), which NFC composes, so compare lengths loosely */
  size_t dn = 0;
  char *d = decode(t, ids, m, &dn);
  CHECK_MSG(dn <= n && dn + n / 100 >= n, "round trip length %zu vs %zu", dn, n);
  free(d);
  free(ids);
  free(p);

  /* 1 MB: repeated words must give the repeated ids (a pre-token boundary per repeat) */
  const char *unit = " Hello world";
  size_t reps = (1 << 20) / strlen(unit);
  p = malloc(reps * strlen(unit) + 16);
  strcpy(p, "Hello world");
  n = 11;
  for (size_t i = 0; i < reps; i++, n += strlen(unit)) memcpy(p + n, unit, strlen(unit));
  t0 = now_s();
  s = dit_tok_encode(t, p, n, &ids, &m, &e);
  dt = now_s() - t0;
  printf("1 MB prompt (%zu bytes): %zu ids in %.3f s\n", n, m, dt);
  bool ok = s == DIT_OK && m == 2 + 2 * reps && ids[0] == 9707 && ids[1] == 1879;
  for (size_t i = 2; ok && i < m; i += 2) ok = ids[i] == 21927 && ids[i + 1] == 1879;
  CHECK_MSG(ok, "1 MB repeated prompt: status %d, %zu ids", (int)s, m);
  free(ids);

  /* 1 MB without pre-token boundaries: one letter run, one space run, one digit run */
  static const char fill[] = {'a', ' ', '7', '\n', '!'};
  for (int f = 0; f < 5; f++) {
    size_t len = f < 2 ? (size_t)1 << 20 : (size_t)1 << 18; /* 1 MB for two, 256 kB for the rest */
    memset(p, fill[f], len);
    t0 = now_s();
    s = dit_tok_encode(t, p, len, &ids, &m, &e);
    dt = now_s() - t0;
    printf("%zu kB of '%s': %zu ids in %.3f s\n", len >> 10, fill[f] == '\n' ? "\\n" : (char[]){fill[f], 0}, m, dt);
    CHECK_MSG(s == DIT_OK && m > 0, "1 MB of 0x%02x: %s", fill[f], e.msg);
    size_t dn2 = 0;
    char *d2 = s == DIT_OK ? decode(t, ids, m, &dn2) : NULL;
    CHECK(d2 && dn2 == len && !memcmp(d2, p, dn2));
    free(d2);
    free(ids);
  }
  free(p);
}

static void test_odd_inputs(const dit_tokenizer *t) {
  int32_t *ids = (int32_t *)1;
  size_t n = 99;
  dit_error e = {0};
  static const struct {
    const char *s;
    size_t n, off;
  } bad[] = {
      {"\xff", 1, 0},          {"ab\xc0\xaf", 4, 2},  {"x\xed\xa0\x80", 4, 1}, {"\xe6\x97", 2, 0},
      {"ok \xf4\x90\x80\x80", 7, 3}, {"\x80", 1, 0}, {"a\xe2\x82", 3, 1},   {"<|im_start|>\xfe", 13, 12},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dit_status s = dit_tok_encode(t, bad[i].s, bad[i].n, &ids, &n, &e);
    char want[32];
    snprintf(want, sizeof want, "offset %zu", bad[i].off);
    CHECK_MSG(s == DIT_ERR_INVALID_ARG && !ids && n == 0 && strstr(e.msg, want), "bad UTF-8 %zu: %s", i, e.msg);
  }
  /* NUL bytes are ordinary characters (byte-level token of 0x00 is U+0100 "Ā") */
  CHECK(dit_tok_encode(t, "a\0b", 3, &ids, &n, &e) == DIT_OK && n >= 2);
  size_t dn = 0;
  char *d = decode(t, ids, n, &dn);
  CHECK(dn == 3 && !memcmp(d, "a\0b", 3));
  free(d);
  free(ids);
  CHECK(dit_tok_encode(t, "\0", 1, &ids, &n, &e) == DIT_OK && n == 1 && ids[0] == dit_tok_token_id(t, "Ā"));
  free(ids);
  /* U+180E is not White_Space (Oniguruma's \s): "a\u180Eb" pre-tokenizes as "a" + "\u180Eb" */
  int32_t *i1 = NULL, *i2 = NULL, *i3 = NULL;
  size_t n1 = 0, n2 = 0, n3 = 0;
  CHECK(dit_tok_encode(t, "a\xe1\xa0\x8e" "b", 5, &i1, &n1, &e) == DIT_OK);
  CHECK(dit_tok_encode(t, "a", 1, &i2, &n2, &e) == DIT_OK);
  CHECK(dit_tok_encode(t, "\xe1\xa0\x8e" "b", 4, &i3, &n3, &e) == DIT_OK);
  CHECK(n1 == n2 + n3 && n2 == 1 && i1[0] == i2[0] && !memcmp(i1 + 1, i3, n3 * sizeof *i3));
  free(i1);
  free(i2);
  free(i3);
  /* only special tokens */
  const char *sp = "<|im_start|><|im_end|><|endoftext|><think></think>";
  CHECK(dit_tok_encode(t, sp, strlen(sp), &ids, &n, &e) == DIT_OK && n == 5 && ids[0] == 151644 &&
        ids[1] == 151645 && ids[2] == 151643 && ids[3] == 151667 && ids[4] == 151668);
  free(ids);
  /* a special token cut short is plain text; an unknown <|...|> too */
  CHECK(dit_tok_encode(t, "<|im_start|", 11, &ids, &n, &e) == DIT_OK && n > 1);
  for (size_t i = 0; i < n; i++) CHECK(ids[i] < 151643);
  free(ids);
  CHECK(dit_tok_encode(t, "", 0, &ids, &n, &e) == DIT_OK && n == 0 && !ids);
  CHECK(dit_tok_encode(t, NULL, 0, &ids, &n, &e) == DIT_OK && n == 0);
  CHECK(dit_tok_encode(t, NULL, 5, &ids, &n, &e) == DIT_ERR_INVALID_ARG);
}

/* ---- small hand-made tokenizer.json files ---------------------------------------- */

typedef struct sbuf {
  char *p;
  size_t n, cap;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    b->cap = (b->n + n + 1) * 2;
    b->p = realloc(b->p, b->cap);
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}
static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* A byte-level vocabulary: the 256 byte characters (ids 0..255, in byte order), then
 * "he" 256, "ll" 257, "hell" 258, "Ġw" 259; `extra` goes after the last entry. */
static void sb_vocab(sbuf *b, const char *extra) {
  sb_str(b, "{");
  for (int i = 0; i < 256; i++) {
    uint32_t cp = tok_byte_to_cp((uint8_t)i);
    char e[32];
    if (cp == '"' || cp == '\\') snprintf(e, sizeof e, "\"\\%c\": %d, ", (char)cp, i);
    else if (cp < 0x80) snprintf(e, sizeof e, "\"%c\": %d, ", (char)cp, i);
    else snprintf(e, sizeof e, "\"%c%c\": %d, ", (char)(0xc0 | (cp >> 6)), (char)(0x80 | (cp & 0x3f)), i);
    sb_str(b, e);
  }
  sb_str(b, "\"he\": 256, \"ll\": 257, \"hell\": 258, \"\xc4\xa0w\": 259");
  sb_str(b, extra);
  sb_str(b, "}");
}

/* A whole file: parts that are NULL take the good defaults. */
static char *make_json(const char *model_type, const char *vocab_extra, const char *merges, const char *added,
                       const char *normalizer, const char *pre) {
  sbuf b = {0};
  sb_str(&b, "{\"version\": \"1.0\", \"added_tokens\": ");
  sb_str(&b, added ? added : "[{\"id\": 260, \"content\": \"<|x|>\", \"special\": true, \"normalized\": false}]");
  sb_str(&b, ", \"normalizer\": ");
  sb_str(&b, normalizer ? normalizer : "{\"type\": \"NFC\"}");
  sb_str(&b, ", \"pre_tokenizer\": ");
  sb_str(&b, pre ? pre
                 : "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
                   "\" ?\\\\p{L}+|\\\\s+\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": "
                   "\"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}");
  sb_str(&b, ", \"model\": {\"type\": \"");
  sb_str(&b, model_type ? model_type : "BPE");
  sb_str(&b, "\", \"dropout\": null, \"unk_token\": null, \"vocab\": ");
  sb_vocab(&b, vocab_extra ? vocab_extra : "");
  sb_str(&b, ", \"merges\": ");
  sb_str(&b, merges ? merges : "[\"h e\", [\"l\", \"l\"], \"he ll\", \"\xc4\xa0 w\"]");
  sb_str(&b, "}}");
  return b.p;
}

/* Returns a malloc'd copy of s with the first `from` replaced by `to`; frees s. */
static char *replace(char *s, const char *from, const char *to) {
  char *p = strstr(s, from);
  if (!p) return s;
  size_t a = (size_t)(p - s), nf = strlen(from), nt = strlen(to), n = strlen(s);
  char *o = malloc(n - nf + nt + 1);
  memcpy(o, s, a);
  memcpy(o + a, to, nt);
  memcpy(o + a + nt, p + nf, n - a - nf + 1);
  free(s);
  return o;
}

static dit_status load_text(const dt_args *a, const char *name, const char *text, size_t len, dit_tokenizer **t,
                            dit_error *e) {
  char dir[1024], path[1200];
  snprintf(dir, sizeof dir, "%s/%s", a->tmp, name);
  char cmd[1100];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  dt_run(cmd, NULL);
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  FILE *f = fopen(path, "wb");
  if (f) {
    fwrite(text, 1, len, f);
    fclose(f);
  }
  return dit_tok_load(dir, t, e);
}

static void expect_bad(const dt_args *a, const char *name, char *json, const char *needle) {
  dit_tokenizer *t = (dit_tokenizer *)1;
  dit_error e = {0};
  dit_status s = load_text(a, name, json, strlen(json), &t, &e);
  CHECK_MSG(s != DIT_OK && t == NULL && strstr(e.msg, needle), "%s: status %d, message \"%s\" (want \"%s\")", name,
            (int)s, e.msg, needle);
  if (s != DIT_OK) printf("  rejected %-18s %s\n", name, e.msg);
  if (s == DIT_OK) dit_tok_free(t);
  free(json);
}

/* Small tokenizer files that load: merge ranks, added-token options, a backtracking regex. */
static void test_small_files(const dt_args *a) {
  dit_tokenizer *t = NULL;
  dit_error e = {0};
  char *good = make_json(NULL, NULL, NULL, NULL, NULL, NULL);
  CHECK_MSG(load_text(a, "good", good, strlen(good), &t, &e) == DIT_OK, "%s", e.msg);
  free(good);
  if (t) {
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(dit_tok_vocab_size(t) == 261);
    CHECK(dit_tok_encode(t, "hello w<|x|> wl", 15, &ids, &n, &e) == DIT_OK);
    /* "hello" -> hell + o; " w" -> Ġw; <|x|>; " wl" -> " ?\p{L}+" one piece -> Ġw + l */
    CHECK(n == 6 && ids[0] == 258 && ids[1] == 'o' && ids[2] == 259 && ids[3] == 260 && ids[4] == 259 &&
          ids[5] == 'l');
    free(ids);
    dit_tok_free(t);
  }
  /* merge ranks decide, not order of appearance in the word: with "l l" before "h e",
   * "hell" still forms since both merges are available */
  good = make_json(NULL, NULL, "[\"l l\", \"h e\", \"he ll\"]", "[]", "null",
                   "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"use_regex\": true}");
  CHECK_MSG(load_text(a, "good2", good, strlen(good), &t, &e) == DIT_OK, "%s", e.msg);
  free(good);
  if (t) {
    int32_t *ids = NULL;
    size_t n = 0;
    /* add_prefix_space: "hell" -> " hell" -> Ġ h e l l -> Ġ + hell (no "Ġ h" merge) */
    CHECK(dit_tok_encode(t, "hell", 4, &ids, &n, &e) == DIT_OK && n == 2 && ids[0] == ' ' && ids[1] == 258);
    free(ids);
    dit_tok_free(t);
  }
  /* lstrip / rstrip / single_word added tokens */
  good = make_json(NULL, NULL, NULL,
                   "[{\"id\": 260, \"content\": \"<m>\", \"lstrip\": true, \"rstrip\": true, \"normalized\": false},"
                   " {\"id\": 261, \"content\": \"ab\", \"single_word\": true, \"normalized\": true},"
                   " {\"id\": 262, \"content\": \"e\xcc\x81!\", \"normalized\": true}]",
                   NULL, NULL);
  CHECK_MSG(load_text(a, "strip", good, strlen(good), &t, &e) == DIT_OK, "%s", e.msg);
  free(good);
  if (t) {
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(dit_tok_encode(t, "a  <m>  b", 9, &ids, &n, &e) == DIT_OK && n == 3 && ids[0] == 'a' && ids[1] == 260 &&
          ids[2] == 'b');
    free(ids);
    CHECK(dit_tok_encode(t, "ab", 2, &ids, &n, &e) == DIT_OK && n == 1 && ids[0] == 261);
    free(ids);
    CHECK(dit_tok_encode(t, "cab", 3, &ids, &n, &e) == DIT_OK && n == 3 && ids[0] == 'c' && ids[1] == 'a');
    free(ids);
    /* a normalized token is matched by its NFC form, in NFC or NFD text */
    CHECK(dit_tok_encode(t, "\xc3\xa9!", 3, &ids, &n, &e) == DIT_OK && n == 1 && ids[0] == 262);
    free(ids);
    CHECK(dit_tok_encode(t, "xe\xcc\x81!", 5, &ids, &n, &e) == DIT_OK && n == 2 && ids[0] == 'x' && ids[1] == 262);
    free(ids);
    dit_tok_free(t);
  }

  /* a catastrophically backtracking regex ends in an error, not a hang */
  good = make_json(NULL, NULL, NULL, NULL, NULL,
                   "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
                   "\"(a|aa)+$\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                   "\"use_regex\": false}]}");
  CHECK_MSG(load_text(a, "backtrack", good, strlen(good), &t, &e) == DIT_OK, "%s", e.msg);
  free(good);
  if (t) {
    char text[200];
    memset(text, 'a', 120);
    text[120] = 'b';
    int32_t *ids = NULL;
    size_t n = 0;
    double t0 = now_s();
    dit_status s = dit_tok_encode(t, text, 121, &ids, &n, &e);
    printf("backtracking regex: status %d in %.3f s: %s\n", (int)s, now_s() - t0, s ? e.msg : "ok");
    CHECK((s == DIT_ERR_FORMAT && strstr(e.msg, "regex") && !ids) || s == DIT_OK);
    free(ids);
    dit_tok_free(t);
  }
}

/* Tokenizer files that break one rule each: refused with a message that names it. */
static void test_small_bad_files(const dt_args *a) {
  dit_tokenizer *t = NULL;
  dit_error e = {0};
  expect_bad(a, "dup_id", make_json(NULL, ", \"dup\": 5", NULL, NULL, NULL, NULL), "id 5 is used by both");
  expect_bad(a, "id_too_big", make_json(NULL, ", \"big\": 999999", NULL, NULL, NULL, NULL), "must be an integer in");
  expect_bad(a, "neg_id", make_json(NULL, ", \"neg\": -1", NULL, NULL, NULL, NULL), "must be an integer in");
  expect_bad(a, "merge_unknown", make_json(NULL, NULL, "[\"h e\", \"q zz\"]", NULL, NULL, NULL),
             "model.merges[1]");
  expect_bad(a, "merge_no_result", make_json(NULL, NULL, "[\"a b\"]", NULL, NULL, NULL), "the merged token");
  expect_bad(a, "merge_malformed", make_json(NULL, NULL, "[\"hello\"]", NULL, NULL, NULL), "is not \"a b\"");
  expect_bad(a, "merge_not_pair", make_json(NULL, NULL, "[[\"h\"]]", NULL, NULL, NULL), "must be \"a b\"");
  expect_bad(a, "wrong_model", make_json("WordPiece", NULL, NULL, NULL, NULL, NULL), "WordPiece");
  expect_bad(a, "added_dup_id",
             make_json(NULL, NULL, NULL,
                       "[{\"id\": 260, \"content\": \"<a>\"}, {\"id\": 260, \"content\": \"<b>\"}]", NULL, NULL),
             "used by two added tokens");
  expect_bad(a, "added_twice",
             make_json(NULL, NULL, NULL,
                       "[{\"id\": 260, \"content\": \"<a>\"}, {\"id\": 261, \"content\": \"<a>\"}]", NULL, NULL),
             "listed twice");
  expect_bad(a, "added_vs_vocab", make_json(NULL, NULL, NULL, "[{\"id\": 5, \"content\": \"<a>\"}]", NULL, NULL),
             "already the vocabulary's");
  expect_bad(a, "added_empty", make_json(NULL, NULL, NULL, "[{\"id\": 260, \"content\": \"\"}]", NULL, NULL),
             "empty content");
  expect_bad(a, "added_id_big", make_json(NULL, NULL, NULL, "[{\"id\": 70000, \"content\": \"<a>\"}]", NULL, NULL),
             "is outside");
  expect_bad(a, "normalizer", make_json(NULL, NULL, NULL, NULL, "{\"type\": \"BertNormalizer\"}", NULL), "BertNormalizer");
  expect_bad(a, "pre_tokenizer", make_json(NULL, NULL, NULL, NULL, NULL, "{\"type\": \"Metaspace\"}"), "Metaspace");
  expect_bad(a, "bad_regex",
             make_json(NULL, NULL, NULL, NULL, NULL,
                       "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a\"}, \"behavior\": \"Isolated\"}"),
             "regex");
  expect_bad(a, "bad_behavior",
             make_json(NULL, NULL, NULL, NULL, NULL,
                       "{\"type\": \"Split\", \"pattern\": {\"String\": \"a\"}, \"behavior\": \"Sideways\"}"),
             "Sideways");
  expect_bad(a, "bytelevel_not_last",
             make_json(NULL, NULL, NULL, NULL, NULL,
                       "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\"}, {\"type\": \"Split\", "
                       "\"pattern\": {\"String\": \"a\"}, \"behavior\": \"Isolated\"}]}"),
             "must be the last");
  /* a byte token missing: "!" renamed "x!" */
  expect_bad(a, "byte_missing", replace(make_json(NULL, NULL, NULL, NULL, NULL, NULL), "\"!\": 33", "\"x!\": 33"),
             "lacks the token");
  expect_bad(a, "dropout", replace(make_json(NULL, NULL, NULL, NULL, NULL, NULL), "\"dropout\": null",
                                   "\"dropout\": 0.5"), "dropout");
  expect_bad(a, "fallback_eow", replace(make_json(NULL, NULL, NULL, NULL, NULL, NULL), "\"dropout\": null",
                                        "\"byte_fallback\": true, \"end_of_word_suffix\": \"</w>\""),
             "end_of_word_suffix");
  /* byte_fallback is read (test_tokenizer_gemma3), as a boolean */
  expect_bad(a, "byte_fallback", replace(make_json(NULL, NULL, NULL, NULL, NULL, NULL), "\"dropout\": null",
                                         "\"byte_fallback\": \"yes\""), "byte_fallback");
  expect_bad(a, "unk_missing", replace(make_json(NULL, NULL, NULL, NULL, NULL, NULL), "\"unk_token\": null",
                                       "\"unk_token\": \"<unk>\""), "unk_token");

  /* raw invalid UTF-8 inside a JSON string */
  char *j = make_json(NULL, ", \"bad\xff\": 300", NULL, NULL, NULL, NULL);
  expect_bad(a, "invalid_utf8", j, "invalid JSON");
  /* deep nesting */
  sbuf b = {0};
  sb_str(&b, "{\"model\": ");
  for (int i = 0; i < 100000; i++) sb_str(&b, "[");
  expect_bad(a, "deep", b.p, "invalid JSON");
  j = malloc(1);
  j[0] = 0;
  expect_bad(a, "empty_file", j, "invalid JSON");
  j = strdup("[1, 2]");
  expect_bad(a, "not_object", j, "top level");
  j = strdup("{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}");
  expect_bad(a, "empty_vocab", j, "empty");
  j = strdup("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"model\": 1}");
  expect_bad(a, "dup_key", j, "invalid JSON");
  /* missing file */
  t = (dit_tokenizer *)1;
  CHECK(dit_tok_load("/nonexistent/dir", &t, &e) == DIT_ERR_IO && t == NULL);
}

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static size_t put_cp(char *o, uint32_t cp) {
  if (cp < 0x80) return o[0] = (char)cp, 1;
  if (cp < 0x800) return o[0] = (char)(0xc0 | (cp >> 6)), o[1] = (char)(0x80 | (cp & 0x3f)), 2;
  if (cp < 0x10000) {
    o[0] = (char)(0xe0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  o[0] = (char)(0xf0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
  o[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

/* Random valid UTF-8 from a mix of scripts, spaces, marks, emoji and token fragments. */
static size_t random_text(uint64_t *r, char *o, size_t max) {
  static const uint32_t ranges[][2] = {{0x20, 0x7e}, {0x09, 0x0d}, {0xa0, 0x17f}, {0x300, 0x36f}, {0x391, 0x3c9},
                                       {0x400, 0x44f}, {0x5d0, 0x5ea}, {0x627, 0x64a}, {0x3040, 0x30ff},
                                       {0x4e00, 0x4fff}, {0xac00, 0xac40}, {0x1f300, 0x1f64f}, {0x2000, 0x206f},
                                       {0x180e, 0x180e}, {0x3000, 0x3000}, {0x0, 0x1f}, {0xfe00, 0xfe0f}};
  static const char *const frags[] = {"<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|endoftext|>", "'s",
                                      "'LL", " ", "\r\n", "1234", "e\xcc\x81"};
  size_t n = 0, len = rng_next(r) % (max / 8);
  while (n < len) {
    if (rng_next(r) % 10 == 0) {
      const char *f = frags[rng_next(r) % (sizeof frags / sizeof frags[0])];
      memcpy(o + n, f, strlen(f));
      n += strlen(f);
      continue;
    }
    const uint32_t *rg = ranges[rng_next(r) % (sizeof ranges / sizeof ranges[0])];
    n += put_cp(o + n, rg[0] + (uint32_t)(rng_next(r) % (rg[1] - rg[0] + 1)));
  }
  return n;
}

#ifndef ROUNDTRIP_ITERS /* build with -DROUNDTRIP_ITERS=20000 for a longer run */
#define ROUNDTRIP_ITERS 300
#endif

/* Random texts: decode(encode(x)) must give back NFC(x) byte for byte. */
static void test_round_trips(const dit_tokenizer *t) {
  uint64_t r = 0x1234567887654321ull;
  char text[4096];
  int bad = 0;
  for (int it = 0; it < ROUNDTRIP_ITERS; it++) {
    size_t n = random_text(&r, text, sizeof text);
    int32_t *ids = NULL;
    size_t m = 0;
    dit_error e = {0};
    if (dit_tok_encode(t, text, n, &ids, &m, &e) != DIT_OK) {
      bad++;
      continue;
    }
    /* expected: the special tokens kept, the text between them in NFC (a combining
     * mark after "<|im_end|>" must not compose with its ">") */
    utf8proc_uint8_t *nfc = malloc(4 * n + 16);
    utf8proc_ssize_t nn = 0;
    static const char *const specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "</think>", "<think>"};
    for (size_t i = 0, from = 0; i <= n; i++) {
      size_t sl = 0;
      for (int k = 0; k < 5 && i < n && !sl; k++)
        if (n - i >= strlen(specials[k]) && !memcmp(text + i, specials[k], strlen(specials[k]))) sl = strlen(specials[k]);
      if (!sl && i < n) continue;
      utf8proc_uint8_t *seg = NULL;
      utf8proc_ssize_t sn = utf8proc_map((const utf8proc_uint8_t *)text + from, (utf8proc_ssize_t)(i - from), &seg,
                                         UTF8PROC_STABLE | UTF8PROC_COMPOSE);
      if (sn > 0) memcpy(nfc + nn, seg, (size_t)sn), nn += sn;
      free(seg);
      memcpy(nfc + nn, text + i, sl);
      nn += (utf8proc_ssize_t)sl;
      i += sl ? sl - 1 : 0;
      from = i + 1;
    }
    size_t dn = 0;
    char *d = decode(t, ids, m, &dn);
    if (nn < 0 || dn != (size_t)nn || memcmp(d, nfc, dn)) {
      if (!bad) {
        fprintf(stderr, "  round trip %d differs (%zu vs %zd bytes)\n", it, dn, (ssize_t)nn);
        for (size_t i = 0; i < dn && i < (size_t)nn; i++)
          if (d[i] != (char)nfc[i]) {
            fprintf(stderr, "  first difference at byte %zu: %02x vs %02x\n", i, (uint8_t)d[i], nfc[i]);
            break;
          }
      }
      bad++;
    }
    free(nfc);
    free(d);
    free(ids);
  }
  CHECK_MSG(bad == 0, "%d of %d random texts do not round-trip", bad, ROUNDTRIP_ITERS);
}

/* The heap BPE against a naive one (rescan for the lowest-rank leftmost pair). */
static void test_bpe_vs_naive(const dit_tokenizer *t) {
  uint64_t r = 42;
  tok_bpe_work w = {0};
  int bad = 0;
  for (int it = 0; it < 2000; it++) {
    char word[64];
    size_t n = 1 + rng_next(&r) % 40;
    static const char alpha[] = "aeiourstlnmkhpbdgc ";
    for (size_t i = 0; i < n; i++) word[i] = alpha[rng_next(&r) % (sizeof alpha - 1)];
    tok_ids out = {0};
    dit_error e = {0};
    CHECK(tok_bpe_word(t, word, n, &w, &out, &e) == DIT_OK);
    int32_t sym[64];
    size_t k = n;
    for (size_t i = 0; i < n; i++) sym[i] = t->byte_id[(uint8_t)word[i]];
    for (;;) {
      uint32_t best = UINT32_MAX, rank;
      size_t at = 0;
      int32_t id, best_id = -1;
      for (size_t i = 0; i + 1 < k; i++)
        if (tok_merge_find(t, sym[i], sym[i + 1], &rank, &id) && rank < best) best = rank, at = i, best_id = id;
      if (best_id < 0) break;
      sym[at] = best_id;
      memmove(sym + at + 1, sym + at + 2, (k - at - 2) * sizeof *sym);
      k--;
    }
    if (out.n != k || memcmp(out.v, sym, k * sizeof *sym)) bad++;
    free(out.v);
  }
  tok_bpe_work_free(&w);
  CHECK_MSG(bad == 0, "%d of 2000 words differ from the naive BPE", bad);
}

#ifndef MUTATION_ITERS /* build with -DMUTATION_ITERS=100000 for a longer run */
#define MUTATION_ITERS 600
#endif

/* Mutated small tokenizer.json files: each loads or fails with a message, and what
 * loads encodes random text without crashing (run under ASan+UBSan in CI). */
static void test_mutations(void) {
  char *base = make_json(NULL, NULL, NULL,
                         "[{\"id\": 260, \"content\": \"<m>\", \"lstrip\": true, \"rstrip\": true, \"normalized\": "
                         "false}, {\"id\": 261, \"content\": \"ab\", \"single_word\": true}]",
                         NULL, NULL);
  size_t n = strlen(base);
  char *buf = malloc(n + 64), text[1024];
  uint64_t r = 7;
  int loaded = 0, rejected = 0, silent = 0;
  static const char tokens[][8] = {"\"", "{", "}", "[", "]", ",", ":", "-1", "1e9", "null", "\\u0000", "\\", "99"};
  for (int it = 0; it < MUTATION_ITERS; it++) {
    memcpy(buf, base, n + 1);
    size_t m = n;
    for (int k = 0; k < 1 + (int)(rng_next(&r) % 3); k++) {
      size_t at = rng_next(&r) % m;
      if (rng_next(&r) % 3 == 0) { /* a digit changed: ids and flags move, JSON stays valid */
        while (at < m && (buf[at] < '0' || buf[at] > '9')) at++;
        if (at < m) buf[at] = (char)('0' + rng_next(&r) % 10);
        continue;
      }
      if (rng_next(&r) % 4 == 0) { /* two bytes swapped: strings change */
        size_t b2 = rng_next(&r) % m;
        char c = buf[at];
        buf[at] = buf[b2];
        buf[b2] = c;
        continue;
      }
      const char *tk = tokens[rng_next(&r) % (sizeof tokens / sizeof tokens[0])];
      size_t tl = strlen(tk);
      if (rng_next(&r) % 2) { /* overwrite */
        if (at + tl > m) continue;
        memcpy(buf + at, tk, tl);
      } else { /* insert */
        memmove(buf + at + tl, buf + at, m - at + 1);
        memcpy(buf + at, tk, tl);
        m += tl;
      }
    }
    dit_tokenizer *t = NULL;
    dit_error e = {0};
    if (dit_tok_load_buffer(buf, m, "mutant", &t, &e) == DIT_OK) {
      loaded++;
      size_t tn = random_text(&r, text, sizeof text);
      int32_t *ids = NULL;
      size_t k = 0;
      dit_tok_encode(t, text, tn, &ids, &k, &e);
      for (size_t i = 0; i < k; i++) CHECK(ids[i] >= 0 && (size_t)ids[i] < dit_tok_vocab_size(t));
      free(ids);
      dit_tok_free(t);
    } else {
      rejected++;
      if (!e.msg[0]) silent++;
    }
  }
  printf("mutated tokenizer.json: %d loaded, %d rejected\n", loaded, rejected);
  CHECK_MSG(silent == 0, "%d rejections without a message", silent);
  free(buf);
  free(base);
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  char path[1024];
  dt_path(path, sizeof path, a.data, "refs/tokenizer_cases.json");
  json_t *cases = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_json_load_file(path, 16 << 20, &cases, &e) == DIT_OK, "%s", e.msg);
  dt_path(path, sizeof path, a.data, "models/zimage-tiny/tokenizer");
  dit_tokenizer *t = NULL;
  double t0 = now_s();
  CHECK_MSG(dit_tok_load(path, &t, &e) == DIT_OK, "%s", e.msg);
  printf("loading the Qwen3 tokenizer.json (5.4 MB): %.3f s\n", now_s() - t0);
  if (t && cases) {
    test_reference_cases(t, cases);
    test_chat_cases(t, cases);
    test_lookup(t);
    test_long_prompts(t, cases);
    test_odd_inputs(t);
    test_round_trips(t);
    test_bpe_vs_naive(t);
    test_public_api(&a, cases);
  }
  test_small_files(&a);
  test_small_bad_files(&a);
  test_mutations();
  dit_tok_free(t);
  json_decref(cases);
  return dt_finish();
}

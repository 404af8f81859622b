/* The vocab.json + merges.txt layout (no tokenizer.json), as CLIP publishes it. Like
 * transformers' CLIPTokenizer, the folder is turned into the pipeline the `tokenizers`
 * library builds for it, expressed as tokenizer.json content and loaded by the one
 * tokenizer.json loader: normalizer NFC, whitespace runs -> one space, Lowercase;
 * pre-tokenizer the CLIP split regex (matches kept, the rest removed) then ByteLevel
 * without a prefix space; BPE with end_of_word_suffix "</w>"; added tokens from
 * tokenizer_config.json's added_tokens_decoder; post-processor <|startoftext|> A
 * <|endoftext|> (bos_token / eos_token of the config). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"

static const char clip_pipeline[] =
    "{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"},"
    " {\"type\": \"Replace\", \"pattern\": {\"Regex\": \"\\\\s+\"}, \"content\": \" \"}, {\"type\": \"Lowercase\"}]},"
    " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\":"
    " \"'s|'t|'re|'ve|'m|'ll|'d|[\\\\p{L}]+|[\\\\p{N}]|[^\\\\s\\\\p{L}\\\\p{N}]+\"}, \"behavior\": \"Removed\","
    " \"invert\": true}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}]}}";

/* Reads a whole file of at most DIT_TOK_MAX_FILE_BYTES; *out is malloc'd, NUL-terminated. */
static dit_status read_file(const char *path, char **out, size_t *out_n, dit_error *err) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return dit_errorf(err, DIT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  char *b = malloc(DIT_TOK_MAX_FILE_BYTES + 1);
  size_t n = b ? fread(b, 1, DIT_TOK_MAX_FILE_BYTES + 1, f) : 0;
  bool bad = ferror(f);
  fclose(f);
  if (!b) return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", path);
  if (bad || n > DIT_TOK_MAX_FILE_BYTES) {
    free(b);
    return dit_errorf(err, bad ? DIT_ERR_IO : DIT_ERR_FORMAT, "%s: %s", path,
                      bad ? "read error" : "larger than the tokenizer file limit");
  }
  b[n] = 0;
  *out = b;
  *out_n = n;
  return DIT_OK;
}

/* merges.txt: an optional "#version" first line, then one "left right" pair a line. */
static dit_status load_merges_txt(const char *path, json_t *merges, dit_error *err) {
  char *b = NULL;
  size_t n = 0;
  DIT_TRY(read_file(path, &b, &n, err));
  dit_status st = DIT_OK;
  size_t line = 0;
  for (size_t i = 0; i < n && st == DIT_OK; line++) {
    char *nl = memchr(b + i, '\n', n - i);
    size_t e = nl ? (size_t)(nl - b) : n, l = e - i;
    if (l && b[e - 1] == '\r') l--;
    const char *s = b + i;
    i = e + 1;
    if ((line == 0 && l >= 8 && !memcmp(s, "#version", 8)) || l == 0) continue;
    const char *sp = memchr(s, ' ', l);
    if (!sp || sp == s || sp == s + l - 1 || memchr(sp + 1, ' ', (size_t)(s + l - sp - 1)))
      st = dit_errorf(err, DIT_ERR_FORMAT, "%s line %zu: \"%.*s\" is not \"left right\"", path, line + 1,
                      (int)(l > 64 ? 64 : l), s);
    else {
      json_t *m = json_stringn(s, l);
      if (!m) st = dit_errorf(err, DIT_ERR_FORMAT, "%s line %zu: not UTF-8 (or out of memory)", path, line + 1);
      else if (json_array_append_new(merges, m)) st = dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", path);
    }
  }
  free(b);
  return st;
}

/* added_tokens_decoder {"id": {content, ...}} -> the added_tokens array of tokenizer.json. */
static dit_status added_from_config(const json_t *cfg, json_t *added, const char *what, dit_error *err) {
  const json_t *dec = json_object_get(cfg, "added_tokens_decoder");
  if (!dec || json_is_null(dec)) return DIT_OK;
  if (!json_is_object(dec)) return dit_errorf(err, DIT_ERR_FORMAT, "%s: added_tokens_decoder must be an object", what);
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)dec, key, v) {
    char *end;
    errno = 0;
    long long id = strtoll(key, &end, 10);
    if (!json_is_object(v) || !*key || *end || errno || id < 0 || id > INT32_MAX || key[0] == '+' || key[0] == '-')
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: added_tokens_decoder[\"%.32s\"]: needs a decimal id and an object",
                        what, key);
    json_t *e = json_deep_copy(v);
    if (!e || json_object_set_new(e, "id", json_integer(id)) || json_array_append_new(added, e))
      return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", what);
  }
  return DIT_OK;
}

/* post_processor: bos A eos, with their ids from the vocabulary. */
static dit_status clip_post(const json_t *cfg, const json_t *vocab, json_t *root, const char *what, dit_error *err) {
  static const char *const keys[] = {"bos_token", "eos_token"};
  static const char *const dflt[] = {"<|startoftext|>", "<|endoftext|>"};
  json_t *single = json_array(), *specials = json_object(), *post = json_object();
  json_object_set_new(root, "post_processor", post); /* root owns them from here, even on failure */
  json_object_set_new(post, "type", json_string("TemplateProcessing"));
  json_object_set_new(post, "single", single);
  json_object_set_new(post, "special_tokens", specials);
  if (!single || !specials || !post) return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", what);
  for (int k = 0; k < 2; k++) {
    const json_t *v = json_object_get(cfg, keys[k]);
    const char *tok = json_is_string(v) ? json_string_value(v) : json_string_value(json_object_get(v, "content"));
    if (!tok) tok = dflt[k];
    const json_t *id = json_object_get(vocab, tok);
    if (!json_is_integer(id))
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s \"%.64s\" is not in vocab.json", what, keys[k], tok);
    if (k == 1) json_array_append_new(single, json_pack("{s{ss}}", "Sequence", "id", "A"));
    json_array_append_new(single, json_pack("{s{ss}}", "SpecialToken", "id", tok));
    json_object_set_new(specials, tok, json_pack("{ss s[I]}", "id", tok, "ids", json_integer_value(id)));
  }
  return DIT_OK;
}

/* Builds the tokenizer.json content of a CLIP folder (root is the parsed clip_pipeline). */
static dit_status clip_root(const char *dir, const json_t *cfg, json_t *root, dit_error *err) {
  char path[4096];
  json_t *vocab = NULL, *model = json_object(), *merges = json_array(), *added = json_array();
  json_object_set_new(root, "model", model);
  json_object_set_new(root, "added_tokens", added);
  if (!model || !merges || !added) {
    json_decref(merges);
    return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", dir);
  }
  json_object_set_new(model, "merges", merges);
  if (snprintf(path, sizeof path, "%s/vocab.json", dir) >= (int)sizeof path)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "tokenizer folder path is too long");
  DIT_TRY(dit_json_load_file(path, DIT_TOK_MAX_FILE_BYTES, &vocab, err));
  json_object_set_new(model, "vocab", vocab);
  if (!json_is_object(vocab)) return dit_errorf(err, DIT_ERR_FORMAT, "%s: must be an object of token -> id", path);
  snprintf(path, sizeof path, "%s/merges.txt", dir);
  DIT_TRY(load_merges_txt(path, merges, err));
  const json_t *unk = json_object_get(cfg, "unk_token");
  const char *u = json_is_string(unk) ? json_string_value(unk) : json_string_value(json_object_get(unk, "content"));
  json_object_set_new(model, "type", json_string("BPE"));
  json_object_set_new(model, "end_of_word_suffix", json_string("</w>"));
  json_object_set_new(model, "unk_token", json_string(u ? u : "<|endoftext|>"));
  DIT_TRY(added_from_config(cfg, added, dir, err));
  return clip_post(cfg, vocab, root, dir, err);
}

dit_status tok_load_vocab_files(const char *dir, dit_tokenizer **out, dit_error *err) {
  *out = NULL;
  char path[4096];
  if (snprintf(path, sizeof path, "%s/tokenizer_config.json", dir) >= (int)sizeof path)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "tokenizer folder path is too long");
  json_t *cfg, *root = NULL;
  DIT_TRY(dit_json_load_file(path, DIT_TOK_MAX_FILE_BYTES, &cfg, err));
  const char *cls = json_string_value(json_object_get(cfg, "tokenizer_class"));
  dit_status st = DIT_OK;
  if (!cls || (strcmp(cls, "CLIPTokenizer") && strcmp(cls, "CLIPTokenizerFast")))
    st = dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: without tokenizer.json only tokenizer_class CLIPTokenizer is "
                    "supported (found \"%.64s\")", path, cls ? cls : "none");
  if (st == DIT_OK) st = dit_json_parse(clip_pipeline, sizeof clip_pipeline - 1, "CLIP pipeline", &root, err);
  if (st == DIT_OK) st = clip_root(dir, cfg, root, err);
  if (st == DIT_OK) st = tok_load_json(root, dir, out, err);
  if (st == DIT_OK) st = tok_load_pad(*out, dir, err);
  if (st != DIT_OK) {
    dit_tok_free(*out);
    *out = NULL;
  }
  json_decref(root);
  json_decref(cfg);
  return st;
}

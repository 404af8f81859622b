/* Loading and validating tokenizer.json (see tokenizer.h for what is supported). The
 * file is untrusted: every id, merge and option is checked before it is used, and the
 * id table is never larger than the number of entries the file actually holds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/json.h"
#include "core/timer.h"
#include "text/tok_internal.h"


/* The byte-level pre-tokenizer's own regex (GPT-2), used when use_regex is true. */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static size_t pow2_at_least(size_t n) {
  size_t c = 16;
  while (c < n) c *= 2;
  return c;
}

int32_t tok_vocab_find(const dit_tokenizer *t, const char *s, size_t n) {
  size_t mask = t->vocab_cap - 1;
  for (size_t i = tok_hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
    uint32_t v = t->vocab_slots[i];
    if (!v) return -1;
    uint32_t id = v - 1;
    if (t->len[id] == n && memcmp(t->pool + t->off[id], s, n) == 0) return (int32_t)id;
  }
}

void tok_vocab_insert(dit_tokenizer *t, uint32_t id) {
  size_t mask = t->vocab_cap - 1;
  size_t i = tok_hash_bytes(t->pool + t->off[id], t->len[id]) & mask;
  while (t->vocab_slots[i]) i = (i + 1) & mask;
  t->vocab_slots[i] = id + 1;
}

/* Inserts a merge; a pair listed twice keeps the later rank, as tokenizers does. */
static void merge_insert(dit_tokenizer *t, int32_t a, int32_t b, uint32_t rank, int32_t id) {
  uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
  size_t mask = t->merge_cap - 1;
  size_t i = tok_hash_u64(key) & mask;
  while (t->merge_slots[i].key != UINT64_MAX && t->merge_slots[i].key != key) i = (i + 1) & mask;
  t->merge_slots[i] = (tok_merge_slot){key, rank, id};
}

static dit_status get_bool(const json_t *o, const char *key, bool dflt, bool *out, const char *where,
                           dit_error *err) {
  const json_t *v = json_object_get(o, key);
  *out = dflt;
  if (!v || json_is_null(v)) return DIT_OK;
  if (!json_is_boolean(v))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: \"%s\" must be true or false", where, key);
  *out = json_is_true(v);
  return DIT_OK;
}

/* ---- model.vocab and added_tokens ---------------------------------------------- */

/* Checks the added_tokens entries (integer id in [0, limit), string content) and adds
 * their ids and lengths to *max_id and *pool. */
dit_status tok_size_added(const json_t *added, size_t limit, size_t *max_id, size_t *pool, dit_error *err) {
  for (size_t i = 0; i < json_array_size(added); i++) {
    const json_t *a = json_array_get(added, i), *id = json_object_get(a, "id"), *c = json_object_get(a, "content");
    if (!json_is_object(a) || !json_is_integer(id) || !json_is_string(c))
      return dit_errorf(err, DIT_ERR_FORMAT, "added_tokens[%zu]: needs an integer \"id\" and a string "
                        "\"content\"", i);
    if (json_integer_value(id) < 0 || (size_t)json_integer_value(id) >= limit)
      return dit_errorf(err, DIT_ERR_FORMAT, "added_tokens[%zu]: id %lld is outside [0, %zu)", i,
                        (long long)json_integer_value(id), limit);
    if ((size_t)json_integer_value(id) > *max_id) *max_id = (size_t)json_integer_value(id);
    *pool += json_string_length(c);
  }
  return DIT_OK;
}

/* Allocates the id table (max_id + 1 ids, all unused), the string pool, the vocabulary
 * hash and the added-token arrays. */
dit_status tok_alloc_tables(dit_tokenizer *t, size_t n_vocab, size_t n_added, size_t pool, size_t max_id,
                            dit_error *err) {
  if (pool > UINT32_MAX - 1) return dit_errorf(err, DIT_ERR_FORMAT, "token strings are too long in total");
  t->n_ids = max_id + 1;
  t->n_vocab = n_vocab;
  t->vocab_cap = pow2_at_least(2 * n_vocab);
  t->off = malloc(t->n_ids * sizeof *t->off);
  t->len = calloc(t->n_ids, sizeof *t->len);
  t->pool = malloc(pool ? pool : 1);
  t->vocab_slots = calloc(t->vocab_cap, sizeof *t->vocab_slots);
  t->added = calloc(n_added ? n_added : 1, sizeof *t->added);
  t->first_idx = calloc(n_added ? n_added : 1, sizeof *t->first_idx);
  if (!t->off || !t->len || !t->pool || !t->vocab_slots || !t->added || !t->first_idx)
    return dit_errorf(err, DIT_ERR_NOMEM, "cannot allocate the vocabulary tables (%zu ids)", t->n_ids);
  memset(t->off, 0xff, t->n_ids * sizeof *t->off);
  return DIT_OK;
}

/* Sizes the id table and the string pool from the entries the file holds. */
static dit_status alloc_tables(dit_tokenizer *t, const json_t *vocab, const json_t *added, dit_error *err) {
  size_t n_vocab = json_object_size(vocab), n_added = json_array_size(added);
  if (n_added > TOK_MAX_ADDED)
    return dit_errorf(err, DIT_ERR_FORMAT, "%zu added_tokens is more than the %d supported", n_added,
                      TOK_MAX_ADDED);
  if (n_vocab == 0) return dit_errorf(err, DIT_ERR_FORMAT, "model.vocab is empty");
  if (n_vocab > (size_t)INT32_MAX / 4)
    return dit_errorf(err, DIT_ERR_FORMAT, "model.vocab has too many entries (%zu)", n_vocab);
  size_t limit = n_vocab + n_added, pool = 0, max_id = 0;
  const char *key;
  const json_t *v;
  json_object_foreach((json_t *)vocab, key, v) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (size_t)json_integer_value(v) >= limit)
      return dit_errorf(err, DIT_ERR_FORMAT,
                        "model.vocab[\"%.64s\"]: id must be an integer in [0, %zu) (the file has %zu "
                        "vocabulary entries and %zu added tokens)", key, limit, n_vocab, n_added);
    if ((size_t)json_integer_value(v) > max_id) max_id = (size_t)json_integer_value(v);
    pool += strlen(key);
  }
  DIT_TRY(tok_size_added(added, limit, &max_id, &pool, err));
  return tok_alloc_tables(t, n_vocab, n_added, pool, max_id, err);
}

static dit_status load_vocab(dit_tokenizer *t, const json_t *vocab, dit_error *err) {
  const char *key;
  const json_t *v;
  json_object_foreach((json_t *)vocab, key, v) {
    size_t id = (size_t)json_integer_value(v), n = strlen(key);
    if (t->off[id] != UINT32_MAX)
      return dit_errorf(err, DIT_ERR_FORMAT, "model.vocab: id %zu is used by both \"%.*s\" and \"%.64s\"",
                        id, (int)(t->len[id] > 64 ? 64 : t->len[id]), t->pool + t->off[id], key);
    t->off[id] = (uint32_t)t->pool_len;
    t->len[id] = (uint32_t)n;
    memcpy(t->pool + t->pool_len, key, n);
    t->pool_len += n;
    tok_vocab_insert(t, (uint32_t)id);
  }
  return DIT_OK;
}

typedef struct added_key {
  uint8_t first;
  size_t len;
  uint32_t idx;
  const char *s;
} added_key;

static int cmp_added_key(const void *pa, const void *pb) {
  const added_key *a = pa, *b = pb;
  if (a->first != b->first) return a->first < b->first ? -1 : 1;
  if (a->len != b->len) return a->len > b->len ? -1 : 1; /* longer first */
  int c = memcmp(a->s, b->s, a->len);
  if (c) return c;
  return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Groups added tokens by first byte, longest first, for leftmost-longest matching. */
static dit_status index_added(dit_tokenizer *t, dit_error *err) {
  added_key *k = malloc((t->n_added ? t->n_added : 1) * sizeof *k);
  if (!k) return dit_errorf(err, DIT_ERR_NOMEM, "cannot index the added tokens");
  uint32_t count[256] = {0};
  for (size_t i = 0; i < t->n_added; i++) {
    const tok_added *ad = &t->added[i];
    k[i] = (added_key){(uint8_t)ad->match[0], ad->match_len, (uint32_t)i, ad->match};
    count[k[i].first]++;
  }
  qsort(k, t->n_added, sizeof *k, cmp_added_key);
  for (size_t i = 1; i < t->n_added; i++)
    if (k[i].len == k[i - 1].len && !memcmp(k[i].s, k[i - 1].s, k[i].len)) {
      dit_errorf(err, DIT_ERR_FORMAT, "added_tokens: \"%.*s\" is listed twice (after normalization)", (int)(k[i].len > 64 ? 64 : k[i].len),
                 k[i].s);
      free(k);
      return DIT_ERR_FORMAT;
    }
  for (size_t i = 0; i < t->n_added; i++) t->first_idx[i] = k[i].idx;
  free(k);
  t->first_start[0] = 0;
  for (int b = 0; b < 256; b++) t->first_start[b + 1] = t->first_start[b] + count[b];
  return DIT_OK;
}

static dit_status load_added_entries(dit_tokenizer *t, const json_t *added, uint8_t *is_added, dit_error *err) {
  for (size_t i = 0; i < json_array_size(added); i++) {
    const json_t *a = json_array_get(added, i);
    const json_t *c = json_object_get(a, "content");
    size_t id = (size_t)json_integer_value(json_object_get(a, "id")), n = json_string_length(c);
    const char *s = json_string_value(c);
    char where[64];
    snprintf(where, sizeof where, "added_tokens[%zu]", i);
    if (n == 0) return dit_errorf(err, DIT_ERR_FORMAT, "%s: empty content", where);
    tok_added *ad = &t->added[t->n_added];
    DIT_TRY(get_bool(a, "special", false, &ad->special, where, err));
    DIT_TRY(get_bool(a, "lstrip", false, &ad->lstrip, where, err));
    DIT_TRY(get_bool(a, "rstrip", false, &ad->rstrip, where, err));
    DIT_TRY(get_bool(a, "single_word", false, &ad->single_word, where, err));
    DIT_TRY(get_bool(a, "normalized", !ad->special, &ad->normalized, where, err));
    if (is_added[id])
      return dit_errorf(err, DIT_ERR_FORMAT, "%s: id %zu is used by two added tokens", where, id);
    is_added[id] = 1;
    if (t->off[id] != UINT32_MAX) {
      /* an added token may repeat a vocabulary entry, but only with the same content */
      if (t->len[id] != n || memcmp(t->pool + t->off[id], s, n))
        return dit_errorf(err, DIT_ERR_FORMAT, "%s: id %zu of \"%.64s\" is already the vocabulary's "
                          "\"%.*s\"", where, id, s, (int)(t->len[id] > 64 ? 64 : t->len[id]),
                          t->pool + t->off[id]); /* pool entries are not NUL-terminated */
      ad->content = t->pool + t->off[id];
    } else {
      t->off[id] = (uint32_t)t->pool_len;
      t->len[id] = (uint32_t)n;
      memcpy(t->pool + t->pool_len, s, n);
      ad->content = t->pool + t->pool_len;
      t->pool_len += n;
    }
    ad->len = n;
    ad->id = (int32_t)id;
    ad->match = ad->content;
    ad->match_len = n;
    if (ad->normalized && t->n_norm) { /* matched in normalized text: normalize it too */
      const char *m;
      DIT_TRY(tok_normalize(t, ad->content, n, &m, &ad->match_len, &ad->match_owned, err));
      ad->match = (char *)m;
    }
    if (ad->normalized) t->any_added_normalized = true;
    else t->any_added_raw = true;
    t->n_added++;
  }
  return DIT_OK;
}

dit_status tok_load_added(dit_tokenizer *t, const json_t *added, dit_error *err) {
  uint8_t *is_added = calloc(t->n_ids, 1);
  if (!is_added) return dit_errorf(err, DIT_ERR_NOMEM, "cannot allocate %zu bytes", t->n_ids);
  dit_status st = load_added_entries(t, added, is_added, err);
  free(is_added);
  return st != DIT_OK ? st : index_added(t, err);
}

/* ---- model.merges --------------------------------------------------------------- */

static dit_status merge_parts(const json_t *m, size_t i, const char **a, size_t *na, const char **b, size_t *nb,
                              dit_error *err) {
  if (json_is_string(m)) {
    const char *s = json_string_value(m), *sp = memchr(s, ' ', json_string_length(m));
    if (!sp) return dit_errorf(err, DIT_ERR_FORMAT, "model.merges[%zu]: \"%.64s\" is not \"a b\"", i, s);
    *a = s;
    *na = (size_t)(sp - s);
    *b = sp + 1;
    *nb = json_string_length(m) - *na - 1;
    return DIT_OK;
  }
  if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
      json_is_string(json_array_get(m, 1))) {
    *a = json_string_value(json_array_get(m, 0));
    *na = json_string_length(json_array_get(m, 0));
    *b = json_string_value(json_array_get(m, 1));
    *nb = json_string_length(json_array_get(m, 1));
    return DIT_OK;
  }
  return dit_errorf(err, DIT_ERR_FORMAT, "model.merges[%zu]: must be \"a b\" or [\"a\", \"b\"]", i);
}

static dit_status load_merges(dit_tokenizer *t, const json_t *merges, dit_error *err) {
  size_t n = json_array_size(merges);
  if (n > UINT32_MAX / 4) return dit_errorf(err, DIT_ERR_FORMAT, "model.merges has too many entries");
  t->merge_cap = pow2_at_least(2 * n);
  t->merge_slots = malloc(t->merge_cap * sizeof *t->merge_slots);
  char *cat = malloc(1024);
  if (!t->merge_slots || !cat) {
    free(cat);
    return dit_errorf(err, DIT_ERR_NOMEM, "cannot allocate the merge table (%zu merges)", n);
  }
  memset(t->merge_slots, 0xff, t->merge_cap * sizeof *t->merge_slots);
  dit_status st = DIT_OK;
  for (size_t i = 0; i < n && st == DIT_OK; i++) {
    const char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    st = merge_parts(json_array_get(merges, i), i, &a, &na, &b, &nb, err);
    if (st != DIT_OK) break;
    int32_t ia = tok_vocab_find(t, a, na), ib = tok_vocab_find(t, b, nb), ic = -1;
    if (na + nb <= 1024) {
      memcpy(cat, a, na);
      memcpy(cat + na, b, nb);
      ic = tok_vocab_find(t, cat, na + nb);
    }
    if (ia < 0 || ib < 0 || ic < 0)
      st = dit_errorf(err, DIT_ERR_FORMAT, "model.merges[%zu]: \"%.*s\" + \"%.*s\": %s is not in the "
                      "vocabulary", i, (int)(na > 64 ? 64 : na), a, (int)(nb > 64 ? 64 : nb), b,
                      ia < 0 ? "the left token" : ib < 0 ? "the right token" : "the merged token");
    else
      merge_insert(t, ia, ib, (uint32_t)i, ic);
  }
  t->n_merges = n;
  free(cat);
  return st;
}

static dit_status load_model(dit_tokenizer *t, const json_t *model, const json_t *added, dit_error *err) {
  if (!json_is_object(model)) return dit_errorf(err, DIT_ERR_FORMAT, "\"model\" must be an object");
  const json_t *type = json_object_get(model, "type");
  if (json_is_string(type) && !strcmp(json_string_value(type), "Unigram")) return tok_load_unigram(t, model, added, err);
  if (type && !json_is_null(type) && !(json_is_string(type) && !strcmp(json_string_value(type), "BPE")))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "model.type \"%s\" is not supported (BPE or Unigram)",
                      json_is_string(type) ? json_string_value(type) : "?");
  const json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
  if (!json_is_object(vocab)) return dit_errorf(err, DIT_ERR_FORMAT, "model.vocab must be an object");
  if (!json_is_array(merges)) return dit_errorf(err, DIT_ERR_FORMAT, "model.merges must be an array");
  if (added && !json_is_null(added) && !json_is_array(added))
    return dit_errorf(err, DIT_ERR_FORMAT, "added_tokens must be an array");
  const json_t *dropout = json_object_get(model, "dropout");
  if (dropout && !json_is_null(dropout) && !(json_is_number(dropout) && json_number_value(dropout) == 0))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "model.dropout must be null (BPE dropout is random)");
  const json_t *eow = json_object_get(model, "end_of_word_suffix");
  if (json_is_string(eow) && json_string_length(eow) > 0 && !(t->eow = strdup(json_string_value(eow))))
    return dit_errorf(err, DIT_ERR_NOMEM, "cannot copy model.end_of_word_suffix");
  t->eow_len = t->eow ? strlen(t->eow) : 0;
  static const char *const empty_keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (int k = 0; k < 1 + !t->eow; k++) {
    const json_t *v = json_object_get(model, empty_keys[k]);
    if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
      return dit_errorf(err, DIT_ERR_UNSUPPORTED, "model.%s must be empty or null", empty_keys[k]);
  }
  DIT_TRY(get_bool(model, "byte_fallback", false, &t->byte_fallback, "model", err));
  if (t->byte_fallback && t->eow) /* tokenizers would fall back on the suffix's bytes too */
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "model.byte_fallback with an end_of_word_suffix is not supported");
  DIT_TRY(get_bool(model, "ignore_merges", false, &t->ignore_merges, "model", err));
  if (t->ignore_merges && t->eow)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "model.ignore_merges with an end_of_word_suffix is not supported");
  DIT_TRY(alloc_tables(t, vocab, added, err));
  DIT_TRY(load_vocab(t, vocab, err));
  t->unk_id = -1;
  const json_t *unk = json_object_get(model, "unk_token");
  if (unk && !json_is_null(unk)) {
    if (!json_is_string(unk)) return dit_errorf(err, DIT_ERR_FORMAT, "model.unk_token must be a string");
    t->unk_id = tok_vocab_find(t, json_string_value(unk), json_string_length(unk));
    if (t->unk_id < 0)
      return dit_errorf(err, DIT_ERR_FORMAT, "model.unk_token \"%.64s\" is not in the vocabulary",
                        json_string_value(unk));
    DIT_TRY(get_bool(model, "fuse_unk", false, &t->fuse_unk, "model", err));
  }
  for (int b = 0; b < 256; b++) { /* "<0x0A>": tokenizers' format!("<{:#04X}>", b) */
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    t->fallback_id[b] = t->byte_fallback ? tok_vocab_find(t, name, 6) : -1;
  }
  DIT_TRY(load_merges(t, merges, err));
  if (added && json_is_array(added)) DIT_TRY(tok_load_added(t, added, err));
  return DIT_OK;
}

/* ---- normalizer and pre_tokenizer ------------------------------------------------ */

typedef dit_status (*step_loader)(dit_tokenizer *t, const json_t *j, int depth, dit_error *err);

/* The start of loading a normalizer or pre_tokenizer j (`what` in messages): none (absent
 * or null) and a "Sequence", whose steps (the array `list`) go through load one by one,
 * leave *type NULL; any other step gives its "type". */
static dit_status step_type(dit_tokenizer *t, const json_t *j, int depth, const char *what, const char *list,
                            step_loader load, const char **type, dit_error *err) {
  *type = NULL;
  if (!j || json_is_null(j)) return DIT_OK;
  const char *ty = json_string_value(json_object_get(j, "type"));
  if (!ty) return dit_errorf(err, DIT_ERR_FORMAT, "%s needs a string \"type\"", what);
  if (strcmp(ty, "Sequence")) {
    *type = ty;
    return DIT_OK;
  }
  const json_t *steps = json_object_get(j, list);
  if (!json_is_array(steps) || depth > 4)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s Sequence needs a \"%s\" array", what, list);
  for (size_t i = 0; i < json_array_size(steps); i++) DIT_TRY(load(t, json_array_get(steps, i), depth + 1, err));
  return DIT_OK;
}

static dit_status load_normalizer(dit_tokenizer *t, const json_t *n, int depth, dit_error *err) {
  const char *type;
  DIT_TRY(step_type(t, n, depth, "normalizer", "normalizers", load_normalizer, &type, err));
  if (!type) return DIT_OK;
  bool handled;
  DIT_TRY(tok_load_norm_step(t, n, type, &handled, err));
  if (handled) return DIT_OK;
  static const char *const names[] = {"NFC", "NFD", "NFKC", "NFKD"};
  for (int k = 0; k < 4; k++) {
    if (strcmp(type, names[k])) continue;
    if (t->n_norm == TOK_MAX_STEPS) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "too many normalizers");
    t->norm[t->n_norm++] = (tok_norm_kind)k;
    return DIT_OK;
  }
  return dit_errorf(err, DIT_ERR_UNSUPPORTED, "normalizer \"%.64s\" is not supported (NFC, NFD, NFKC, NFKD, "
                    "Lowercase, Replace, Strip, Precompiled or a Sequence of them)", type);
}

/* Unicode White_Space, which is what \s means in Oniguruma (the regex engine of the
 * tokenizers library). PCRE2's \s with UCP also matches U+180E, so patterns are
 * rewritten to use this class instead. */
static const char ws_class[] =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

/* Rewrites \s (anywhere) and \S (outside a class) into explicit White_Space classes.
 * Returns a malloc'd NUL-terminated pattern or NULL when out of memory. */
static char *rewrite_spaces(const char *pat, size_t len, size_t *out_len) {
  size_t nws = sizeof ws_class - 1, cap = len + 1, n = 0;
  for (size_t i = 0; i + 1 < len; i++)
    if (pat[i] == '\\') cap += nws + 3, i++;
  char *o = malloc(cap);
  if (!o) return NULL;
  bool in_class = false;
  for (size_t i = 0; i < len; i++) {
    char c = pat[i];
    if (c == '\\' && i + 1 < len) {
      char e = pat[++i];
      if (e == 's' || (e == 'S' && !in_class)) {
        if (!in_class) o[n++] = '[';
        if (e == 'S') o[n++] = '^';
        memcpy(o + n, ws_class, nws);
        n += nws;
        if (!in_class) o[n++] = ']';
      } else {
        o[n++] = c;
        o[n++] = e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      o[n++] = c;
      /* a ']' right after '[' or '[^' is a literal */
      if (i + 1 < len && pat[i + 1] == '^') o[n++] = pat[++i];
      if (i + 1 < len && pat[i + 1] == ']') o[n++] = pat[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < len && pat[i + 1] == ':') { /* [:alpha:] */
      const char *end = strstr(pat + i, ":]");
      if (end && (size_t)(end - pat) < len) {
        size_t k = (size_t)(end - pat) + 2 - i;
        memcpy(o + n, pat + i, k);
        n += k;
        i += k - 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    o[n++] = c;
  }
  o[n] = 0;
  *out_len = n;
  return o;
}

static dit_status compile_regex(const char *pat, size_t len, bool literal, pcre2_code **out, dit_error *err) {
  int code;
  PCRE2_SIZE off;
  size_t rlen = len;
  char *rewritten = literal ? NULL : rewrite_spaces(pat, len, &rlen);
  if (!literal && !rewritten) return dit_errorf(err, DIT_ERR_NOMEM, "cannot allocate a regex");
  uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  *out = pcre2_compile((PCRE2_SPTR)(literal ? pat : rewritten), rlen, opts, &code, &off, NULL);
  free(rewritten);
  if (!*out) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(code, msg, sizeof msg);
    return dit_errorf(err, DIT_ERR_FORMAT, "pre_tokenizer regex \"%.80s\": %s", pat, (const char *)msg);
  }
  (void)pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE); /* without JIT the interpreter is used */
  return DIT_OK;
}

static dit_status load_split(tok_pre_step *s, const json_t *p, dit_error *err) {
  const json_t *pat = json_object_get(p, "pattern");
  const json_t *re = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
  if (!json_is_string(re) && !json_is_string(str))
    return dit_errorf(err, DIT_ERR_FORMAT, "Split pre_tokenizer needs a pattern {\"Regex\": ...} or "
                      "{\"String\": ...}");
  const json_t *ps = json_is_string(re) ? re : str;
  DIT_TRY(compile_regex(json_string_value(ps), json_string_length(ps), !json_is_string(re), &s->re, err));
  static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
  const char *b = json_string_value(json_object_get(p, "behavior"));
  int k = 0;
  while (b && k < 5 && strcmp(b, names[k])) k++;
  if (!b || k == 5)
    return dit_errorf(err, DIT_ERR_FORMAT, "Split pre_tokenizer: unknown behavior \"%.64s\"", b ? b : "");
  s->behavior = (tok_split_behavior)k;
  return get_bool(p, "invert", false, &s->invert, "Split pre_tokenizer", err);
}

static dit_status load_pre(dit_tokenizer *t, const json_t *p, int depth, dit_error *err) {
  const char *type;
  DIT_TRY(step_type(t, p, depth, "pre_tokenizer", "pretokenizers", load_pre, &type, err));
  if (!type) return DIT_OK;
  if (t->n_pre == TOK_MAX_STEPS) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "too many pre_tokenizers");
  tok_pre_step *s = &t->pre[t->n_pre];
  memset(s, 0, sizeof *s);
  if (!strcmp(type, "Split")) {
    s->kind = TOK_PRE_SPLIT;
    dit_status st = load_split(s, p, err);
    if (s->re) t->n_pre++; /* counted once compiled, so that free() releases it */
    return st;
  }
  if (!strcmp(type, "ByteLevel")) {
    bool use_regex;
    s->kind = TOK_PRE_BYTELEVEL;
    s->behavior = TOK_SPLIT_ISOLATED;
    DIT_TRY(get_bool(p, "add_prefix_space", true, &s->add_prefix_space, "ByteLevel pre_tokenizer", err));
    DIT_TRY(get_bool(p, "use_regex", true, &use_regex, "ByteLevel pre_tokenizer", err));
    if (use_regex) DIT_TRY(compile_regex(gpt2_pattern, sizeof gpt2_pattern - 1, false, &s->re, err));
    t->n_pre++;
    t->byte_level = true;
    return DIT_OK;
  }
  if (!strcmp(type, "Metaspace")) {
    s->kind = TOK_PRE_METASPACE;
    DIT_TRY(tok_load_metaspace(s, p, err));
    t->n_pre++;
    return DIT_OK;
  }
  return dit_errorf(err, DIT_ERR_UNSUPPORTED, "pre_tokenizer \"%.64s\" is not supported (Split, ByteLevel, "
                    "Metaspace or a Sequence of them)", type);
}

/* Every byte's GPT-2 character must be a vocabulary token. */
static dit_status load_byte_ids(dit_tokenizer *t, dit_error *err) {
  for (int b = 0; b < 256; b++) {
    t->byte_id[b] = -1;
    if (!t->byte_level) continue;
    uint32_t cp = tok_byte_to_cp((uint8_t)b);
    char u[2];
    size_t n = 1;
    if (cp < 0x80) u[0] = (char)cp;
    else u[0] = (char)(0xc0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3f)), n = 2;
    t->byte_id[b] = tok_vocab_find(t, u, n);
    if (t->byte_id[b] < 0)
      return dit_errorf(err, DIT_ERR_FORMAT, "byte-level vocabulary lacks the token \"%.*s\" (U+%04X) for "
                        "byte 0x%02X", (int)n, u, cp, b);
    char ue[64];
    if (!t->eow) continue;
    if (t->eow_len > sizeof ue - 2)
      return dit_errorf(err, DIT_ERR_UNSUPPORTED, "model.end_of_word_suffix is too long");
    memcpy(ue, u, n);
    memcpy(ue + n, t->eow, t->eow_len);
    t->byte_eow_id[b] = tok_vocab_find(t, ue, n + t->eow_len);
    if (t->byte_eow_id[b] < 0)
      return dit_errorf(err, DIT_ERR_FORMAT, "byte-level vocabulary lacks the token \"%.*s%s\" for byte 0x%02X",
                        (int)n, u, t->eow, b);
  }
  return DIT_OK;
}

static dit_status load_root(dit_tokenizer *t, const json_t *root, dit_error *err) {
  if (!json_is_object(root)) return dit_errorf(err, DIT_ERR_FORMAT, "the top level must be an object");
  DIT_TRY(load_normalizer(t, json_object_get(root, "normalizer"), 0, err)); /* added tokens use it */
  DIT_TRY(load_model(t, json_object_get(root, "model"), json_object_get(root, "added_tokens"), err));
  DIT_TRY(load_pre(t, json_object_get(root, "pre_tokenizer"), 0, err));
  for (size_t i = 0; i + 1 < t->n_pre; i++)
    if (t->pre[i].kind == TOK_PRE_BYTELEVEL)
      return dit_errorf(err, DIT_ERR_UNSUPPORTED, "a ByteLevel pre_tokenizer must be the last one");
  if (t->unigram && t->byte_level)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "a Unigram model with a ByteLevel pre_tokenizer is not supported");
  DIT_TRY(tok_load_post(t, json_object_get(root, "post_processor"), err));
  return load_byte_ids(t, err);
}

/* Builds the tokenizer from parsed JSON; `what` prefixes error messages. */
dit_status tok_load_json(json_t *root, const char *what, dit_tokenizer **out, dit_error *err) {
  dit_tokenizer *t = calloc(1, sizeof *t);
  if (!t) return dit_errorf(err, DIT_ERR_NOMEM, "%s: cannot allocate the tokenizer", what);
  t->chat_style = -1;
  t->pad_id = -1;
  dit_status st = load_root(t, root, err);
  if (st != DIT_OK) {
    dit_error_prefix(err, "%s", what);
    dit_tok_free(t);
    return st;
  }
  *out = t;
  return DIT_OK;
}

/* The parsed tree of a tokenizer.json held in memory, per byte of the file: 5.7 measured for
 * Qwen3's 11.4 MB file with jansson 2.14 (65 MB resident after json_load_file). */
#define TOK_JSON_TREE_FACTOR 5.7

/* After the tree of a json_bytes file is freed: the load's peak (the file's bytes, its tree
 * and the tables) noted, and the tree's memory given back to the system. */
static void after_load(dit_tokenizer *t, size_t json_bytes) {
  dit_heap_trim();
  if (t) t->load_peak = (size_t)((double)json_bytes * (1.0 + TOK_JSON_TREE_FACTOR)) + dit_tok_table_bytes(t);
}

dit_status dit_tok_load_file(const char *path, dit_tokenizer **out, dit_error *err) {
  *out = NULL;
  json_t *root;
  struct stat sb;
  const size_t bytes = stat(path, &sb) == 0 ? (size_t)sb.st_size : 0;
  DIT_TRY(dit_json_load_file(path, DIT_TOK_MAX_FILE_BYTES, &root, err));
  dit_status st = tok_load_json(root, path, out, err);
  json_decref(root);
  after_load(*out, bytes);
  return st;
}

dit_status dit_tok_load_buffer(const char *buf, size_t len, const char *what, dit_tokenizer **out, dit_error *err) {
  *out = NULL;
  if (len > DIT_TOK_MAX_FILE_BYTES)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: %zu bytes is larger than the %zu-byte limit", what, len,
                      DIT_TOK_MAX_FILE_BYTES);
  json_t *root;
  DIT_TRY(dit_json_parse(buf, len, what, &root, err));
  dit_status st = tok_load_json(root, what, out, err);
  json_decref(root);
  after_load(*out, len);
  return st;
}

size_t dit_tok_table_bytes(const dit_tokenizer *t) {
  if (!t) return 0;
  return t->n_ids * 2 * sizeof(uint32_t) + t->pool_len + t->vocab_cap * sizeof(uint32_t) +
         t->merge_cap * sizeof(tok_merge_slot) + t->n_added * (sizeof(tok_added) + sizeof(uint32_t)) +
         (t->scores ? t->n_ids * sizeof(double) : 0);
}

size_t dit_tok_load_bytes(const dit_tokenizer *t) { return t ? t->load_peak : 0; }

dit_status dit_tok_load(const char *tokenizer_dir, dit_tokenizer **out, dit_error *err) {
  char path[4096];
  if (snprintf(path, sizeof path, "%s/vocab.json", tokenizer_dir) < (int)sizeof path && access(path, F_OK) == 0 &&
      snprintf(path, sizeof path, "%s/tokenizer.json", tokenizer_dir) < (int)sizeof path && access(path, F_OK) != 0)
    return tok_load_vocab_files(tokenizer_dir, out, err); /* no tokenizer.json: vocab.json + merges.txt */
  if (snprintf(path, sizeof path, "%s/tokenizer.json", tokenizer_dir) >= (int)sizeof path) {
    *out = NULL;
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "tokenizer folder path is too long");
  }
  DIT_TRY(dit_tok_load_file(path, out, err));
  dit_status st = tok_load_pad(*out, tokenizer_dir, err);
  if (st != DIT_OK) {
    dit_tok_free(*out);
    *out = NULL;
  }
  return st;
}

void dit_tok_free(dit_tokenizer *t) {
  if (!t) return;
  for (size_t i = 0; i < t->n_pre; i++) pcre2_code_free(t->pre[i].re);
  for (size_t i = 0; t->added && i < t->n_added; i++)
    if (t->added[i].match_owned) free(t->added[i].match);
  free(t->off);
  free(t->len);
  free(t->pool);
  free(t->vocab_slots);
  free(t->merge_slots);
  free(t->added);
  free(t->first_idx);
  free(t->eow);
  free(t->scores);
  tok_norm_free(t);
  free(t);
}

int32_t dit_tok_token_id(const dit_tokenizer *t, const char *token) {
  if (!t || !token) return -1;
  size_t n = strlen(token);
  for (size_t i = 0; i < t->n_added; i++)
    if (t->added[i].len == n && !memcmp(t->added[i].content, token, n)) return t->added[i].id;
  return tok_vocab_find(t, token, n);
}

size_t dit_tok_vocab_size(const dit_tokenizer *t) { return t ? t->n_ids : 0; }

const char *dit_tok_token_str(const dit_tokenizer *t, int32_t id, size_t *len) {
  if (!t || id < 0 || (size_t)id >= t->n_ids || t->off[id] == UINT32_MAX) return NULL;
  if (len) *len = t->len[id];
  return t->pool + t->off[id];
}

void dit_tok_set_chat_style(dit_tokenizer *t, int style) {
  if (t) t->chat_style = style;
}

int dit_tok_chat_style(const dit_tokenizer *t) { return t ? t->chat_style : -1; }

dit_status tok_get_bool(const json_t *o, const char *key, bool dflt, bool *out, const char *where, dit_error *err) {
  return get_bool(o, key, dflt, out, where, err);
}

dit_status tok_compile_regex(const char *pat, size_t len, bool literal, pcre2_code **out, dit_error *err) {
  return compile_regex(pat, len, literal, out, err);
}

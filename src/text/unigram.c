/* The Unigram model of tokenizer.json (SentencePiece models such as T5's): a vocabulary of
 * [piece, score] pairs and the Viterbi segmentation of the `tokenizers` library's
 * Unigram::encode_optimized: at each character boundary, every vocabulary piece that
 * starts there (shortest first) extends the best path ending at its end when it scores
 * strictly better; a character that no single-character piece covers is an unknown piece
 * scored min_score - 10. Consecutive unknown pieces are fused (fuse_unk is always on for
 * Unigram there) and a piece not in the vocabulary becomes unk_id. byte_fallback is not
 * supported (false in the files ditrun reads). */
#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"

#define UNK_PENALTY 10.0

/* Sizes the tables; vocabulary ids are the entry indices, added tokens may go beyond. */
static dit_status unigram_tables(dit_tokenizer *t, const json_t *vocab, const json_t *added, dit_error *err) {
  size_t n = json_array_size(vocab), n_added = json_is_array(added) ? json_array_size(added) : 0, pool = 0;
  if (n == 0) return dit_errorf(err, DIT_ERR_FORMAT, "model.vocab is empty");
  if (n > (size_t)INT32_MAX / 4 || n_added > TOK_MAX_ADDED)
    return dit_errorf(err, DIT_ERR_FORMAT, "model.vocab or added_tokens has too many entries");
  size_t limit = n + n_added, max_id = n - 1;
  for (size_t i = 0; i < n; i++) {
    const json_t *e = json_array_get(vocab, i);
    if (!json_is_array(e) || json_array_size(e) != 2 || !json_is_string(json_array_get(e, 0)) ||
        !json_is_number(json_array_get(e, 1)))
      return dit_errorf(err, DIT_ERR_FORMAT, "model.vocab[%zu]: must be [\"piece\", score] with a numeric score", i);
    if (json_string_length(json_array_get(e, 0)) == 0)
      return dit_errorf(err, DIT_ERR_FORMAT, "model.vocab[%zu]: empty piece", i);
    pool += json_string_length(json_array_get(e, 0));
  }
  DIT_TRY(tok_size_added(added, limit, &max_id, &pool, err));
  DIT_TRY(tok_alloc_tables(t, n, n_added, pool, max_id, err));
  t->scores = malloc(n * sizeof *t->scores);
  if (!t->scores) return dit_errorf(err, DIT_ERR_NOMEM, "cannot allocate the scores of %zu pieces", n);
  return DIT_OK;
}

dit_status tok_load_unigram(dit_tokenizer *t, const json_t *model, const json_t *added, dit_error *err) {
  const json_t *vocab = json_object_get(model, "vocab"), *unk = json_object_get(model, "unk_id");
  if (!json_is_array(vocab)) return dit_errorf(err, DIT_ERR_FORMAT, "model.vocab must be an array (Unigram)");
  if (added && !json_is_null(added) && !json_is_array(added))
    return dit_errorf(err, DIT_ERR_FORMAT, "added_tokens must be an array");
  bool flag;
  DIT_TRY(tok_get_bool(model, "byte_fallback", false, &flag, "model", err));
  if (flag) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "model.byte_fallback=true is not supported");
  DIT_TRY(unigram_tables(t, vocab, added, err));
  t->unigram = true;
  t->min_score = 0;
  for (size_t i = 0; i < t->n_vocab; i++) {
    const json_t *e = json_array_get(vocab, i), *p = json_array_get(e, 0);
    size_t n = json_string_length(p);
    const char *s = json_string_value(p);
    int32_t dup = tok_vocab_find(t, s, n);
    if (dup >= 0)
      return dit_errorf(err, DIT_ERR_FORMAT, "model.vocab[%zu]: piece \"%.64s\" is already entry %d", i, s, dup);
    t->off[i] = (uint32_t)t->pool_len;
    t->len[i] = (uint32_t)n;
    memcpy(t->pool + t->pool_len, s, n);
    t->pool_len += n;
    tok_vocab_insert(t, (uint32_t)i);
    t->scores[i] = json_number_value(json_array_get(e, 1));
    if (i == 0 || t->scores[i] < t->min_score) t->min_score = t->scores[i];
    if (n > t->max_piece) t->max_piece = n;
  }
  t->unk_id = -1;
  if (unk && !json_is_null(unk)) {
    if (!json_is_integer(unk) || json_integer_value(unk) < 0 || (size_t)json_integer_value(unk) >= t->n_vocab)
      return dit_errorf(err, DIT_ERR_FORMAT, "model.unk_id must be an integer in [0, %zu)", t->n_vocab);
    t->unk_id = (int32_t)json_integer_value(unk);
  }
  if (added && json_is_array(added)) DIT_TRY(tok_load_added(t, added, err));
  return DIT_OK;
}

typedef struct node {
  double score;
  int32_t start; /* -1: no path ends here yet */
  int32_t id;
} node;

/* Walks the best path back from the end and appends its ids in order. */
static dit_status emit_path(const dit_tokenizer *t, const char *s, size_t n, const node *best, tok_ids *out,
                            dit_error *err) {
  size_t count = 0;
  for (size_t e = n; e > 0; e = (size_t)best[e].start) count++;
  size_t base = out->n;
  for (size_t i = 0; i < count; i++) DIT_TRY(tok_ids_push(out, -1, err)); /* filled backwards below */
  size_t k = base + count, e = n;
  while (e > 0) {
    size_t b = (size_t)best[e].start;
    int32_t id = best[e].id;
    if (id == t->unk_id) { /* fuse a run of unknown pieces into one */
      while (b > 0 && best[b].id == t->unk_id) b = (size_t)best[b].start;
      int32_t fused = tok_vocab_find(t, s + b, e - b);
      id = fused >= 0 ? fused : t->unk_id;
    }
    out->v[--k] = id;
    e = b;
  }
  /* fused runs left unused slots at the front: close the gap */
  size_t used = base + count - k;
  memmove(out->v + base, out->v + k, used * sizeof *out->v);
  out->n = base + used;
  return DIT_OK;
}

dit_status tok_unigram_word(const dit_tokenizer *t, const char *s, size_t n, tok_ids *out, dit_error *err) {
  if (n == 0) return DIT_OK;
  if (n > (size_t)INT32_MAX - 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "tokenizer: piece too long");
  node *best = malloc((n + 1) * sizeof *best);
  if (!best) return dit_errorf(err, DIT_ERR_NOMEM, "tokenizer: cannot allocate a %zu-byte lattice", n);
  for (size_t i = 0; i <= n; i++) best[i] = (node){0, -1, -1};
  best[0].start = 0;
  double unk_score = t->min_score - UNK_PENALTY;
  for (size_t b = 0; b < n;) {
    uint8_t c = (uint8_t)s[b];
    size_t cl = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    if (cl > n - b) cl = n - b;
    double here = best[b].score;
    bool single = false;
    for (size_t l = 1; l <= t->max_piece && l <= n - b; l++) {
      int32_t id = tok_vocab_find(t, s + b, l);
      if (id < 0) continue;
      double cand = here + t->scores[id];
      node *tg = &best[b + l];
      if (tg->start < 0 || cand > tg->score) *tg = (node){cand, (int32_t)b, id};
      if (l == cl) single = true;
    }
    if (!single) {
      if (t->unk_id < 0) {
        free(best);
        return dit_errorf(err, DIT_ERR_INVALID_ARG, "tokenizer: the text has a character (at byte %zu of a piece) "
                          "that no piece covers and the model has no unk_id", b);
      }
      double cand = here + unk_score;
      node *tg = &best[b + cl];
      if (tg->start < 0 || cand > tg->score) *tg = (node){cand, (int32_t)b, t->unk_id};
    }
    b += cl;
  }
  dit_status st = emit_path(t, s, n, best, out, err);
  free(best);
  return st;
}

/* The BPE core: turns one pre-token into ids by applying merges in rank order. Like
 * tokenizers' Word::merge_all, it keeps the symbols in a doubly linked list and the
 * candidate pairs in a binary min-heap ordered by (rank, position), so a word of n
 * symbols costs O(n log n) instead of the O(n^2) of rescanning for the best pair. */
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "text/tok_internal.h"

typedef struct tok_heap_item {
  uint32_t rank;
  uint32_t pos;
  int32_t id;
} tok_heap_item;

uint32_t tok_byte_to_cp(uint8_t b) {
  /* printable Latin-1 bytes stand for themselves; the rest get 256, 257, ... in order */
  if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae) return b;
  uint32_t n = 0;
  for (uint32_t c = 0; c < b; c++)
    if (!((c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || c >= 0xae)) n++;
  return 256 + n;
}

dit_status tok_ids_push(tok_ids *o, int32_t id, dit_error *err) {
  int32_t *v = dit_grow(o->v, o->n, &o->cap, sizeof *v, 256);
  if (!v) return dit_errorf(err, DIT_ERR_NOMEM, "tokenizer: cannot grow the id list past %zu entries", o->n);
  o->v = v;
  o->v[o->n++] = id;
  return DIT_OK;
}

void tok_bpe_work_free(tok_bpe_work *w) {
  free(w->sym);
  free(w->prev);
  free(w->next);
  free(w->heap);
  memset(w, 0, sizeof *w);
}

static dit_status work_reserve(tok_bpe_work *w, size_t n, dit_error *err) {
  if (n <= w->cap) return DIT_OK;
  size_t cap = w->cap ? w->cap : 64;
  while (cap < n) cap *= 2;
  int32_t *s = realloc(w->sym, cap * sizeof *s);
  if (s) w->sym = s;
  int32_t *p = s ? realloc(w->prev, cap * sizeof *p) : NULL;
  if (p) w->prev = p;
  int32_t *q = p ? realloc(w->next, cap * sizeof *q) : NULL;
  if (q) w->next = q;
  if (!s || !p || !q) return dit_errorf(err, DIT_ERR_NOMEM, "tokenizer: cannot allocate a %zu-symbol word", n);
  w->cap = cap;
  return DIT_OK;
}

static bool item_less(const tok_heap_item *a, const tok_heap_item *b) {
  return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

typedef struct heap {
  tok_heap_item *v;
  size_t n, cap;
} heap;

static dit_status heap_push(heap *h, tok_heap_item it, dit_error *err) {
  tok_heap_item *v = dit_grow(h->v, h->n, &h->cap, sizeof *v, 64);
  if (!v) return dit_errorf(err, DIT_ERR_NOMEM, "tokenizer: cannot grow the merge heap");
  h->v = v;
  size_t i = h->n++;
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!item_less(&it, &h->v[parent])) break;
    h->v[i] = h->v[parent];
    i = parent;
  }
  h->v[i] = it;
  return DIT_OK;
}

static tok_heap_item heap_pop(heap *h) {
  tok_heap_item top = h->v[0], last = h->v[--h->n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= h->n) break;
    if (c + 1 < h->n && item_less(&h->v[c + 1], &h->v[c])) c++;
    if (!item_less(&h->v[c], &last)) break;
    h->v[i] = h->v[c];
    i = c;
  }
  if (h->n) h->v[i] = last;
  return top;
}

/* Pushes the pair starting at symbol p (with its right neighbour) when it merges. */
static dit_status push_pair(const dit_tokenizer *t, const tok_bpe_work *w, heap *h, int32_t p, dit_error *err) {
  if (p < 0) return DIT_OK;
  int32_t q = w->next[p];
  if (q < 0) return DIT_OK;
  uint32_t rank;
  int32_t id;
  if (!tok_merge_find(t, w->sym[p], w->sym[q], &rank, &id)) return DIT_OK;
  return heap_push(h, (tok_heap_item){rank, (uint32_t)p, id}, err);
}

/* Id of the word's last character with the end-of-word suffix, or -1. */
static int32_t tok_suffixed_find(const dit_tokenizer *t, const char *s, size_t n) {
  char buf[64];
  if (n + t->eow_len > sizeof buf) return -1;
  memcpy(buf, s, n);
  memcpy(buf + n, t->eow, t->eow_len);
  return tok_vocab_find(t, buf, n + t->eow_len);
}

/* Whether byte fallback covers every byte of the character s[0..n). */
static bool fallback_all(const dit_tokenizer *t, const char *s, size_t n) {
  if (!t->byte_fallback) return false;
  for (size_t b = 0; b < n; b++)
    if (t->fallback_id[(uint8_t)s[b]] < 0) return false;
  return true;
}

/* Fills w->sym with the word's initial symbols; returns their count in *n. */
static dit_status initial_symbols(const dit_tokenizer *t, const char *s, size_t len, tok_bpe_work *w, size_t *n,
                                  dit_error *err) {
  DIT_TRY(work_reserve(w, len, err));
  size_t k = 0;
  if (t->byte_level) {
    for (size_t i = 0; i < len; i++) w->sym[k++] = t->byte_id[(uint8_t)s[i]];
    if (t->eow) w->sym[k - 1] = t->byte_eow_id[(uint8_t)s[len - 1]]; /* the word's end carries the suffix */
  } else {
    /* as tokenizers' BPE::merge_word: a known character flushes a pending unk; an unknown one
     * becomes its bytes' fallback tokens (when every byte has one), else an unk (fused with
     * the pending one under fuse_unk), else nothing (no unk token: the character is dropped) */
    bool unk_pending = false;
    for (size_t i = 0; i < len;) {
      uint8_t c = (uint8_t)s[i];
      size_t cl = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
      if (cl > len - i) cl = len - i;
      int32_t id = t->eow && i + cl == len ? tok_suffixed_find(t, s + i, cl) : tok_vocab_find(t, s + i, cl);
      if (id >= 0) {
        if (unk_pending) w->sym[k++] = t->unk_id, unk_pending = false;
        w->sym[k++] = id;
      } else if (fallback_all(t, s + i, cl)) { /* tokenizers adds these without flushing the pending unk */
        for (size_t b = 0; b < cl; b++) w->sym[k++] = t->fallback_id[(uint8_t)s[i + b]];
      } else if (t->unk_id >= 0) {
        if (unk_pending && !t->fuse_unk) w->sym[k++] = t->unk_id;
        unk_pending = true;
      }
      i += cl;
    }
    if (unk_pending) w->sym[k++] = t->unk_id;
  }
  *n = k;
  return DIT_OK;
}

/* With ignore_merges, a word that is itself in the vocabulary is emitted whole. */
static int32_t whole_word_id(const dit_tokenizer *t, const char *s, size_t len) {
  if (!t->byte_level) return tok_vocab_find(t, s, len);
  char buf[512];
  if (len > sizeof buf / 2) return -1;
  size_t k = 0;
  for (size_t i = 0; i < len; i++) {
    uint32_t cp = tok_byte_to_cp((uint8_t)s[i]);
    if (cp < 0x80) {
      buf[k++] = (char)cp;
    } else {
      buf[k++] = (char)(0xc0 | (cp >> 6));
      buf[k++] = (char)(0x80 | (cp & 0x3f));
    }
  }
  return tok_vocab_find(t, buf, k);
}

dit_status tok_bpe_word(const dit_tokenizer *t, const char *s, size_t len, tok_bpe_work *w, tok_ids *out,
                        dit_error *err) {
  if (len == 0) return DIT_OK;
  if (t->ignore_merges) {
    int32_t id = whole_word_id(t, s, len);
    if (id >= 0) return tok_ids_push(out, id, err);
  }
  size_t n;
  DIT_TRY(initial_symbols(t, s, len, w, &n, err));
  if (n == 0) return DIT_OK;
  for (size_t i = 0; i < n; i++) {
    w->prev[i] = (int32_t)i - 1;
    w->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
  }
  heap h = {w->heap, 0, w->heap_cap};
  dit_status st = DIT_OK;
  for (size_t i = 0; i + 1 < n && st == DIT_OK; i++) st = push_pair(t, w, &h, (int32_t)i, err);
  while (st == DIT_OK && h.n > 0) {
    tok_heap_item top = heap_pop(&h);
    int32_t p = (int32_t)top.pos;
    if (w->sym[p] < 0) continue;  /* merged into its left neighbour already */
    int32_t q = w->next[p];
    if (q < 0) continue;
    uint32_t rank;
    int32_t id;
    if (!tok_merge_find(t, w->sym[p], w->sym[q], &rank, &id) || id != top.id) continue; /* stale */
    w->sym[p] = id;
    w->sym[q] = -1;
    w->next[p] = w->next[q];
    if (w->next[q] >= 0) w->prev[w->next[q]] = p;
    st = push_pair(t, w, &h, w->prev[p], err);
    if (st == DIT_OK) st = push_pair(t, w, &h, p, err);
  }
  w->heap = h.v;
  w->heap_cap = h.cap;
  for (int32_t i = 0; st == DIT_OK && i >= 0; i = w->next[i]) st = tok_ids_push(out, w->sym[i], err);
  return st;
}

/* A growing string: the one way the library builds text of unknown length. */
#ifndef DIT_CORE_SBUF_H
#define DIT_CORE_SBUF_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Start with `dit_sbuf b = {.ok = true};`; free(b.s) when done. s stays NUL-terminated once
 * anything was put; ok turns false for good when an allocation fails (later puts do nothing). */
typedef struct dit_sbuf {
  char *s;
  size_t n, cap;
  bool ok;
} dit_sbuf;

/* Appends s[0..n); returns b->ok. */
static inline bool dit_sbuf_put(dit_sbuf *b, const char *s, size_t n) {
  if (!b->ok) return false;
  if (n + 1 > b->cap - b->n) {
    size_t cap = (b->n + n + 1) * 2;
    char *p = cap > b->n ? realloc(b->s, cap) : NULL;
    if (!p) return b->ok = false;
    b->s = p, b->cap = cap;
  }
  if (n) memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = 0;
  return true;
}

static inline bool dit_sbuf_puts(dit_sbuf *b, const char *s) { return dit_sbuf_put(b, s, strlen(s)); }

#endif

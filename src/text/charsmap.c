/* SentencePiece's precompiled_charsmap (the `Precompiled` normalizer of tokenizer.json):
 * base64 of [u32 trie size in bytes, little-endian][the trie: u32 units][replacement
 * strings, each ending in NUL]. The trie is a darts-clone double array over UTF-8 bytes;
 * a leaf's value is the offset of the replacement string. Normalization follows the
 * `tokenizers` library: the text is cut into extended grapheme clusters; a cluster shorter
 * than 6 bytes whose start matches the trie is replaced whole by the replacement of its
 * SHORTEST matching prefix; otherwise each character is replaced on its own when it
 * matches, and kept when it does not. Every trie index is bounds-checked: a corrupt
 * charsmap ends in an error, never an out-of-range read. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/sbuf.h"
#include "text/tok_internal.h"

struct tok_charsmap {
  uint32_t *unit;
  size_t n_unit;
  char *repl;      /* the replacement strings (NUL-terminated; one extra NUL at the end) */
  size_t n_repl;
};

static int b64_value(uint8_t c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* Decodes standard base64 (padding optional); *out is malloc'd. */
static dit_status b64_decode(const char *s, size_t n, uint8_t **out, size_t *out_n, dit_error *err) {
  while (n > 0 && s[n - 1] == '=') n--;
  if (n % 4 == 1) return dit_errorf(err, DIT_ERR_FORMAT, "precompiled_charsmap: base64 is truncated");
  uint8_t *o = malloc(n / 4 * 3 + 3);
  if (!o) return dit_errorf(err, DIT_ERR_NOMEM, "precompiled_charsmap: cannot allocate %zu bytes", n);
  size_t k = 0;
  uint32_t acc = 0;
  for (size_t i = 0; i < n; i++) {
    int v = b64_value((uint8_t)s[i]);
    if (v < 0) {
      free(o);
      return dit_errorf(err, DIT_ERR_FORMAT, "precompiled_charsmap: byte %zu is not base64", i);
    }
    acc = acc << 6 | (uint32_t)v;
    if (i % 4 == 3) {
      o[k++] = (uint8_t)(acc >> 16);
      o[k++] = (uint8_t)(acc >> 8);
      o[k++] = (uint8_t)acc;
      acc = 0;
    }
  }
  if (n % 4 == 2) o[k++] = (uint8_t)(acc >> 4);
  if (n % 4 == 3) o[k++] = (uint8_t)(acc >> 10), o[k++] = (uint8_t)(acc >> 2);
  *out = o;
  *out_n = k;
  return DIT_OK;
}

void tok_charsmap_free(tok_charsmap *m) {
  if (!m) return;
  free(m->unit);
  free(m->repl);
  free(m);
}

static dit_status charsmap_parse(tok_charsmap *m, const uint8_t *b, size_t n, dit_error *err) {
  if (n < 4) return dit_errorf(err, DIT_ERR_FORMAT, "precompiled_charsmap: %zu bytes is too short", n);
  uint32_t trie = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
  if (trie % 4 || trie == 0 || trie > n - 4)
    return dit_errorf(err, DIT_ERR_FORMAT, "precompiled_charsmap: trie size %u does not fit the %zu bytes",
                      trie, n);
  m->n_unit = trie / 4;
  m->n_repl = n - 4 - trie;
  m->unit = malloc(trie);
  m->repl = malloc(m->n_repl + 1);
  if (!m->unit || !m->repl) return dit_errorf(err, DIT_ERR_NOMEM, "precompiled_charsmap: out of memory");
  for (size_t i = 0; i < m->n_unit; i++) {
    const uint8_t *u = b + 4 + 4 * i;
    m->unit[i] = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
  }
  memcpy(m->repl, b + 4 + trie, m->n_repl);
  m->repl[m->n_repl] = 0;
  dit_error e2;
  if (dit_utf8_validate(m->repl, m->n_repl, &e2) != DIT_OK)
    return dit_errorf(err, DIT_ERR_FORMAT, "precompiled_charsmap: the replacement strings are not UTF-8");
  return DIT_OK;
}

dit_status tok_charsmap_load(const char *b64, size_t len, tok_charsmap **out, dit_error *err) {
  *out = NULL;
  uint8_t *b = NULL;
  size_t n = 0;
  DIT_TRY(b64_decode(b64, len, &b, &n, err));
  tok_charsmap *m = calloc(1, sizeof *m);
  dit_status st = m ? charsmap_parse(m, b, n, err)
                    : dit_errorf(err, DIT_ERR_NOMEM, "precompiled_charsmap: out of memory");
  free(b);
  if (st != DIT_OK) {
    tok_charsmap_free(m);
    return st;
  }
  *out = m;
  return DIT_OK;
}

static uint32_t unit_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }

/* The replacement of the shortest prefix of s[0..n) in the trie: *repl (NULL when none). */
static dit_status charsmap_lookup(const tok_charsmap *m, const char *s, size_t n, const char **repl,
                                  dit_error *err) {
  *repl = NULL;
  size_t pos = unit_offset(m->unit[0]);
  for (size_t i = 0; i < n; i++) {
    uint8_t c = (uint8_t)s[i];
    if (c == 0) break;
    pos ^= c;
    if (pos >= m->n_unit) goto bad;
    uint32_t u = m->unit[pos];
    if ((u & ((1u << 31) | 0xffu)) != c) return DIT_OK;
    pos ^= unit_offset(u);
    if (pos >= m->n_unit) goto bad;
    if ((u >> 8) & 1) {
      size_t v = m->unit[pos] & ((1u << 31) - 1);
      if (v >= m->n_repl) goto bad;
      *repl = m->repl + v;
      return DIT_OK;
    }
  }
  return DIT_OK;
bad:
  return dit_errorf(err, DIT_ERR_FORMAT, "precompiled_charsmap: a trie offset is out of range (corrupt charsmap)");
}

/* Appends to the output, or says why it could not. */
static dit_status put(dit_sbuf *o, const char *s, size_t n, dit_error *err) {
  return dit_sbuf_put(o, s, n) ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "tokenizer: out of memory normalizing");
}

/* One grapheme cluster g[0..n): whole when short and matching, else character by character. */
static dit_status charsmap_cluster(const tok_charsmap *m, const char *g, size_t n, dit_sbuf *o, dit_error *err) {
  const char *r;
  if (n < 6) {
    DIT_TRY(charsmap_lookup(m, g, n, &r, err));
    if (r) return put(o, r, strlen(r), err);
  }
  for (size_t i = 0; i < n;) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t cl = utf8proc_iterate((const utf8proc_uint8_t *)g + i, (utf8proc_ssize_t)(n - i), &cp);
    if (cl <= 0) cl = 1;
    DIT_TRY(charsmap_lookup(m, g + i, (size_t)cl, &r, err));
    DIT_TRY(r ? put(o, r, strlen(r), err) : put(o, g + i, (size_t)cl, err));
    i += (size_t)cl;
  }
  return DIT_OK;
}

dit_status tok_charsmap_normalize(const tok_charsmap *m, const char *s, size_t n, char **out, size_t *out_n,
                                  dit_error *err) {
  dit_sbuf o = {.ok = true};
  dit_status st = put(&o, "", 0, err);
  utf8proc_int32_t state = 0, prev = -1;
  size_t start = 0;
  for (size_t i = 0; i < n && st == DIT_OK;) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t cl = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
    if (cl <= 0) cl = 1, cp = 0xfffd;
    if (prev >= 0 && utf8proc_grapheme_break_stateful(prev, cp, &state)) {
      st = charsmap_cluster(m, s + start, i - start, &o, err);
      start = i;
    }
    prev = cp;
    i += (size_t)cl;
  }
  if (st == DIT_OK && n > start) st = charsmap_cluster(m, s + start, n - start, &o, err);
  if (st != DIT_OK) {
    free(o.s);
    return st;
  }
  *out = o.s;
  *out_n = o.n;
  return DIT_OK;
}

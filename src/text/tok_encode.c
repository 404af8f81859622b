/* tokenizer.json encoding: the steps between the raw text and the BPE core, in the
 * order the `tokenizers` library runs them (see tokenizer.h): added tokens, normalizer,
 * pre-tokenizer regex splits, byte-level mapping. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/grow.h"
#include "text/tok_internal.h"

/* A piece of text being pre-tokenized: points into the caller's text, a normalized
 * copy, or a string made by ByteLevel's add_prefix_space (owned by the state). */
typedef struct piece {
  const char *p;
  size_t n;
} piece;

typedef struct piece_list {
  piece *v;
  size_t n, cap;
} piece_list;

typedef struct span {
  size_t s, e;
  bool match;
} span;

typedef struct enc_state {
  const dit_tokenizer *t;
  pcre2_match_data *md;
  pcre2_match_context *mctx;
  pcre2_jit_stack *jit;
  tok_bpe_work bpe;
  tok_ids out;
  piece_list a, b;         /* pieces before / after a pre-tokenizer step */
  span *spans;             /* one piece's regex matches and gaps */
  size_t n_spans, cap_spans;
  char **owned;            /* strings with a prefix space or made by Metaspace */
  size_t n_owned, cap_owned;
  bool seg_origin;         /* the segment being encoded starts the text (Metaspace "first") */
} enc_state;

/* ---- UTF-8 ------------------------------------------------------------------------ */

dit_status dit_utf8_validate(const char *text, size_t len, dit_error *err) {
  const uint8_t *s = (const uint8_t *)text;
  for (size_t i = 0; i < len;) {
    uint8_t c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    bool ok = n && n <= len - i;
    for (size_t k = 1; ok && k < n; k++) ok = (s[i + k] & 0xc0) == 0x80;
    if (ok && n == 3) {
      uint32_t cp = ((uint32_t)(c & 0x0f) << 12) | ((uint32_t)(s[i + 1] & 0x3f) << 6);
      ok = cp >= 0x800 && !(cp >= 0xd800 && cp <= 0xdfff);
    } else if (ok && n == 4) {
      uint32_t cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3f) << 12);
      ok = cp >= 0x10000 && cp <= 0x10ffff;
    }
    if (!ok)
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "text is not valid UTF-8: bad byte 0x%02X at offset %zu", c, i);
    i += n;
  }
  return DIT_OK;
}

/* Decodes the (valid) character at s[i]; sets *n to its length. */
static uint32_t utf8_at(const char *text, size_t i, size_t *n) {
  const uint8_t *s = (const uint8_t *)text + i;
  if (s[0] < 0x80) return *n = 1, s[0];
  if (s[0] < 0xe0) return *n = 2, ((uint32_t)(s[0] & 0x1f) << 6) | (s[1] & 0x3f);
  if (s[0] < 0xf0) return *n = 3, ((uint32_t)(s[0] & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
  *n = 4;
  return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3f) << 12) | ((uint32_t)(s[2] & 0x3f) << 6) |
         (s[3] & 0x3f);
}

/* Start of the character that ends just before byte i (i > 0). */
static size_t utf8_prev(const char *s, size_t i) {
  do i--;
  while (i > 0 && ((uint8_t)s[i] & 0xc0) == 0x80);
  return i;
}

/* Unicode White_Space (what Rust's \s matches). */
bool tok_is_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Rust's \w: letters, marks, decimal and letter numbers, connector punctuation, joiners. */
static bool is_word(uint32_t c) {
  if (c == 0x200c || c == 0x200d) return true;
  switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

/* ---- pre-tokenizer ----------------------------------------------------------------- */

static dit_status pieces_push(piece_list *l, const char *p, size_t n, dit_error *err) {
  if (n == 0) return DIT_OK;
  piece *v = dit_grow(l->v, l->n, &l->cap, sizeof *v, 64);
  if (!v) return dit_errorf(err, DIT_ERR_NOMEM, "tokenizer: cannot grow the piece list");
  l->v = v;
  l->v[l->n++] = (piece){p, n};
  return DIT_OK;
}

static dit_status span_push(enc_state *st, size_t s, size_t e, bool match, dit_error *err) {
  span *v = dit_grow(st->spans, st->n_spans, &st->cap_spans, sizeof *v, 64);
  if (!v) return dit_errorf(err, DIT_ERR_NOMEM, "tokenizer: cannot grow the split list");
  st->spans = v;
  st->spans[st->n_spans++] = (span){s, e, match};
  return DIT_OK;
}

/* Fills st->spans with the regex matches of pc and the gaps between them, covering pc. */
static dit_status find_matches(enc_state *st, const pcre2_code *re, piece pc, dit_error *err) {
  st->n_spans = 0;
  size_t prev = 0, off = 0;
  while (off < pc.n) {
    int rc = pcre2_match(re, (PCRE2_SPTR)pc.p, pc.n, off, PCRE2_NO_UTF_CHECK, st->md, st->mctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[160];
      pcre2_get_error_message(rc, msg, sizeof msg);
      return dit_errorf(err, DIT_ERR_FORMAT, "tokenizer.json's pre_tokenizer regex failed on the text near byte "
                        "%zu of a %zu-byte piece: %s", off, pc.n, (const char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
    size_t ms = ov[0], me = ov[1];
    if (me == ms) { /* empty match: no piece; step over one character */
      size_t cl;
      utf8_at(pc.p, ms, &cl);
      off = ms + cl;
      continue;
    }
    if (ms > prev) DIT_TRY(span_push(st, prev, ms, false, err));
    DIT_TRY(span_push(st, ms, me, true, err));
    prev = off = me;
  }
  if (prev < pc.n) DIT_TRY(span_push(st, prev, pc.n, false, err));
  return DIT_OK;
}

/* Splits pc by step s's regex with its behaviour, appending the pieces to out. */
static dit_status split_piece(enc_state *st, const tok_pre_step *s, piece pc, piece_list *out, dit_error *err) {
  DIT_TRY(find_matches(st, s->re, pc, err));
  /* merged spans are accumulated in (cs, ce) and flushed when a new piece starts */
  size_t cs = 0, ce = 0;
  bool have = false, prev_match = false;
  size_t n = st->n_spans;
  for (size_t k = 0; k < n; k++) {
    size_t i = s->behavior == TOK_SPLIT_MERGED_NEXT ? n - 1 - k : k;
    span sp = st->spans[i];
    bool m = sp.match != s->invert;
    bool join = false;
    switch (s->behavior) {
      case TOK_SPLIT_REMOVED:
        if (m) continue;
        break;
      case TOK_SPLIT_ISOLATED: break;
      case TOK_SPLIT_CONTIGUOUS: join = have && m == prev_match; break;
      case TOK_SPLIT_MERGED_PREV:
      case TOK_SPLIT_MERGED_NEXT: join = have && m && !prev_match; break;
    }
    prev_match = m;
    if (join) {
      if (sp.s < cs) cs = sp.s;
      if (sp.e > ce) ce = sp.e;
      continue;
    }
    if (have && s->behavior != TOK_SPLIT_MERGED_NEXT) DIT_TRY(pieces_push(out, pc.p + cs, ce - cs, err));
    if (have && s->behavior == TOK_SPLIT_MERGED_NEXT) DIT_TRY(span_push(st, cs, ce, false, err));
    cs = sp.s;
    ce = sp.e;
    have = true;
  }
  if (!have) return DIT_OK;
  if (s->behavior != TOK_SPLIT_MERGED_NEXT) return pieces_push(out, pc.p + cs, ce - cs, err);
  /* MergedWithNext walked backwards, parking its pieces after the spans: emit reversed */
  DIT_TRY(span_push(st, cs, ce, false, err));
  for (size_t i = st->n_spans; i-- > n;) DIT_TRY(pieces_push(out, pc.p + st->spans[i].s, st->spans[i].e - st->spans[i].s, err));
  return DIT_OK;
}

/* Keeps s (malloc'd) until the end of the call; frees it when it cannot. */
static dit_status own(enc_state *st, char *s, dit_error *err) {
  if (st->n_owned == st->cap_owned) {
    size_t cap = st->cap_owned ? st->cap_owned * 2 : 16;
    char **v = realloc(st->owned, cap * sizeof *v);
    if (!v) {
      free(s);
      return dit_errorf(err, DIT_ERR_NOMEM, "tokenizer: out of memory");
    }
    st->owned = v;
    st->cap_owned = cap;
  }
  st->owned[st->n_owned++] = s;
  return DIT_OK;
}

/* ByteLevel's add_prefix_space: a copy of pc with a leading space. */
static dit_status prefix_space(enc_state *st, piece *pc, dit_error *err) {
  if (pc->n > 0 && pc->p[0] == ' ') return DIT_OK;
  char *s = malloc(pc->n + 1);
  if (!s) return dit_errorf(err, DIT_ERR_NOMEM, "tokenizer: out of memory");
  s[0] = ' ';
  memcpy(s + 1, pc->p, pc->n);
  DIT_TRY(own(st, s, err));
  pc->p = s;
  pc->n++;
  return DIT_OK;
}

/* Metaspace: the piece with its spaces replaced, split before each replacement. */
static dit_status metaspace_piece(enc_state *st, const tok_pre_step *s, piece pc, piece_list *out, dit_error *err) {
  char *m;
  size_t n;
  DIT_TRY(tok_metaspace(s, pc.p, pc.n, st->seg_origin && pc.p == st->a.v[0].p, &m, &n, err));
  DIT_TRY(own(st, m, err));
  for (size_t i = 0, e; i < n; i = e) {
    e = tok_metaspace_next(s, m, n, i);
    DIT_TRY(pieces_push(out, m + i, e - i, err));
  }
  return DIT_OK;
}

/* Pre-tokenizes one normalized segment and BPE-encodes its pieces. */
static dit_status encode_segment(enc_state *st, const char *s, size_t n, dit_error *err) {
  const dit_tokenizer *t = st->t;
  if (n == 0) return DIT_OK;
  st->a.n = 0;
  DIT_TRY(pieces_push(&st->a, s, n, err));
  for (size_t k = 0; k < t->n_pre; k++) {
    const tok_pre_step *step = &t->pre[k];
    st->b.n = 0;
    for (size_t i = 0; i < st->a.n; i++) {
      piece pc = st->a.v[i];
      if (step->kind == TOK_PRE_BYTELEVEL && step->add_prefix_space) DIT_TRY(prefix_space(st, &pc, err));
      if (step->kind == TOK_PRE_METASPACE) DIT_TRY(metaspace_piece(st, step, pc, &st->b, err));
      else if (step->re) DIT_TRY(split_piece(st, step, pc, &st->b, err));
      else DIT_TRY(pieces_push(&st->b, pc.p, pc.n, err));
    }
    piece_list tmp = st->a;
    st->a = st->b;
    st->b = tmp;
  }
  for (size_t i = 0; i < st->a.n; i++) {
    if (t->unigram) DIT_TRY(tok_unigram_word(t, st->a.v[i].p, st->a.v[i].n, &st->out, err));
    else DIT_TRY(tok_bpe_word(t, st->a.v[i].p, st->a.v[i].n, &st->bpe, &st->out, err));
  }
  return DIT_OK;
}

/* ---- normalizer --------------------------------------------------------------------- */

dit_status tok_normalize(const dit_tokenizer *t, const char *s, size_t n, const char **out, size_t *out_n,
                         bool *owned, dit_error *err) {
  *out = s;
  *out_n = n;
  *owned = false;
  for (size_t k = 0; k < t->n_norm; k++) {
    if (t->norm[k] > TOK_NORM_NFKD) {
      char *o;
      size_t on;
      dit_status r = tok_norm_step(t, k, *out, *out_n, &o, &on, err);
      if (*owned) free((char *)*out);
      *owned = r == DIT_OK;
      if (r != DIT_OK) return r;
      *out = o;
      *out_n = on;
      continue;
    }
    bool ascii = true;
    for (size_t i = 0; i < *out_n && ascii; i++) ascii = (uint8_t)(*out)[i] < 0x80;
    if (ascii) continue; /* every normalization form leaves ASCII unchanged */
    static const utf8proc_option_t opts[] = {
        UTF8PROC_STABLE | UTF8PROC_COMPOSE, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE,
        UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT};
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)*out, (utf8proc_ssize_t)*out_n, &dst, opts[t->norm[k]]);
    if (*owned) free((char *)*out);
    if (r < 0) {
      free(dst);
      *owned = false;
      return dit_errorf(err, r == UTF8PROC_ERROR_NOMEM ? DIT_ERR_NOMEM : DIT_ERR_INVALID_ARG,
                        "tokenizer: normalization failed: %s", utf8proc_errmsg(r));
    }
    *out = (const char *)dst;
    *out_n = (size_t)r;
    *owned = true;
  }
  return DIT_OK;
}

/* ---- added tokens ------------------------------------------------------------------ */

/* Finds the leftmost-longest added token of the given set (normalized or not) at or
 * after *pos. Returns its index or -1; sets *at to its start. */
static long find_added(const dit_tokenizer *t, const char *s, size_t n, size_t pos, bool normalized, size_t *at) {
  for (size_t i = pos; i < n; i++) {
    uint8_t b = (uint8_t)s[i];
    for (uint32_t k = t->first_start[b]; k < t->first_start[b + 1]; k++) {
      const tok_added *a = &t->added[t->first_idx[k]];
      if (a->normalized != normalized || a->match_len > n - i || memcmp(s + i, a->match, a->match_len)) continue;
      *at = i;
      return (long)t->first_idx[k];
    }
  }
  return -1;
}

static dit_status encode_normalized(enc_state *st, const char *s, size_t n, dit_error *err);

/* Splits s at the added tokens of one set; text between them goes on to the next stage
 * (normalization for the raw set, pre-tokenization for the normalized set). */
static dit_status split_added(enc_state *st, const char *s, size_t n, bool normalized, dit_error *err) {
  const dit_tokenizer *t = st->t;
  size_t done = 0, pos = 0, at;
  bool any = normalized ? t->any_added_normalized : t->any_added_raw;
  bool origin = normalized ? st->seg_origin : true; /* does s start the text? */
  long k;
  while (any && pos < n && (k = find_added(t, s, n, pos, normalized, &at)) >= 0) {
    const tok_added *a = &t->added[k];
    size_t start = at, stop = at + a->match_len, cl;
    pos = stop;
    if (a->single_word && ((start > 0 && is_word(utf8_at(s, utf8_prev(s, start), &cl))) ||
                           (stop < n && is_word(utf8_at(s, stop, &cl)))))
      continue;
    if (a->lstrip)
      while (start > done && tok_is_space(utf8_at(s, utf8_prev(s, start), &cl))) start = utf8_prev(s, start);
    if (a->rstrip)
      while (stop < n && tok_is_space(utf8_at(s, stop, &cl))) stop += cl;
    pos = stop;
    st->seg_origin = origin && done == 0;
    if (start > done) {
      if (normalized) DIT_TRY(encode_segment(st, s + done, start - done, err));
      else DIT_TRY(encode_normalized(st, s + done, start - done, err));
    }
    DIT_TRY(tok_ids_push(&st->out, a->id, err));
    done = stop;
  }
  if (done >= n) return DIT_OK;
  st->seg_origin = origin && done == 0;
  if (normalized) return encode_segment(st, s + done, n - done, err);
  return encode_normalized(st, s + done, n - done, err);
}

/* Normalizes a segment between raw added tokens, then splits out normalized ones. */
static dit_status encode_normalized(enc_state *st, const char *s, size_t n, dit_error *err) {
  const char *ns;
  size_t nn;
  bool owned;
  DIT_TRY(tok_normalize(st->t, s, n, &ns, &nn, &owned, err));
  dit_status r = split_added(st, ns, nn, true, err);
  if (owned) free((char *)ns);
  return r;
}

/* ---- entry point ------------------------------------------------------------------- */

static void state_free(enc_state *st) {
  pcre2_match_data_free(st->md);
  pcre2_match_context_free(st->mctx);
  pcre2_jit_stack_free(st->jit);
  tok_bpe_work_free(&st->bpe);
  free(st->a.v);
  free(st->b.v);
  free(st->spans);
  for (size_t i = 0; i < st->n_owned; i++) free(st->owned[i]);
  free(st->owned);
}

dit_status dit_tok_encode(const dit_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n,
                          dit_error *err) {
  *ids = NULL;
  *n = 0;
  if (!t || (!text && len)) return dit_errorf(err, DIT_ERR_INVALID_ARG, "tokenizer: NULL argument");
  DIT_TRY(dit_utf8_validate(text, len, err));
  enc_state st = {.t = t};
  st.md = pcre2_match_data_create(16, NULL);
  st.mctx = pcre2_match_context_create(NULL);
  st.jit = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
  if (!st.md || !st.mctx || !st.jit) {
    state_free(&st);
    return dit_errorf(err, DIT_ERR_NOMEM, "tokenizer: cannot allocate the regex state");
  }
  pcre2_jit_stack_assign(st.mctx, NULL, st.jit);
  dit_status r = len ? split_added(&st, text, len, false, err) : DIT_OK;
  state_free(&st);
  if (r != DIT_OK) {
    free(st.out.v);
    return r;
  }
  if (st.out.n == 0) {
    free(st.out.v);
    return DIT_OK;
  }
  *ids = st.out.v;
  *n = st.out.n;
  return DIT_OK;
}

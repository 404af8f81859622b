/* The tokenizer.json normalizers that take arguments or are not Unicode normalization
 * forms: Lowercase, Replace, Strip and Precompiled (see charsmap.c). Each runs on the
 * whole string and returns a new one, as the `tokenizers` library's do (only the text
 * matters here: ids carry no offsets). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/sbuf.h"
#include "text/tok_internal.h"

static dit_status add_step(dit_tokenizer *t, tok_norm_kind kind, tok_norm_arg **arg, dit_error *err) {
  if (t->n_norm == TOK_MAX_STEPS) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "too many normalizers");
  *arg = &t->norm_arg[t->n_norm];
  memset(*arg, 0, sizeof **arg);
  t->norm[t->n_norm++] = kind;
  return DIT_OK;
}

static dit_status load_replace(dit_tokenizer *t, const json_t *j, dit_error *err) {
  const json_t *pat = json_object_get(j, "pattern"), *content = json_object_get(j, "content");
  const json_t *re = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
  if ((!json_is_string(re) && !json_is_string(str)) || !json_is_string(content))
    return dit_errorf(err, DIT_ERR_FORMAT, "Replace normalizer needs a pattern {\"Regex\": ...} or {\"String\": "
                      "...} and a string \"content\"");
  const json_t *ps = json_is_string(re) ? re : str;
  if (json_string_length(ps) == 0) return dit_errorf(err, DIT_ERR_FORMAT, "Replace normalizer: empty pattern");
  tok_norm_arg *a = NULL;
  DIT_TRY(add_step(t, TOK_NORM_REPLACE, &a, err));
  a->content_len = json_string_length(content);
  a->content = malloc(a->content_len + 1);
  if (!a->content) return dit_errorf(err, DIT_ERR_NOMEM, "Replace normalizer: out of memory");
  memcpy(a->content, json_string_value(content), a->content_len + 1);
  return tok_compile_regex(json_string_value(ps), json_string_length(ps), !json_is_string(re), &a->re, err);
}

dit_status tok_load_norm_step(dit_tokenizer *t, const json_t *j, const char *type, bool *handled, dit_error *err) {
  *handled = true;
  tok_norm_arg *a = NULL;
  if (!strcmp(type, "Lowercase")) return add_step(t, TOK_NORM_LOWERCASE, &a, err);
  if (!strcmp(type, "Replace")) return load_replace(t, j, err);
  if (!strcmp(type, "Strip")) {
    bool l, r;
    DIT_TRY(tok_get_bool(j, "strip_left", true, &l, "Strip normalizer", err));
    DIT_TRY(tok_get_bool(j, "strip_right", true, &r, "Strip normalizer", err));
    DIT_TRY(add_step(t, TOK_NORM_STRIP, &a, err));
    a->strip_left = l;
    a->strip_right = r;
    return DIT_OK;
  }
  if (!strcmp(type, "Precompiled")) {
    const json_t *m = json_object_get(j, "precompiled_charsmap");
    if (!json_is_string(m))
      return dit_errorf(err, DIT_ERR_FORMAT, "Precompiled normalizer needs a string \"precompiled_charsmap\"");
    if (t->charsmap) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "only one Precompiled normalizer is supported");
    DIT_TRY(tok_charsmap_load(json_string_value(m), json_string_length(m), &t->charsmap, err));
    return add_step(t, TOK_NORM_PRECOMPILED, &a, err);
  }
  *handled = false;
  return DIT_OK;
}

void tok_norm_free(dit_tokenizer *t) {
  for (size_t k = 0; k < t->n_norm; k++) {
    pcre2_code_free(t->norm_arg[k].re);
    free(t->norm_arg[k].content);
  }
  tok_charsmap_free(t->charsmap);
}

/* A malloc'd copy of s[0..n) (NUL-terminated). */
static dit_status copy_out(const char *s, size_t n, char **out, size_t *out_n, dit_error *err) {
  *out = malloc(n + 1);
  if (!*out) return dit_errorf(err, DIT_ERR_NOMEM, "tokenizer: out of memory normalizing %zu bytes", n);
  memcpy(*out, s, n);
  (*out)[n] = 0;
  *out_n = n;
  return DIT_OK;
}

/* Rust's char::to_lowercase: the simple mapping, except U+0130 which becomes "i\u0307". */
static dit_status lowercase(const char *s, size_t n, char **out, size_t *out_n, dit_error *err) {
  char *o = malloc(2 * n + 1); /* a lowercase form is never more than twice as long in UTF-8 */
  if (!o) return dit_errorf(err, DIT_ERR_NOMEM, "tokenizer: out of memory lowercasing %zu bytes", n);
  size_t k = 0;
  for (size_t i = 0; i < n;) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t cl = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
    if (cl <= 0) { /* not reached: the text was validated */
      o[k++] = s[i++];
      continue;
    }
    i += (size_t)cl;
    if (cp == 0x130) {
      memcpy(o + k, "i\xcc\x87", 3);
      k += 3;
      continue;
    }
    k += (size_t)utf8proc_encode_char(utf8proc_tolower(cp), (utf8proc_uint8_t *)o + k);
  }
  o[k] = 0;
  *out = o;
  *out_n = k;
  return DIT_OK;
}

static dit_status replace(const tok_norm_arg *a, const char *s, size_t n, char **out, size_t *out_n,
                          dit_error *err) {
  pcre2_match_data *md = pcre2_match_data_create(1, NULL);
  dit_sbuf o = {.ok = md != NULL};
  size_t off = 0, prev = 0;
  dit_status st = DIT_OK;
  while (o.ok && off <= n) {
    int rc = pcre2_match(a->re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      st = dit_errorf(err, DIT_ERR_FORMAT, "Replace normalizer: the regex failed (error %d)", rc);
      break;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    size_t ms = ov[0], me = ov[1];
    if (me == ms) { /* an empty match replaces nothing; step over one character */
      if (ms >= n) break;
      off = ms + 1;
      while (off < n && ((uint8_t)s[off] & 0xc0) == 0x80) off++;
      continue;
    }
    dit_sbuf_put(&o, s + prev, ms - prev);
    dit_sbuf_put(&o, a->content, a->content_len);
    prev = off = me;
  }
  pcre2_match_data_free(md);
  if (st == DIT_OK) dit_sbuf_put(&o, s + prev, n - prev);
  if (st == DIT_OK && !o.ok) st = dit_errorf(err, DIT_ERR_NOMEM, "tokenizer: out of memory in Replace");
  if (st != DIT_OK) {
    free(o.s);
    return st;
  }
  *out = o.s;
  *out_n = o.n;
  return DIT_OK;
}

static dit_status strip(const tok_norm_arg *a, const char *s, size_t n, char **out, size_t *out_n, dit_error *err) {
  size_t b = 0, e = n;
  while (a->strip_left && b < e) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t cl = utf8proc_iterate((const utf8proc_uint8_t *)s + b, (utf8proc_ssize_t)(e - b), &cp);
    if (cl <= 0 || !tok_is_space((uint32_t)cp)) break;
    b += (size_t)cl;
  }
  while (a->strip_right && e > b) {
    size_t p = e - 1;
    while (p > b && ((uint8_t)s[p] & 0xc0) == 0x80) p--;
    utf8proc_int32_t cp;
    utf8proc_ssize_t cl = utf8proc_iterate((const utf8proc_uint8_t *)s + p, (utf8proc_ssize_t)(e - p), &cp);
    if (cl <= 0 || !tok_is_space((uint32_t)cp)) break;
    e = p;
  }
  return copy_out(s + b, e - b, out, out_n, err);
}

dit_status tok_norm_step(const dit_tokenizer *t, size_t k, const char *s, size_t n, char **out, size_t *out_n,
                         dit_error *err) {
  switch (t->norm[k]) {
    case TOK_NORM_LOWERCASE: return lowercase(s, n, out, out_n, err);
    case TOK_NORM_REPLACE: return replace(&t->norm_arg[k], s, n, out, out_n, err);
    case TOK_NORM_STRIP: return strip(&t->norm_arg[k], s, n, out, out_n, err);
    case TOK_NORM_PRECOMPILED: return tok_charsmap_normalize(t->charsmap, s, n, out, out_n, err);
    default: return copy_out(s, n, out, out_n, err);
  }
}

/* The Metaspace pre-tokenizer (SentencePiece style): spaces become the replacement
 * character ("▁"), which is prepended to the piece as prepend_scheme says ("always";
 * "first": only to the piece that starts the text; "never"), and with split the piece is
 * cut before each replacement character (tokenizers' MergedWithNext). */
#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"

dit_status tok_load_metaspace(tok_pre_step *s, const json_t *p, dit_error *err) {
  const json_t *r = json_object_get(p, "replacement");
  const char *scheme = json_string_value(json_object_get(p, "prepend_scheme"));
  if (!json_is_string(r) || json_string_length(r) == 0 || json_string_length(r) >= sizeof s->repl ||
      strchr(json_string_value(r), ' '))
    return dit_errorf(err, DIT_ERR_FORMAT, "Metaspace pre_tokenizer needs a one-character string \"replacement\"");
  memcpy(s->repl, json_string_value(r), json_string_length(r));
  s->repl_len = json_string_length(r);
  DIT_TRY(tok_get_bool(p, "split", true, &s->split, "Metaspace pre_tokenizer", err));
  if (scheme) {
    static const char *const names[] = {"always", "first", "never"};
    int k = 0;
    while (k < 3 && strcmp(scheme, names[k])) k++;
    if (k == 3) return dit_errorf(err, DIT_ERR_FORMAT, "Metaspace pre_tokenizer: unknown prepend_scheme \"%.32s\"", scheme);
    s->prepend = (tok_prepend)k;
    return DIT_OK;
  }
  bool add; /* files older than prepend_scheme */
  DIT_TRY(tok_get_bool(p, "add_prefix_space", true, &add, "Metaspace pre_tokenizer", err));
  s->prepend = add ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
  return DIT_OK;
}

dit_status tok_metaspace(const tok_pre_step *s, const char *p, size_t n, bool at_start, char **out, size_t *out_n,
                         dit_error *err) {
  size_t spaces = 0;
  for (size_t i = 0; i < n; i++) spaces += p[i] == ' ';
  size_t cap = n + (spaces + 1) * s->repl_len + 1;
  char *o = malloc(cap);
  if (!o) return dit_errorf(err, DIT_ERR_NOMEM, "tokenizer: out of memory in Metaspace");
  size_t k = 0;
  bool starts = n > 0 && (p[0] == ' ' || (n >= s->repl_len && !memcmp(p, s->repl, s->repl_len)));
  if (!starts && (s->prepend == TOK_PREPEND_ALWAYS || (s->prepend == TOK_PREPEND_FIRST && at_start))) {
    memcpy(o, s->repl, s->repl_len);
    k = s->repl_len;
  }
  for (size_t i = 0; i < n; i++) {
    if (p[i] != ' ') {
      o[k++] = p[i];
      continue;
    }
    memcpy(o + k, s->repl, s->repl_len);
    k += s->repl_len;
  }
  o[k] = 0;
  *out = o;
  *out_n = k;
  return DIT_OK;
}

size_t tok_metaspace_next(const tok_pre_step *s, const char *p, size_t n, size_t pos) {
  if (!s->split) return n;
  for (size_t i = pos + 1; i + s->repl_len <= n; i++)
    if (!memcmp(p + i, s->repl, s->repl_len)) return i;
  return n;
}

/* Generation parameters as the text web UIs and PNG-info readers exchange (see ditrun.h,
 * dit_infotext). Parsing follows those readers' rules: the last line is the parameters
 * line when it holds three or more "Key: value" pairs, each found as
 *   \s*(\w[\w \-/]+):\s*("(?:\\.|[^\\"])+"|[^,]*)(?:,|$)
 * anywhere along the line; lines before it are the prompt until one starts with
 * "Negative prompt:", then the negative prompt; every line is stripped of outer spaces. */
#include <ctype.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/sbuf.h"
#include "ditrun.h"

static bool word_char(unsigned char c) { return isalnum(c) || c == '_' || c >= 0x80; }
static bool key_char(unsigned char c) { return word_char(c) || c == ' ' || c == '-' || c == '/'; }

static bool key_ok(const char *k) {
  if (!k || !word_char((unsigned char)k[0]) || !k[1]) return false;
  for (const char *p = k + 1; *p; p++)
    if (!key_char((unsigned char)*p)) return false;
  return k[strlen(k) - 1] != ' ';
}

static bool needs_quotes(const char *v) { return strpbrk(v, ",:\n") != NULL || v[0] == '"'; }

static void put_value(dit_sbuf *b, const char *v) {
  if (!needs_quotes(v)) {
    dit_sbuf_puts(b, v);
    return;
  }
  json_t *j = json_string(v);
  char *q = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
  if (q) dit_sbuf_puts(b, q);
  else b->ok = false;
  free(q);
  json_decref(j);
}

dit_status dit_infotext_format(const dit_infotext *t, char **out) {
  *out = NULL;
  if (!t || t->n_fields < 0 || t->n_fields > DIT_INFOTEXT_MAX_FIELDS) return DIT_ERR_INVALID_ARG;
  for (int i = 0; i < t->n_fields; i++)
    if (!key_ok(t->keys[i]) || !t->values[i]) return DIT_ERR_INVALID_ARG;
  dit_sbuf b = {.ok = true};
  dit_sbuf_puts(&b, t->prompt ? t->prompt : "");
  if (t->negative_prompt && *t->negative_prompt) {
    dit_sbuf_puts(&b, "\nNegative prompt: ");
    dit_sbuf_puts(&b, t->negative_prompt);
  }
  for (int i = 0; i < t->n_fields; i++) {
    dit_sbuf_puts(&b, i ? ", " : "\n");
    dit_sbuf_puts(&b, t->keys[i]);
    dit_sbuf_puts(&b, ": ");
    put_value(&b, t->values[i]);
  }
  if (!b.ok || !b.s) {
    free(b.s);
    return DIT_ERR_NOMEM;
  }
  *out = b.s;
  return DIT_OK;
}

/* Tries the pattern at s[0]. On a match sets key/value spans and returns the length
 * consumed; 0 when there is none here. */
static size_t match_pair(const char *s, const char **k, size_t *kn, const char **v, size_t *vn) {
  const char *p = s;
  while (isspace((unsigned char)*p)) p++;
  if (!word_char((unsigned char)*p)) return 0;
  const char *ks = p++;
  if (!key_char((unsigned char)*p)) return 0;
  while (key_char((unsigned char)*p)) p++;
  if (*p != ':') return 0;
  *k = ks, *kn = (size_t)(p - ks);
  p++;
  while (isspace((unsigned char)*p)) p++;
  if (*p == '"') { /* "(?:\\.|[^\\"])+" followed by ',' or the end */
    const char *q = p + 1;
    while (*q && *q != '"') q += (*q == '\\' && q[1]) ? 2 : 1;
    if (*q == '"' && q > p + 1 && (q[1] == ',' || q[1] == 0)) {
      *v = p, *vn = (size_t)(q + 1 - p);
      return (size_t)(q + 1 - s) + (q[1] == ',');
    }
  }
  const char *e = p;
  while (*e && *e != ',') e++;
  *v = p, *vn = (size_t)(e - p);
  return (size_t)(e - s) + (*e == ',');
}

static char *dup_n(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (d) memcpy(d, s, n), d[n] = 0;
  return d;
}

/* A quoted value -> its JSON string; anything else (or bad JSON) as written. */
static char *unquote(const char *v, size_t n) {
  if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
    json_error_t je;
    json_t *j = json_loadb(v, n, JSON_DECODE_ANY, &je);
    if (json_is_string(j)) {
      char *d = dup_n(json_string_value(j), json_string_length(j));
      json_decref(j);
      return d;
    }
    json_decref(j);
  }
  return dup_n(v, n);
}

/* Counts (or, with t, stores) the pairs of one line. Returns the count, -1 on no memory. */
static int scan_pairs(const char *line, dit_infotext *t) {
  int n = 0;
  for (const char *p = line; *p;) {
    const char *k, *v;
    size_t kn, vn, used = match_pair(p, &k, &kn, &v, &vn);
    if (!used) {
      p++;
      continue;
    }
    p += used;
    n++;
    if (!t || t->n_fields >= DIT_INFOTEXT_MAX_FIELDS) continue;
    char *key = dup_n(k, kn), *val = unquote(v, vn);
    if (!key || !val) {
      free(key), free(val);
      return -1;
    }
    t->keys[t->n_fields] = key;
    t->values[t->n_fields++] = val;
  }
  return n;
}

/* Appends the stripped line [s, e) to *dst with "\n" between lines. */
static bool append_line(char **dst, const char *s, const char *e) {
  while (s < e && isspace((unsigned char)*s)) s++;
  while (e > s && isspace((unsigned char)e[-1])) e--;
  size_t old = *dst ? strlen(*dst) : 0, n = (size_t)(e - s);
  char *d = realloc(*dst, old + (old ? 1 : 0) + n + 1);
  if (!d) return false;
  if (old) d[old++] = '\n';
  memcpy(d + old, s, n);
  d[old + n] = 0;
  *dst = d;
  return true;
}

dit_status dit_infotext_parse(const char *text, dit_infotext *out) {
  memset(out, 0, sizeof *out);
  out->owned = 1;
  char *t = strdup(text ? text : "");
  if (!t) return DIT_ERR_NOMEM;
  char *s = t, *e = t + strlen(t); /* strip the whole text */
  while (*s && isspace((unsigned char)*s)) s++;
  while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
  char *last = strrchr(s, '\n');
  char *params = last ? last + 1 : s;
  bool ok = true;
  int np = scan_pairs(params, NULL);
  if (np >= 3) {
    ok = scan_pairs(params, out) >= 0;
    if (last) *last = 0;
    else *s = 0;
  }
  char *prompt = NULL, *neg = NULL;
  bool in_neg = false;
  for (char *line = s; ok && *s && line;) {
    char *nl = strchr(line, '\n');
    char *end = nl ? nl : line + strlen(line);
    const char *ls = line;
    while (ls < end && isspace((unsigned char)*ls)) ls++;
    if (!strncmp(ls, "Negative prompt:", 16)) in_neg = true, ls += 16;
    ok = append_line(in_neg ? &neg : &prompt, ls, end);
    line = nl ? nl + 1 : NULL;
  }
  free(t);
  out->prompt = prompt ? prompt : strdup("");
  out->negative_prompt = neg ? neg : strdup("");
  if (!ok || !out->prompt || !out->negative_prompt) {
    dit_infotext_free(out);
    return DIT_ERR_NOMEM;
  }
  return DIT_OK;
}

const char *dit_infotext_get(const dit_infotext *t, const char *key) {
  for (int i = 0; t && i < t->n_fields; i++)
    if (!strcmp(t->keys[i], key)) return t->values[i];
  return NULL;
}

void dit_infotext_free(dit_infotext *t) {
  if (!t) return;
  if (t->owned) {
    free((char *)t->prompt);
    free((char *)t->negative_prompt);
    for (int i = 0; i < t->n_fields; i++) free((char *)t->keys[i]), free((char *)t->values[i]);
  }
  memset(t, 0, sizeof *t);
}

/* A tokenizer against transformers' ids (see tok_refs.h). */
#include "tok_refs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testing.h"
#include "text/tokenizer.h"

void dt_check_tokenizer_refs(const char *dir, const json_t *r, const char *key, size_t n_cases) {
  dit_tokenizer *t = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_tok_load(dir, &t, &e) == DIT_OK, "%s: %s", key, e.msg);
  if (!t) return;
  size_t max_length = (size_t)json_integer_value(json_object_get(r, "max_length"));
  CHECK_MSG(dit_tok_pad_id(t) == json_integer_value(json_object_get(r, "pad")), "%s: pad id %d", key,
            dit_tok_pad_id(t));
  const json_t *cases = json_object_get(r, "cases");
  CHECK_MSG(json_array_size(cases) == n_cases, "%s: %zu cases", key, json_array_size(cases));
  size_t same = 0;
  for (size_t i = 0; i < json_array_size(cases); i++) {
    const json_t *c = json_array_get(cases, i), *ref = json_object_get(c, "ids");
    const char *text = json_string_value(json_object_get(c, "text"));
    int32_t *ids = NULL;
    size_t n = 0;
    dit_status st = dit_tok_encode_model(t, text, json_string_length(json_object_get(c, "text")), max_length, &ids,
                                         &n, &e);
    bool ok = st == DIT_OK && n == json_array_size(ref);
    for (size_t k = 0; ok && k < n; k++) ok = ids[k] == json_integer_value(json_array_get(ref, k));
    CHECK_MSG(ok, "%s case %zu \"%.60s\": %s", key, i, text, st == DIT_OK ? "ids differ" : e.msg);
    if (!ok && st == DIT_OK) {
      fprintf(stderr, "  got %zu:", n);
      for (size_t k = 0; k < n && k < 40; k++) fprintf(stderr, " %d", ids[k]);
      fprintf(stderr, "\n  expected %zu:", json_array_size(ref));
      for (size_t k = 0; k < json_array_size(ref) && k < 40; k++)
        fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(ref, k)));
      fputc('\n', stderr);
    }
    same += ok;
    free(ids);
  }
  printf("%s: %zu of %zu reference strings give the reference ids\n", key, same, json_array_size(cases));
  /* a 1 MB prompt (words, then one 256 KB run without spaces, with a NUL byte) is cut to max_length */
  size_t big = 1 << 20;
  char *text = malloc(big);
  if (text) {
    for (size_t i = 0; i < big; i++) text[i] = i < 3 * big / 4 ? "word "[i % 5] : (char)('a' + i % 26);
    text[big - 7] = 0;
    int32_t *ids = NULL;
    size_t n = 0;
    dit_status st = dit_tok_encode_model(t, text, big, max_length, &ids, &n, &e);
    CHECK_MSG(st == DIT_OK && n == max_length, "%s: 1 MB prompt: %zu ids, %s", key, n, st == DIT_OK ? "" : e.msg);
    free(ids);
    free(text);
  }
  /* max_length below the special tokens is refused; invalid UTF-8 is refused */
  int32_t *ids = NULL;
  size_t n = 0;
  CHECK(dit_tok_encode_model(t, "a", 1, 1, &ids, &n, &e) != DIT_OK || n <= 1);
  free(ids);
  CHECK(dit_tok_encode_model(t, "a\xff", 2, 77, &ids, &n, &e) == DIT_ERR_INVALID_ARG && !ids && n == 0);
  dit_tok_free(t);
}


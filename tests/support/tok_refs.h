/* A tokenizer against the ids transformers gives (tests/fixtures/gen/make_tokenizer_refs.py's
 * files): shared by the FLUX.1 and Gemma 3 tokenizer tests. */
#ifndef DIT_TEST_TOK_REFS_H
#define DIT_TEST_TOK_REFS_H

#include <stddef.h>

#include "io/json.h"

/* Loads the tokenizer in dir and encodes every case of r ({"max_length", "pad", "cases": [{"text",
 * "ids"}]}: n_cases of them) with its special tokens, cut to max_length: the ids must be equal.
 * Then a 1 MB prompt is cut to max_length, a max_length below the special tokens and invalid
 * UTF-8 are refused. key names r in messages. */
void dt_check_tokenizer_refs(const char *dir, const json_t *r, const char *key, size_t n_cases);

#endif

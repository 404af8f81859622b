/* libFuzzer target for tokenizing arbitrary bytes with the real (fixture) Qwen3
 * tokenizer, plain and inside both chat templates: the result is ids below the vocab
 * size, or DIT_ERR_INVALID_ARG (invalid UTF-8, naming the offset) exactly when
 * dit_utf8_validate rejects the bytes. The tokenizer.json is $DIT_FUZZ_TOKENIZER, else
 * the zimage-tiny fixture's in the source tree (tests/fixtures), relative to the working
 * folder (fuzz/run.sh sets the variable). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"
#include "text/tokenizer.h"

#ifndef DIT_FUZZ_DEFAULT_TOKENIZER
#define DIT_FUZZ_DEFAULT_TOKENIZER "tests/fixtures/models/zimage-tiny/tokenizer/tokenizer.json"
#endif

static const dit_tokenizer *tok(void) {
  static dit_tokenizer *t;
  if (!t) {
    const char *path = getenv("DIT_FUZZ_TOKENIZER");
    dit_error err = {0};
    if (dit_tok_load_file(path ? path : DIT_FUZZ_DEFAULT_TOKENIZER, &t, &err) != DIT_OK) {
      fprintf(stderr, "fuzz_tokenize: %s (set DIT_FUZZ_TOKENIZER)\n", err.msg);
      abort();
    }
  }
  return t;
}

static void encode_check(const char *text, size_t len, bool valid) {
  dit_error err = {0};
  int32_t *ids = NULL;
  size_t n = 0;
  dit_status s = dit_tok_encode(tok(), text, len, &ids, &n, &err);
  if (s == DIT_OK) {
    if (!valid || (len && !n)) abort();
    for (size_t i = 0; i < n; i++)
      if (ids[i] < 0 || (size_t)ids[i] >= dit_tok_vocab_size(tok())) abort();
    free(ids);
  } else if (s != DIT_ERR_INVALID_ARG || valid || !err.msg[0] || ids || n) {
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  dit_error verr = {0};
  bool valid = dit_utf8_validate(text, size, &verr) == DIT_OK;
  if (!valid && !verr.msg[0]) abort();
  encode_check(text, size, valid);
  static const dit_chat_style styles[] = {DIT_CHAT_QWEN3_THINKING, DIT_CHAT_QWEN3_NO_THINKING};
  for (size_t k = 0; k < 2; k++) {
    char *chat = NULL;
    size_t chat_len = 0;
    dit_error err = {0};
    dit_status s = dit_chat_render_n(styles[k], text, size, &chat, &chat_len, &err);
    if (s == DIT_OK) {
      encode_check(chat, chat_len, valid);
      free(chat);
    } else if (!err.msg[0]) {
      abort();
    }
  }
  return 0;
}

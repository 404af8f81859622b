/* libFuzzer target for tokenizer.json loading: any bytes give a tokenizer or
 * DIT_ERR_FORMAT / DIT_ERR_UNSUPPORTED / DIT_ERR_NOMEM with a message naming the field,
 * never a crash, leak or UB. A loaded tokenizer must then encode a few fixed texts
 * (plain, special-token, byte-level, invalid UTF-8) with every id below its vocab size, and
 * encode as a pipeline does (special tokens added, cut to max_length) within max_length. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "text/tokenizer.h"

static void encode_check(const dit_tokenizer *t, const char *text, size_t len) {
  dit_error err = {0};
  int32_t *ids = NULL;
  size_t n = 0;
  dit_status s = dit_tok_encode(t, text, len, &ids, &n, &err);
  if (s == DIT_OK) {
    size_t vocab = dit_tok_vocab_size(t);
    for (size_t i = 0; i < n; i++)
      if (ids[i] < 0 || (size_t)ids[i] >= vocab) abort();
    free(ids);
  } else if (!err.msg[0] || ids || n) {
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_write("tokenizer.json", data, size);
  char path[512];
  snprintf(path, sizeof path, "%s/tokenizer.json", fz_dir());
  dit_error err = {0};
  dit_tokenizer *t = NULL;
  dit_status s = dit_tok_load_file(path, &t, &err);
  if (s != DIT_OK) {
    if (t || !err.msg[0] || (s != DIT_ERR_FORMAT && s != DIT_ERR_UNSUPPORTED && s != DIT_ERR_NOMEM)) abort();
    return 0;
  }
  static const char *const texts[] = {"Hello world", "<|im_start|>user\nhi<|im_end|>", "a  b\t\n 12345 !?",
                                      "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80", "", "\xff\xfe"};
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) encode_check(t, texts[i], strlen(texts[i]));
  encode_check(t, "a\0b", 3);
  /* as a pipeline calls it: the post-processor's special tokens, cut to max_length */
  for (size_t max_len = 1; max_len <= 9; max_len += 4) {
    dit_error e2 = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    if (dit_tok_encode_model(t, texts[0], strlen(texts[0]), max_len, &ids, &n, &e2) == DIT_OK) {
      if (n > max_len) abort();
      for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= dit_tok_vocab_size(t)) abort();
      free(ids);
    } else if (!e2.msg[0] || ids || n) {
      abort();
    }
  }
  for (int32_t id = -1; id < 300; id++) {
    size_t len;
    const char *str = dit_tok_token_str(t, id, &len);
    if (str && id >= 0 && (size_t)id >= dit_tok_vocab_size(t)) abort();
    if (str && len) (void)str[len - 1];
  }
  dit_tok_free(t);
  return 0;
}

/* libFuzzer target for what `ditrun info IMAGE.png` reads from an untrusted PNG: the file
 * (dit_png_read_text, libpng under ditrun's limits) and the "parameters" text parser
 * (dit_infotext_parse). The first byte picks: even = the bytes are a PNG file; odd = the rest
 * is a parameters text. A PNG gives DIT_OK or a FORMAT error with a message, never a crash,
 * leak or UB; a text always parses (only running out of memory fails), and what it parses to
 * formats and parses again to the same fields. */
#include <stdlib.h>
#include <string.h>

#include "ditrun.h"
#include "fuzz_util.h"
#include "io/png.h"

static void check_text(const char *text) {
  dit_infotext t, u;
  if (dit_infotext_parse(text, &t) != DIT_OK) abort();
  if (!t.prompt || !t.negative_prompt || t.n_fields < 0 || t.n_fields > DIT_INFOTEXT_MAX_FIELDS) abort();
  char *again = NULL;
  /* keys the parser returns may break the writer's stricter key rules; those are refused */
  if (dit_infotext_format(&t, &again) == DIT_OK) {
    if (dit_infotext_parse(again, &u) != DIT_OK) abort();
    dit_infotext_free(&u);
  }
  free(again);
  dit_infotext_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > (1u << 20)) return 0;
  if (data[0] & 1) {
    char *text = malloc(size);
    if (!text) return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    check_text(text);
    free(text);
    return 0;
  }
  fz_write("in.png", data + 1, size - 1);
  char path[512];
  snprintf(path, sizeof path, "%s/in.png", fz_dir());
  dit_error err = {0};
  dit_png_text t;
  dit_status s = dit_png_read_text(path, &t, &err);
  if (s == DIT_OK) {
    for (int i = 0; i < t.n; i++)
      if (!t.keys[i] || !t.values[i]) abort();
    for (int i = 0; i < t.n; i++)
      if (!strcmp(t.keys[i], "parameters")) check_text(t.values[i]);
    dit_png_text_free(&t);
  } else if ((s != DIT_ERR_FORMAT && s != DIT_ERR_NOMEM) || !err.msg[0]) {
    abort();
  }
  return 0;
}

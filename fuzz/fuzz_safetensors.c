/* libFuzzer target for the safetensors reader: any bytes must give DIT_OK or a
 * FORMAT/UNSUPPORTED error with a message, never a crash, leak or UB; an accepted file
 * has every tensor inside the buffer. Not part of the CMake build; build and run with
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Isrc -Iinclude \
 *     fuzz/fuzz_safetensors.c src/io/safetensors.c src/io/json.c src/core/error.c \
 *     src/core/dtype.c src/core/tensor.c -ljansson -lm -o fuzz_st
 *   ./fuzz_st -max_total_time=60 CORPUS_DIR   (seed it with the fixture .safetensors files) */
#include <stdlib.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dit_error err = {0};
  dit_st_file *f;
  dit_st_options opt = {.max_header_bytes = 1u << 20};
  dit_status s = dit_st_open_memory(data, size, "fuzz", &opt, &f, &err);
  if (s == DIT_OK) {
    for (size_t i = 0; i < f->n_tensors; i++) {
      const dit_st_tensor *t = &f->tensors[i];
      const uint8_t *p = t->data;
      if (p < data || t->end < t->begin || (size_t)(p - data) + (t->end - t->begin) > size) abort();
    }
    dit_st_close(f);
  } else if ((s != DIT_ERR_FORMAT && s != DIT_ERR_UNSUPPORTED) || !err.msg[0]) {
    abort();
  }
  return 0;
}

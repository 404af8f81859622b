/* libFuzzer target for the GGUF reader: any bytes must give DIT_OK or a FORMAT/UNSUPPORTED
 * error with a message, never a crash, leak or UB; an accepted file has every tensor inside
 * the buffer with the byte size its dtype and shape imply, and every key/value readable.
 * Built by fuzz/CMakeLists.txt (make fuzz); seeds in fuzz/corpus/gguf. */
#include <stdlib.h>

#include "io/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dit_error err = {0};
  dit_st_file *f;
  dit_status s = dit_gguf_open_memory(data, size, "fuzz", &f, &err);
  if (s != DIT_OK) {
    if ((s != DIT_ERR_FORMAT && s != DIT_ERR_UNSUPPORTED) || !err.msg[0]) abort();
    return 0;
  }
  for (size_t i = 0; i < f->n_tensors; i++) {
    const dit_st_tensor *t = &f->tensors[i];
    const uint8_t *p = t->data;
    dit_tensor d = dit_tensor_make(t->dtype, NULL, t->ndim, t->shape);
    if (p < data || t->end < t->begin || (size_t)(p - data) + (t->end - t->begin) > size ||
        dit_tensor_nbytes(&d) != t->end - t->begin)
      abort();
  }
  for (size_t i = 0; i < f->gguf->n_kv; i++) { /* every element readable */
    const dit_gguf_kv *kv = &f->gguf->kv[i];
    const char *sv;
    uint64_t n;
    double v;
    for (uint64_t k = 0; k < kv->n && k < 64; k++)
      if (kv->elem == DIT_GGUF_STRING ? !(kv->type == DIT_GGUF_ARRAY ? dit_gguf_str_at(kv, k, &sv, &n) : dit_gguf_str(kv, &sv, &n))
                                      : !dit_gguf_float_at(kv, k, &v))
        abort();
  }
  dit_st_close(f);
  return 0;
}

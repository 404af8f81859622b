/* libFuzzer target for `ditrun serve`'s request parser (tools/serve_req.c): any bytes as a
 * request body. A body is either a request whose every field is in range, or refused with a
 * message; never a crash, a leak or a half-filled request. Also base64 of the bytes, whose
 * length and alphabet are checked. */
#include <stdlib.h>
#include <string.h>

#include "serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const srv_limits lim = {2048 * 2048, 4, true};
  srv_gen_req r;
  char msg[512];
  msg[0] = 0;
  if (srv_req_parse((const char *)data, size, &lim, &r, msg, sizeof msg)) {
    if (!r.prompt || !r.prompt[0] || strlen(r.prompt) > SRV_MAX_PROMPT) abort();
    if (r.negative && strlen(r.negative) > SRV_MAX_PROMPT) abort();
    if (r.n < 1 || r.n > lim.max_n || r.steps < 0 || r.steps > SRV_MAX_STEPS) abort();
    if ((r.width == 0) != (r.height == 0)) abort();
    if (r.width && (r.width < 16 || r.height < 16 || (int64_t)r.width * r.height > lim.max_pixels)) abort();
    if (r.guidance_set && !(r.guidance >= 0 && r.guidance <= 100)) abort();
    if (r.n_loras < 0 || r.n_loras > DIT_MAX_LORAS) abort();
    for (int i = 0; i < r.n_loras; i++) /* a plain file name: no path, no hidden file */
      if (!r.lora_name[i][0] || r.lora_name[i][0] == '.' || strchr(r.lora_name[i], '/') ||
          !(r.lora_scale[i] >= -100 && r.lora_scale[i] <= 100))
        abort();
    srv_req_free(&r);
  } else if (!msg[0] || r.prompt || r.negative) {
    abort();
  }
  char *b = srv_base64(data, size);
  static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=";
  if (!b || strlen(b) != (size + 2) / 3 * 4 || strspn(b, alphabet) != strlen(b))
    abort();
  free(b);
  return 0;
}

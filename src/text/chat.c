/* Chat template rendering for the supported text encoders (see chat.h). */
#include "text/chat.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char qwen3_head[] = "<|im_start|>user\n";
static const char qwen3_tail[] = "<|im_end|>\n<|im_start|>assistant\n";
static const char qwen3_no_think[] = "<think>\n\n</think>\n\n";

dit_status dit_chat_render_n(dit_chat_style style, const char *prompt, size_t len, char **out, size_t *out_len,
                             dit_error *err) {
  *out = NULL;
  if (out_len) *out_len = 0;
  if (style != DIT_CHAT_QWEN3_THINKING && style != DIT_CHAT_QWEN3_NO_THINKING)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "chat template: unknown style %d", (int)style);
  if (!prompt) len = 0;
  const char *extra = style == DIT_CHAT_QWEN3_NO_THINKING ? qwen3_no_think : "";
  size_t nh = sizeof qwen3_head - 1, nt = sizeof qwen3_tail - 1, ne = strlen(extra);
  if (len > SIZE_MAX - nh - nt - ne - 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "chat template: prompt too long");
  size_t total = nh + len + nt + ne;
  char *s = malloc(total + 1);
  if (!s) return dit_errorf(err, DIT_ERR_NOMEM, "chat template: cannot allocate %zu bytes", total + 1);
  memcpy(s, qwen3_head, nh);
  if (len) memcpy(s + nh, prompt, len);
  memcpy(s + nh + len, qwen3_tail, nt);
  memcpy(s + nh + len + nt, extra, ne);
  s[total] = '\0';
  *out = s;
  if (out_len) *out_len = total;
  return DIT_OK;
}

dit_status dit_chat_render(dit_chat_style style, const char *prompt, char **out, dit_error *err) {
  return dit_chat_render_n(style, prompt, prompt ? strlen(prompt) : 0, out, NULL, err);
}


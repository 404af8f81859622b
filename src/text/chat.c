/* Chat template rendering for the supported text encoders (see chat.h). */
#include "text/chat.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char qwen3_head[] = "<|im_start|>user\n";
static const char qwen3_tail[] = "<|im_end|>\n<|im_start|>assistant\n";
static const char qwen3_tail_no_think[] = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
static const char krea2_head[] =
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, "
    "spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n";

dit_status dit_chat_parts(dit_chat_style style, const char **head, const char **tail, dit_error *err) {
  switch (style) {
    case DIT_CHAT_QWEN3_THINKING: *head = qwen3_head, *tail = qwen3_tail; return DIT_OK;
    case DIT_CHAT_QWEN3_NO_THINKING: *head = qwen3_head, *tail = qwen3_tail_no_think; return DIT_OK;
    case DIT_CHAT_KREA2: *head = krea2_head, *tail = qwen3_tail; return DIT_OK;
    default: return dit_errorf(err, DIT_ERR_INVALID_ARG, "chat template: unknown style %d", (int)style);
  }
}

dit_status dit_chat_render_n(dit_chat_style style, const char *prompt, size_t len, char **out, size_t *out_len,
                             dit_error *err) {
  *out = NULL;
  if (out_len) *out_len = 0;
  const char *head = NULL, *tail = NULL;
  DIT_TRY(dit_chat_parts(style, &head, &tail, err));
  if (!prompt) len = 0;
  size_t nh = strlen(head), nt = strlen(tail);
  if (len > SIZE_MAX - nh - nt - 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "chat template: prompt too long");
  size_t total = nh + len + nt;
  char *s = malloc(total + 1);
  if (!s) return dit_errorf(err, DIT_ERR_NOMEM, "chat template: cannot allocate %zu bytes", total + 1);
  memcpy(s, head, nh);
  if (len) memcpy(s + nh, prompt, len);
  memcpy(s + nh + len, tail, nt);
  s[total] = '\0';
  *out = s;
  if (out_len) *out_len = total;
  return DIT_OK;
}

dit_status dit_chat_render(dit_chat_style style, const char *prompt, char **out, dit_error *err) {
  return dit_chat_render_n(style, prompt, prompt ? strlen(prompt) : 0, out, NULL, err);
}


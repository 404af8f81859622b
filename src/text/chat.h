/* Chat templates of the text encoders the pipelines use, rendered directly (no general
 * Jinja): what tokenizer.apply_chat_template(messages=[{"role": "user", "content":
 * prompt}], tokenize=False, add_generation_prompt=True, enable_thinking=...) returns
 * with Qwen3's template (tokenizer_config.json "chat_template"):
 *   "<|im_start|>user\n" PROMPT "<|im_end|>\n<|im_start|>assistant\n"
 * and, with enable_thinking=False only, "<think>\n\n</think>\n\n" after it.
 * Z-Image passes enable_thinking=True, FLUX.2 klein enable_thinking=False. The prompt is
 * inserted verbatim (no trimming, no escaping); special tokens written in it are
 * recognized later by the tokenizer, exactly as in transformers. */
#ifndef DIT_TEXT_CHAT_H
#define DIT_TEXT_CHAT_H

#include <stddef.h>

#include "core/error.h"

/* DIT_CHAT_NONE: the text encoders take the prompt as it is (FLUX.1). DIT_CHAT_KREA2: Krea 2's
 * Qwen3-VL template, a system turn describing the image, then the user turn:
 *   "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture,
 *   quantity, text, spatial relationships of the objects and background:<|im_end|>\n"
 *   "<|im_start|>user\n" PROMPT "<|im_end|>\n<|im_start|>assistant\n"
 * (its pipeline tokenizes the part before the prompt's end and the tail apart, padding between
 * them: pipeline/prompt.h). */
typedef enum { DIT_CHAT_NONE = -1, DIT_CHAT_QWEN3_THINKING, DIT_CHAT_QWEN3_NO_THINKING, DIT_CHAT_KREA2 } dit_chat_style;

/* The text a style puts before the prompt and after it (static strings), or
 * DIT_ERR_INVALID_ARG for an unknown style or DIT_CHAT_NONE. */
dit_status dit_chat_parts(dit_chat_style style, const char **head, const char **tail, dit_error *err);

/* Renders a NUL-terminated prompt (NULL = ""); *out is malloc'd and NUL-terminated. */
dit_status dit_chat_render(dit_chat_style style, const char *prompt, char **out, dit_error *err);
/* Same for len bytes of prompt (may contain NUL bytes); *out_len = rendered length. */
dit_status dit_chat_render_n(dit_chat_style style, const char *prompt, size_t len, char **out, size_t *out_len,
                             dit_error *err);

#endif

/* Prompt text -> caption features, as the diffusers pipelines compute them with their
 * Qwen3 text encoder: chat template, tokenize, truncate/pad to max_sequence_length,
 * attention mask, the hidden states the pipeline takes. One function per pipeline
 * family, since each takes different layers and keeps different positions. */
#ifndef DIT_PIPELINE_PROMPT_H
#define DIT_PIPELINE_PROMPT_H

#include "core/error.h"
#include "models/qwen3.h"
#include "text/tokenizer.h"

/* ZImagePipeline._encode_prompt for one prompt (NULL = ""): the Qwen3 chat template with
 * enable_thinking=True, ids truncated to max_len (the pipeline's max_sequence_length,
 * 512 by default), hidden_states[-2] at the real (unpadded) positions only.
 * The padding the pipeline adds is never attended to by real positions (causal + key
 * mask), so only the n real tokens are run: the same values, max_len/n times cheaper.
 * *embeds: malloc'd host F32 [*n_tokens, hidden_size]; free() it. On failure *embeds is
 * NULL and *n_tokens 0 (invalid UTF-8 and max_len < 1 are DIT_ERR_INVALID_ARG; NaN or
 * Inf in the features is DIT_ERR_NUMERIC naming the token). */
dit_status dit_zimage_encode_prompt(dit_qwen3 *te, const dit_tokenizer *tok, const char *prompt, int max_len,
                                    float **embeds, int *n_tokens, dit_error *err);

/* What dit_zimage_encode_prompt of prompt costs (core/cost.h: the encoder's run, its output
 * buffer and the features returned) and its *n_tokens; nothing runs. */
dit_status dit_zimage_prompt_cost(const dit_qwen3 *te, const dit_tokenizer *tok, const char *prompt, int max_len,
                                  dit_cost *out, int *n_tokens, dit_error *err);
/* Flux2KleinPipeline._get_qwen3_prompt_embeds for one prompt (NULL = ""): the chat
 * template with enable_thinking=False, ids truncated and right-padded with
 * <|endoftext|> to max_len (512 by default), hidden_states 9, 18 and 27 concatenated
 * per position: *embeds is malloc'd host F32 [max_len, 3 * hidden_size] (padded
 * positions included, as the pipeline keeps them); free() it. The encoder must have
 * at least 27 layers. On failure *embeds is NULL. */
dit_status dit_flux2_klein_encode_prompt(dit_qwen3 *te, const dit_tokenizer *tok, const char *prompt, int max_len,
                                         float **embeds, dit_error *err);

/* What dit_flux2_klein_encode_prompt of prompt costs (its encoder run over max_len ids and
 * the buffers of the three hidden states) and the prompt's *n_tokens before padding. */
dit_status dit_flux2_klein_prompt_cost(const dit_qwen3 *te, const dit_tokenizer *tok, const char *prompt,
                                       int max_len, dit_cost *out, int *n_tokens, dit_error *err);
/* Krea2Pipeline.get_text_hidden_states for one prompt (NULL = ""): its template (text/chat.h,
 * DIT_CHAT_KREA2) as a block of max_len + 29 tokens (system turn + prompt, truncated or padded)
 * then the 5 tail tokens; the hidden states taps[0..n_taps) of the text encoder (Qwen3-VL's
 * language model) after the 34 system tokens. *embeds: malloc'd host F32 [max_len, n_taps,
 * hidden], *mask: malloc'd [max_len] (1 = prompt or tail token); rows of padding hold 0 (the
 * pipeline's hold the encoder's output there, which no later step reads). Free both. */
dit_status dit_krea2_encode_prompt(dit_qwen3 *te, const dit_tokenizer *tok, const char *prompt, int max_len,
                                   const int *taps, int n_taps, float **embeds, uint8_t **mask, dit_error *err);
/* What dit_krea2_encode_prompt of prompt costs (the encoder over the real ids, to the deepest
 * tap, and its buffers) and the prompt's *n_tokens after the template's head. */
dit_status dit_krea2_prompt_cost(const dit_qwen3 *te, const dit_tokenizer *tok, const char *prompt, int max_len,
                                 const int *taps, int n_taps, dit_cost *out, int *n_tokens, dit_error *err);

#endif

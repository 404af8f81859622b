/* Caption features from prompt text for the Qwen3-conditioned pipelines (see prompt.h):
 * the glue between the chat template, the tokenizer and the text encoder. */
#include "pipeline/prompt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"

#define KLEIN_N_LAYERS 3
#define KLEIN_DEEPEST 27 /* the last of the hidden states it takes: 9, 18, 27 */
#define KREA2_PREFIX_TOKENS 34 /* the pipeline's prompt_template_encode_start_idx: the system turn */
#define KREA2_SUFFIX_TOKENS 5  /* prompt_template_encode_num_suffix_tokens */

/* Chat-templated ids of prompt, truncated to max_len (the pipelines' truncation=True
 * keeps the first ids). *ids malloc'd, *n >= 1 on success. */
static dit_status prompt_ids(const dit_tokenizer *tok, dit_chat_style style, const char *prompt, int max_len,
                             int32_t **ids, int *n, dit_error *err) {
  *ids = NULL;
  *n = 0;
  if (!tok) return dit_errorf(err, DIT_ERR_INVALID_ARG, "prompt: NULL tokenizer");
  if (max_len < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "prompt: max_sequence_length %d must be >= 1", max_len);
  char *text = NULL;
  DIT_TRY(dit_chat_render(style, prompt, &text, err));
  size_t count = 0;
  dit_status s = dit_tok_encode(tok, text, strlen(text), ids, &count, err);
  free(text);
  if (s != DIT_OK) {
    dit_error_prefix(err, "prompt");
    return s;
  }
  if (count == 0) {
    free(*ids);
    *ids = NULL;
    return dit_errorf(err, DIT_ERR_INTERNAL, "prompt: the chat template encoded to no tokens");
  }
  *n = count > (size_t)max_len ? max_len : (int)count;
  return DIT_OK;
}

/* Runs te on one sequence of S ids (mask may be NULL) and downloads the requested
 * hidden states into host[j] ([S * hidden] floats each). */
static dit_status encode_to_host(dit_qwen3 *te, int S, const int32_t *ids, const uint8_t *mask, int n_layers, const int *layers, float *const *host, dit_error *err) {
  dit_backend *be = dit_qwen3_backend(te);
  size_t bytes = (size_t)S * (size_t)dit_qwen3_get_config(te)->hidden_size * sizeof(float);
  void **dev = calloc((size_t)(n_layers > 0 ? n_layers : 1), sizeof *dev);
  dit_status s = dev ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "prompt: out of memory");
  for (int j = 0; j < n_layers && s == DIT_OK; j++) s = be->ops->alloc(be, bytes, &dev[j], err);
  if (s == DIT_OK) s = dit_qwen3_encode(te, 1, S, ids, mask, n_layers, layers, (float *const *)dev, err);
  for (int j = 0; j < n_layers && s == DIT_OK; j++) s = be->ops->download(be, host[j], dev[j], bytes, err);
  for (int j = 0; dev && j < n_layers; j++)
    if (dev[j]) be->ops->free(be, dev[j]);
  free(dev);
  return s;
}

/* NaN/Inf in caption features is a numeric failure of the text encoder, named here
 * rather than found later as a black image. */
static dit_status check_finite(const float *x, size_t rows, size_t width, const char *what, dit_error *err) {
  for (size_t i = 0; i < rows * width; i++)
    if (!isfinite(x[i]))
      return dit_errorf(err, DIT_ERR_NUMERIC, "%s: the text encoder produced %s at token %zu", what,
                        isnan(x[i]) ? "NaN" : "Inf", i / width);
  return DIT_OK;
}

dit_status dit_zimage_encode_prompt(dit_qwen3 *te, const dit_tokenizer *tok, const char *prompt, int max_len,
                                    float **embeds, int *n_tokens, dit_error *err) {
  *embeds = NULL;
  *n_tokens = 0;
  if (!te) return dit_errorf(err, DIT_ERR_INVALID_ARG, "prompt: NULL text encoder");
  int32_t *ids = NULL;
  int n = 0;
  DIT_TRY(prompt_ids(tok, DIT_CHAT_QWEN3_THINKING, prompt, max_len, &ids, &n, err));
  size_t H = (size_t)dit_qwen3_get_config(te)->hidden_size;
  float *out = malloc((size_t)n * H * sizeof *out);
  if (!out) {
    free(ids);
    return dit_errorf(err, DIT_ERR_NOMEM, "prompt: out of memory for %d x %zu caption features", n, H);
  }
  /* Only the n real ids: the pipeline's right padding is invisible to them. */
  const int layer = -2;
  dit_status s = encode_to_host(te, n, ids, NULL, 1, &layer, &out, err);
  free(ids);
  if (s == DIT_OK) s = check_finite(out, (size_t)n, H, "Z-Image prompt", err);
  if (s != DIT_OK) {
    free(out);
    dit_error_prefix(err, "Z-Image prompt encoding");
    return s;
  }
  *embeds = out;
  *n_tokens = n;
  return DIT_OK;
}

dit_status dit_zimage_prompt_cost(const dit_qwen3 *te, const dit_tokenizer *tok, const char *prompt, int max_len,
                                  dit_cost *out, int *n_tokens, dit_error *err) {
  int32_t *ids = NULL;
  int n = 0;
  DIT_TRY(prompt_ids(tok, DIT_CHAT_QWEN3_THINKING, prompt, max_len, &ids, &n, err));
  free(ids);
  DIT_TRY(dit_qwen3_cost(te, 1, n, -2, false, out, err));
  /* encode_to_host's backend buffer and the caption features it returns */
  out->act_bytes += 2 * (size_t)n * (size_t)dit_qwen3_get_config(te)->hidden_size * sizeof(float);
  *n_tokens = n;
  return DIT_OK;
}

dit_status dit_flux2_klein_encode_prompt(dit_qwen3 *te, const dit_tokenizer *tok, const char *prompt, int max_len,
                                         float **embeds, dit_error *err) {
  *embeds = NULL;
  if (!te) return dit_errorf(err, DIT_ERR_INVALID_ARG, "prompt: NULL text encoder");
  int32_t *real = NULL;
  int n = 0;
  DIT_TRY(prompt_ids(tok, DIT_CHAT_QWEN3_NO_THINKING, prompt, max_len, &real, &n, err));
  int32_t pad = dit_tok_token_id(tok, "<|endoftext|>");
  if (pad < 0) {
    free(real);
    return dit_errorf(err, DIT_ERR_FORMAT, "prompt: the tokenizer has no <|endoftext|> token to pad with");
  }
  size_t H = (size_t)dit_qwen3_get_config(te)->hidden_size, S = (size_t)max_len;
  int32_t *ids = malloc(S * sizeof *ids);
  uint8_t *mask = malloc(S);
  float *hs = malloc(KLEIN_N_LAYERS * S * H * sizeof *hs), *out = malloc(KLEIN_N_LAYERS * S * H * sizeof *out);
  dit_status s = DIT_OK;
  if (!ids || !mask || !hs || !out) s = dit_errorf(err, DIT_ERR_NOMEM, "prompt: out of memory for %zu tokens", S);
  if (s == DIT_OK) {
    for (size_t i = 0; i < S; i++) {
      ids[i] = i < (size_t)n ? real[i] : pad;
      mask[i] = i < (size_t)n;
    }
    const int layers[KLEIN_N_LAYERS] = {9, 18, KLEIN_DEEPEST};
    float *host[KLEIN_N_LAYERS] = {hs, hs + S * H, hs + 2 * S * H};
    s = encode_to_host(te, max_len, ids, mask, KLEIN_N_LAYERS, layers, host, err);
    if (s != DIT_OK) dit_error_prefix(err, "FLUX.2 klein prompt encoding");
  }
  if (s == DIT_OK) s = check_finite(hs, KLEIN_N_LAYERS * S, H, "FLUX.2 klein prompt", err);
  if (s == DIT_OK) /* [3, S, H] -> [S, 3 * H]: the pipeline's stack(dim=1).permute(0, 2, 1, 3) */
    for (size_t i = 0; i < S; i++)
      for (int j = 0; j < KLEIN_N_LAYERS; j++)
        memcpy(out + (i * KLEIN_N_LAYERS + (size_t)j) * H, hs + ((size_t)j * S + i) * H, H * sizeof *out);
  free(real);
  free(ids);
  free(mask);
  free(hs);
  DIT_HAND_OVER(s, out, embeds, free);
}

dit_status dit_flux2_klein_prompt_cost(const dit_qwen3 *te, const dit_tokenizer *tok, const char *prompt,
                                       int max_len, dit_cost *out, int *n_tokens, dit_error *err) {
  int32_t *ids = NULL;
  int n = 0;
  DIT_TRY(prompt_ids(tok, DIT_CHAT_QWEN3_NO_THINKING, prompt, max_len, &ids, &n, err));
  free(ids);
  DIT_TRY(dit_qwen3_cost(te, 1, max_len, KLEIN_DEEPEST, n < max_len, out, err));
  /* encode_to_host's backend buffers, the hidden states downloaded and their [S, 3H] form */
  const size_t SH = (size_t)max_len * (size_t)dit_qwen3_get_config(te)->hidden_size;
  out->act_bytes += 3 * KLEIN_N_LAYERS * SH * sizeof(float) + (size_t)max_len * (sizeof(int32_t) + 1);
  *n_tokens = n;
  return DIT_OK;
}

/* Tokens of text (its whole encoding; *n may be 0). */
static dit_status tokens_of(const dit_tokenizer *tok, const char *text, int32_t **ids, size_t *n, dit_error *err) {
  dit_status s = dit_tok_encode(tok, text, strlen(text), ids, n, err);
  if (s != DIT_OK) dit_error_prefix(err, "prompt");
  return s;
}

/* Krea 2's ids: the template's head and the prompt, cut to the block of max_len + prefix -
 * suffix tokens, then the tail; *n counts the head and prompt's, *S all (ids malloc'd). */
static dit_status krea2_ids(const dit_tokenizer *tok, const char *prompt, int max_len, int32_t **ids, size_t *n,
                            size_t *S, dit_error *err) {
  *ids = NULL;
  if (max_len < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "prompt: max_sequence_length %d must be >= 1", max_len);
  const char *head = NULL, *tail = NULL;
  DIT_TRY(dit_chat_parts(DIT_CHAT_KREA2, &head, &tail, err));
  char *text = malloc(strlen(head) + (prompt ? strlen(prompt) : 0) + 1);
  if (!text) return dit_errorf(err, DIT_ERR_NOMEM, "prompt: out of memory");
  strcpy(text, head);
  if (prompt) strcat(text, prompt);
  int32_t *front = NULL, *back = NULL;
  size_t nf = 0, nb = 0;
  dit_status s = tokens_of(tok, text, &front, &nf, err);
  if (s == DIT_OK) s = tokens_of(tok, tail, &back, &nb, err);
  const size_t block = (size_t)max_len + KREA2_PREFIX_TOKENS - KREA2_SUFFIX_TOKENS; /* head + prompt, padded to it */
  if (s == DIT_OK && (nb != KREA2_SUFFIX_TOKENS || nf < KREA2_PREFIX_TOKENS))
    s = dit_errorf(err, DIT_ERR_FORMAT, "prompt: the tokenizer gives Krea 2's template %zu + %zu tokens, expected %d + %d",
                   nf, nb, KREA2_PREFIX_TOKENS, KREA2_SUFFIX_TOKENS);
  *n = nf < block ? nf : block, *S = *n + nb;
  if (s == DIT_OK && !(*ids = malloc(*S * sizeof **ids))) s = dit_errorf(err, DIT_ERR_NOMEM, "prompt: out of memory");
  for (size_t i = 0; s == DIT_OK && i < *S; i++) (*ids)[i] = i < *n ? front[i] : back[i - *n];
  free(text), free(front), free(back);
  return s;
}

dit_status dit_krea2_encode_prompt(dit_qwen3 *te, const dit_tokenizer *tok, const char *prompt, int max_len,
                                   const int *taps, int n_taps, float **embeds, uint8_t **mask_out, dit_error *err) {
  *embeds = NULL;
  *mask_out = NULL;
  if (!te || !tok || !taps || n_taps < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "prompt: NULL text encoder, tokenizer or taps");
  int32_t *ids = NULL;
  size_t n = 0, S = 0;
  DIT_TRY(krea2_ids(tok, prompt, max_len, &ids, &n, &S, err));
  float *hs = NULL, *out = NULL;
  uint8_t *mask = NULL;
  const size_t H = (size_t)dit_qwen3_get_config(te)->hidden_size, L = (size_t)max_len;
  /* Only the real tokens run, at positions 0..S-1: the padding between prompt and tail is
   * masked out of every key, so it changes none of them, and the pipeline's position_ids
   * (cumsum(mask) - 1) give the tail the positions that follow the prompt's. The padded
   * rows' features are left 0: nothing reads them (the transformer masks them too). */
  hs = malloc((size_t)n_taps * S * H * sizeof *hs), out = calloc(L * (size_t)n_taps * H, sizeof *out);
  mask = calloc(L, 1);
  dit_status s = hs && out && mask ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "prompt: out of memory");
  if (s == DIT_OK) {
    float **host = malloc((size_t)n_taps * sizeof *host);
    if (!host) s = dit_errorf(err, DIT_ERR_NOMEM, "prompt: out of memory");
    for (int j = 0; host && j < n_taps; j++) host[j] = hs + (size_t)j * S * H;
    if (s == DIT_OK) s = encode_to_host(te, (int)S, ids, NULL, n_taps, taps, host, err);
    free(host);
    if (s != DIT_OK) dit_error_prefix(err, "Krea 2 prompt encoding");
  }
  if (s == DIT_OK) s = check_finite(hs, (size_t)n_taps * S, H, "Krea 2 prompt", err);
  if (s == DIT_OK) { /* [taps, S, H] -> [L, taps, H] after the prefix, the tail at the block's end */
    for (size_t i = KREA2_PREFIX_TOKENS; i < S; i++) {
      const size_t row = i < n ? i - KREA2_PREFIX_TOKENS : L - (S - i);
      mask[row] = 1;
      for (int j = 0; j < n_taps; j++)
        memcpy(out + (row * (size_t)n_taps + (size_t)j) * H, hs + ((size_t)j * S + i) * H, H * sizeof *out);
    }
  }
  free(ids), free(hs);
  if (s != DIT_OK) {
    free(out), free(mask);
    return s;
  }
  *embeds = out;
  *mask_out = mask;
  return DIT_OK;
}

dit_status dit_krea2_prompt_cost(const dit_qwen3 *te, const dit_tokenizer *tok, const char *prompt, int max_len,
                                 const int *taps, int n_taps, dit_cost *out, int *n_tokens, dit_error *err) {
  int32_t *ids = NULL;
  size_t n = 0, S = 0;
  DIT_TRY(krea2_ids(tok, prompt, max_len, &ids, &n, &S, err));
  free(ids);
  int deepest = 0;
  for (int j = 0; j < n_taps; j++) deepest = taps[j] > deepest ? taps[j] : deepest;
  DIT_TRY(dit_qwen3_cost(te, 1, (int)S, deepest, false, out, err));
  /* encode_to_host's buffers, the hidden states downloaded, the [L, taps, H] features, the mask */
  const size_t H = (size_t)dit_qwen3_get_config(te)->hidden_size, T = (size_t)n_taps;
  out->act_bytes += 2 * T * S * H * sizeof(float) + (size_t)max_len * (T * H * sizeof(float) + 1);
  *n_tokens = (int)(n - KREA2_PREFIX_TOKENS);
  return DIT_OK;
}

/* The text tokenizer: Hugging Face tokenizer.json files with a byte-level BPE model
 * (Qwen2/Qwen3, GPT-2 style) or a Unigram model (T5), and CLIP's vocab.json + merges.txt
 * folders, reproducing the `tokenizers` library's encode() ids.
 *
 * What is supported (anything else in the file is rejected with a message naming it):
 *   model          BPE: vocab, merges ("a b" strings or [a, b] pairs), ignore_merges,
 *                  unk_token (or null), dropout null/0, empty subword prefix,
 *                  end_of_word_suffix (CLIP's "</w>", on a word's last symbol).
 *                  Unigram (unigram.c): vocab of [piece, score], unk_id, byte_fallback
 *                  false; Viterbi over the pieces, unknown characters fused into one unk.
 *   added_tokens   special or not; matched in the raw text before normalization
 *                  (normalized=false) or in the normalized text (normalized=true),
 *                  leftmost-longest, honouring lstrip / rstrip / single_word.
 *   normalizer     null, NFC, NFD, NFKC, NFKD (utf8proc), Lowercase, Replace (Regex or
 *                  String), Strip, Precompiled (SentencePiece charsmap, charsmap.c), or a
 *                  Sequence of those.
 *   pre_tokenizer  null, Split (Regex or String pattern, all five behaviours, invert),
 *                  ByteLevel (add_prefix_space, use_regex), Metaspace (replacement,
 *                  prepend_scheme, split), or a Sequence of those.
 *                  Regexes run with PCRE2 (UTF + UCP, JIT); \s (and \S outside a class)
 *                  is rewritten to Unicode White_Space, which is what it means in
 *                  Oniguruma, the engine of `tokenizers` (PCRE2's \s also takes U+180E).
 *                  Left as is: \S inside a class; \p{..} tables follow PCRE2's Unicode
 *                  version (14.0 in 10.42), which may differ from Oniguruma's for code
 *                  points assigned later.
 *   post_processor TemplateProcessing (single sequence), RobertaProcessing, BertProcessing:
 *                  the special tokens dit_tok_encode_model adds (dit_tok_encode adds none).
 *   decoder: ignored.
 *
 * The encode pipeline, per call: validate UTF-8 -> split out added tokens (raw) ->
 * normalize each remaining piece -> split out normalized added tokens -> pre-tokenize
 * -> byte-level map (bytes become initial BPE symbols directly) -> BPE merges by rank
 * (binary heap over a linked list of symbols, like tokenizers' Word::merge_all).
 *
 * Loading validates the file per RELIABILITY.md: ids unique and below the vocabulary
 * size, the id table never larger than the number of entries in the file, merges that
 * reference existing tokens (and whose concatenation exists), all 256 byte tokens
 * present when ByteLevel is used, JSON depth capped by the parser (jansson: 2048).
 *
 * ---- How the pipelines use it (read this before writing the text-encoder glue) ----
 * Both Z-Image (ZImagePipeline._encode_prompt) and FLUX.2 klein
 * (Flux2KleinPipeline._get_qwen3_prompt_embeds) do, per prompt:
 *   1. text = chat template of [{"role": "user", "content": prompt}] with
 *      add_generation_prompt=True; Z-Image passes enable_thinking=True (no think block),
 *      klein enable_thinking=False (appends "<think>\n\n</think>\n\n"): see chat.h.
 *   2. tokenizer(text, padding="max_length", max_length=max_sequence_length (default
 *      512), truncation=True): ids = dit_tok_encode(text) (Qwen2Tokenizer adds no
 *      BOS/EOS); if longer than max_length, keep the FIRST max_length ids (truncation
 *      side right; the chat template's tail is then cut off too); then pad on the RIGHT
 *      with pad id = dit_tok_token_id("<|endoftext|>") (151643) up to max_length.
 *      attention_mask = 1 for the real ids, 0 for the padding.
 *   3. The text encoder (Qwen3) runs on all max_length positions with that mask
 *      (padded keys masked out; causal).
 *   4. Z-Image: takes hidden_states[-2] (the output of the second-to-last decoder
 *      layer, before the final norm) and keeps
 *      ONLY the valid (mask = 1) positions: caption features are [n_valid, hidden],
 *      padding dropped. An empty prompt still has the 8 (thinking) template ids.
 *      FLUX.2 klein: stacks hidden_states[9], [18], [27] (outputs of decoder layers 9,
 *      18, 27; [0] is the embedding) -> [L, 3*hidden] and keeps all
 *      max_length positions, padding included (no masking of the output).
 *   The negative prompt (CFG) goes through the same steps ("" when not given).
 * Padded positions never influence valid ones (causal + key mask), so for Z-Image the
 * encoder may run on just the valid ids; klein needs the padded positions' states.
 *
 * FLUX.1 (FluxPipeline.encode_prompt) tokenizes the prompt twice, with no chat template:
 *   CLIP (tokenizer/, vocab.json + merges.txt; _get_clip_prompt_embeds): tokenizer(prompt,
 *      padding="max_length", max_length=77 (tokenizer_max_length), truncation=True):
 *      ids = dit_tok_encode_model(text, max_length 77) = <|startoftext|> (49406), the
 *      text's ids cut to 75, <|endoftext|> (49407); then pad on the RIGHT to 77 with
 *      dit_tok_pad_id() (49407, the same token as EOS). The CLIP text model's pooled
 *      output is what FLUX.1 uses.
 *   T5 (tokenizer_2/, tokenizer.json; _get_t5_prompt_embeds): tokenizer(prompt,
 *      padding="max_length", max_length=max_sequence_length (default 512), truncation=True):
 *      ids = dit_tok_encode_model(text, max_length 512) = the text's ids cut to 511, then
 *      </s> (1); pad on the RIGHT to 512 with dit_tok_pad_id() (0, "<pad>"). The T5
 *      encoder runs on all 512 positions WITHOUT an attention mask (diffusers passes
 *      none), so padding is part of the input. */
#ifndef DIT_TEXT_TOKENIZER_H
#define DIT_TEXT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "ditrun.h"

/* Largest tokenizer.json accepted (the real Qwen3 one is 11 MB). */
#define DIT_TOK_MAX_FILE_BYTES ((size_t)64 << 20)

/* Loads tokenizer_dir/tokenizer.json, or, when the folder has none, the vocab.json +
 * merges.txt layout of a CLIPTokenizer (tokenizer_config.json's tokenizer_class). Also
 * reads tokenizer_config.json's pad_token when the file exists (dit_tok_pad_id). On
 * failure *out = NULL and err names the field. */
dit_status dit_tok_load(const char *tokenizer_dir, dit_tokenizer **out, dit_error *err);
/* Loads a tokenizer.json file given by its path (what dit_tok_load does on the folder). */
dit_status dit_tok_load_file(const char *path, dit_tokenizer **out, dit_error *err);
/* Same from len bytes of tokenizer.json content in memory (`what` names it in messages). */
dit_status dit_tok_load_buffer(const char *buf, size_t len, const char *what, dit_tokenizer **out, dit_error *err);
void dit_tok_free(dit_tokenizer *t);
/* The memory its tables hold, and what its load held at the peak (the file, its parsed JSON
 * tree, estimated from the file's size, and the tables; 0 for the vocab.json layout). */
size_t dit_tok_table_bytes(const dit_tokenizer *t);
size_t dit_tok_load_bytes(const dit_tokenizer *t);

/* Encodes UTF-8 text WITHOUT adding special tokens (special tokens present in the text
 * are matched). Invalid UTF-8 -> DIT_ERR_INVALID_ARG naming the byte offset. NUL bytes
 * are ordinary characters. *ids is malloc'd (NULL when *n == 0); free() it. On failure
 * *ids = NULL, *n = 0. Thread-safe: t is not modified. */
dit_status dit_tok_encode(const dit_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n,
                          dit_error *err);
/* Encodes as the pipelines call the tokenizer (HF add_special_tokens=True,
 * truncation=True, no padding): the post-processor's special tokens around the ids of
 * dit_tok_encode, the text's ids cut (right side) so that the total, special tokens
 * included, is at most max_length (0: no limit). max_length below the number of special
 * tokens is an error. Same ownership rules as dit_tok_encode. */
dit_status dit_tok_encode_model(const dit_tokenizer *t, const char *text, size_t len, size_t max_length,
                                int32_t **ids, size_t *n, dit_error *err);
/* Id of tokenizer_config.json's pad_token (what padding to max_length appends); -1 when
 * the folder names none (or the tokenizer was loaded from a file or a buffer). */
int32_t dit_tok_pad_id(const dit_tokenizer *t);
/* Id of a vocabulary or added token given by its exact content; -1 if absent. */
int32_t dit_tok_token_id(const dit_tokenizer *t, const char *token);
/* Number of ids: max id + 1 over the vocabulary and the added tokens (151669 for Qwen3). */
size_t dit_tok_vocab_size(const dit_tokenizer *t);
/* Content of a token (vocabulary form, e.g. "Ġworld"), NULL when id is unused; *len set. */
const char *dit_tok_token_str(const dit_tokenizer *t, int32_t id, size_t *len);

/* The chat style (a dit_chat_style, see chat.h) the public API records from
 * model_index.json; -1 (the default) when none is known. */
void dit_tok_set_chat_style(dit_tokenizer *t, int style);
int dit_tok_chat_style(const dit_tokenizer *t);

/* Checks that text is valid UTF-8 (no overlongs, surrogates or code points > U+10FFFF).
 * Returns DIT_ERR_INVALID_ARG naming the first bad byte offset. */
dit_status dit_utf8_validate(const char *text, size_t len, dit_error *err);

#endif

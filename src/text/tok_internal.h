/* Private layout of dit_tokenizer, shared by the loader (tok_load.c), the encoder
 * (tok_encode.c) and the BPE core (bpe.c). Nothing outside src/text includes this. */
#ifndef DIT_TEXT_TOK_INTERNAL_H
#define DIT_TEXT_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/json.h"
#include "text/tokenizer.h"

#define TOK_MAX_STEPS 8   /* normalizer / pre-tokenizer steps in a Sequence */
#define TOK_MAX_ADDED 65536

typedef enum {
  TOK_NORM_NFC, TOK_NORM_NFD, TOK_NORM_NFKC, TOK_NORM_NFKD, /* utf8proc forms, in this order */
  TOK_NORM_LOWERCASE, TOK_NORM_REPLACE, TOK_NORM_STRIP, TOK_NORM_PRECOMPILED /* normalizers.c */
} tok_norm_kind;

/* Arguments of the normalizers that have some (normalizers.c). */
typedef struct tok_norm_arg {
  pcre2_code *re;             /* Replace: the pattern (a String pattern compiles as a literal) */
  char *content;              /* Replace: the replacement */
  size_t content_len;
  bool strip_left, strip_right; /* Strip */
} tok_norm_arg;

typedef struct tok_charsmap tok_charsmap; /* Precompiled: SentencePiece's charsmap (charsmap.c) */

typedef enum {
  TOK_SPLIT_REMOVED, TOK_SPLIT_ISOLATED, TOK_SPLIT_MERGED_PREV, TOK_SPLIT_MERGED_NEXT, TOK_SPLIT_CONTIGUOUS
} tok_split_behavior;

typedef enum { TOK_PRE_SPLIT, TOK_PRE_BYTELEVEL, TOK_PRE_METASPACE } tok_pre_kind;

/* Metaspace's prepend_scheme. */
typedef enum { TOK_PREPEND_ALWAYS, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER } tok_prepend;

typedef struct tok_pre_step {
  tok_pre_kind kind;
  pcre2_code *re;             /* Split: the pattern; ByteLevel: the GPT-2 regex if use_regex */
  tok_split_behavior behavior;
  bool invert;
  bool add_prefix_space;      /* ByteLevel */
  char repl[8];               /* Metaspace: the replacement character (UTF-8) */
  size_t repl_len;
  tok_prepend prepend;        /* Metaspace */
  bool split;                 /* Metaspace: split before each replacement character */
} tok_pre_step;

typedef struct tok_added {
  char *content;              /* as in the file (points into the id string pool) */
  size_t len;
  char *match;                /* what is matched: content, normalized when `normalized` */
  size_t match_len;
  bool match_owned;
  int32_t id;
  bool special, lstrip, rstrip, single_word, normalized;
} tok_added;

/* Open-addressing hash of (left id, right id) -> (rank, merged id). */
typedef struct tok_merge_slot {
  uint64_t key;   /* (left << 32) | right; UINT64_MAX = empty */
  uint32_t rank;
  int32_t id;
} tok_merge_slot;

struct dit_tokenizer {
  /* id -> string: strings live in `pool`; off[id] == UINT32_MAX marks an unused id. */
  size_t n_ids;               /* max id + 1 */
  uint32_t *off, *len;
  char *pool;
  size_t pool_len;
  /* model vocabulary: content -> id (slots hold id + 1; 0 = empty) */
  uint32_t *vocab_slots;
  size_t vocab_cap;           /* power of two */
  size_t n_vocab;
  /* merges */
  tok_merge_slot *merge_slots;
  size_t merge_cap;           /* power of two */
  size_t n_merges;
  bool ignore_merges;
  int32_t unk_id;             /* -1 = none */
  bool fuse_unk;              /* consecutive unknown characters become one unk */
  /* byte_fallback (SentencePiece-style BPE: Gemma): a character not in the vocabulary becomes
   * the tokens "<0xXX>" of its bytes; fallback_id[b] is that of byte b, -1 when absent */
  bool byte_fallback;
  int32_t fallback_id[256];
  /* byte-level: id of the token for each byte's GPT-2 character; -1 when not byte-level */
  bool byte_level;
  int32_t byte_id[256];
  /* BPE end_of_word_suffix (CLIP's "</w>"): the last symbol of a word carries it; with
   * byte-level, the id of each byte's character + suffix */
  char *eow;
  size_t eow_len;
  int32_t byte_eow_id[256];
  /* Unigram model (unigram.c): score of each id, the smallest one, the longest piece */
  bool unigram;
  double *scores;
  double min_score;
  size_t max_piece;
  /* added tokens, and per first byte the indices of those starting with it (longest first) */
  tok_added *added;
  size_t n_added;
  uint32_t *first_idx;        /* n_added entries grouped by first byte */
  uint32_t first_start[257];
  bool any_added_normalized, any_added_raw;
  /* normalizer and pre-tokenizer */
  tok_norm_kind norm[TOK_MAX_STEPS];
  tok_norm_arg norm_arg[TOK_MAX_STEPS];
  size_t n_norm;
  tok_charsmap *charsmap;
  tok_pre_step pre[TOK_MAX_STEPS];
  size_t n_pre;
  int chat_style;             /* dit_chat_style set by the public loader; -1 = none */
  /* post_processor (single sequence): ids put before and after the encoded text */
  int32_t post_pre[TOK_MAX_STEPS], post_post[TOK_MAX_STEPS];
  size_t n_post_pre, n_post_post;
  int32_t pad_id;             /* tokenizer_config.json's pad_token; -1 = none */
  size_t load_peak;           /* memory its load held at the peak (dit_tok_load_bytes) */
};

/* FNV-1a over bytes: the vocabulary hash. */
static inline uint64_t tok_hash_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
  return h;
}
static inline uint64_t tok_hash_u64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

/* Vocabulary lookup (model vocab only, not added tokens): id or -1. */
int32_t tok_vocab_find(const dit_tokenizer *t, const char *s, size_t n);

/* Merge lookup: true and (*rank, *id) when the pair merges. */
static inline bool tok_merge_find(const dit_tokenizer *t, int32_t a, int32_t b, uint32_t *rank, int32_t *id) {
  uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
  size_t mask = t->merge_cap - 1;
  for (size_t i = tok_hash_u64(key) & mask;; i = (i + 1) & mask) {
    const tok_merge_slot *s = &t->merge_slots[i];
    if (s->key == key) {
      *rank = s->rank;
      *id = s->id;
      return true;
    }
    if (s->key == UINT64_MAX) return false;
  }
}

/* Applies the normalizers to s; *out is s itself or a malloc'd string (*owned = true). */
dit_status tok_normalize(const dit_tokenizer *t, const char *s, size_t n, const char **out, size_t *out_n,
                         bool *owned, dit_error *err);

/* GPT-2 bytes_to_unicode: the code point standing for byte b. */
uint32_t tok_byte_to_cp(uint8_t b);

/* Growable id output of one encode call. */
typedef struct tok_ids {
  int32_t *v;
  size_t n, cap;
} tok_ids;
dit_status tok_ids_push(tok_ids *o, int32_t id, dit_error *err);

/* Scratch space reused across words by the BPE core. */
typedef struct tok_bpe_work {
  int32_t *sym;
  int32_t *prev, *next;
  size_t cap;
  struct tok_heap_item *heap;
  size_t heap_cap;
} tok_bpe_work;
void tok_bpe_work_free(tok_bpe_work *w);
/* BPE-encodes one pre-token (raw UTF-8 bytes) and appends its ids to out. */
dit_status tok_bpe_word(const dit_tokenizer *t, const char *s, size_t n, tok_bpe_work *w, tok_ids *out,
                        dit_error *err);

/* Adds id (its string already in the pool) to the vocabulary hash. */
void tok_vocab_insert(dit_tokenizer *t, uint32_t id);
/* Checks the added_tokens entries (integer id in [0, limit), string content) and adds
 * their ids and lengths to *max_id and *pool. */
dit_status tok_size_added(const json_t *added, size_t limit, size_t *max_id, size_t *pool, dit_error *err);
/* Allocates the id table (max_id + 1 ids, all unused), the string pool, the vocabulary
 * hash and the added-token arrays. */
dit_status tok_alloc_tables(dit_tokenizer *t, size_t n_vocab, size_t n_added, size_t pool, size_t max_id,
                            dit_error *err);
/* Loads the added_tokens array once t->off/len/pool/added/first_idx are allocated. */
dit_status tok_load_added(dit_tokenizer *t, const json_t *added, dit_error *err);
/* Compiles a tokenizer.json pattern (Regex, or a String taken literally). */
dit_status tok_compile_regex(const char *pat, size_t len, bool literal, pcre2_code **out, dit_error *err);
/* Builds a tokenizer from the parsed content of a tokenizer.json (`what` in messages). */
dit_status tok_load_json(json_t *root, const char *what, dit_tokenizer **out, dit_error *err);
/* A missing or null boolean key gives dflt; anything but a boolean is an error. */
dit_status tok_get_bool(const json_t *o, const char *key, bool dflt, bool *out, const char *where, dit_error *err);

/* ---- unigram.c, normalizers.c, charsmap.c, tok_post.c, tok_vocab_files.c ---- */
/* Loads a model of type Unigram (vocab of [piece, score], unk_id, byte_fallback false). */
dit_status tok_load_unigram(dit_tokenizer *t, const json_t *model, const json_t *added, dit_error *err);
/* Viterbi segmentation of one pre-token over the scored pieces; appends the ids. */
dit_status tok_unigram_word(const dit_tokenizer *t, const char *s, size_t n, tok_ids *out, dit_error *err);
/* Loads the normalizers that take arguments (Lowercase, Replace, Strip, Precompiled);
 * false in *handled when type is none of them. */
dit_status tok_load_norm_step(dit_tokenizer *t, const json_t *j, const char *type, bool *handled, dit_error *err);
/* Runs normalizer step k (one of the kinds above) on s: *out is malloc'd. */
dit_status tok_norm_step(const dit_tokenizer *t, size_t k, const char *s, size_t n, char **out, size_t *out_n,
                         dit_error *err);
void tok_norm_free(dit_tokenizer *t);
/* Loads a Metaspace pre-tokenizer step. */
dit_status tok_load_metaspace(tok_pre_step *s, const json_t *p, dit_error *err);
/* Metaspace on one piece: spaces become the replacement, which is prepended as the scheme
 * says (first = only when the piece starts the text); *out is malloc'd. */
dit_status tok_metaspace(const tok_pre_step *s, const char *p, size_t n, bool at_start, char **out, size_t *out_n,
                         dit_error *err);
/* End of the Metaspace piece that starts at pos of s (split before each replacement). */
size_t tok_metaspace_next(const tok_pre_step *s, const char *p, size_t n, size_t pos);
/* Loads post_processor (null, TemplateProcessing, RobertaProcessing, BertProcessing). */
dit_status tok_load_post(dit_tokenizer *t, const json_t *p, dit_error *err);
/* Loads a folder of the vocab.json + merges.txt layout (CLIPTokenizer). */
dit_status tok_load_vocab_files(const char *dir, dit_tokenizer **out, dit_error *err);
/* Reads tokenizer_config.json's pad_token (when the file exists) into t->pad_id. */
dit_status tok_load_pad(dit_tokenizer *t, const char *dir, dit_error *err);

/* Unicode White_Space (what Rust's char::is_whitespace and \s match). */
bool tok_is_space(uint32_t c);
/* The Precompiled normalizer's charsmap (charsmap.c): loaded from its base64 text. */
dit_status tok_charsmap_load(const char *b64, size_t len, tok_charsmap **out, dit_error *err);
void tok_charsmap_free(tok_charsmap *m);
dit_status tok_charsmap_normalize(const tok_charsmap *m, const char *s, size_t n, char **out, size_t *out_n,
                                  dit_error *err);

#endif

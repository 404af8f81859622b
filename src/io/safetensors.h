/* safetensors files, mapped read-only and validated by every rule of RELIABILITY.md
 * before anything is trusted; sharded sets (*.safetensors.index.json); and the weight
 * table that binds checkpoint names to model struct fields with shape checks.
 * Implemented in safetensors.c (one file), st_weights.c (sets) and st_wtable.c (table).
 *
 * Errors: DIT_ERR_FORMAT for a malformed file (the message names the file, the tensor
 * and the rule), DIT_ERR_UNSUPPORTED for a valid file this engine cannot hold (rank > 8),
 * DIT_ERR_IO when a file cannot be opened or mapped, DIT_ERR_NOMEM.
 * Known limit: the data are mapped, not read; a file truncated by another process while
 * mapped raises SIGBUS on access. Sizes are checked against the file at open time. */
#ifndef DIT_IO_SAFETENSORS_H
#define DIT_IO_SAFETENSORS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/tensor.h"
#include "io/outfile.h"

#define DIT_ST_DEFAULT_MAX_HEADER (100u * 1024u * 1024u)

typedef struct dit_st_tensor {
  char *name;
  dit_dtype dtype;
  int ndim;
  int64_t shape[DIT_MAX_DIMS];
  uint64_t begin, end;  /* byte offsets within the data buffer */
  const void *data;     /* into the mapping; may be unaligned for its dtype */
} dit_st_tensor;

typedef struct dit_st_file {
  char *path;
  void *map;            /* whole-file mapping (or the caller's buffer for open_memory) */
  size_t map_size;
  bool mapped;          /* map is ours to munmap */
  size_t n_tensors;
  dit_st_tensor *tensors; /* sorted by name */
  json_t *metadata;     /* __metadata__ object or NULL */
  struct dit_gguf_meta *gguf; /* a GGUF file's header (io/gguf.h), NULL for safetensors */
} dit_st_file;

typedef struct dit_st_options {
  size_t max_header_bytes; /* 0 = DIT_ST_DEFAULT_MAX_HEADER */
} dit_st_options;

/* Maps and validates one file. opt may be NULL. On failure *out is NULL and the
 * message names the file and the rule broken. */
dit_status dit_st_open(const char *path, const dit_st_options *opt, dit_st_file **out, dit_error *err);
/* Validates a header + data held in memory (the same rules; used by tests/fuzzers).
 * The returned file points into buf and must not outlive it. */
dit_status dit_st_open_memory(const void *buf, size_t len, const char *what, const dit_st_options *opt,
                              dit_st_file **out, dit_error *err);
void dit_st_close(dit_st_file *f);
/* An empty file record named what (for the readers). */
dit_status dit_st_new(const char *what, dit_st_file **out, dit_error *err);
/* Maps path (dit_map_file), then parse_fn fills a new record over the mapping (arg passed
 * through); on failure nothing is left. The safetensors and GGUF readers' open. */
typedef dit_status (*dit_st_parse_fn)(dit_st_file *f, const unsigned char *buf, size_t len, const void *arg,
                                      dit_error *err);
dit_status dit_st_open_mapped(const char *path, size_t min_len, const char *what_min, dit_st_parse_fn parse_fn,
                              const void *arg, dit_st_file **out, dit_error *err);
/* Maps a regular file read-only (FIFOs, folders and devices refused; at least min_len
 * bytes, else DIT_ERR_FORMAT "too short for <what_min>"). Unmap with munmap(map, len). */
dit_status dit_map_file(const char *path, size_t min_len, const char *what_min, void **map, size_t *len,
                        dit_error *err);
const dit_st_tensor *dit_st_find(const dit_st_file *f, const char *name);

/* A component's weights: one .safetensors file, or the shards of an index.json, or the
 * single *.safetensors in a folder. Tensor names are unique across shards. */
typedef struct dit_weights {
  size_t n_files;
  dit_st_file **files;
  size_t n_tensors;
  const dit_st_tensor **tensors; /* all tensors of all files, sorted by name */
  void **owned;                  /* aligned copies made for misaligned tensors */
  size_t n_owned;
  dit_st_tensor *renamed;        /* after dit_weights_remap: the entries tensors points to */
  size_t n_renamed;
} dit_weights;

/* path: a .safetensors file, a .safetensors.index.json file, or a folder holding either
 * (an index is preferred when present; among several files the standard names
 * diffusion_pytorch_model.* and model.* win, otherwise several is an error). An index's
 * shards must be plain regular files next to it, and each tensor must be in exactly
 * the shard its weight_map names. */
dit_status dit_weights_open(const char *path, const dit_st_options *opt, dit_weights **out, dit_error *err);
void dit_weights_close(dit_weights *w);
const dit_st_tensor *dit_weights_find(const dit_weights *w, const char *name);

/* Descriptor of a stored tensor as a dit_tensor. If its data is misaligned for its
 * dtype, an aligned (64-byte) copy is made and owned by w (one per call). The data are
 * read-only (a PROT_READ mapping): never write through out->data. */
dit_status dit_weights_tensor(dit_weights *w, const dit_st_tensor *st, dit_tensor *out, dit_error *err);
/* 64-byte aligned memory owned (and freed) by w; NULL when out of memory. */
void *dit_weights_alloc(dit_weights *w, size_t bytes);
/* Drops the whole pages of [p, p + n) from the process's resident set when they lie in one of
 * w's file mappings (they are read from the file again if touched later); memory outside the
 * mappings (aligned or gathered copies) is left as it is. For weights read once (a model's
 * modulation projections after their fold). */
void dit_weights_release_pages(const dit_weights *w, const void *p, size_t n);

/* ---- writing (st_write.c) ----
 * Writes path (through a temporary file in its folder, renamed when complete; an existing
 * path is replaced only when overwrite): the header with meta's n_meta key/value string
 * pairs (meta[2i], meta[2i+1]) as "__metadata__", then each tensor (element types, 0 to 4
 * dims) as fill gives it, back to back. Nothing is left on failure. */
dit_status dit_st_write(const char *path, bool overwrite, const char *const *meta, size_t n_meta,
                        const dit_out_tensor *t, size_t n_t, dit_out_fill_fn fill, void *user, dit_error *err);

/* ---- other programs' names for the same tensors (st_remap.c) ----
 * Checkpoints saved by other tools name a model's tensors their own way: a prefix on every
 * name, renamed modules, projections fused into one tensor. A remap rewrites the names of
 * an open set into the ones a weight table uses, without touching the data. */
typedef struct dit_wrename {
  const char *from, *to; /* every occurrence of from becomes to */
  const char *within;    /* NULL, or: only in names that start with this when the rule is reached
                            (a rule placed before its block's prefix is renamed sees the same
                            prefix both ways, so it can tell one kind of block from another) */
} dit_wrename;

typedef struct dit_wsplit {
  const char *suffix;   /* a name ending in this ... */
  int n;                /* ... is n tensors of equal rows (dim 0), in order, */
  const char *parts[4]; /* named with parts[i] in place of the suffix */
  const char *within;   /* NULL, or: only for names starting with this (the split's side's names) */
  int64_t group_rows;   /* 0: the parts are n row ranges back to back (views of the stored data);
                           else the rows come in groups of n x group_rows, part i being rows
                           [i group_rows, (i+1) group_rows) of every group (MiniMax-H3's release
                           stores q, k and v interleaved per head): gathered into copies the set
                           owns. Import only: no export fuses such a split */
} dit_wsplit;

/* src renamed by the rules r[0..n): in order, each from -> to; or backward, each to -> from
 * in reverse order (the other direction of the same table). The name is seen with a leading
 * '^' so a rule can anchor at its start (a rule used both ways anchors both its sides).
 * False when a name does not fit in len. */
bool dit_wname_rename(const dit_wrename *r, size_t n, bool backward, const char *src, char *dst, size_t len);
/* True when name starts with within (or within is NULL). */
bool dit_wname_within(const char *name, const char *within);

typedef struct dit_wremap {
  const char *strip_prefix;  /* removed from names that start with it (NULL: none) */
  const dit_wrename *rename; /* applied in order after the prefix is stripped */
  size_t n_rename;
  const dit_wsplit *split;   /* then the first split whose suffix matches */
  size_t n_split;
  const char *const *drop;   /* names (after the above) left out; NULL-terminated, or NULL */
  const char *const *swapped; /* names (after the above) whose two row halves lie in the other
                                 order under the original names (FLUX's final modulation);
                                 NULL-terminated, or NULL. LoRA reads it: a pair named the
                                 original way gets its B's halves exchanged */
} dit_wremap;

/* The other direction, for files ditrun writes (`ditrun quantize`): the names a family's
 * GGUF files carry elsewhere, made from the diffusers names of a set; a family whose import
 * is a plain remap reads that remap's tables backwards. */
typedef struct dit_wexport {
  const char *arch;          /* the file's general.architecture */
  const char *strip_prefix;  /* removed first (NULL: none) */
  const dit_wrename *rename; /* then applied (to fused names too), see dit_wname_rename */
  size_t n_rename;
  bool inverse;              /* the renames are an import's table, applied backward */
  const dit_wsplit *fuse;    /* a split read backwards: the stored parts, rows concatenated in
                                order, become one tensor named with the suffix (the first split
                                whose parts and `within` match) */
  size_t n_fuse;
  const char *const *drop;   /* source names left out; NULL-terminated, or NULL */
  const dit_wrename *swap;   /* source name from is written as to (no other renaming) with the
                                two halves of its rows exchanged (FLUX's final modulation: scale
                                then shift in diffusers, shift then scale in the original) */
  size_t n_swap;
} dit_wexport;

/* dst = src with every occurrence of from replaced by to (len bytes with the NUL); false
 * when it does not fit. */
bool dit_wname_replace(char *dst, size_t len, const char *src, const char *from, const char *to);
/* Rewrites w's names by r (the tensors become views with the new names; a split part
 * covers its rows of the original's bytes, or a gathered copy, see group_rows). A split
 * tensor whose dim 0 is not a multiple of n (of n x group_rows), a name longer than
 * DIT_WNAME_MAX, or two tensors ending with one name is DIT_ERR_FORMAT naming them. The
 * per-tensor scales of a split fp8 weight ("X.scale_weight",
 * "X.weight_scale" and the input scales beside "X.weight") are copied to each part's name.
 * May be applied once per set. */
dit_status dit_weights_remap(dit_weights *w, const dit_wremap *r, dit_error *err);

/* ---- weight table: {checkpoint name, destination, expected shape} ---- */
#define DIT_WNAME_MAX 192

typedef struct dit_wentry {
  char name[DIT_WNAME_MAX];
  dit_tensor *dst;
  int ndim;
  int64_t shape[DIT_MAX_DIMS];
  bool optional;       /* absent is fine: dst->data stays NULL */
  bool halves_swapped; /* dst holds its two row halves in the other order than the name's own
                          layout (a FLUX.2 single file's final modulation under diffusers' name) */
  bool scale_with_next; /* converted to fp8 (DIT_UPLOAD_FP8_COMPUTE), it shares one per-tensor scale
                           with the next entry: tensors a model runs as one stacked GEMM (Z-Image's
                           q, k, v) need one scale (dit_tensor_stack_rows) */
} dit_wentry;

typedef struct dit_wtable {
  dit_wentry *entries;
  size_t n, cap;
  dit_status status;   /* first failure of an add (reported by bind) */
  dit_error err;
} dit_wtable;

void dit_wtable_init(dit_wtable *t);
void dit_wtable_free(dit_wtable *t);
/* Adds an entry; the name is printf-formatted. Failures are remembered and reported by
 * dit_wtable_bind, so a model can add all its entries without checking each call. */
void dit_wtable_add(dit_wtable *t, dit_tensor *dst, bool optional, int ndim, const int64_t *shape,
                    const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Marks the last added entry as sharing its fp8 scale with the next one (scale_with_next). */
void dit_wtable_share_scale_with_next(dit_wtable *t);
/* True for a weight matrix that stays block-quantized (and that block-quantized files quantize):
 * a 2-D tensor named "*.weight" whose rows of shape[1] are whole blocks of type t. Other
 * block-quantized tensors (norm weights, pad tokens) bind as F32 copies. */
bool dit_wname_quant_matrix(const char *name, int ndim, const int64_t *shape, dit_dtype t);
/* True for a matrix that fp8 compute (DIT_GPU_PRECISION_FP8) runs in fp8: a 2-D "*.weight"
 * of a numbered transformer block (the name's second segment a number: "layers.3.",
 * "transformer_blocks.0.", BFL's "double_blocks.7.") with both sizes multiples of 16 (the fp8
 * GEMM's), except modulation ("*modulation*", "adaLN*", BFL's "*_mod.", FLUX.1's
 * "norm*.linear": they scale whole rows and run once per step) and anything named "*embed*".
 * Embedders, the final layer and shared modulation are outside the blocks and stay bf16. */
bool dit_wname_fp8_compute(const char *name, int ndim, const int64_t *shape);
/* Binds every entry: finds its tensor (with `prefix` prepended to the name, "" for
 * none), checks the shape, fills *dst (stored dtype, pointing into the mapping or an
 * aligned copy; a block-quantized tensor that is not a 2-D "*.weight" matrix, such as a
 * norm's weight or a pad token some GGUF writers quantize, becomes an F32 copy). Stored tensors not in the table are an error unless they start with
 * one of `ignore` (NULL-terminated list, may be NULL). The message names every missing,
 * mis-shaped or extra tensor (the first few, then a count). */
dit_status dit_wtable_bind(dit_wtable *t, dit_weights *w, const char *prefix, const char *const *ignore,
                           dit_error *err);

#endif

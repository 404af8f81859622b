/* Tuning cache: what a backend learned by timing candidates (a GEMM algorithm, a cuDNN
 * engine config) for one shape, kept in a small file so that the next process looks the
 * winner up instead of timing again. This is the storage only: entries {key, value} of
 * opaque bytes (the caller puts everything that decides the answer into the key: device,
 * driver and library versions, shape, dtypes), loaded from one file and saved to it.
 *
 * A bad file is never the caller's problem: open starts empty and keeps a one-line note.
 * Save merges: it re-reads the file (another process may have added entries since open),
 * keeps the file's entries whose keys this handle lacks, and replaces the file atomically
 * (temporary file in the same folder, fsync, rename). Two processes saving at the same
 * moment can still lose one side's new entries (the last rename wins); those shapes are
 * simply tuned again later.
 *
 * File (little-endian): "DITTUNE1", u32 version (1), u32 entry count (at most
 * DIT_TUNE_CACHE_MAX_ENTRIES), then per entry u16 key length (1..256), u16 value length
 * (0..256), the key bytes, the value bytes; then the u64 FNV-1a hash of every byte before
 * it. Nothing may follow. A file with a key twice is read with the last value winning. */
#ifndef DIT_CORE_TUNE_CACHE_H
#define DIT_CORE_TUNE_CACHE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"

#define DIT_TUNE_CACHE_MAX_KEY 256
#define DIT_TUNE_CACHE_MAX_VAL 256
/* A put of a new key into a full cache evicts the oldest entry (the first put of its key,
 * file entries counting in file order); a save keeps the newest this many. */
#define DIT_TUNE_CACHE_MAX_ENTRIES 4096
/* Larger files are not read (started empty, with a note); the largest valid one is ~2 MiB. */
#define DIT_TUNE_CACHE_MAX_FILE (4u << 20)
#define DIT_TUNE_CACHE_VERSION 1u
#define DIT_TUNE_CACHE_FILE "tune.bin"

typedef struct dit_tune_cache dit_tune_cache;

/* Opens the cache kept in path: reads the file when there is one. A missing file gives an
 * empty cache with no note; an unreadable, too large or malformed one (truncated, wrong
 * magic, version or checksum, bad lengths) an empty cache with a note. Fails only for
 * NULL or empty arguments (DIT_ERR_INVALID_ARG) and allocation (DIT_ERR_NOMEM); *out is
 * NULL then. */
dit_status dit_tune_cache_open(const char *path, dit_tune_cache **out, dit_error *err);
/* Why open started empty, one line naming the file ("... checksum mismatch ..."), or NULL
 * when it did not (file read, or no file). */
const char *dit_tune_cache_note(const dit_tune_cache *c);
/* Number of entries held. */
size_t dit_tune_cache_count(const dit_tune_cache *c);
/* Looks key[0..klen) up. Found: *vlen (if set) = the value's length, and when it fits in cap
 * the value is copied to val and true returned; a value longer than cap returns false with
 * *vlen > cap. Not found (or c NULL): false, *vlen = 0. val may be NULL when cap is 0. */
bool dit_tune_cache_get(const dit_tune_cache *c, const void *key, size_t klen, void *val, size_t cap, size_t *vlen);
/* Sets key's value (replacing an existing one in place). A key of 1..DIT_TUNE_CACHE_MAX_KEY
 * bytes and a value of at most DIT_TUNE_CACHE_MAX_VAL; DIT_ERR_INVALID_ARG otherwise, and
 * DIT_ERR_NOMEM (cache unchanged either way). A new key in a full cache evicts the oldest. */
dit_status dit_tune_cache_put(dit_tune_cache *c, const void *key, size_t klen, const void *val, size_t vlen,
                              dit_error *err);
/* Writes the cache to its file when anything changed since open (else does nothing and
 * returns DIT_OK): merged with the file's current entries as above, the folder (and its
 * parents, mode 0700) created when missing. DIT_ERR_IO with the reason on failure: the old
 * file is then intact and no temporary file is left. */
dit_status dit_tune_cache_save(dit_tune_cache *c, dit_error *err);
void dit_tune_cache_free(dit_tune_cache *c);

/* The cache file's default path into buf: <cache_dir_env>/tune.bin when cache_dir_env (the
 * value of $DITRUN_CACHE_DIR) is non-empty, else <xdg_env>/ditrun/tune.bin when xdg_env
 * ($XDG_CACHE_HOME) is an absolute path (the XDG rule: a relative one is ignored), else
 * <home_env>/.cache/ditrun/tune.bin when home_env ($HOME) is absolute. Trailing slashes
 * of the folder are dropped. The values come from the caller: the environment is read in
 * core/options.c only. DIT_ERR_INVALID_ARG with a message when none is usable or the path
 * does not fit in len (buf is "" then). */
dit_status dit_tune_cache_default_path(char *buf, size_t len, const char *cache_dir_env, const char *xdg_env,
                                       const char *home_env, dit_error *err);

#endif

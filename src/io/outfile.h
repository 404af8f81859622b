/* Output files written safely: into a temporary file in the target's folder, flushed and
 * fsynced, then moved into place without replacing an existing file (renameat2
 * RENAME_NOREPLACE, else link + unlink) unless asked to; a failure leaves nothing behind.
 * The PNG and GGUF writers share it. */
#ifndef DIT_IO_OUTFILE_H
#define DIT_IO_OUTFILE_H

#include <stdbool.h>
#include <stdio.h>

#include "core/dtype.h"
#include "core/error.h"

typedef struct dit_outfile {
  const char *path, *kind; /* kind names the format in messages ("PNG", "GGUF") */
  bool overwrite;
  char *dir, *tmp;
  FILE *fp;                /* write here */
} dit_outfile;

/* Checks the target (not a folder; absent unless overwrite; its folder exists) and opens the
 * temporary file. On failure nothing is left open or created. */
dit_status dit_outfile_begin(dit_outfile *o, const char *path, const char *kind, bool overwrite, dit_error *err);
/* Completes the file when st is DIT_OK (flush, fsync, close, move into place), else removes
 * it; returns st or the first failure of these steps. Frees o's state either way. */
dit_status dit_outfile_end(dit_outfile *o, dit_status st, dit_error *err);
/* DIT_ERR_IO "cannot write <kind> <path>: <what>: <reason for errno e>". */
dit_status dit_outfile_error(const dit_outfile *o, const char *what, int e, dit_error *err);

/* A tensor the weight-file writers (GGUF, safetensors) write: its name, dtype and shape in
 * torch order; the data come from a fill function, tensor i's nbytes at dst, in order. */
typedef struct dit_out_tensor {
  const char *name;
  dit_dtype dtype;
  int ndim;
  int64_t shape[4];
} dit_out_tensor;
typedef dit_status (*dit_out_fill_fn)(void *user, size_t i, void *dst, size_t nbytes, dit_error *err);

#endif

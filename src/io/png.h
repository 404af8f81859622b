/* PNG output: the generated image as 8-bit RGB with the generation parameters as iTXt
 * (UTF-8) text chunks, written atomically (temp file in the target folder, flushed,
 * fsync'd, renamed) so a failed or interrupted run never leaves a partial file, and an
 * existing file is never replaced unless the caller asks. Also the float -> 8-bit
 * conversion of diffusers' numpy_to_pil. */
#ifndef DIT_IO_PNG_H
#define DIT_IO_PNG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

/* Writes rgb (height rows of width*3 bytes, top row first) to path.
 * keys[i]/values[i] (i < n_text) become iTXt chunks; keys must be 1-79 bytes of printable
 * Latin-1 without leading/trailing/double spaces (PNG's keyword rule), values any UTF-8.
 * overwrite=false: fails with DIT_ERR_IO ("... exists") if path exists, leaving it untouched.
 * Returns DIT_ERR_INVALID_ARG for bad sizes/keys, DIT_ERR_IO naming the path and the reason
 * (missing folder, is a directory, permission denied, disk full, ...), DIT_ERR_NOMEM.
 * On any failure no file is created at path and no temp file is left behind. */
dit_status dit_png_write(const char *path, const uint8_t *rgb, int width, int height,
                         const char *const *keys, const char *const *values, int n_text,
                         bool overwrite, dit_error *err);

/* The same PNG (same checks, same chunks) into memory: *out (malloc'd, free() it) holds
 * *out_len bytes. DIT_ERR_INVALID_ARG for bad sizes/keys, DIT_ERR_NOMEM. */
dit_status dit_png_encode(const uint8_t *rgb, int width, int height, const char *const *keys,
                          const char *const *values, int n_text, uint8_t **out, size_t *out_len, dit_error *err);

/* What dit_png_read_text found: the image size and the text chunks in file order. */
typedef struct dit_png_text {
  int width, height;
  int n;
  char **keys, **values; /* n malloc'd UTF-8 strings each (tEXt's Latin-1 is passed through) */
} dit_png_text;

/* Reads a PNG's size and its tEXt/zTXt/iTXt chunks (before and after the image data),
 * decoding the pixels to check them. DIT_ERR_FORMAT naming the file for a file that is not a
 * PNG or is damaged, DIT_ERR_IO when it cannot be opened, DIT_ERR_NOMEM. On failure *out is
 * empty. Free with dit_png_text_free. */
dit_status dit_png_read_text(const char *path, dit_png_text *out, dit_error *err);
void dit_png_text_free(dit_png_text *t);

/* n floats in [0, 1] (already (x/2 + 0.5).clamp(0, 1) by the pipeline) -> bytes as numpy's
 * (x * 255).round().astype(uint8): x*255 in float32, rounded half to even. Values outside
 * [0, 1] are clamped first. NaN or Inf -> DIT_ERR_NUMERIC naming the first bad index
 * (out is then unspecified). */
dit_status dit_image_to_u8(const float *hwc, size_t n, uint8_t *out, dit_error *err);

#endif

/* Input images (init and reference images), read as diffusers reads them: PIL.Image.open,
 * ImageOps.exif_transpose, .convert("RGB"). PNG through libpng, JPEG through libjpeg-turbo,
 * from memory, with the pixel count checked against a budget from the header before any pixel
 * is decoded (a 100000 x 100000 header costs nothing). What PIL's convert("RGB") does, done here:
 *   RGBA, gray + alpha: the alpha dropped (not composited);  gray: replicated to R, G, B;
 *   palette: the palette's colors (transparency ignored);     1-bit gray: 0 / 255;
 *   16-bit RGB(A): the high byte of each sample;              16-bit gray: clamped to 0..255
 *   (Pillow opens it as 32-bit "I" and clips);               JPEG: libjpeg's default decode
 *   (islow IDCT, fancy upsampling), gray JPEG replicated; CMYK JPEG refused.
 *   EXIF orientation (JPEG APP1, PNG eXIf): applied as exif_transpose does. */
#ifndef DIT_IO_IMAGE_READ_H
#define DIT_IO_IMAGE_READ_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "ditrun.h"

#define DIT_IMAGE_MAX_FILE (256u << 20) /* bytes of an image file read into memory */

/* Decodes n bytes (a PNG or a JPEG, told by its signature) into out (8-bit RGB). name is for
 * messages. DIT_ERR_FORMAT for damaged or unrecognized data, DIT_ERR_INVALID_ARG for an image
 * of more than max_pixels pixels, DIT_ERR_UNSUPPORTED for a CMYK JPEG, DIT_ERR_NOMEM. On
 * failure out is empty. */
dit_status dit_image_decode(const uint8_t *data, size_t n, const char *name, int64_t max_pixels, dit_image *out,
                            dit_error *err);
/* The same from a file (at most DIT_IMAGE_MAX_FILE bytes; DIT_ERR_IO when it cannot be read). */
dit_status dit_image_read(const char *path, int64_t max_pixels, dit_image *out, dit_error *err);

/* EXIF orientation (1..8) from a TIFF-structured EXIF block (after "Exif\0\0"); 1 when absent
 * or unreadable. */
int dit_exif_orientation(const uint8_t *tiff, size_t n);
/* img transposed in place as PIL's exif_transpose does for orientation o (2..8; 1 = nothing).
 * DIT_ERR_NOMEM. */
dit_status dit_image_orient(dit_image *img, int o, dit_error *err);

/* The resampling filters of dit_image_resize, as PIL's Image.Resampling names them. */
typedef enum dit_resample {
  DIT_RESAMPLE_LANCZOS,  /* Image.LANCZOS: sinc(x) sinc(x / 3), support 3; diffusers' VaeImageProcessor default */
  DIT_RESAMPLE_BILINEAR, /* Image.BILINEAR: the triangle 1 - |x|, support 1; diffusers' VideoProcessor
                          * (resample="bilinear", LTX-2's image-to-video) */
} dit_resample;

/* PIL's Image.resize(size, filter) of 8-bit RGB, bit for bit (Pillow 9.4's Resample.c): per-axis
 * weights of the filter, its support widened by the scale when shrinking, normalized and
 * rounded to 22-bit fixed point; separable passes, rows first (into 8-bit), then columns. dst
 * holds ow * oh * 3 bytes. Same size: a copy. DIT_ERR_INVALID_ARG for sizes < 1 or an unknown
 * filter, DIT_ERR_NOMEM. */
dit_status dit_image_resize(const uint8_t *src, int w, int h, uint8_t *dst, int ow, int oh, dit_resample filter,
                            dit_error *err);

#endif

/* Input images from PNG (libpng) and JPEG (libjpeg-turbo), as diffusers/PIL read them: see
 * image_read.h. Both libraries report errors by calling our handler, which records the message
 * and longjmps back; nothing is printed, nothing aborts. */
#include "io/image_read.h"

#include <errno.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jpeglib.h>
#include <jerror.h>

#include "io/png_libpng.h"

static dit_status too_big(const char *name, uint64_t w, uint64_t h, int64_t max_pixels, dit_error *err) {
  return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %llux%llu is %llu pixels, more than this run allows (%lld)", name,
                    (unsigned long long)w, (unsigned long long)h, (unsigned long long)(w * h), (long long)max_pixels);
}

static dit_status alloc_rgb(dit_image *out, uint32_t w, uint32_t h, const char *name, dit_error *err) {
  out->rgb = malloc((size_t)w * h * 3);
  if (!out->rgb) return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory for a %ux%u image", name, w, h);
  out->width = (int)w, out->height = (int)h;
  return DIT_OK;
}

/* ---- PNG -------------------------------------------------------------------------------- */
typedef struct png_src {
  dit_png_jmp j; /* first: libpng's error pointer is the source */
  const uint8_t *p;
  size_t n, at;
} png_src;

static void on_png_read(png_structp png, png_bytep dst, size_t len) {
  png_src *s = png_get_io_ptr(png);
  if (len > s->n - s->at) png_error(png, "the file ends early (truncated?)");
  memcpy(dst, s->p + s->at, len);
  s->at += len;
}

/* libpng's transformations to 8-bit RGB as PIL's convert("RGB") gives it. */
static void png_to_rgb8(png_structp png, png_infop info, bool *gray16) {
  int ct = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  *gray16 = depth == 16 && !(ct & PNG_COLOR_MASK_COLOR) && ct != PNG_COLOR_TYPE_PALETTE;
  if (ct == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (ct == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16 && !*gray16) png_set_strip_16(png); /* the high byte, as PIL's "RGB;16B" */
  if (*gray16) png_set_swap(png);                        /* 16-bit gray: read whole, clamped below */
  if (ct & PNG_COLOR_MASK_ALPHA || png_get_valid(png, info, PNG_INFO_tRNS)) png_set_strip_alpha(png);
  if (!*gray16 && !(ct & PNG_COLOR_MASK_COLOR) && ct != PNG_COLOR_TYPE_PALETTE) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
}

static dit_status decode_png(const uint8_t *data, size_t n, const char *name, int64_t max_pixels, dit_image *out,
                             int *orientation, dit_error *err) {
  png_src src = {.p = data, .n = n};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, dit_png_on_error, dit_png_on_warning);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  png_bytep *volatile rows = NULL;
  uint16_t *volatile wide = NULL;
  if (!png || !info || setjmp(src.j.jmp)) {
    dit_status s = png && info ? dit_errorf(err, DIT_ERR_FORMAT, "%s: not a readable PNG: %s", name, src.j.msg)
                               : dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", name);
    png_destroy_read_struct(png ? &png : NULL, info ? &info : NULL, NULL);
    free(rows), free(wide);
    dit_image_free(out);
    return s;
  }
  png_set_read_fn(png, &src, on_png_read);
  png_set_user_limits(png, 1u << 20, 1u << 20);
  png_set_chunk_malloc_max(png, 64u << 20);
  png_read_info(png, info);
  uint32_t w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if ((int64_t)w * h > max_pixels) {
    png_destroy_read_struct(&png, &info, NULL);
    return too_big(name, w, h, max_pixels, err);
  }
  png_bytep exif = NULL;
  png_uint_32 exif_n = 0;
  if (png_get_eXIf_1(png, info, &exif_n, &exif) && exif) *orientation = dit_exif_orientation(exif, exif_n);
  bool gray16;
  png_to_rgb8(png, info, &gray16);
  if (alloc_rgb(out, w, h, name, err) != DIT_OK) png_error(png, "out of memory");
  rows = malloc(h * sizeof *rows);
  if (gray16) wide = malloc((size_t)w * h * 2);
  if (!rows || (gray16 && !wide)) png_error(png, "out of memory");
  for (uint32_t y = 0; y < h; y++)
    rows[y] = gray16 ? (png_bytep)(wide + (size_t)y * w) : out->rgb + (size_t)y * w * 3;
  png_read_image(png, rows);
  png_read_end(png, NULL);
  if (gray16)
    for (size_t i = 0; i < (size_t)w * h; i++) {
      uint8_t v = wide[i] > 255 ? 255 : (uint8_t)wide[i];
      out->rgb[3 * i] = out->rgb[3 * i + 1] = out->rgb[3 * i + 2] = v;
    }
  png_destroy_read_struct(&png, &info, NULL);
  free(rows), free(wide);
  return DIT_OK;
}

/* ---- JPEG ------------------------------------------------------------------------------- */
typedef struct jpeg_fail {
  struct jpeg_error_mgr mgr; /* first */
  jmp_buf jmp;
  char msg[JMSG_LENGTH_MAX];
} jpeg_fail;

static void on_jpeg_error(j_common_ptr c) {
  jpeg_fail *f = (jpeg_fail *)c->err;
  f->mgr.format_message(c, f->msg);
  longjmp(f->jmp, 1);
}

/* Warnings (corrupt but decodable data) are not printed; a file that ends early is an error,
 * as in PIL (libjpeg would pad it with gray). */
static void on_jpeg_message(j_common_ptr c, int level) {
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) {
    jpeg_fail *f = (jpeg_fail *)c->err;
    snprintf(f->msg, sizeof f->msg, "the file ends early (truncated?)");
    longjmp(f->jmp, 1);
  }
}

static int jpeg_orientation(j_decompress_ptr c) {
  for (jpeg_saved_marker_ptr m = c->marker_list; m; m = m->next)
    if (m->marker == JPEG_APP0 + 1 && m->data_length > 6 && !memcmp(m->data, "Exif\0\0", 6))
      return dit_exif_orientation(m->data + 6, m->data_length - 6);
  return 1;
}

static dit_status decode_jpeg(const uint8_t *data, size_t n, const char *name, int64_t max_pixels, dit_image *out,
                              int *orientation, dit_error *err) {
  struct jpeg_decompress_struct c;
  jpeg_fail f;
  memset(&c, 0, sizeof c);
  c.err = jpeg_std_error(&f.mgr);
  f.mgr.error_exit = on_jpeg_error;
  f.mgr.emit_message = on_jpeg_message;
  f.msg[0] = 0;
  if (setjmp(f.jmp)) {
    if (!f.msg[0]) snprintf(f.msg, sizeof f.msg, "damaged data");
    jpeg_destroy_decompress(&c);
    dit_image_free(out);
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: not a readable JPEG: %s", name, f.msg);
  }
  jpeg_create_decompress(&c);
  jpeg_mem_src(&c, data, (unsigned long)n);
  jpeg_save_markers(&c, JPEG_APP0 + 1, 0xffff);
  jpeg_read_header(&c, TRUE);
  if ((int64_t)c.image_width * c.image_height > max_pixels) {
    jpeg_destroy_decompress(&c);
    return too_big(name, c.image_width, c.image_height, max_pixels, err);
  }
  if (c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&c);
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: a CMYK JPEG (convert it to RGB first)", name);
  }
  *orientation = jpeg_orientation(&c);
  c.out_color_space = JCS_RGB; /* a gray JPEG too: libjpeg replicates it, as PIL's convert("RGB") */
  jpeg_start_decompress(&c);
  if (alloc_rgb(out, c.output_width, c.output_height, name, err) != DIT_OK) {
    jpeg_destroy_decompress(&c);
    return DIT_ERR_NOMEM;
  }
  while (c.output_scanline < c.output_height) {
    JSAMPROW row = out->rgb + (size_t)c.output_scanline * c.output_width * 3;
    jpeg_read_scanlines(&c, &row, 1);
  }
  jpeg_finish_decompress(&c);
  jpeg_destroy_decompress(&c);
  return DIT_OK;
}

/* ---- entry points -------------------------------------------------------------------------- */
dit_status dit_image_decode(const uint8_t *data, size_t n, const char *name, int64_t max_pixels, dit_image *out,
                            dit_error *err) {
  memset(out, 0, sizeof *out);
  int orientation = 1;
  dit_status s;
  if (n >= 8 && !png_sig_cmp(data, 0, 8)) s = decode_png(data, n, name, max_pixels, out, &orientation, err);
  else if (n >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff)
    s = decode_jpeg(data, n, name, max_pixels, out, &orientation, err);
  else return dit_errorf(err, DIT_ERR_FORMAT, "%s: not a PNG or JPEG image", name);
  if (s == DIT_OK && orientation != 1) s = dit_image_orient(out, orientation, err);
  if (s != DIT_OK) dit_image_free(out);
  return s;
}

dit_status dit_image_read(const char *path, int64_t max_pixels, dit_image *out, dit_error *err) {
  memset(out, 0, sizeof *out);
  FILE *fp = fopen(path, "rb");
  if (!fp) return dit_errorf(err, DIT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
      (uint64_t)st.st_size > DIT_IMAGE_MAX_FILE) {
    fclose(fp);
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: not a regular file of 1 byte to %u MiB", path,
                      DIT_IMAGE_MAX_FILE >> 20);
  }
  uint8_t *buf = malloc((size_t)st.st_size);
  size_t got = buf ? fread(buf, 1, (size_t)st.st_size, fp) : 0;
  fclose(fp);
  if (!buf) return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", path);
  dit_status s = got == (size_t)st.st_size ? dit_image_decode(buf, got, path, max_pixels, out, err)
                                           : dit_errorf(err, DIT_ERR_IO, "%s: read failed", path);
  free(buf);
  return s;
}

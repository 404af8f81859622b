/* PNG writer over libpng (see png.h): validate, then write through io/outfile.h (a temporary
 * file moved into place, an existing file kept unless asked to). libpng reports errors
 * by calling our error function, which records the message and longjmps back; nothing is
 * printed and nothing aborts. */
#include "io/png.h"
#include "io/outfile.h"
#include "io/png_libpng.h"
#include "core/sbuf.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PNG_MAX_SIDE 65535

/* ---- argument checks ------------------------------------------------------------- */

/* PNG keyword rule: 1-79 bytes of printable Latin-1, no leading/trailing/double spaces. */
static bool keyword_ok(const char *k) {
  size_t n = strlen(k);
  if (n < 1 || n > 79 || k[0] == ' ' || k[n - 1] == ' ') return false;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)k[i];
    if (!((c >= 32 && c <= 126) || c >= 161)) return false;
    if (c == ' ' && k[i + 1] == ' ') return false;
  }
  return true;
}

/* Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF). */
static bool utf8_ok(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    unsigned c = *p;
    int len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (!len) return false;
    unsigned cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (int i = 1; i < len; i++) {
      if ((p[i] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3f);
    }
    static const unsigned min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    p += len;
  }
  return true;
}

static dit_status check_args(const char *path, const uint8_t *rgb, int width, int height, const char *const *keys,
                             const char *const *values, int n_text, dit_error *err) {
  if (!path || !path[0]) return dit_errorf(err, DIT_ERR_INVALID_ARG, "PNG: empty output path");
  if (!rgb) return dit_errorf(err, DIT_ERR_INVALID_ARG, "PNG %s: no pixel data", path);
  if (width < 1 || height < 1 || width > PNG_MAX_SIDE || height > PNG_MAX_SIDE)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "PNG %s: size %dx%d is outside 1..%d", path, width, height,
                      PNG_MAX_SIDE);
  if (n_text < 0 || (n_text > 0 && (!keys || !values)))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "PNG %s: bad text list (%d entries)", path, n_text);
  for (int i = 0; i < n_text; i++) {
    if (!keys[i] || !keyword_ok(keys[i]))
      return dit_errorf(err, DIT_ERR_INVALID_ARG,
                        "PNG %s: text key %d \"%.80s\" is not a PNG keyword (1-79 printable Latin-1 bytes, "
                        "no leading, trailing or double spaces)",
                        path, i, keys[i] ? keys[i] : "(null)");
    if (!values[i] || !utf8_ok(values[i]))
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "PNG %s: the value of text key \"%s\" is %s", path, keys[i],
                        values[i] ? "not valid UTF-8" : "missing");
  }
  return DIT_OK;
}

/* ---- paths ------------------------------------------------------------------------ */

/* Splits path into its folder (malloc'd; "." when none) and checks the target and the
 * folder; fails naming the path and the reason. */
/* ---- libpng ----------------------------------------------------------------------- */

typedef struct png_sink {
  dit_png_jmp j;    /* first: libpng's error pointer is the sink */
  FILE *fp;         /* a file, or (fp NULL) the memory buffer mem */
  dit_sbuf *mem;
  int write_errno;  /* errno of the failed write, 0 if none */
} png_sink;

void dit_png_on_error(png_structp png, png_const_charp msg) {
  dit_png_jmp *j = png_get_error_ptr(png);
  snprintf(j->msg, sizeof j->msg, "%s", msg ? msg : "libpng error");
  longjmp(j->jmp, 1);
}

void dit_png_on_warning(png_structp png, png_const_charp msg) {
  (void)png;
  (void)msg; /* warnings are not errors; never printed */
}

static void on_png_write(png_structp png, png_bytep data, size_t len) {
  png_sink *s = png_get_io_ptr(png);
  if (!s->fp) {
    if (!dit_sbuf_put(s->mem, (const char *)data, len)) png_error(png, "out of memory for the PNG");
    return;
  }
  if (fwrite(data, 1, len, s->fp) != len) {
    s->write_errno = errno ? errno : EIO;
    png_error(png, "write failed");
  }
}

static void on_png_flush(png_structp png) {
  png_sink *s = png_get_io_ptr(png);
  if (s->fp && fflush(s->fp) != 0) {
    s->write_errno = errno ? errno : EIO;
    png_error(png, "flush failed");
  }
}

/* Encodes the image into s->fp. Returns 0, or -1 with s->j.msg / s->write_errno set. */
static int encode(png_sink *s, const uint8_t *rgb, int width, int height, const char *const *keys,
                  const char *const *values, int n_text) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, s, dit_png_on_error, dit_png_on_warning);
  if (!png) {
    snprintf(s->j.msg, sizeof s->j.msg, "out of memory creating the PNG writer");
    return -1;
  }
  png_infop info = png_create_info_struct(png);
  png_text *volatile text = NULL;
  if (!info || setjmp(s->j.jmp)) {
    if (!info && !s->j.msg[0]) snprintf(s->j.msg, sizeof s->j.msg, "out of memory creating the PNG writer");
    png_destroy_write_struct(&png, info ? &info : NULL);
    free(text);
    return -1;
  }
  png_set_write_fn(png, s, on_png_write, on_png_flush);
  png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (n_text > 0) {
    text = calloc((size_t)n_text, sizeof *text);
    if (!text) png_error(png, "out of memory for the text chunks");
    for (int i = 0; i < n_text; i++) {
      text[i].compression = PNG_ITXT_COMPRESSION_NONE;
      text[i].key = (png_charp)keys[i];
      text[i].text = (png_charp)values[i];
      text[i].itxt_length = strlen(values[i]);
      text[i].lang = (png_charp) "";
      text[i].lang_key = (png_charp) "";
    }
    png_set_text(png, info, text, n_text);
  }
  png_write_info(png, info);
  for (int y = 0; y < height; y++) png_write_row(png, (png_const_bytep)(rgb + (size_t)y * (size_t)width * 3));
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  free(text);
  return 0;
}

dit_status dit_png_write(const char *path, const uint8_t *rgb, int width, int height, const char *const *keys,
                         const char *const *values, int n_text, bool overwrite, dit_error *err) {
  DIT_TRY(check_args(path, rgb, width, height, keys, values, n_text, err));
  dit_outfile o;
  DIT_TRY(dit_outfile_begin(&o, path, "PNG", overwrite, err));
  png_sink sink;
  memset(&sink, 0, sizeof sink);
  sink.fp = o.fp;
  dit_status st = DIT_OK;
  int rc = encode(&sink, rgb, width, height, keys, values, n_text);
  if (rc != 0 && sink.write_errno) st = dit_outfile_error(&o, "writing", sink.write_errno, err);
  else if (rc != 0) st = dit_errorf(err, DIT_ERR_IO, "cannot write PNG %s: libpng: %s", path, sink.j.msg);
  return dit_outfile_end(&o, st, err);
}

dit_status dit_png_encode(const uint8_t *rgb, int width, int height, const char *const *keys,
                          const char *const *values, int n_text, uint8_t **out, size_t *out_len, dit_error *err) {
  *out = NULL;
  *out_len = 0;
  DIT_TRY(check_args("(in memory)", rgb, width, height, keys, values, n_text, err));
  dit_sbuf mem = {.ok = true};
  png_sink sink;
  memset(&sink, 0, sizeof sink);
  sink.mem = &mem;
  if (encode(&sink, rgb, width, height, keys, values, n_text) != 0 || !mem.ok) {
    free(mem.s);
    if (!mem.ok) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory encoding a %dx%d PNG", width, height);
    return dit_errorf(err, DIT_ERR_INTERNAL, "encoding a %dx%d PNG: libpng: %s", width, height, sink.j.msg);
  }
  *out = (uint8_t *)mem.s;
  *out_len = mem.n;
  return DIT_OK;
}

dit_status dit_image_to_u8(const float *hwc, size_t n, uint8_t *out, dit_error *err) {
  for (size_t i = 0; i < n; i++) {
    float x = hwc[i];
    if (!isfinite(x))
      return dit_errorf(err, DIT_ERR_NUMERIC, "image to 8-bit: value %zu (pixel %zu, channel %zu) is %s", i, i / 3,
                        i % 3, isnan(x) ? "NaN" : "infinite");
    if (x < 0.0f) x = 0.0f;
    if (x > 1.0f) x = 1.0f;
    float y = x * 255.0f;          /* float32 product, as numpy */
    float r = nearbyintf(y);       /* round half to even (default rounding mode) */
    out[i] = (uint8_t)(int)r;
  }
  return DIT_OK;
}

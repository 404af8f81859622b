/* PNG writer over libpng (see png.h): validate, write to a mkstemp file in the target's
 * folder, flush + fsync, then move it into place without replacing an existing file
 * (renameat2 RENAME_NOREPLACE, else link + unlink) unless asked to. libpng reports errors
 * by calling our error function, which records the message and longjmps back; nothing is
 * printed and nothing aborts. */
#include "io/png.h"
#include "io/png_libpng.h"

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
static dit_status check_target(const char *path, bool overwrite, char **dir_out, dit_error *err) {
  size_t n = strlen(path);
  if (path[n - 1] == '/') return dit_errorf(err, DIT_ERR_IO, "cannot write PNG %s: it names a directory", path);
  struct stat st;
  if (stat(path, &st) == 0) {
    if (S_ISDIR(st.st_mode)) return dit_errorf(err, DIT_ERR_IO, "cannot write PNG %s: it is a directory", path);
    if (!overwrite)
      return dit_errorf(err, DIT_ERR_IO, "cannot write PNG %s: the file already exists (refusing to overwrite it)",
                        path);
    if (!S_ISREG(st.st_mode))
      return dit_errorf(err, DIT_ERR_IO, "cannot write PNG %s: it exists and is not a regular file", path);
  }
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
  if (!dir) return dit_errorf(err, DIT_ERR_NOMEM, "PNG %s: out of memory", path);
  if (stat(dir, &st) != 0) {
    int e = errno;
    dit_errorf(err, DIT_ERR_IO, "cannot write PNG %s: folder %s %s", path, dir,
               e == ENOENT ? "does not exist" : strerror(e));
    free(dir);
    return DIT_ERR_IO;
  }
  if (!S_ISDIR(st.st_mode)) {
    dit_errorf(err, DIT_ERR_IO, "cannot write PNG %s: %s is not a folder", path, dir);
    free(dir);
    return DIT_ERR_IO;
  }
  *dir_out = dir;
  return DIT_OK;
}

/* ---- libpng ----------------------------------------------------------------------- */

typedef struct png_sink {
  dit_png_jmp j;    /* first: libpng's error pointer is the sink */
  FILE *fp;
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
  if (fwrite(data, 1, len, s->fp) != len) {
    s->write_errno = errno ? errno : EIO;
    png_error(png, "write failed");
  }
}

static void on_png_flush(png_structp png) {
  png_sink *s = png_get_io_ptr(png);
  if (fflush(s->fp) != 0) {
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

/* Moves tmp to path: atomically refusing an existing path unless overwrite. Returns 0 or
 * an errno (EEXIST when path appeared meanwhile). */
static int move_into_place(const char *tmp, const char *path, bool overwrite) {
  if (overwrite) return rename(tmp, path) == 0 ? 0 : errno;
#ifdef RENAME_NOREPLACE
  if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) return errno;
#endif
  /* Filesystem without RENAME_NOREPLACE: link() refuses an existing name atomically. */
  if (link(tmp, path) == 0) {
    unlink(tmp);
    return 0;
  }
  if (errno == EEXIST) return EEXIST;
  if (errno != EPERM && errno != ENOTSUP && errno != EOPNOTSUPP && errno != EMLINK) return errno;
  /* No hard links either (some FUSE / FAT mounts): check, then rename (a small race). */
  struct stat st;
  if (stat(path, &st) == 0) return EEXIST;
  return rename(tmp, path) == 0 ? 0 : errno;
}

static void sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    (void)fsync(fd); /* best effort: makes the rename durable */
    close(fd);
  }
}

static dit_status io_error(const char *path, const char *what, int e, dit_error *err) {
  const char *why = e == EACCES || e == EPERM ? "permission denied"
                    : e == ENOSPC          ? "no space left on the device (disk full)"
                    : e == EDQUOT          ? "disk quota exceeded"
                    : e == EROFS           ? "read-only file system"
                                           : strerror(e);
  return dit_errorf(err, DIT_ERR_IO, "cannot write PNG %s: %s: %s", path, what, why);
}

dit_status dit_png_write(const char *path, const uint8_t *rgb, int width, int height, const char *const *keys,
                         const char *const *values, int n_text, bool overwrite, dit_error *err) {
  DIT_TRY(check_args(path, rgb, width, height, keys, values, n_text, err));
  char *dir = NULL;
  DIT_TRY(check_target(path, overwrite, &dir, err));
  size_t tlen = strlen(dir) + 32;
  char *tmp = malloc(tlen);
  if (!tmp) {
    free(dir);
    return dit_errorf(err, DIT_ERR_NOMEM, "PNG %s: out of memory", path);
  }
  snprintf(tmp, tlen, "%s/.ditrun-png-XXXXXX", dir);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    dit_status s = io_error(path, "cannot create a temporary file in its folder", errno, err);
    free(tmp);
    free(dir);
    return s;
  }
  (void)fchmod(fd, 0644); /* mkstemp makes 0600; a picture is normally readable by all */
  png_sink sink;
  memset(&sink, 0, sizeof sink);
  sink.fp = fdopen(fd, "wb");
  dit_status st = DIT_OK;
  if (!sink.fp) {
    st = io_error(path, "fdopen", errno, err);
    close(fd);
  } else {
    int rc = encode(&sink, rgb, width, height, keys, values, n_text);
    if (rc != 0 && sink.write_errno) st = io_error(path, "writing", sink.write_errno, err);
    else if (rc != 0) st = dit_errorf(err, DIT_ERR_IO, "cannot write PNG %s: libpng: %s", path, sink.j.msg);
    if (st == DIT_OK && fflush(sink.fp) != 0) st = io_error(path, "writing", errno, err);
    if (st == DIT_OK && fsync(fd) != 0) st = io_error(path, "fsync", errno, err);
    if (fclose(sink.fp) != 0 && st == DIT_OK) st = io_error(path, "closing", errno, err);
  }
  if (st == DIT_OK) {
    int e = move_into_place(tmp, path, overwrite);
    if (e == EEXIST)
      st = dit_errorf(err, DIT_ERR_IO, "cannot write PNG %s: the file already exists (refusing to overwrite it)", path);
    else if (e == EISDIR)
      st = dit_errorf(err, DIT_ERR_IO, "cannot write PNG %s: it is a directory", path);
    else if (e != 0)
      st = io_error(path, "renaming the finished file into place", e, err);
    else
      sync_dir(dir);
  }
  if (st != DIT_OK) unlink(tmp); /* no partial file: the target was never touched */
  free(tmp);
  free(dir);
  return st;
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

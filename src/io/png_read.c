/* Reading back what ditrun (or another tool) wrote into a PNG: its size and its text chunks
 * (tEXt, zTXt, iTXt, before or after the image data), through libpng with its limits on.
 * The pixels are decoded row by row into one row buffer and dropped: only the metadata is
 * wanted, and a damaged image still fails here rather than later in a viewer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/png.h"
#include "io/png_libpng.h"


void dit_png_text_free(dit_png_text *t) {
  if (!t) return;
  for (int i = 0; i < t->n; i++) free(t->keys[i]), free(t->values[i]);
  free(t->keys);
  free(t->values);
  memset(t, 0, sizeof *t);
}

/* Appends the text chunks libpng holds in info to t; 0 or -1 (out of memory). */
static int collect(png_structp png, png_infop info, dit_png_text *t) {
  png_textp text = NULL;
  int n = 0;
  png_get_text(png, info, &text, &n);
  if (n <= 0) return 0;
  char **k = realloc(t->keys, (size_t)(t->n + n) * sizeof *k);
  if (!k) return -1;
  t->keys = k;
  char **v = realloc(t->values, (size_t)(t->n + n) * sizeof *v);
  if (!v) return -1;
  t->values = v;
  for (int i = 0; i < n; i++) {
    size_t len = text[i].compression >= PNG_ITXT_COMPRESSION_NONE ? text[i].itxt_length : text[i].text_length;
    char *key = strdup(text[i].key ? text[i].key : "");
    char *val = malloc(len + 1);
    if (!key || !val) {
      free(key), free(val);
      return -1;
    }
    if (len) memcpy(val, text[i].text, len);
    val[len] = 0;
    t->keys[t->n] = key;
    t->values[t->n] = val;
    t->n++;
  }
  return 0;
}

dit_status dit_png_read_text(const char *path, dit_png_text *out, dit_error *err) {
  memset(out, 0, sizeof *out);
  FILE *fp = fopen(path, "rb");
  if (!fp) return dit_errorf(err, DIT_ERR_IO, "%s: cannot open", path);
  unsigned char sig[8];
  if (fread(sig, 1, 8, fp) != 8 || png_sig_cmp(sig, 0, 8)) {
    fclose(fp);
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: not a PNG file", path);
  }
  dit_png_jmp src = {0};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, dit_png_on_error, dit_png_on_warning);
  png_infop info = png ? png_create_info_struct(png) : NULL, end = png ? png_create_info_struct(png) : NULL;
  png_bytep volatile row = NULL;
  if (!png || !info || !end || setjmp(src.jmp)) {
    dit_status s = png && info && end ? dit_errorf(err, DIT_ERR_FORMAT, "%s: %s", path, src.msg)
                                      : dit_errorf(err, DIT_ERR_NOMEM, "out of memory reading %s", path);
    png_destroy_read_struct(png ? &png : NULL, info ? &info : NULL, end ? &end : NULL);
    free(row);
    fclose(fp);
    dit_png_text_free(out);
    return s;
  }
  png_init_io(png, fp);
  png_set_sig_bytes(png, 8);
  png_set_user_limits(png, 1u << 15, 1u << 15);
  png_set_chunk_malloc_max(png, 64u << 20);
  png_read_info(png, info);
  out->width = (int)png_get_image_width(png, info);
  out->height = (int)png_get_image_height(png, info);
  if (collect(png, info, out)) png_error(png, "out of memory for the text chunks");
  int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  row = malloc(png_get_rowbytes(png, info));
  if (!row) png_error(png, "out of memory for a row");
  for (int p = 0; p < passes; p++)
    for (int y = 0; y < out->height; y++) png_read_row(png, row, NULL);
  png_read_end(png, end);
  if (collect(png, end, out)) png_error(png, "out of memory for the text chunks");
  png_destroy_read_struct(&png, &info, &end);
  free(row);
  fclose(fp);
  return DIT_OK;
}

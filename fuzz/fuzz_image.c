/* libFuzzer target for the input-image readers (src/io/image_read.c): any bytes as a PNG or
 * JPEG (libpng, libjpeg-turbo, our EXIF orientation parser), then a resize of what decoded,
 * Lanczos or bilinear by the low bit of the last byte (so the corpus stays plain image files).
 * Every outcome is an image of the size its header gave (turned by its orientation) or an
 * error with a message; the pixel budget (1 Mpx here) holds whatever the header says. */
#include <stdlib.h>
#include <string.h>

#include "io/image_read.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dit_image img;
  dit_error err = {0};
  dit_status s = dit_image_decode(data, size, "fuzz", 1 << 20, &img, &err);
  if (s != DIT_OK) {
    if (!err.msg[0] || img.rgb) abort();
    return 0;
  }
  if (!img.rgb || img.width < 1 || img.height < 1 || (int64_t)img.width * img.height > (1 << 20)) abort();
  int ow = img.width / 2 + 1, oh = img.height % 7 + 1;
  uint8_t *out = malloc((size_t)ow * oh * 3);
  const dit_resample filter = data[size - 1] & 1 ? DIT_RESAMPLE_BILINEAR : DIT_RESAMPLE_LANCZOS;
  if (out && dit_image_resize(img.rgb, img.width, img.height, out, ow, oh, filter, &err) != DIT_OK) abort();
  free(out);
  dit_image_free(&img);
  (void)dit_exif_orientation(data, size);
  return 0;
}

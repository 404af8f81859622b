/* Input images prepared as diffusers does (see image_prep.h). */
#include "pipeline/image_prep.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/image_read.h"

/* x / 255 (numpy float32) then 2 x - 1 (torch float32), channel-major. */
static void normalize(const uint8_t *rgb, int W, int H, float *out) {
  const size_t hw = (size_t)W * (size_t)H;
  for (size_t i = 0; i < hw; i++)
    for (int c = 0; c < 3; c++) {
      const float x = (float)rgb[3 * i + (size_t)c] / 255.0f;
      out[(size_t)c * hw + i] = 2.0f * x - 1.0f;
    }
}

static dit_status check_image(const dit_image *img, dit_error *err) {
  if (!img || !img->rgb || img->width < 1 || img->height < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "input image: none or empty");
  return DIT_OK;
}

dit_status dit_image_to_pixels(const dit_image *img, int W, int H, dit_resample filter, float **out, dit_error *err) {
  *out = NULL;
  DIT_TRY(check_image(img, err));
  if (W < 1 || H < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "input image: target size %dx%d", W, H);
  float *px = malloc(3 * (size_t)W * (size_t)H * sizeof *px);
  uint8_t *tmp = NULL;
  const uint8_t *rgb = img->rgb;
  dit_status s = px ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "input image: out of memory");
  if (s == DIT_OK && (img->width != W || img->height != H)) {
    tmp = malloc(3 * (size_t)W * (size_t)H);
    s = tmp ? dit_image_resize(img->rgb, img->width, img->height, tmp, W, H, filter, err)
            : dit_errorf(err, DIT_ERR_NOMEM, "input image: out of memory");
    rgb = tmp;
  }
  if (s == DIT_OK) normalize(rgb, W, H, px);
  free(tmp);
  if (s != DIT_OK) {
    free(px);
    return s;
  }
  *out = px;
  return DIT_OK;
}

/* The size after the area cap (before flooring): PIL's resize target, or the image's own. */
static dit_status capped_size(const dit_image *img, int64_t max_area, int *w, int *h, dit_error *err) {
  DIT_TRY(check_image(img, err));
  const int iw = img->width, ih = img->height;
  if (iw < 64 || ih < 64)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "reference image too small: %dx%d (both sides must be >= 64 pixels)",
                      iw, ih);
  const double ar = fmax((double)iw / ih, (double)ih / iw);
  if (ar > 8.0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "reference image %dx%d: aspect ratio %.1f:1 is beyond 8:1", iw, ih, ar);
  *w = iw, *h = ih;
  if ((int64_t)iw * ih > max_area) {
    const double s = sqrt((double)max_area / ((double)iw * (double)ih));
    *w = (int)((double)iw * s);
    *h = (int)((double)ih * s);
  }
  return DIT_OK;
}

dit_status dit_flux2_ref_size(const dit_image *img, int multiple, int64_t max_area, int *W, int *H, dit_error *err) {
  int w, h;
  DIT_TRY(capped_size(img, max_area, &w, &h, err));
  *W = w / multiple * multiple;
  *H = h / multiple * multiple;
  if (*W < 1 || *H < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "reference image %dx%d is smaller than %d pixels after resizing", w, h,
                      multiple);
  return DIT_OK;
}

dit_status dit_flux2_ref_pixels(const dit_image *img, int multiple, int64_t max_area, float **out, int *W, int *H,
                                dit_error *err) {
  *out = NULL;
  int w, h;
  DIT_TRY(capped_size(img, max_area, &w, &h, err));
  DIT_TRY(dit_flux2_ref_size(img, multiple, max_area, W, H, err));
  uint8_t *rs = NULL;
  const uint8_t *src = img->rgb;
  if (w != img->width || h != img->height) {
    rs = malloc(3 * (size_t)w * (size_t)h);
    if (!rs) return dit_errorf(err, DIT_ERR_NOMEM, "reference image: out of memory");
    dit_status s = dit_image_resize(img->rgb, img->width, img->height, rs, w, h, DIT_RESAMPLE_LANCZOS, err);
    if (s != DIT_OK) {
      free(rs);
      return s;
    }
    src = rs;
  }
  /* center crop to W x H, as Flux2ImageProcessor._resize_and_crop */
  const int left = (w - *W) / 2, top = (h - *H) / 2;
  uint8_t *crop = malloc(3 * (size_t)*W * (size_t)*H);
  float *px = malloc(3 * (size_t)*W * (size_t)*H * sizeof *px);
  dit_status s = crop && px ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "reference image: out of memory");
  if (s == DIT_OK) {
    for (int y = 0; y < *H; y++)
      memcpy(crop + 3 * (size_t)y * *W, src + 3 * ((size_t)(top + y) * w + (size_t)left), 3 * (size_t)*W);
    normalize(crop, *W, *H, px);
  }
  free(rs);
  free(crop);
  if (s != DIT_OK) {
    free(px);
    return s;
  }
  *out = px;
  return DIT_OK;
}

/* Input images of the editing pipelines (init images, reference images) prepared as
 * diffusers' image processors prepare them, from the 8-bit RGB that dit_image_decode makes
 * of a file (PIL's open + exif_transpose + convert("RGB")). */
#ifndef DIT_PIPELINE_IMAGE_PREP_H
#define DIT_PIPELINE_IMAGE_PREP_H

#include "core/error.h"
#include "ditrun.h"
#include "io/image_read.h"

/* VaeImageProcessor.preprocess of img at W x H: resized with PIL's filter when its size differs
 * (bit for bit, dit_image_resize), then x / 255 * 2 - 1 in float32, as [3, H, W] (*out
 * malloc'd). diffusers' VaeImageProcessor resizes with DIT_RESAMPLE_LANCZOS (its default);
 * VideoProcessor(resample="bilinear") (LTX-2's image-to-video) with DIT_RESAMPLE_BILINEAR. */
dit_status dit_image_to_pixels(const dit_image *img, int W, int H, dit_resample filter, float **out, dit_error *err);

/* Flux2ImageProcessor's checks of a reference image (both sides >= 64 pixels, aspect ratio
 * <= 8), then Flux2KleinPipeline's preparation: an image of more than max_area pixels is
 * resized (Lanczos) to int(w * s) x int(h * s), s = sqrt(max_area / (w * h)); both sides are
 * floored to multiples of `multiple` and the image center-cropped to them (left = (w -
 * W) / 2, top = (h - H) / 2, rounded down), then normalized as dit_image_to_pixels. *W, *H:
 * the prepared size; *out [3, H, W] malloc'd. DIT_ERR_INVALID_ARG names the failed check. */
dit_status dit_flux2_ref_pixels(const dit_image *img, int multiple, int64_t max_area, float **out, int *W, int *H,
                                dit_error *err);

/* The prepared size of a FLUX.2 reference image (as dit_flux2_ref_pixels, without pixels). */
dit_status dit_flux2_ref_size(const dit_image *img, int multiple, int64_t max_area, int *W, int *H, dit_error *err);

#endif

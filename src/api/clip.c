/* Writing video clips (dit_model_generate_clip's output) as MP4 or as a folder of PNG frames
 * with a WAV (dit_clip_free is beside dit_image_free, so a program that saves no clip does not
 * link FFmpeg's libraries). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx.h"
#include "io/video.h"

/* fps as the fraction a video stream stores: whole numbers over 1, the NTSC rates
 * (24000/1001, ...) as such, anything else in thousandths. */
static void fps_fraction(double fps, int *num, int *den) {
  const double whole = round(fps), ntsc = round(fps * 1.001);
  if (fabs(fps - whole) < 1e-9) {
    *num = (int)whole, *den = 1;
  } else if (fabs(fps - ntsc * 1000.0 / 1001.0) < 1e-6) {
    *num = (int)ntsc * 1000, *den = 1001;
  } else {
    *num = (int)round(fps * 1000.0), *den = 1000;
  }
}

static bool ends_with_mp4(const char *path) {
  const size_t n = strlen(path);
  return n >= 4 && (!strcmp(path + n - 4, ".mp4") || !strcmp(path + n - 4, ".MP4"));
}

dit_status dit_clip_save(dit_ctx *ctx, const dit_clip *c, const char *path, int overwrite) {
  dit_error *err = &ctx->err;
  dit_error_clear(err);
  if (!c || !c->rgb || !path || !*path) return dit_errorf(err, DIT_ERR_INVALID_ARG, "no clip or no path to save it to");
  if (!(c->fps > 0 && c->fps <= 1000))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "clip frame rate %g is outside (0, 1000]", c->fps);
  dit_video v = {.width = c->width, .height = c->height, .n_frames = c->n_frames, .rgb = c->rgb};
  fps_fraction(c->fps, &v.fps_num, &v.fps_den);
  if (c->channels > 0 && c->samples)
    v.sound = (dit_sound){.samples = c->samples, .n_samples = c->n_samples, .channels = c->channels,
                          .sample_rate = c->sample_rate};
  if (ends_with_mp4(path)) return dit_video_write_mp4(path, &v, overwrite != 0, err);
  return dit_video_write_frames(path, &v, err);
}

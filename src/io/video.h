/* Video output: RGB frames, with optional sound, as an MP4 file (H.264 video, AAC audio)
 * through FFmpeg's libraries (libavformat, libavcodec, libswscale). Written like the PNGs
 * (io/outfile.h): into a temporary file beside the target, moved into place when complete;
 * a failure leaves nothing behind. */
#ifndef DIT_IO_VIDEO_H
#define DIT_IO_VIDEO_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "io/sound.h"

typedef struct dit_video {
  int width, height;      /* even (4:2:0 chroma), at most 8192 */
  int n_frames;           /* >= 1 */
  const uint8_t *rgb;     /* n_frames x height x width x 3, 8-bit RGB, frame after frame */
  int fps_num, fps_den;   /* frame rate fps_num / fps_den (24/1, 24000/1001, ...) */
  dit_sound sound;        /* optional (samples NULL: a video stream only) */
} dit_video;

/* Writes v to path as MP4 (H.264 yuv420p BT.709 limited range, quality-based rate; AAC). An
 * existing path is refused unless overwrite. */
dit_status dit_video_write_mp4(const char *path, const dit_video *v, bool overwrite, dit_error *err);

#endif

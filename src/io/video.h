/* Video output: RGB frames, with optional sound, as an MP4 file (H.264 video, AAC audio)
 * through FFmpeg's libraries (libavformat, libavcodec, libswscale), or as a folder of PNGs and
 * a WAV. Written like the PNGs
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

/* Refuses what cannot be written (what: "MP4", "frames"; path for the message): no frames, a
 * size outside 2..8192 (odd when even: 4:2:0 video), a frame rate outside (0, 1000], bad sound. */
dit_status dit_video_check(const char *what, const char *path, const dit_video *v, bool even, dit_error *err);

/* Writes v as a new folder dir: frame_00001.png ... (one 8-bit RGB PNG per frame) and, with
 * sound, audio.wav (16-bit PCM). Made as a hidden folder beside dir and renamed to dir once
 * complete; an existing dir is refused; a failure leaves nothing behind. */
dit_status dit_video_write_frames(const char *dir, const dit_video *v, dit_error *err);

/* Writes v to path as MP4 (H.264 yuv420p BT.709 limited range, quality-based rate; AAC). An
 * existing path is refused unless overwrite. */
dit_status dit_video_write_mp4(const char *path, const dit_video *v, bool overwrite, dit_error *err);

/* rgb (w x h 8-bit RGB) cropped to even sides, compressed as one H.264 frame at crf (1..51;
 * libx264, preset veryfast, yuv420p through swscale's bilinear BT.601 limited-range conversion,
 * as PyAV does it) and decoded back: *out (malloc'd) is *ow x *oh 8-bit RGB. What LTX-2's
 * image-to-video does to its image (diffusers' apply_image_conditioning_crf); the x264 version
 * decides the exact pixels. DIT_ERR_UNSUPPORTED without FFmpeg's libraries or their libx264. */
dit_status dit_image_h264_roundtrip(const uint8_t *rgb, int w, int h, int crf, uint8_t **out, int *ow, int *oh,
                                    dit_error *err);

#endif

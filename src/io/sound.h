/* Sound output: float samples as a WAV file (16-bit PCM), and the sound an MP4 carries
 * (io/video.h). Written like the PNGs (io/outfile.h): complete, or not at all. */
#ifndef DIT_IO_SOUND_H
#define DIT_IO_SOUND_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"

typedef struct dit_sound {
  const float *samples; /* n_samples x channels, interleaved, in [-1, 1] (clamped; NaN is 0) */
  int64_t n_samples;    /* per channel */
  int channels;         /* 1 or 2 */
  int sample_rate;      /* Hz, 8000..192000 */
} dit_sound;

/* Refuses sound that cannot be written (what: "WAV", "MP4"; path for the message): no
 * samples, channels other than 1 or 2, a rate outside 8000..192000 Hz. */
dit_status dit_sound_check(const char *what, const char *path, const dit_sound *s, dit_error *err);
/* One sample as written: clamped to [-1, 1], NaN as 0. */
float dit_sound_sample(float x);
/* Writes s to path as a RIFF WAVE file, 16-bit PCM (each sample rounded to the nearest of
 * 65535 levels). An existing path is refused unless overwrite. */
dit_status dit_wav_write(const char *path, const dit_sound *s, bool overwrite, dit_error *err);

#endif

/* WAV output (see sound.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "io/outfile.h"
#include "io/sound.h"

dit_status dit_sound_check(const char *what, const char *path, const dit_sound *s, dit_error *err) {
  if (!s || !s->samples || s->n_samples < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s %s: no sound to write", what, path);
  if (s->channels < 1 || s->channels > 2 || s->sample_rate < 8000 || s->sample_rate > 192000)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s %s: sound of %d channels at %d Hz: 1 or 2 channels, "
                      "8000..192000 Hz", what, path, s->channels, s->sample_rate);
  /* RIFF sizes are 32-bit: the data chunk of 16-bit samples must fit */
  if (s->n_samples > (int64_t)(UINT32_MAX - 64) / (2 * s->channels))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s %s: %lld samples: too long for one file", what, path,
                      (long long)s->n_samples);
  return DIT_OK;
}

float dit_sound_sample(float x) { return x != x ? 0.0f : x < -1.0f ? -1.0f : x > 1.0f ? 1.0f : x; }

static void le16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void le32(uint8_t *p, uint32_t v) { le16(p, v), le16(p + 2, v >> 16); }

dit_status dit_wav_write(const char *path, const dit_sound *s, bool overwrite, dit_error *err) {
  if (!path || !*path) return dit_errorf(err, DIT_ERR_INVALID_ARG, "WAV: no output path");
  DIT_TRY(dit_sound_check("WAV", path, s, err));
  const uint32_t block = 2u * (uint32_t)s->channels, data = (uint32_t)s->n_samples * block;
  uint8_t h[44];
  memcpy(h, "RIFF", 4), le32(h + 4, 36 + data), memcpy(h + 8, "WAVEfmt ", 8);
  le32(h + 16, 16), le16(h + 20, 1 /* PCM */), le16(h + 22, (uint32_t)s->channels);
  le32(h + 24, (uint32_t)s->sample_rate), le32(h + 28, (uint32_t)s->sample_rate * block);
  le16(h + 32, block), le16(h + 34, 16), memcpy(h + 36, "data", 4), le32(h + 40, data);
  dit_outfile o;
  DIT_TRY(dit_outfile_begin(&o, path, "WAV", overwrite, err));
  dit_status st = DIT_OK;
  if (fwrite(h, 1, sizeof h, o.fp) != sizeof h) st = dit_outfile_error(&o, "writing", errno, err);
  uint8_t buf[4096];
  const int64_t total = s->n_samples * s->channels;
  for (int64_t i = 0; st == DIT_OK && i < total;) {
    size_t n = 0;
    for (; n + 2 <= sizeof buf && i < total; i++, n += 2)
      le16(buf + n, (uint32_t)(uint16_t)(int16_t)lrintf(dit_sound_sample(s->samples[i]) * 32767.0f));
    if (fwrite(buf, 1, n, o.fp) != n) st = dit_outfile_error(&o, "writing", errno, err);
  }
  return dit_outfile_end(&o, st, err);
}

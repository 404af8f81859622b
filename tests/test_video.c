/* WAV output (io/sound.h), then MP4 output (io/video.h), and one image's H.264 round trip: frames and sound written, then
 * read back with FFmpeg's own demuxer
 * and decoders: one H.264 and one AAC stream, the frame count, rate and duration asked for,
 * every frame within 30 dB PSNR of its RGB input and the sound within 20 dB SNR of its
 * input; refusals (odd sizes, no frames, bad sound, an existing file, a missing folder) leave
 * nothing behind. A build without FFmpeg's libraries must say so and write nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/image_read.h"
#include "io/video.h"
#include "testing.h"

#define W 64
#define H 48
#define NF 12
#define RATE 48000
#define NS (RATE / 2)

static bool exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

/* Smooth gradients and a square moving across them. */
static uint8_t *make_frames(void) {
  uint8_t *rgb = malloc((size_t)NF * H * W * 3);
  if (!rgb) return NULL;
  for (int f = 0; f < NF; f++)
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) {
        uint8_t *p = rgb + (((size_t)f * H + y) * W + x) * 3;
        bool sq = x >= 4 + 3 * f && x < 20 + 3 * f && y >= 12 && y < 28;
        p[0] = sq ? 230 : (uint8_t)(40 + 3 * x);
        p[1] = sq ? 40 : (uint8_t)(30 + 4 * y);
        p[2] = (uint8_t)(120 + 50 * sin(0.1 * (x + y) + f));
      }
  return rgb;
}

static float *make_sound(void) {
  float *a = malloc(sizeof(float) * NS * 2);
  if (!a) return NULL;
  for (int s = 0; s < NS; s++) {
    a[2 * s] = 0.5f * (float)sin(2 * M_PI * 440.0 * s / RATE);
    a[2 * s + 1] = 0.3f * (float)sin(2 * M_PI * 660.0 * s / RATE);
  }
  return a;
}

#ifdef DIT_HAVE_FFMPEG
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libswscale/swscale.h>

typedef struct readback {
  int n_streams, n_frames, width, height, fps_num, fps_den;
  double duration_s, min_psnr, min_psnr_420;
  int64_t n_samples;
  float *left; /* decoded first channel */
  bool h264, aac;
} readback;

/* frame f of rgb through the writer's own conversion (BT.709 limited-range 4:2:0) and back:
 * what the encoder was given, in RGB */
static void yuv420_round_trip(const uint8_t *in, uint8_t *out) {
  const int *m = sws_getCoefficients(SWS_CS_ITU709);
  const int flags = SWS_BICUBIC | SWS_ACCURATE_RND;
  struct SwsContext *to = sws_getContext(W, H, AV_PIX_FMT_RGB24, W, H, AV_PIX_FMT_YUV420P, flags, NULL, NULL, NULL);
  struct SwsContext *back = sws_getContext(W, H, AV_PIX_FMT_YUV420P, W, H, AV_PIX_FMT_RGB24, flags, NULL, NULL, NULL);
  sws_setColorspaceDetails(to, m, 1, m, 0, 0, 1 << 16, 1 << 16);
  sws_setColorspaceDetails(back, m, 0, m, 1, 0, 1 << 16, 1 << 16);
  static uint8_t y[W * H], u[W * H / 4], v[W * H / 4];
  uint8_t *planes[3] = {y, u, v};
  int ls[3] = {W, W / 2, W / 2}, rl[1] = {W * 3};
  sws_scale(to, &in, rl, 0, H, planes, ls);
  sws_scale(back, (const uint8_t *const *)planes, ls, 0, H, &out, rl);
  sws_freeContext(to);
  sws_freeContext(back);
}

static double psnr8(const uint8_t *a, const uint8_t *b, size_t n) {
  double se = 0;
  for (size_t i = 0; i < n; i++) se += (double)(a[i] - b[i]) * (a[i] - b[i]);
  return se > 0 ? 10 * log10(255.0 * 255.0 * (double)n / se) : 99;
}

static void take_video(readback *r, AVFrame *fr, const uint8_t *rgb, struct SwsContext **sws) {
  if (!*sws) {
    *sws = sws_getContext(fr->width, fr->height, fr->format, W, H, AV_PIX_FMT_RGB24, SWS_BICUBIC | SWS_ACCURATE_RND,
                          NULL, NULL, NULL);
    const int *m = sws_getCoefficients(SWS_CS_ITU709);
    sws_setColorspaceDetails(*sws, m, 0, m, 1, 0, 1 << 16, 1 << 16);
  }
  uint8_t out[W * H * 3];
  uint8_t *dst[1] = {out};
  int ls[1] = {W * 3};
  sws_scale(*sws, (const uint8_t *const *)fr->data, fr->linesize, 0, fr->height, dst, ls);
  if (r->n_frames < NF) {
    const uint8_t *ref = rgb + (size_t)r->n_frames * W * H * 3;
    uint8_t rt[W * H * 3];
    yuv420_round_trip(ref, rt);
    double p = psnr8(out, rt, sizeof rt), p420 = psnr8(rt, ref, sizeof rt);
    if (p < r->min_psnr) r->min_psnr = p;
    if (p420 < r->min_psnr_420) r->min_psnr_420 = p420;
  }
  r->n_frames++;
}

static void take_audio(readback *r, AVFrame *fr) {
  float *l = realloc(r->left, sizeof(float) * (size_t)(r->n_samples + fr->nb_samples));
  if (!l) return;
  r->left = l;
  memcpy(l + r->n_samples, fr->data[0], sizeof(float) * (size_t)fr->nb_samples); /* fltp: plane 0 */
  r->n_samples += fr->nb_samples;
}

static int read_back(const char *path, const uint8_t *rgb, readback *r) {
  memset(r, 0, sizeof *r);
  r->min_psnr = r->min_psnr_420 = 1e9;
  AVFormatContext *ic = NULL;
  if (avformat_open_input(&ic, path, NULL, NULL) < 0 || avformat_find_stream_info(ic, NULL) < 0) return -1;
  r->n_streams = (int)ic->nb_streams;
  r->duration_s = ic->duration / (double)AV_TIME_BASE;
  AVCodecContext *dec[2] = {NULL, NULL};
  for (unsigned i = 0; i < ic->nb_streams && i < 2; i++) {
    AVCodecParameters *par = ic->streams[i]->codecpar;
    if (par->codec_type == AVMEDIA_TYPE_VIDEO) {
      r->h264 = par->codec_id == AV_CODEC_ID_H264, r->width = par->width, r->height = par->height;
      r->fps_num = ic->streams[i]->avg_frame_rate.num, r->fps_den = ic->streams[i]->avg_frame_rate.den;
    } else if (par->codec_type == AVMEDIA_TYPE_AUDIO) {
      r->aac = par->codec_id == AV_CODEC_ID_AAC;
    }
    const AVCodec *c = avcodec_find_decoder(par->codec_id);
    dec[i] = c ? avcodec_alloc_context3(c) : NULL;
    if (!dec[i] || avcodec_parameters_to_context(dec[i], par) < 0 || avcodec_open2(dec[i], c, NULL) < 0) return -1;
  }
  AVPacket *pkt = av_packet_alloc();
  AVFrame *fr = av_frame_alloc();
  struct SwsContext *sws = NULL;
  for (bool eof = false; !eof;) {
    int rc = av_read_frame(ic, pkt);
    eof = rc < 0;
    for (unsigned i = 0; i < ic->nb_streams && i < 2; i++) {
      if (!eof && pkt->stream_index != (int)i) continue;
      avcodec_send_packet(dec[i], eof ? NULL : pkt);
      while (avcodec_receive_frame(dec[i], fr) == 0) {
        if (dec[i]->codec_type == AVMEDIA_TYPE_VIDEO) take_video(r, fr, rgb, &sws);
        else take_audio(r, fr);
      }
    }
    if (!eof) av_packet_unref(pkt);
  }
  sws_freeContext(sws);
  av_frame_free(&fr);
  av_packet_free(&pkt);
  avcodec_free_context(&dec[0]);
  avcodec_free_context(&dec[1]);
  avformat_close_input(&ic);
  return 0;
}

/* SNR of the decoded left channel against the input's, over the middle half, at the lag
 * (AAC's encoder delay, if the demuxer left any) that fits best. */
static double left_snr(const readback *r, const float *in) {
  double best = -99;
  for (int lag = 0; lag <= 2048; lag++) {
    double sig = 0, noise = 0;
    for (int s = NS / 4; s < 3 * NS / 4; s++) {
      if (s + lag >= r->n_samples) return best;
      double a = in[2 * s], d = r->left[s + lag] - a;
      sig += a * a, noise += d * d;
    }
    double snr = noise > 0 ? 10 * log10(sig / noise) : 99;
    if (snr > best) best = snr;
  }
  return best;
}

static void check_written(const dt_args *a, const dit_video *v, const uint8_t *rgb, const float *snd) {
  char path[4200];
  snprintf(path, sizeof path, "%s/av.mp4", a->tmp);
  unlink(path);
  dit_error e = {0};
  CHECK_MSG(dit_video_write_mp4(path, v, false, &e) == DIT_OK, "%s", e.msg);
  readback r;
  CHECK_MSG(read_back(path, rgb, &r) == 0, "cannot read %s back", path);
  CHECK_MSG(r.n_streams == 2 && r.h264 && r.aac, "%d streams (h264 %d, aac %d)", r.n_streams, r.h264, r.aac);
  CHECK_MSG(r.width == W && r.height == H && r.n_frames == NF, "%dx%d, %d frames", r.width, r.height, r.n_frames);
  CHECK_MSG(r.fps_num * 1 == 24 * r.fps_den, "frame rate %d/%d", r.fps_num, r.fps_den);
  CHECK_MSG(fabs(r.duration_s - 0.5) < 0.05, "duration %.3f s", r.duration_s);
  /* the encoder against what it was given; the colour conversion alone against the RGB input
   * (a wrong matrix or range would cost far more than 4:2:0's chroma at the square's edges) */
  CHECK_MSG(r.min_psnr >= 35.0 && r.min_psnr < 1e9, "worst frame %.1f dB from the encoder's input", r.min_psnr);
  CHECK_MSG(r.min_psnr_420 >= 25.0, "the 4:2:0 conversion alone: worst frame %.1f dB", r.min_psnr_420);
  CHECK_MSG(r.n_samples >= NS && r.n_samples <= NS + 2048, "%lld samples decoded", (long long)r.n_samples);
  double snr = left_snr(&r, snd);
  CHECK_MSG(snr >= 20.0, "sound SNR %.1f dB", snr);
  printf("mp4: %d frames %dx%d at %d/%d fps, %.3f s, worst frame %.1f dB from the encoder's input (4:2:0 conversion "
         "alone %.1f dB); %lld samples, SNR %.1f dB\n", r.n_frames, r.width, r.height, r.fps_num, r.fps_den,
         r.duration_s, r.min_psnr, r.min_psnr_420, (long long)r.n_samples, snr);
  free(r.left);
  /* without sound: one stream */
  dit_video vs = *v;
  vs.sound.samples = NULL;
  CHECK_MSG(dit_video_write_mp4(path, &vs, true, &e) == DIT_OK, "%s", e.msg);
  CHECK(read_back(path, rgb, &r) == 0 && r.n_streams == 1 && r.n_frames == NF);
  free(r.left);
  /* an existing file is refused and left as it was */
  struct stat before, after;
  stat(path, &before);
  CHECK(dit_video_write_mp4(path, v, false, &e) == DIT_ERR_IO && strstr(e.msg, "exists"));
  CHECK(stat(path, &after) == 0 && after.st_size == before.st_size && after.st_mtime == before.st_mtime);
}
#endif

static void test_video(const dt_args *a) {
  uint8_t *rgb = make_frames();
  float *snd = make_sound();
  if (!rgb || !snd) {
    CHECK(0);
    free(rgb), free(snd);
    return;
  }
  dit_video v = {W, H, NF, rgb, 24, 1, {snd, NS, 2, RATE}};
  char path[4200];
  dit_error e = {0};
#ifdef DIT_HAVE_FFMPEG
  check_written(a, &v, rgb, snd);
#else
  snprintf(path, sizeof path, "%s/none.mp4", a->tmp);
  CHECK(dit_video_write_mp4(path, &v, false, &e) == DIT_ERR_UNSUPPORTED && strstr(e.msg, "FFmpeg") && !exists(path));
#endif
  /* refusals, before anything is written */
  snprintf(path, sizeof path, "%s/bad.mp4", a->tmp);
  unlink(path);
  static const struct {
    int w, h, nf, fn, fd, ch, rate;
    int64_t ns;
    const char *needle;
  } bad[] = {{63, 48, NF, 24, 1, 2, RATE, NS, "even"},      {64, 0, NF, 24, 1, 2, RATE, NS, "even"},
             {64, 48, 0, 24, 1, 2, RATE, NS, "no frames"},  {64, 48, NF, 0, 1, 2, RATE, NS, "frame rate"},
             {64, 48, NF, 24, 1, 3, RATE, NS, "channels"},  {64, 48, NF, 24, 1, 2, 1000, NS, "Hz"},
             {64, 48, NF, 24, 1, 2, RATE, 0, "no sound"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dit_video b = v;
    b.width = bad[i].w, b.height = bad[i].h, b.n_frames = bad[i].nf, b.fps_num = bad[i].fn, b.fps_den = bad[i].fd;
    b.sound.channels = bad[i].ch, b.sound.sample_rate = bad[i].rate, b.sound.n_samples = bad[i].ns;
    dit_status st = dit_video_write_mp4(path, &b, false, &e);
    CHECK_MSG(st == DIT_ERR_INVALID_ARG && strstr(e.msg, bad[i].needle) && !exists(path), "case %zu: %d %s", i,
              (int)st, e.msg);
  }
  snprintf(path, sizeof path, "%s/no/such/folder/x.mp4", a->tmp);
#ifdef DIT_HAVE_FFMPEG
  CHECK(dit_video_write_mp4(path, &v, false, &e) == DIT_ERR_IO && strstr(e.msg, "does not exist"));
#endif
  free(rgb);
  free(snd);
}

static uint32_t rd32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

/* WAV: the header a reader needs, every sample within half a level of its input (clamped,
 * NaN as 0), an existing file refused, bad sound refused without a file. */
static void test_wav(const dt_args *a) {
  float *snd = make_sound();
  if (!snd) return;
  snd[10] = 1.7f, snd[11] = -3.0f, snd[12] = NAN;
  const dit_sound s = {snd, NS, 2, RATE};
  char path[4200];
  snprintf(path, sizeof path, "%s/s.wav", a->tmp);
  unlink(path);
  dit_error e = {0};
  CHECK_MSG(dit_wav_write(path, &s, false, &e) == DIT_OK, "%s", e.msg);
  FILE *f = fopen(path, "rb");
  uint8_t *b = malloc(44 + (size_t)NS * 4);
  size_t got = f && b ? fread(b, 1, 44 + (size_t)NS * 4 + 1, f) : 0;
  if (f) fclose(f);
  CHECK_MSG(got == 44 + (size_t)NS * 4, "%zu bytes", got);
  if (got == 44 + (size_t)NS * 4) {
    CHECK(!memcmp(b, "RIFF", 4) && rd32(b + 4) == 36 + NS * 4 && !memcmp(b + 8, "WAVEfmt ", 8) && rd32(b + 16) == 16);
    CHECK(b[20] == 1 && b[22] == 2 && rd32(b + 24) == RATE && rd32(b + 28) == RATE * 4 && b[32] == 4 && b[34] == 16);
    CHECK(!memcmp(b + 36, "data", 4) && rd32(b + 40) == NS * 4);
    double worst = 0;
    for (int i = 0; i < NS * 2; i++) {
      int16_t v = (int16_t)(b[44 + 2 * i] | b[45 + 2 * i] << 8);
      float x = snd[i] != snd[i] ? 0.0f : snd[i] > 1 ? 1.0f : snd[i] < -1 ? -1.0f : snd[i];
      double d = fabs(v / 32767.0 - x);
      if (d > worst) worst = d;
    }
    CHECK_MSG(worst <= 0.5 / 32767 + 1e-7, "a sample %.3g from its input", worst);
  }
  free(b);
  CHECK(dit_wav_write(path, &s, false, &e) == DIT_ERR_IO && strstr(e.msg, "exists"));
  const dit_sound mono7k = {snd, NS, 1, 7000}, none = {snd, 0, 2, RATE};
  snprintf(path, sizeof path, "%s/bad.wav", a->tmp);
  CHECK(dit_wav_write(path, &mono7k, false, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "Hz") && !exists(path));
  CHECK(dit_wav_write(path, &none, false, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "no sound") && !exists(path));
  free(snd);
}

/* Frames as a folder: every PNG the frame it was given, the WAV beside them; an existing
 * folder refused; a failing write (a frame size PNG refuses) leaves nothing. */
static void test_frames(const dt_args *a) {
  uint8_t *rgb = make_frames();
  float *snd = make_sound();
  dit_video v = {W, H, NF, rgb, 24, 1, {snd, NS, 2, RATE}};
  char dir[4200], p[4300];
  snprintf(dir, sizeof dir, "%s/frames", a->tmp);
  snprintf(p, sizeof p, "rm -rf '%s'", dir);
  CHECK(rgb && snd && system(p) == 0);
  dit_error e = {0};
  CHECK_MSG(dit_video_write_frames(dir, &v, &e) == DIT_OK, "%s", e.msg);
  for (int f = 0; f < NF; f++) {
    snprintf(p, sizeof p, "%s/frame_%05d.png", dir, f + 1);
    dit_image im = {0};
    CHECK_MSG(dit_image_read(p, 1 << 20, &im, &e) == DIT_OK, "%s", e.msg);
    CHECK_MSG(im.width == W && im.height == H && im.rgb && !memcmp(im.rgb, rgb + (size_t)f * W * H * 3, W * H * 3),
              "frame %d differs", f + 1);
    dit_image_free(&im);
  }
  snprintf(p, sizeof p, "%s/frame_%05d.png", dir, NF + 1);
  CHECK(!exists(p));
  snprintf(p, sizeof p, "%s/audio.wav", dir);
  struct stat st;
  CHECK(stat(p, &st) == 0 && st.st_size == 44 + NS * 4);
  CHECK(dit_video_write_frames(dir, &v, &e) == DIT_ERR_IO && strstr(e.msg, "exists"));
  /* 9000 wide passes no check of the frames, so nothing is made: no folder, no temporary one */
  snprintf(dir, sizeof dir, "%s/frames_bad", a->tmp);
  v.width = 9000;
  CHECK(dit_video_write_frames(dir, &v, &e) == DIT_ERR_INVALID_ARG && !exists(dir));
  /* an odd size is fine for PNGs */
  v.width = 63, v.n_frames = 1, v.sound.samples = NULL;
  snprintf(dir, sizeof dir, "%s/frames_odd", a->tmp);
  snprintf(p, sizeof p, "rm -rf '%s'", dir);
  CHECK(system(p) == 0 && dit_video_write_frames(dir, &v, &e) == DIT_OK);
  snprintf(p, sizeof p, "find '%s' -name '.ditrun-frames-*' | grep -q .", a->tmp);
  CHECK_MSG(system(p) != 0, "a temporary folder was left in %s", a->tmp);
  free(rgb);
  free(snd);
}

/* One image through H.264 and back (LTX-2's image conditioning): even sides (an odd image
 * cropped), lossy but close (PSNR against the input between 25 and 60 dB at CRF 33; closer at
 * CRF 18), the same bytes on a second run; CRFs outside 1..51 refused. Without FFmpeg's
 * libraries: refused, saying so. */
static void test_crf(const dt_args *a) {
  (void)a;
  uint8_t *rgb = make_frames();
  if (!rgb) return;
  dit_error e = {0};
  uint8_t *o1 = NULL, *o2 = NULL;
  int w = 0, h = 0;
#ifdef DIT_HAVE_FFMPEG
  double prev = 0;
  for (int k = 0; k < 2; k++) {
    const int crf = k ? 18 : 33;
    CHECK_MSG(dit_image_h264_roundtrip(rgb, W - 1, H - 1, crf, &o1, &w, &h, &e) == DIT_OK, "%s", e.msg);
    CHECK(w == W - 2 && h == H - 2);
    CHECK_MSG(dit_image_h264_roundtrip(rgb, W - 1, H - 1, crf, &o2, &w, &h, &e) == DIT_OK, "%s", e.msg);
    if (!o1 || !o2) break;
    CHECK_MSG(!memcmp(o1, o2, (size_t)w * h * 3), "CRF %d: two runs differ", crf);
    uint8_t *crop = malloc((size_t)w * h * 3);
    for (int y = 0; crop && y < h; y++) memcpy(crop + (size_t)y * w * 3, rgb + (size_t)y * (W - 1) * 3, (size_t)w * 3);
    const double p = crop ? psnr8(o1, crop, (size_t)w * h * 3) : 0;
    CHECK_MSG(p > 25.0 && p < 60.0 && (!k || p > prev), "CRF %d: %.1f dB from the input", crf, p);
    printf("H.264 round trip of a %dx%d image at CRF %d: %dx%d, %.1f dB PSNR from its input\n", W - 1, H - 1, crf, w, h,
           p);
    prev = p;
    free(crop), free(o1), free(o2);
    o1 = o2 = NULL;
  }
  CHECK(dit_image_h264_roundtrip(rgb, W, H, 0, &o1, &w, &h, &e) == DIT_ERR_INVALID_ARG && !o1);
  CHECK(dit_image_h264_roundtrip(rgb, W, H, 52, &o1, &w, &h, &e) == DIT_ERR_INVALID_ARG && !o1);
  CHECK(dit_image_h264_roundtrip(rgb, 1, H, 33, &o1, &w, &h, &e) == DIT_ERR_INVALID_ARG && !o1);
#else
  CHECK(dit_image_h264_roundtrip(rgb, W, H, 33, &o1, &w, &h, &e) == DIT_ERR_UNSUPPORTED && strstr(e.msg, "FFmpeg"));
#endif
  free(rgb);
}

int main(int argc, char **argv) {
#ifdef DIT_HAVE_FFMPEG
  av_log_set_level(AV_LOG_ERROR); /* the test's own choice: FFmpeg's log level is process-wide */
#endif
  static void (*const cases[])(const dt_args *) = {test_video, test_wav, test_frames, test_crf};
  return dt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}

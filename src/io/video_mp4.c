/* MP4 output through FFmpeg's libraries (see video.h). The muxer writes through an AVIOContext
 * over the outfile's temporary FILE (write and seek: the mp4 muxer goes back to fill in the
 * mdat size), so the file appears under its name only once complete. */
#include "io/video.h"

#ifdef DIT_HAVE_FFMPEG
#include <errno.h>
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
#include <stdio.h>
#include <string.h>

#include "io/outfile.h"

#define VIO_BUF 65536

typedef struct mp4_enc {
  const dit_video *v;
  dit_outfile *of;
  AVFormatContext *oc;
  AVIOContext *pb;
  AVCodecContext *venc, *aenc;
  AVStream *vst, *ast;
  AVFrame *vframe, *aframe;
  AVPacket *pkt;
  struct SwsContext *sws;
  int io_errno;
} mp4_enc;

#if LIBAVFORMAT_VERSION_MAJOR >= 61 /* FFmpeg 7 made the buffer const */
#define IO_BUF const uint8_t *
#else
#define IO_BUF uint8_t *
#endif

static int io_write(void *opaque, IO_BUF buf, int n) {
  mp4_enc *e = opaque;
  if (fwrite(buf, 1, (size_t)n, e->of->fp) != (size_t)n) {
    e->io_errno = errno ? errno : EIO;
    return AVERROR(EIO);
  }
  return n;
}

static int64_t io_seek(void *opaque, int64_t off, int whence) {
  mp4_enc *e = opaque;
  if (whence == AVSEEK_SIZE) return -1;
  if (fseeko(e->of->fp, (off_t)off, whence & ~AVSEEK_FORCE) != 0) {
    e->io_errno = errno;
    return AVERROR(errno);
  }
  return (int64_t)ftello(e->of->fp);
}

static dit_status av_fail(const mp4_enc *e, const char *what, int rc, dit_error *err) {
  if (e->io_errno) return dit_outfile_error(e->of, what, e->io_errno, err);
  char msg[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(rc, msg, sizeof msg);
  return dit_errorf(err, DIT_ERR_IO, "cannot write MP4 %s: %s: %s", e->of->path, what, msg);
}

static dit_status open_video(mp4_enc *e, dit_error *err) {
  const dit_video *v = e->v;
  const AVCodec *c = avcodec_find_encoder_by_name("libx264");
  if (!c) c = avcodec_find_encoder(AV_CODEC_ID_H264);
  if (!c) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "MP4 %s: this FFmpeg has no H.264 encoder", e->of->path);
  if (!(e->vst = avformat_new_stream(e->oc, NULL)) || !(e->venc = avcodec_alloc_context3(c)))
    return dit_errorf(err, DIT_ERR_NOMEM, "MP4 %s: out of memory (video stream)", e->of->path);
  AVCodecContext *x = e->venc;
  x->width = v->width, x->height = v->height, x->pix_fmt = AV_PIX_FMT_YUV420P;
  x->time_base = (AVRational){v->fps_den, v->fps_num};
  x->framerate = (AVRational){v->fps_num, v->fps_den};
  x->color_primaries = AVCOL_PRI_BT709, x->color_trc = AVCOL_TRC_BT709, x->colorspace = AVCOL_SPC_BT709;
  x->color_range = AVCOL_RANGE_MPEG;
  if (e->oc->oformat->flags & AVFMT_GLOBALHEADER) x->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  if (!strcmp(c->name, "libx264")) { /* quality-based; x264's own log only for errors */
    av_opt_set(x->priv_data, "crf", "18", 0);
    av_opt_set(x->priv_data, "preset", "medium", 0);
    av_opt_set(x->priv_data, "x264-params", "log=0", 0);
  }
  int rc = avcodec_open2(x, c, NULL);
  if (rc < 0) return av_fail(e, "opening the H.264 encoder", rc, err);
  if ((rc = avcodec_parameters_from_context(e->vst->codecpar, x)) < 0) return av_fail(e, "video parameters", rc, err);
  e->vst->time_base = x->time_base;
  e->vst->avg_frame_rate = x->framerate;
  e->vframe = av_frame_alloc();
  if (!e->vframe) return dit_errorf(err, DIT_ERR_NOMEM, "MP4 %s: out of memory (frame)", e->of->path);
  e->vframe->format = x->pix_fmt, e->vframe->width = x->width, e->vframe->height = x->height;
  if ((rc = av_frame_get_buffer(e->vframe, 0)) < 0) return av_fail(e, "a frame buffer", rc, err);
  e->sws = sws_getContext(v->width, v->height, AV_PIX_FMT_RGB24, v->width, v->height, AV_PIX_FMT_YUV420P,
                          SWS_BICUBIC | SWS_ACCURATE_RND, NULL, NULL, NULL);
  if (!e->sws) return dit_errorf(err, DIT_ERR_NOMEM, "MP4 %s: cannot set up the RGB to YUV conversion", e->of->path);
  /* full-range RGB in, BT.709 limited-range YUV out */
  const int *m = sws_getCoefficients(SWS_CS_ITU709);
  sws_setColorspaceDetails(e->sws, m, 1, m, 0, 0, 1 << 16, 1 << 16);
  return DIT_OK;
}

static dit_status open_audio(mp4_enc *e, dit_error *err) {
  const dit_sound *v = &e->v->sound;
  const AVCodec *c = avcodec_find_encoder(AV_CODEC_ID_AAC);
  if (!c) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "MP4 %s: this FFmpeg has no AAC encoder", e->of->path);
  if (!(e->ast = avformat_new_stream(e->oc, NULL)) || !(e->aenc = avcodec_alloc_context3(c)))
    return dit_errorf(err, DIT_ERR_NOMEM, "MP4 %s: out of memory (audio stream)", e->of->path);
  AVCodecContext *x = e->aenc;
  x->sample_fmt = AV_SAMPLE_FMT_FLTP, x->sample_rate = v->sample_rate, x->bit_rate = 96000 * v->channels;
  av_channel_layout_default(&x->ch_layout, v->channels);
  x->time_base = (AVRational){1, v->sample_rate};
  if (e->oc->oformat->flags & AVFMT_GLOBALHEADER) x->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  int rc = avcodec_open2(x, c, NULL);
  if (rc < 0) return av_fail(e, "opening the AAC encoder", rc, err);
  if ((rc = avcodec_parameters_from_context(e->ast->codecpar, x)) < 0) return av_fail(e, "audio parameters", rc, err);
  e->ast->time_base = x->time_base;
  if (!(e->aframe = av_frame_alloc())) return dit_errorf(err, DIT_ERR_NOMEM, "MP4 %s: out of memory", e->of->path);
  e->aframe->format = x->sample_fmt, e->aframe->nb_samples = x->frame_size, e->aframe->sample_rate = x->sample_rate;
  if ((rc = av_channel_layout_copy(&e->aframe->ch_layout, &x->ch_layout)) < 0 ||
      (rc = av_frame_get_buffer(e->aframe, 0)) < 0)
    return av_fail(e, "an audio frame buffer", rc, err);
  return DIT_OK;
}

/* Sends frame (NULL: flush) to enc and writes what comes out into stream st. */
static dit_status encode(mp4_enc *e, AVCodecContext *enc, AVStream *st, AVFrame *frame, dit_error *err) {
  int rc = avcodec_send_frame(enc, frame);
  if (rc < 0) return av_fail(e, "encoding", rc, err);
  for (;;) {
    rc = avcodec_receive_packet(enc, e->pkt);
    if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return DIT_OK;
    if (rc < 0) return av_fail(e, "encoding", rc, err);
    av_packet_rescale_ts(e->pkt, enc->time_base, st->time_base);
    e->pkt->stream_index = st->index;
    rc = av_interleaved_write_frame(e->oc, e->pkt);
    if (rc < 0) return av_fail(e, "writing a packet", rc, err);
  }
}

static dit_status put_video_frame(mp4_enc *e, int i, dit_error *err) {
  const dit_video *v = e->v;
  int rc = av_frame_make_writable(e->vframe);
  if (rc < 0) return av_fail(e, "a frame buffer", rc, err);
  const uint8_t *src[1] = {v->rgb + (size_t)i * (size_t)v->width * (size_t)v->height * 3};
  const int stride[1] = {v->width * 3};
  sws_scale(e->sws, src, stride, 0, v->height, e->vframe->data, e->vframe->linesize);
  e->vframe->pts = i;
  return encode(e, e->venc, e->vst, e->vframe, err);
}

/* Audio frame k: samples [k * frame_size, ...), de-interleaved, clamped to [-1, 1]; the last
 * one may be shorter (allowed for the last frame of an encoder with a fixed frame size). */
static dit_status put_audio_frame(mp4_enc *e, int64_t k, dit_error *err) {
  const dit_sound *v = &e->v->sound;
  const int64_t fs = e->aenc->frame_size, s0 = k * fs;
  const int n = (int)(v->n_samples - s0 < fs ? v->n_samples - s0 : fs);
  int rc = av_frame_make_writable(e->aframe);
  if (rc < 0) return av_fail(e, "an audio frame buffer", rc, err);
  e->aframe->nb_samples = n;
  for (int c = 0; c < v->channels; c++) {
    float *dst = (float *)e->aframe->data[c];
    for (int s = 0; s < n; s++) dst[s] = dit_sound_sample(v->samples[(s0 + s) * v->channels + c]);
  }
  e->aframe->pts = s0;
  return encode(e, e->aenc, e->ast, e->aframe, err);
}

/* Frames and audio frames in time order, so the muxer interleaves without buffering much. */
static dit_status write_streams(mp4_enc *e, dit_error *err) {
  const dit_video *v = e->v;
  const int64_t fs = e->aenc ? e->aenc->frame_size : 1;
  const int64_t n_aframes = e->aenc ? (v->sound.n_samples + fs - 1) / fs : 0;
  int vi = 0;
  int64_t ai = 0;
  while (vi < v->n_frames || ai < n_aframes) {
    /* video frame vi starts at vi * den / num s; audio frame ai at ai * fs / rate s */
    bool video_first = ai >= n_aframes || (vi < v->n_frames && (int64_t)vi * v->fps_den * v->sound.sample_rate <=
                                                                   ai * fs * (int64_t)v->fps_num);
    if (video_first) DIT_TRY(put_video_frame(e, vi++, err));
    else DIT_TRY(put_audio_frame(e, ai++, err));
  }
  DIT_TRY(encode(e, e->venc, e->vst, NULL, err));
  if (e->aenc) DIT_TRY(encode(e, e->aenc, e->ast, NULL, err));
  return DIT_OK;
}

static dit_status write_all(mp4_enc *e, dit_error *err) {
  const char *path = e->of->path;
  int rc = avformat_alloc_output_context2(&e->oc, NULL, "mp4", NULL);
  if (rc < 0 || !e->oc) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "MP4 %s: this FFmpeg has no mp4 muxer", path);
  uint8_t *buf = av_malloc(VIO_BUF);
  if (!buf || !(e->pb = avio_alloc_context(buf, VIO_BUF, 1, e, NULL, io_write, io_seek))) {
    av_free(buf);
    return dit_errorf(err, DIT_ERR_NOMEM, "MP4 %s: out of memory (output buffer)", path);
  }
  e->oc->pb = e->pb;
  e->oc->flags |= AVFMT_FLAG_CUSTOM_IO;
  if (!(e->pkt = av_packet_alloc())) return dit_errorf(err, DIT_ERR_NOMEM, "MP4 %s: out of memory", path);
  DIT_TRY(open_video(e, err));
  if (e->v->sound.samples) DIT_TRY(open_audio(e, err));
  if ((rc = avformat_write_header(e->oc, NULL)) < 0) return av_fail(e, "the header", rc, err);
  DIT_TRY(write_streams(e, err));
  if ((rc = av_write_trailer(e->oc)) < 0) return av_fail(e, "the trailer", rc, err);
  avio_flush(e->pb);
  if (e->io_errno || e->pb->error < 0) return av_fail(e, "flushing", e->pb->error, err);
  return DIT_OK;
}

static void mp4_free(mp4_enc *e) {
  sws_freeContext(e->sws);
  av_frame_free(&e->vframe);
  av_frame_free(&e->aframe);
  av_packet_free(&e->pkt);
  avcodec_free_context(&e->venc);
  avcodec_free_context(&e->aenc);
  if (e->pb) av_freep(&e->pb->buffer);
  avio_context_free(&e->pb);
  avformat_free_context(e->oc);
}

dit_status dit_video_write_mp4(const char *path, const dit_video *v, bool overwrite, dit_error *err) {
  if (!path || !*path) return dit_errorf(err, DIT_ERR_INVALID_ARG, "MP4: no output path");
  DIT_TRY(dit_video_check("MP4", path, v, true, err));
  dit_outfile of;
  DIT_TRY(dit_outfile_begin(&of, path, "MP4", overwrite, err));
  mp4_enc e = {.v = v, .of = &of};
  dit_status st = write_all(&e, err);
  mp4_free(&e);
  return dit_outfile_end(&of, st, err);
}
#else

dit_status dit_video_write_mp4(const char *path, const dit_video *v, bool overwrite, dit_error *err) {
  (void)v, (void)overwrite;
  return dit_errorf(err, DIT_ERR_UNSUPPORTED, "cannot write MP4 %s: this ditrun was built without FFmpeg's libraries "
                    "(Debian: libavformat-dev libavcodec-dev libswscale-dev; `make setup` installs them)",
                    path ? path : "");
}
#endif

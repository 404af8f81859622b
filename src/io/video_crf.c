/* One image through H.264 and back (see video.h): LTX-2's image-to-video conditioning re-compresses
 * its image as the model was trained (diffusers' apply_image_conditioning_crf, after the
 * ltx-pipelines' preprocessing): the image cropped to even sides, converted to yuv420p as PyAV's
 * reformat does (swscale, bilinear, its default BT.601 limited-range matrix), one frame encoded
 * by libx264 at the CRF with preset veryfast (a 1 fps stream), decoded by FFmpeg's H.264 decoder
 * and converted back to 8-bit RGB the same way. */
#include "io/video.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DIT_HAVE_FFMPEG
#include <libavcodec/avcodec.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>

typedef struct crf_run {
  AVCodecContext *enc, *dec;
  AVFrame *rgb, *yuv, *out; /* rgb: padded rows, as swscale's SIMD reads and writes them */
  AVPacket *pkt;
  struct SwsContext *to_yuv, *to_rgb;
} crf_run;

static dit_status av_error(const char *what, int rc, dit_error *err) {
  char msg[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(rc, msg, sizeof msg);
  return dit_errorf(err, DIT_ERR_IO, "image H.264 re-compression: %s: %s", what, msg);
}

static dit_status open_codecs(crf_run *r, int w, int h, int crf, dit_error *err) {
  const AVCodec *ec = avcodec_find_encoder_by_name("libx264"), *dc = avcodec_find_decoder(AV_CODEC_ID_H264);
  if (!ec || !dc)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "image H.264 re-compression: this FFmpeg has no %s",
                      ec ? "H.264 decoder" : "libx264 encoder");
  if (!(r->enc = avcodec_alloc_context3(ec)) || !(r->dec = avcodec_alloc_context3(dc)))
    return dit_errorf(err, DIT_ERR_NOMEM, "image H.264 re-compression: out of memory");
  AVCodecContext *x = r->enc;
  x->width = w, x->height = h, x->pix_fmt = AV_PIX_FMT_YUV420P;
  x->time_base = (AVRational){1, 1}, x->framerate = (AVRational){1, 1};
  char v[16];
  snprintf(v, sizeof v, "%d", crf);
  av_opt_set(x->priv_data, "crf", v, 0);
  av_opt_set(x->priv_data, "preset", "veryfast", 0);
  av_opt_set(x->priv_data, "x264-params", "log=0", 0);
  int rc = avcodec_open2(x, ec, NULL);
  if (rc < 0) return av_error("opening libx264", rc, err);
  if ((rc = avcodec_open2(r->dec, dc, NULL)) < 0) return av_error("opening the H.264 decoder", rc, err);
  r->to_yuv = sws_getContext(w, h, AV_PIX_FMT_RGB24, w, h, AV_PIX_FMT_YUV420P, SWS_BILINEAR, NULL, NULL, NULL);
  r->to_rgb = sws_getContext(w, h, AV_PIX_FMT_YUV420P, w, h, AV_PIX_FMT_RGB24, SWS_BILINEAR, NULL, NULL, NULL);
  r->rgb = av_frame_alloc(), r->yuv = av_frame_alloc(), r->out = av_frame_alloc(), r->pkt = av_packet_alloc();
  if (!r->to_yuv || !r->to_rgb || !r->rgb || !r->yuv || !r->out || !r->pkt)
    return dit_errorf(err, DIT_ERR_NOMEM, "image H.264 re-compression: out of memory");
  r->rgb->format = AV_PIX_FMT_RGB24, r->rgb->width = w, r->rgb->height = h;
  r->yuv->format = AV_PIX_FMT_YUV420P, r->yuv->width = w, r->yuv->height = h;
  if ((rc = av_frame_get_buffer(r->rgb, 0)) < 0 || (rc = av_frame_get_buffer(r->yuv, 0)) < 0)
    return av_error("a frame buffer", rc, err);
  return DIT_OK;
}

/* The encoder's packets (the frame, then its flush) into the decoder; the decoded frame into r->out. */
static dit_status code_frame(crf_run *r, dit_error *err) {
  r->yuv->pts = 0;
  int rc = avcodec_send_frame(r->enc, r->yuv);
  if (rc >= 0) rc = avcodec_send_frame(r->enc, NULL);
  if (rc < 0) return av_error("encoding", rc, err);
  bool got = false;
  for (;;) {
    rc = avcodec_receive_packet(r->enc, r->pkt);
    if (rc == AVERROR_EOF) break;
    if (rc < 0) return av_error("encoding", rc, err);
    rc = avcodec_send_packet(r->dec, r->pkt);
    av_packet_unref(r->pkt);
    if (rc < 0) return av_error("decoding", rc, err);
  }
  if ((rc = avcodec_send_packet(r->dec, NULL)) < 0) return av_error("decoding", rc, err);
  while (!got) {
    rc = avcodec_receive_frame(r->dec, r->out);
    if (rc == AVERROR_EOF) break;
    if (rc < 0) return av_error("decoding", rc, err);
    got = true;
  }
  if (!got) return dit_errorf(err, DIT_ERR_IO, "image H.264 re-compression: the decoder gave no frame");
  return DIT_OK;
}

static void crf_free(crf_run *r) {
  sws_freeContext(r->to_yuv);
  sws_freeContext(r->to_rgb);
  av_frame_free(&r->rgb);
  av_frame_free(&r->yuv);
  av_frame_free(&r->out);
  av_packet_free(&r->pkt);
  avcodec_free_context(&r->enc);
  avcodec_free_context(&r->dec);
}

dit_status dit_image_h264_roundtrip(const uint8_t *rgb, int w, int h, int crf, uint8_t **out, int *ow, int *oh,
                                    dit_error *err) {
  *out = NULL;
  const int W = w / 2 * 2, H = h / 2 * 2;
  if (!rgb || W < 2 || H < 2 || W > 16384 || H > 16384 || crf < 1 || crf > 51)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "image H.264 re-compression: a %dx%d image at CRF %d (1..51)", w, h,
                      crf);
  crf_run r;
  memset(&r, 0, sizeof r);
  dit_status s = open_codecs(&r, W, H, crf, err);
  if (s == DIT_OK) { /* the image cropped to even sides */
    for (int y = 0; y < H; y++)
      memcpy(r.rgb->data[0] + (size_t)y * r.rgb->linesize[0], rgb + (size_t)y * w * 3, (size_t)W * 3);
    sws_scale(r.to_yuv, (const uint8_t *const *)r.rgb->data, r.rgb->linesize, 0, H, r.yuv->data, r.yuv->linesize);
  }
  if (s == DIT_OK) s = code_frame(&r, err);
  if (s == DIT_OK && (r.out->width != W || r.out->height != H || r.out->format != AV_PIX_FMT_YUV420P))
    s = dit_errorf(err, DIT_ERR_IO, "image H.264 re-compression: decoded a %dx%d frame of format %d", r.out->width,
                   r.out->height, r.out->format);
  uint8_t *dst = s == DIT_OK ? malloc((size_t)W * H * 3) : NULL;
  if (s == DIT_OK && !dst) s = dit_errorf(err, DIT_ERR_NOMEM, "image H.264 re-compression: out of memory");
  if (s == DIT_OK) {
    sws_scale(r.to_rgb, (const uint8_t *const *)r.out->data, r.out->linesize, 0, H, r.rgb->data, r.rgb->linesize);
    for (int y = 0; y < H; y++)
      memcpy(dst + (size_t)y * W * 3, r.rgb->data[0] + (size_t)y * r.rgb->linesize[0], (size_t)W * 3);
    *out = dst, *ow = W, *oh = H;
  }
  crf_free(&r);
  return s;
}
#else

dit_status dit_image_h264_roundtrip(const uint8_t *rgb, int w, int h, int crf, uint8_t **out, int *ow, int *oh,
                                    dit_error *err) {
  (void)rgb, (void)w, (void)h, (void)crf, (void)ow, (void)oh;
  *out = NULL;
  return dit_errorf(err, DIT_ERR_UNSUPPORTED, "image H.264 re-compression: this ditrun was built without FFmpeg's "
                    "libraries (Debian: libavcodec-dev libswscale-dev; `make setup` installs them); an image CRF of 0 "
                    "skips it");
}
#endif

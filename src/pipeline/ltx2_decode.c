/* LTX-2's decoders (LTX2Pipeline.__call__ after the loop): the video latents unpacked,
 * denormalized and decoded by the video VAE into 8-bit frames; the audio latents
 * denormalized (per packed feature), unpacked, decoded by the audio VAE into a mel
 * spectrogram and turned into sound by the vocoder. */
#include <stdlib.h>
#include <string.h>

#include "models/vae_ltx2.h"
#include "models/vae_ltx2_audio.h"
#include "models/vocoder_ltx2.h"
#include "pipeline/ltx2_pipeline_internal.h"
#include "pipeline/pipeline_common.h"

/* The decoders' slot object. */
typedef struct ltx2_decoders {
  dit_vae_ltx2 *vae;
  dit_vae_ltx2_audio *audio_vae;
  dit_vocoder_ltx2 *vocoder;
} ltx2_decoders;

static void decoders_free(void *obj) {
  ltx2_decoders *d = obj;
  if (!d) return;
  dit_vae_ltx2_free(d->vae);
  dit_vae_ltx2_audio_free(d->audio_vae);
  dit_vocoder_ltx2_free(d->vocoder);
  free(d);
}

static dit_status decoders_load(const dit_model_rt *rt, void **obj, dit_error *err) {
  char path[4096];
  ltx2_decoders *d = calloc(1, sizeof *d);
  if (!d) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  dit_status s = dit_model_dir_component_path(rt->dir, "vae", path, sizeof path, err);
  if (s == DIT_OK) s = dit_vae_ltx2_load(rt->dev, path, &d->vae, err);
  if (s == DIT_OK) s = dit_model_dir_component_path(rt->dir, "audio_vae", path, sizeof path, err);
  if (s == DIT_OK) s = dit_vae_ltx2_audio_load(rt->dev, path, &d->audio_vae, err);
  if (s == DIT_OK) s = dit_model_dir_component_path(rt->dir, "vocoder", path, sizeof path, err);
  if (s == DIT_OK) s = dit_vocoder_ltx2_load(rt->dev, path, &d->vocoder, err);
  DIT_HAND_OVER(s, d, obj, decoders_free);
}

const dit_component_kind dit_ltx2_decoders = {"VAE decode", DIT_KEEP_VAE, decoders_load, decoders_free, false, NULL};

/* n floats of host memory into fresh backend memory *dev. */
static dit_status to_backend(dit_backend *be, const float *host, size_t n, void **dev, dit_error *err) {
  DIT_TRY(be->ops->alloc(be, n * sizeof(float), dev, err));
  return be->ops->upload(be, *dev, host, n * sizeof(float), err);
}

static dit_tensor backend_tensor(dit_backend *be, void *p, int nd, const int64_t *shape) {
  dit_tensor t = dit_tensor_make(DIT_F32, p, nd, shape);
  t.device = dit_backend_device(be);
  return t;
}

/* Video: tokens [N, C] -> [1, C, F, H, W] -> denormalized -> the VAE -> frames. */
/* --vae-tile N (latent pixels): diffusers' tiling with N x N latent tiles every N - N / 8 (at
 * least one less; N = 16 is diffusers' default of 512 pixels every 448 at 32x compression) and
 * its windows of 16 frames every 8; 0: untiled, as LTX2Pipeline decodes. */
static void tiling_of(const dit_vae_ltx2 *vae, int vae_tile, dit_vae_ltx2_tiling *t) {
  dit_vae_ltx2_tiling_default(t);
  if (vae_tile <= 0) return;
  const int sp = dit_vae_ltx2_get_config(vae)->spatial_ratio, over = vae_tile / 8 > 1 ? vae_tile / 8 : 1;
  t->spatial = t->temporal = true;
  t->min_h = t->min_w = vae_tile * sp;
  t->stride_h = t->stride_w = (vae_tile > over ? vae_tile - over : vae_tile) * sp;
}

static dit_status decode_video(dit_backend *be, dit_vae_ltx2 *vae, const dit_ltx2_geom *g, const float *tokens,
                               int vae_tile, const dit_ltx2_opts *o, dit_clip *out, dit_error *err) {
  const dit_vae_ltx2_config *vc = dit_vae_ltx2_get_config(vae);
  if (vc->latent_channels != g->C)
    return dit_errorf(err, DIT_ERR_FORMAT, "the VAE's latent_channels %d is not the transformer's %d", vc->latent_channels,
                      g->C);
  int T = 0, Ho = 0, Wo = 0;
  dit_vae_ltx2_output_size(vae, g->F, g->H, g->W, &T, &Ho, &Wo);
  if (T != g->frames || Ho != g->height || Wo != g->width)
    return dit_errorf(err, DIT_ERR_FORMAT, "the VAE decodes %d x %d x %d latents to %d frames of %dx%d, not the %d of "
                      "%dx%d asked (its compression differs from the transformer's vae_scale_factors)",
                      g->F, g->H, g->W, T, Wo, Ho, g->frames, g->width, g->height);
  const size_t nv = dit_ltx2_video_n(g), nout = 3 * (size_t)T * Ho * Wo;
  float *lat = malloc(nv * sizeof *lat), *vid = malloc(nout * sizeof *vid);
  void *dl = NULL, *dv = NULL;
  dit_status s = lat && vid ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "out of memory for the video");
  if (s == DIT_OK) {
    dit_ltx2_unpack_video(tokens, g->C, g->F, g->H, g->W, lat);
    s = to_backend(be, lat, nv, &dl, err);
  }
  dit_tensor tl = backend_tensor(be, dl, 5, (int64_t[]){1, g->C, g->F, g->H, g->W});
  if (s == DIT_OK) s = dit_vae_ltx2_denormalize(vae, &tl, err);
  dit_vae_ltx2_tiling t;
  tiling_of(vae, vae_tile, &t);
  if (s == DIT_OK && vae_tile > 0) { /* blended on the host: no backend buffer of the whole video */
    s = dit_vae_ltx2_decode_tiled_host(vae, &tl, vid, &t, err);
  } else if (s == DIT_OK) {
    dit_tensor tv = backend_tensor(be, NULL, 5, (int64_t[]){1, 3, T, Ho, Wo});
    s = be->ops->alloc(be, nout * sizeof(float), &dv, err);
    tv.data = dv;
    if (s == DIT_OK) s = dit_vae_ltx2_decode(vae, &tl, &tv, err);
    if (s == DIT_OK) s = be->ops->download(be, vid, dv, nout * sizeof(float), err);
    if (s == DIT_OK) s = be->ops->sync(be, err);
  }
  if (s == DIT_OK) s = dit_frames_from_decoder(vid, T, Ho, Wo, &out->rgb, err);
  if (s == DIT_OK) {
    out->width = Wo, out->height = Ho, out->n_frames = T, out->fps = g->fps;
    if (o->video_out) *o->video_out = vid, vid = NULL;
  }
  if (dl) be->ops->free(be, dl);
  if (dv) be->ops->free(be, dv);
  free(lat), free(vid);
  return s;
}

/* Audio: tokens [L, Ca*M] -> [1, Ca, L, M] -> denormalized -> mel -> sound (interleaved). */
static dit_status decode_audio(dit_backend *be, const ltx2_decoders *d, const dit_ltx2_geom *g, const float *tokens,
                               dit_clip *out, dit_error *err) {
  const size_t na = dit_ltx2_audio_n(g);
  int Tm = 0, Mo = 0;
  dit_vae_ltx2_audio_output_size(d->audio_vae, g->L, g->M, &Tm, &Mo);
  const int mel_ch = dit_vae_ltx2_audio_get_config(d->audio_vae)->output_channels;
  const int64_t n_samples = dit_vocoder_ltx2_output_samples(d->vocoder, Tm);
  const int ch = dit_vocoder_ltx2_channels(d->vocoder);
  const size_t nmel = (size_t)mel_ch * Tm * Mo, nsnd = (size_t)ch * (size_t)n_samples;
  float *lat = malloc(na * sizeof *lat), *snd = malloc(nsnd * sizeof *snd);
  out->samples = malloc(nsnd * sizeof *out->samples);
  void *dl = NULL, *dm = NULL, *ds = NULL;
  dit_status s = lat && snd && out->samples ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "out of memory for the sound");
  if (s == DIT_OK) {
    dit_ltx2_unpack_audio(tokens, g->Ca, g->L, g->M, lat);
    s = to_backend(be, lat, na, &dl, err);
  }
  if (s == DIT_OK) s = be->ops->alloc(be, nmel * sizeof(float), &dm, err);
  if (s == DIT_OK) s = be->ops->alloc(be, nsnd * sizeof(float), &ds, err);
  if (s == DIT_OK) {
    dit_tensor tl = backend_tensor(be, dl, 4, (int64_t[]){1, g->Ca, g->L, g->M});
    dit_tensor tm = backend_tensor(be, dm, 4, (int64_t[]){1, mel_ch, Tm, Mo});
    dit_tensor ts = backend_tensor(be, ds, 3, (int64_t[]){1, ch, n_samples});
    s = dit_vae_ltx2_audio_denormalize(d->audio_vae, &tl, err);
    if (s == DIT_OK) s = dit_vae_ltx2_audio_decode(d->audio_vae, &tl, &tm, err);
    if (s != DIT_OK) dit_error_prefix(err, "audio VAE");
    if (s == DIT_OK) s = dit_vocoder_ltx2_run(d->vocoder, &tm, &ts, err);
  }
  if (s == DIT_OK) s = be->ops->download(be, snd, ds, nsnd * sizeof(float), err);
  if (s == DIT_OK) s = be->ops->sync(be, err);
  if (s == DIT_OK) s = dit_check_finite(snd, nsnd, "vocoder", err);
  if (s == DIT_OK) {
    for (int c = 0; c < ch; c++)
      for (int64_t k = 0; k < n_samples; k++) out->samples[k * ch + c] = snd[(size_t)c * n_samples + k];
    out->channels = ch, out->n_samples = n_samples, out->sample_rate = dit_vocoder_ltx2_sample_rate(d->vocoder);
  }
  if (dl) be->ops->free(be, dl);
  if (dm) be->ops->free(be, dm);
  if (ds) be->ops->free(be, ds);
  free(lat), free(snd);
  return s;
}

dit_status dit_ltx2_decode(const dit_model_rt *rt, dit_components *c, const dit_gen_params *p, const dit_ltx2_geom *g,
                           const float *video, const float *audio, const dit_ltx2_opts *o, dit_clip *out,
                           dit_error *err) {
  void *obj = NULL;
  dit_stage_begin(p, "VAE decode");
  DIT_TRY(dit_component_get(rt, c, DIT_SLOT_VAE, &obj, err));
  const ltx2_decoders *d = obj;
  dit_status s = decode_video(rt->dev, d->vae, g, video, p->vae_tile, o, out, err);
  if (s != DIT_OK) dit_error_prefix(err, "VAE decode");
  if (s == DIT_OK) {
    dit_stage_begin(p, "sound");
    s = decode_audio(rt->dev, d, g, audio, out, err);
    if (s != DIT_OK) dit_error_prefix(err, "sound");
  }
  dit_component_done(rt, c, DIT_SLOT_VAE);
  return s;
}

dit_status dit_ltx2_decode_cost(const dit_model_rt *rt, dit_components *c, const dit_gen_params *p,
                                const dit_ltx2_geom *g, dit_cost *out, dit_error *err) {
  void *obj = NULL;
  DIT_TRY(dit_component_get(rt, c, DIT_SLOT_VAE, &obj, err));
  const ltx2_decoders *d = obj;
  int T = 0, Ho = 0, Wo = 0, Tm = 0, Mo = 0;
  dit_vae_ltx2_output_size(d->vae, g->F, g->H, g->W, &T, &Ho, &Wo);
  dit_vae_ltx2_audio_output_size(d->audio_vae, g->L, g->M, &Tm, &Mo);
  const size_t nv = dit_ltx2_video_n(g), na = dit_ltx2_audio_n(g), nout = 3 * (size_t)T * Ho * Wo;
  const size_t nmel = (size_t)dit_vae_ltx2_audio_get_config(d->audio_vae)->output_channels * Tm * Mo;
  const size_t nsnd = (size_t)dit_vocoder_ltx2_channels(d->vocoder) * dit_vocoder_ltx2_output_samples(d->vocoder, Tm);
  dit_vae_ltx2_tiling t;
  tiling_of(d->vae, p->vae_tile, &t);
  dit_cost v = {0}, a = {0}, voc = {0};
  dit_status s = dit_vae_ltx2_cost(d->vae, g->F, g->H, g->W, p->vae_tile > 0 ? &t : NULL, &v, err);
  if (s == DIT_OK) s = dit_vae_ltx2_audio_cost(d->audio_vae, g->L, g->M, &a, err);
  if (s == DIT_OK) dit_vocoder_ltx2_cost(d->vocoder, Tm, &voc);
  dit_component_done(rt, c, DIT_SLOT_VAE);
  /* the video: the latents' host and backend copies, the decoded floats (and untiled their backend buffer),
   * the VAE's, then the 8-bit frames and one frame's floats; the sound beside the frames and the VAE's slots:
   * the latents' copies, the mel, the sound three times (backend, host, interleaved), the decoders' */
  const size_t rgb = nout, video = 2 * nv * sizeof(float) + nout * sizeof(float) * (p->vae_tile > 0 ? 1 : 2) +
                                  v.act_bytes + rgb + (size_t)3 * Ho * Wo * sizeof(float);
  const size_t sound = rgb + v.act_bytes + 2 * na * sizeof(float) + nmel * sizeof(float) + 3 * nsnd * sizeof(float) +
                       a.act_bytes + voc.act_bytes;
  out->act_bytes = (nv + na) * sizeof(float) + (video > sound ? video : sound); /* the pipeline's latents */
  out->flops = v.flops + a.flops + voc.flops;
  return s;
}

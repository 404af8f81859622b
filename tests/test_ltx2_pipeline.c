/* The whole LTX-2 pipeline against diffusers' LTX2Pipeline (fixtures models/ltx2-tiny and
 * ltx23-tiny, made by gen/make_fixtures_ltx2.py with the call in reference.json: a 64x32 clip
 * of 9 frames at 25 fps, 3 steps, CFG + STG at block 1 + modality isolation, seed 42): the
 * prompt to the decoded video (model space, against vae_decode.0.out0), the 8-bit frames
 * (against the pipeline's float frames, at most one level apart) and the sound (against the
 * vocoder's output). The first fixture runs with every component released after its stage,
 * the second with all kept. The same for LTX2ImageToVideoPipeline's run (reference_i2v, made by
 * gen/make_fixtures_ltx2_i2v.py: the image images/in/rgb.png, image_crf 0). Then the public API: an image call on a video model and a frame
 * count the VAE cannot make are refused, a clip made from an image (image to video; strength
 * and a CRF above 51 refused), and a clip saved as a frames folder; the CLI's MP4 output (also
 * with --vae-tile), image to video into a frames folder, and refusals, and SIGTERM during its
 * run leaving no partial or temporary file. With DIT_TEST_DEVICE=cuda the models run on the
 * GPU: frames PSNR >= 35 dB, decoded video and sound SNR >= 30 dB. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/ctx.h"
#include "core/timer.h"
#include "fixture.h"
#include "io/image_read.h"
#include "io/json.h"
#include "pipeline/ltx2_pipeline.h"
#include "testing.h"

#define TOL 1e-4      /* relative error, float32 CPU against float32 torch */
#define GPU_TOL 1e-3  /* normalized MSE on the GPU: SNR 30 dB (the bound for the sound) */

static dit_backend *g_be;
static bool g_gpu;

/* The fixture's call as dit_gen_params and pipeline options. */
static void call_params(const json_t *call, dit_gen_params *p, dit_ltx2_opts *o) {
  dit_gen_params_default(p);
  p->prompt = json_string_value(json_object_get(call, "prompt"));
  p->width = dt_json_int(call, "width"), p->height = dt_json_int(call, "height");
  p->frames = dt_json_int(call, "num_frames");
  p->fps = json_number_value(json_object_get(call, "frame_rate"));
  p->steps = dt_json_int(call, "num_inference_steps");
  p->max_sequence_length = dt_json_int(call, "max_sequence_length");
  p->guidance = 3.0, p->guidance_set = 1; /* LTX2Pipeline's default guidance_scale */
  dit_ltx2_opts_default(o);
  const json_t *sb = json_object_get(call, "spatio_temporal_guidance_blocks");
  o->n_stg_blocks = 0;
  for (size_t i = 0; i < json_array_size(sb) && i < DIT_LTX2_MAX_STG_BLOCKS; i++)
    o->stg_blocks[o->n_stg_blocks++] = (int)json_integer_value(json_array_get(sb, i));
}

static void check_clip(const char *ref, const dit_clip *c, const float *video) {
  const size_t T = (size_t)c->n_frames, npix = (size_t)c->width * c->height, nv = 3 * T * npix;
  float *want = dt_load_f32_n(ref, "vae_decode.0.out0", nv), *frames = dt_load_f32_n(ref, "frames", nv);
  if (want && video) {
    const double e = dt_error_of(g_gpu, video, want, nv);
    CHECK_MSG(e <= (g_gpu ? GPU_TOL : TOL), "decoded video: %.3g", e);
    printf("  decoded video [3, %zu, %d, %d] against vae_decode.0.out0: %.3g\n", T, c->height, c->width, e);
  }
  if (frames) { /* frames [T, H, W, 3] in [0, 1] */
    int worst = 0;
    for (size_t k = 0; k < nv; k++) {
      const int d = abs((int)c->rgb[k] - (int)lrint(frames[k] * 255.0));
      worst = d > worst ? d : worst;
    }
    double se = 0.0;
    for (size_t k = 0; k < nv; k++) {
      const double d = (double)c->rgb[k] - frames[k] * 255.0;
      se += d * d;
    }
    const double psnr = se > 0 ? 10.0 * log10(255.0 * 255.0 * (double)nv / se) : 99.0;
    CHECK_MSG(g_gpu ? psnr >= 35.0 : worst <= 1, "8-bit frames: %d levels, PSNR %.1f dB", worst, psnr);
    printf("  8-bit frames: at most %d level(s) from the pipeline's float frames, PSNR %.1f dB\n", worst, psnr);
  }
  const size_t ns = (size_t)c->channels * (size_t)c->n_samples;
  float *snd = dt_load_f32_n(ref, "vocoder.0.out0", ns), *planar = malloc(ns * sizeof *planar);
  if (snd && planar && c->samples) {
    for (int ch = 0; ch < c->channels; ch++)
      for (int64_t k = 0; k < c->n_samples; k++) planar[(size_t)ch * c->n_samples + k] = c->samples[k * c->channels + ch];
    const double e = dt_error_of(g_gpu, planar, snd, ns);
    CHECK_MSG(e <= (g_gpu ? GPU_TOL : TOL), "sound: %.3g", e);
    printf("  sound %d ch x %lld samples at %d Hz against the vocoder's: %.3g\n", c->channels,
           (long long)c->n_samples, c->sample_rate, e);
  }
  free(want), free(frames), free(snd), free(planar);
}

/* The run of dir/<stem>.json (its tensors in dir/<stem>.safetensors); an image-to-video run
 * (the json names its "image", a file under tests/fixtures) gets that image. */
static void run_fixture(const dt_args *a, const char *name, const char *stem, unsigned keep) {
  char dir[1024], ref[1200], sub[128], js[1200];
  snprintf(sub, sizeof sub, "models/%s", name);
  dt_path(dir, sizeof dir, a->data, sub);
  snprintf(ref, sizeof ref, "%s/%s.safetensors", dir, stem);
  snprintf(js, sizeof js, "%s/%s.json", dir, stem);
  json_error_t je;
  json_t *rj = json_load_file(js, 0, &je);
  CHECK_MSG(rj != NULL, "%s: %s", js, je.text);
  if (!rj) return;
  dit_image img = {0};
  const char *image = json_string_value(json_object_get(rj, "image"));
  if (image) { /* "tests/fixtures/X" -> data/X */
    char path[1400];
    const char *rel = strncmp(image, "tests/fixtures/", 15) ? image : image + 15;
    dt_path(path, sizeof path, a->data, rel);
    FILE *f = fopen(path, "rb");
    static uint8_t buf[1 << 16];
    const size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    dit_error ie = {0};
    CHECK_MSG(n > 0 && dit_image_decode(buf, n, rel, DIT_IMAGE_DEFAULT_MAX_PIXELS, &img, &ie) == DIT_OK, "%s: %s", path, ie.msg);
  }
  dit_ctx *ctx = NULL;
  dit_ctx_params cp;
  dit_ctx_params_default(&cp);
  CHECK(dit_ctx_create(&cp, &ctx) == DIT_OK);
  dit_model_rt rt = {.ctx = ctx, .dev = g_be, .keep = keep};
  dit_error e = {0};
  const dit_backend_precision prec = {0};
  CHECK_MSG(dit_model_dir_open(dir, &rt.dir, &e) == DIT_OK, "%s", e.msg);
  if (g_gpu) CHECK(dit_backend_create(DIT_DEVICE_CPU, 0, 0, prec, &ctx->opts, &rt.host, &e) == DIT_OK);
  else rt.host = g_be;
  void *state = NULL;
  dit_gen_params p;
  dit_ltx2_opts o;
  call_params(json_object_get(rj, "call"), &p, &o);
  p.seed = (uint64_t)json_integer_value(json_object_get(rj, "seed"));
  if (img.rgb) { /* the reference's image_crf 0: no re-compression */
    p.init_image = &img;
    const json_t *crf = json_object_get(json_object_get(rj, "call"), "image_crf");
    CHECK(json_is_integer(crf));
    p.image_crf = json_integer_value(crf) == 0 ? -1 : (int)json_integer_value(crf);
  }
  float *video = NULL;
  o.video_out = &video;
  dit_clip clip = {0};
  dit_gen_stats st;
  if (rt.dir && rt.host) {
    CHECK_MSG(dit_family_find("LTX2Pipeline")->open(&rt, &state, &e) == DIT_OK, "%s", e.msg);
    if (state) {
      CHECK_MSG(dit_ltx2_generate_with(&rt, state, &p, &o, &clip, &st, &e) == DIT_OK, "%s", e.msg);
      printf("%s %s (%s): %d frames of %dx%d at %g fps in %.2f s\n", name, stem,
             keep ? "components kept" : "released per stage", clip.n_frames, clip.width, clip.height, clip.fps,
             st.total_seconds);
      CHECK(clip.n_frames == p.frames && clip.width == p.width && clip.height == p.height && clip.channels == 2);
      if (clip.rgb) check_clip(ref, &clip, video);
      dit_family_find("LTX2Pipeline")->close(state);
    }
  }
  dit_clip_free(&clip);
  dit_image_free(&img);
  free(video);
  if (rt.host && rt.host != g_be) dit_backend_free(rt.host);
  dit_model_dir_close(rt.dir);
  dit_ctx_free(ctx);
  json_decref(rj);
}

static void test_ltx20(const dt_args *a) { run_fixture(a, "ltx2-tiny", "reference", 0); }
static void test_ltx23(const dt_args *a) { run_fixture(a, "ltx23-tiny", "reference", DIT_KEEP_ALL); }
static void test_ltx20_i2v(const dt_args *a) { run_fixture(a, "ltx2-tiny", "reference_i2v", DIT_KEEP_ALL); }
static void test_ltx23_i2v(const dt_args *a) { run_fixture(a, "ltx23-tiny", "reference_i2v", 0); }

/* Appends stage and a comma to the buffer user (256 bytes). */
static void record_stage(void *user, const char *stage) {
  char *b = user;
  const size_t n = strlen(b);
  snprintf(b + n, 256 - n, "%s,", stage);
}

/* The public API on a video model: refusals, then one clip (STG off: the tiny model is shallower
 * than the pipeline's default block; its stages reported in order) written as a frames folder. */
static void test_public_api(const dt_args *a) {
  char dir[1024], out[1200];
  dt_path(dir, sizeof dir, a->data, "models/ltx2-tiny");
  dit_ctx *ctx = NULL;
  dit_model *m = dt_model_open(dir, g_gpu, &ctx);
  if (m) {
    dit_gen_defaults d;
    dit_model_get_defaults(m, &d);
    CHECK(d.frames == 121 && d.fps == 24.0 && d.frames_multiple == 4 && d.size_multiple == 16 && !strcmp(d.family, "ltx2"));
    dit_gen_params p;
    dit_gen_params_default(&p);
    p.prompt = "a fox";
    p.width = 64, p.height = 32, p.frames = 9, p.steps = 2, p.max_sequence_length = 16;
    dit_image img = {0};
    CHECK(dit_model_generate(m, &p, &img, NULL) == DIT_ERR_INVALID_ARG && strstr(dit_ctx_last_error(ctx), "videos"));
    dit_clip c = {0};
    p.frames = 10;
    CHECK(dit_model_generate_clip(m, &p, &c, NULL) == DIT_ERR_INVALID_ARG &&
          strstr(dit_ctx_last_error(ctx), "1 + a multiple of 4"));
    dit_image one = {.width = 2, .height = 2, .rgb = (uint8_t[12]){0}};
    p.frames = 9, p.init_image = &one, p.strength = 0.5;
    CHECK(dit_model_generate_clip(m, &p, &c, NULL) == DIT_ERR_INVALID_ARG &&
          strstr(dit_ctx_last_error(ctx), "strength"));
    p.strength = 0, p.image_crf = 52;
    CHECK(dit_model_generate_clip(m, &p, &c, NULL) == DIT_ERR_INVALID_ARG && strstr(dit_ctx_last_error(ctx), "CRF"));
    p.image_crf = 0;
#ifndef DIT_HAVE_FFMPEG
    p.image_crf = -1; /* the default CRF needs FFmpeg's libraries */
#endif
    char i2v_stages[256] = "";
    p.on_stage = record_stage, p.user = i2v_stages;
    CHECK_MSG(dit_model_generate_clip(m, &p, &c, NULL) == DIT_OK, "%s", dit_ctx_last_error(ctx));
    CHECK_MSG(!strcmp(i2v_stages, "text encoder,image encoder,denoising,VAE decode,sound,"), "stages: %s", i2v_stages);
    CHECK(c.n_frames == 9 && c.width == 64 && c.height == 32);
    dit_clip_free(&c);
    p.init_image = NULL;
    p.frames = 5;
    char stages[256] = "";
    p.on_stage = record_stage, p.user = stages;
    CHECK_MSG(dit_model_generate_clip(m, &p, &c, NULL) == DIT_OK, "%s", dit_ctx_last_error(ctx));
    CHECK_MSG(!strcmp(stages, "text encoder,denoising,VAE decode,sound,"), "stages: %s", stages);
    CHECK(c.n_frames == 5 && c.width == 64 && c.height == 32 && c.fps == 24.0 && c.channels == 2 && c.n_samples > 0);
    dt_path(out, sizeof out, a->tmp, "clip_frames");
    char rm[1400];
    snprintf(rm, sizeof rm, "rm -rf '%s'", out); /* an earlier run's */
    dt_run(rm, NULL);
    CHECK_MSG(dit_clip_save(ctx, &c, out, 0) == DIT_OK, "%s", dit_ctx_last_error(ctx));
    char f[1400];
    struct stat sb;
    snprintf(f, sizeof f, "%s/frame_00005.png", out);
    CHECK(stat(f, &sb) == 0);
    snprintf(f, sizeof f, "%s/audio.wav", out);
    CHECK(stat(f, &sb) == 0 && sb.st_size > 44);
    CHECK(dit_clip_save(ctx, &c, out, 0) != DIT_OK); /* an existing folder is never replaced */
    printf("public API: image call and 10 frames refused; 5 frames + %lld samples of sound written as %s\n",
           (long long)c.n_samples, out);
    dit_clip_free(&c);
    dit_model_free(m);
  }
  dit_ctx_free(ctx);
}

#ifdef DIT_HAVE_FFMPEG
#include <libavformat/avformat.h>

/* What ffprobe would show of the file: one H.264 stream of `frames` frames at fps/1, one AAC
 * stream, the duration of the frames. */
static void probe_mp4(const char *path, int frames, int fps) {
  AVFormatContext *ic = NULL;
  CHECK_MSG(avformat_open_input(&ic, path, NULL, NULL) == 0 && avformat_find_stream_info(ic, NULL) >= 0, "%s", path);
  if (!ic) return;
  int video = 0, audio = 0;
  for (unsigned i = 0; i < ic->nb_streams; i++) {
    const AVStream *st = ic->streams[i];
    if (st->codecpar->codec_type == AVMEDIA_TYPE_VIDEO) {
      video++;
      CHECK_MSG(st->codecpar->codec_id == AV_CODEC_ID_H264 && st->nb_frames == frames &&
                    st->avg_frame_rate.num == fps * st->avg_frame_rate.den,
                "video stream: %lld frames at %d/%d", (long long)st->nb_frames, st->avg_frame_rate.num,
                st->avg_frame_rate.den);
    } else if (st->codecpar->codec_type == AVMEDIA_TYPE_AUDIO) {
      audio++;
      CHECK(st->codecpar->codec_id == AV_CODEC_ID_AAC);
    }
  }
  const double dur = ic->duration / (double)AV_TIME_BASE;
  CHECK_MSG(video == 1 && audio == 1 && ic->nb_streams == 2, "%u streams", ic->nb_streams);
  CHECK_MSG(fabs(dur - (double)frames / fps) < 0.1, "duration %.3f s", dur);
  printf("CLI: %s: one H.264 stream of %d frames at %d fps, one AAC stream, %.3f s\n", path, frames, fps, dur);
  avformat_close_input(&ic);
}
#endif

/* `ditrun generate` on a video model: an MP4 (when built with FFmpeg's libraries: read back,
 * and no encoder banner on stderr), and the refusals (an image output, a frame count the VAE
 * cannot make, one step (the schedule's stretch to its terminal sigma divides 0 by 0),
 * --frames on an image model; `ditrun serve`, which makes images, on a video
 * model before it loads). */
static void test_cli(const dt_args *a) {
  char dir[1024], img_model[1024], out[1200], log[1200], cmd[4096], msg[4096];
  dt_path(dir, sizeof dir, a->data, "models/ltx2-tiny");
  dt_path(img_model, sizeof img_model, a->src, "models/shapes-128");
  dt_path(out, sizeof out, a->tmp, "cli_clip.mp4");
  dt_path(log, sizeof log, a->tmp, "cli.log");
  const char *common = "-p 'a fox' -W 64 -H 32 --steps 2 --max-seq-len 16 --quiet";
  unlink(out); /* an earlier run's */
  snprintf(cmd, sizeof cmd, "'%s/ditrun' generate -m '%s' %s --frames 9 -o '%s'", a->bin, dir, common, out);
  int rc = dt_run_output(cmd, log, msg, sizeof msg);
#ifdef DIT_HAVE_FFMPEG
  CHECK_MSG(rc == 0, "MP4 output: rc %d: %s", rc, msg);
  CHECK_MSG(!strstr(msg, "x264") && !strstr(msg, "libx264"), "FFmpeg's banner reached stderr: %s", msg);
  probe_mp4(out, 9, 24);
#else
  CHECK_MSG(rc == 2 && strstr(msg, "FFmpeg"), "MP4 without FFmpeg: rc %d: %s", rc, msg);
#endif
  /* --vae-tile: diffusers' tiling in space (3 x 3 latent tiles every 2 of 8 x 6) and time (17 frames: windows) */
  dt_path(out, sizeof out, a->tmp, "cli_tiled.mp4");
  unlink(out);
  snprintf(cmd, sizeof cmd, "'%s/ditrun' generate -m '%s' -p 'a fox' -W 128 -H 96 --steps 2 --max-seq-len 16 --quiet "
           "--frames 17 --vae-tile 3 -o '%s'", a->bin, dir, out);
  rc = dt_run_output(cmd, log, msg, sizeof msg);
#ifdef DIT_HAVE_FFMPEG
  CHECK_MSG(rc == 0, "--vae-tile 3: rc %d: %s", rc, msg);
  probe_mp4(out, 17, 24);
#endif
  snprintf(cmd, sizeof cmd, "'%s/ditrun' generate -m '%s' %s --frames 9 -o '%s/x.png'", a->bin, dir, common, a->tmp);
  rc = dt_run_output(cmd, log, msg, sizeof msg);
  CHECK_MSG(rc == 2 && strstr(msg, "makes videos"), "PNG output of a video model: rc %d: %s", rc, msg);
  snprintf(cmd, sizeof cmd, "'%s/ditrun' generate -m '%s' %s --frames 10 -o '%s/y.mp4'", a->bin, dir, common, a->tmp);
  rc = dt_run_output(cmd, log, msg, sizeof msg);
  CHECK_MSG(rc == 2 && strstr(msg, "1 + a multiple of 4"), "--frames 10: rc %d: %s", rc, msg);
  snprintf(cmd, sizeof cmd, "'%s/ditrun' generate -m '%s' -p x --frames 9 -o '%s/z.png'", a->bin, img_model, a->tmp);
  rc = dt_run_output(cmd, log, msg, sizeof msg);
  CHECK_MSG(rc == 2 && strstr(msg, "makes images"), "--frames on an image model: rc %d: %s", rc, msg);
  snprintf(cmd, sizeof cmd, "'%s/ditrun' generate -m '%s' -p x -W 64 -H 32 --frames 9 --steps 1 -o '%s/s1.mp4'", a->bin,
           dir, a->tmp);
  rc = dt_run_output(cmd, log, msg, sizeof msg);
  CHECK_MSG(rc == 2 && strstr(msg, "at least 2 steps"), "--steps 1: rc %d: %s", rc, msg);
  char png[1200];
  dt_path(png, sizeof png, a->data, "images/in/rgb.png");
  snprintf(cmd, sizeof cmd, "'%s/ditrun' generate -m '%s' %s --frames 9 -i '%s' --strength 0.5 -o '%s/i.mp4'", a->bin,
           dir, common, png, a->tmp);
  rc = dt_run_output(cmd, log, msg, sizeof msg);
  CHECK_MSG(rc == 2 && strstr(msg, "--strength"), "--strength on a video model: rc %d: %s", rc, msg);
  /* image-to-video from the CLI: a frames folder whose first frame is the image's */
  dt_path(out, sizeof out, a->tmp, "cli_i2v");
#ifdef DIT_HAVE_FFMPEG
  const char *crf = ""; /* the default: re-compressed at CRF 33 */
#else
  const char *crf = "--image-crf 0";
#endif
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && '%s/ditrun' generate -m '%s' %s --frames 9 -i '%s' %s -o '%s'", out,
           a->bin, dir, common, png, crf, out);
  rc = dt_run_output(cmd, log, msg, sizeof msg);
  char f1[1400];
  snprintf(f1, sizeof f1, "%s/frame_00009.png", out);
  CHECK_MSG(rc == 0 && access(f1, F_OK) == 0, "image-to-video to a frames folder: rc %d: %s", rc, msg);
  snprintf(cmd, sizeof cmd, "'%s/ditrun' generate -m '%s' -p x --image-crf 20 -o '%s/c.png'", a->bin, img_model,
           a->tmp);
  rc = dt_run_output(cmd, log, msg, sizeof msg);
  CHECK_MSG(rc == 2 && strstr(msg, "--image-crf"), "--image-crf without an image: rc %d: %s", rc, msg);
  snprintf(cmd, sizeof cmd, "'%s/ditrun' serve -m '%s' --port 0", a->bin, dir);
  rc = dt_run_output(cmd, log, msg, sizeof msg);
  CHECK_MSG(rc == 2 && strstr(msg, "makes videos"), "serve on a video model: rc %d: %s", rc, msg);
}

/* Starts `ditrun generate` of a 49-frame 512x256 clip into out (its MP4 takes about as long to
 * encode as the tiny model takes to make it) (stdout and stderr to log); its pid. */
static pid_t start_generate(const dt_args *a, const char *model, const char *out, const char *log) {
  char cli[1200];
  dt_path(cli, sizeof cli, a->bin, "ditrun");
  char *argv[] = {cli, "generate", "-m", (char *)model, "-p", "a fox", "-W", "512", "-H", "256", "--steps", "2",
                  "--max-seq-len", "16", "--quiet", "--frames", "49", "-o", (char *)out, NULL};
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, 1), dup2(fd, 2), close(fd);
    execv(cli, argv);
    _exit(127);
  }
  return pid;
}

/* What a folder holds after an interrupted run: CHECKs that nothing but `name` is there (no
 * temporary file or folder); returns whether name is. */
static bool only_output(const char *folder, const char *name) {
  DIR *d = opendir(folder);
  bool found = false;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (!strcmp(e->d_name, name)) found = true;
    else CHECK_MSG(0, "%s: '%s' left behind", folder, e->d_name);
  }
  if (d) closedir(d);
  return found;
}

/* Whether folder holds a writer's temporary (.ditrun-...). */
static bool has_temporary(const char *folder) {
  DIR *d = opendir(folder);
  bool found = false;
  for (struct dirent *e; d && !found && (e = readdir(d));) found = !strncmp(e->d_name, ".ditrun-", 8);
  if (d) closedir(d);
  return found;
}

/* SIGTERM to `ditrun generate` (the tiny model; MP4 when built with FFmpeg's libraries, else a
 * frames folder): 0.5 s in, while it computes, it ends by the signal with nothing written; sent
 * the moment the output's temporary appears (watched every millisecond; the encode takes about
 * a second here), the write completes first: the process still ends by SIGTERM, the clip is
 * whole and no temporary is left. */
static void test_sigterm(const dt_args *a) {
  char model[1024], folder[1200], out[1300], log[1300];
  dt_path(model, sizeof model, a->data, "models/ltx2-tiny");
#ifdef DIT_HAVE_FFMPEG
  const char *name = "clip.mp4";
#else
  const char *name = "clip";
#endif
  for (int k = 0; k < 2; k++) { /* 0: during the run; 1: during the write */
    snprintf(folder, sizeof folder, "%s/sigterm_%d", a->tmp, k);
    snprintf(out, sizeof out, "%s/%s", folder, name);
    snprintf(log, sizeof log, "%s.log", folder);
    char rm[1400];
    snprintf(rm, sizeof rm, "rm -rf '%s' && mkdir -p '%s'", folder, folder);
    CHECK(dt_run(rm, NULL) == 0);
    pid_t pid = start_generate(a, model, out, log);
    CHECK(pid > 0);
    if (pid <= 0) return;
    int st = 0;
    bool seen = false;
    if (k == 0) {
      usleep(500000);
    } else {
      for (int ms = 0; ms < 120000 && !seen && waitpid(pid, &st, WNOHANG) == 0; ms++) {
        seen = has_temporary(folder);
        if (!seen) usleep(1000);
      }
    }
    kill(pid, SIGTERM);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "run %d: status %d, not ended by SIGTERM", k, st);
    const bool whole = only_output(folder, name);
    if (k == 0) {
      CHECK_MSG(!whole, "SIGTERM 0.5 s in: %s was written", out);
      continue;
    }
    CHECK_MSG(seen && whole, "SIGTERM during the write: temporary seen %d, clip written %d", seen, whole);
    if (!whole) continue;
#ifdef DIT_HAVE_FFMPEG
    probe_mp4(out, 49, 24);
#else
    char f[1400];
    snprintf(f, sizeof f, "%s/frame_00049.png", out);
    CHECK_MSG(access(f, F_OK) == 0, "%s: not all frames", out);
#endif
    printf("SIGTERM while %s was being written: the write finished, then the signal ended the process\n", out);
  }
}

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_ltx20,      test_ltx23, test_ltx20_i2v, test_ltx23_i2v,
                                                   test_public_api, test_cli, test_sigterm};
  return dt_main_on_env_backend(argc, argv, cases, sizeof cases / sizeof cases[0], &g_be, &g_gpu);
}

/* The LTX-2 vocoders (diffusers' pipelines/ltx2/vocoder.py): mel spectrograms to waveforms.
 *
 * LTX2Vocoder (LTX-2.0): conv_in, then per upsampling level an optional leaky ReLU, a
 * ConvTranspose1d and the mean of parallel resblocks (dilated "same" convolutions behind leaky
 * ReLU, snake or snake-beta activations, each optionally anti-aliased: Kaiser-sinc 2x up, the
 * activation, Kaiser-sinc 2x down, replicate edges), the output activation (leaky ReLU of
 * slope 0.01, or anti-aliased snake-beta), conv_out and tanh / clamp / nothing.
 * LTX2VocoderWithBWE (LTX-2.3): that vocoder, its waveform padded with zeros to a multiple of
 * the hop, a causal log-mel STFT of each audio channel (the checkpoint's DFT basis and mel
 * filterbank), a second ("BWE") vocoder of the same kind on that mel, plus the waveform
 * resampled by a Hann-windowed sinc (output / input sampling rate), clamped to [-1, 1] and
 * cropped.
 *
 * Every step runs through backend ops (the same code on the CPU and on CUDA). Activations are
 * F32 and channels last ([time, channels] per batch item): a convolution is an im2col copy
 * from a zero-padded buffer and one GEMM (linear) with its weight permuted at load to
 * [Co, k * Ci]; a ConvTranspose1d of stride s is one GEMM over its polyphase taps giving s
 * outputs per input row. Weights keep their stored dtype (F32, BF16, F16); the snake
 * parameters are exponentiated (logscale) at load; the anti-aliasing filters are the
 * checkpoint's (computed as diffusers does when it has none); the BWE's Hann resampler filter,
 * which checkpoints do not hold, is computed and rounded to bf16 (its values in diffusers once
 * the model is cast to bfloat16, and in the fixtures' references). */
#ifndef DIT_MODELS_VOCODER_LTX2_H
#define DIT_MODELS_VOCODER_LTX2_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/cost.h"
#include "core/error.h"
#include "core/tensor.h"

#define DIT_VOC_MAX_UP 8   /* upsampling levels */
#define DIT_VOC_MAX_RES 4  /* parallel resblocks per level */
#define DIT_VOC_MAX_DIL 4  /* dilations per resblock */

typedef enum dit_voc_act { DIT_VOC_LEAKY_RELU = 0, DIT_VOC_SNAKE, DIT_VOC_SNAKEBETA } dit_voc_act;
typedef enum dit_voc_final { DIT_VOC_FINAL_NONE = 0, DIT_VOC_FINAL_TANH, DIT_VOC_FINAL_CLAMP } dit_voc_final;

/* One vocoder (LTX2Vocoder's config; the BWE one reads the bwe_ fields). */
typedef struct dit_voc_gen_config {
  int in_channels, hidden_channels, out_channels;
  int n_up;                           /* len(upsample_factors) */
  int up_kernel[DIT_VOC_MAX_UP];      /* upsample_kernel_sizes */
  int up_factor[DIT_VOC_MAX_UP];      /* upsample_factors */
  int n_res;                          /* len(resnet_kernel_sizes) */
  int res_kernel[DIT_VOC_MAX_RES];    /* resnet_kernel_sizes */
  int n_dil[DIT_VOC_MAX_RES];         /* len(resnet_dilations[i]) */
  int dil[DIT_VOC_MAX_RES][DIT_VOC_MAX_DIL];
  dit_voc_act act;                    /* act_fn */
  float slope;                        /* leaky_relu_negative_slope */
  bool antialias;
  int aa_ratio, aa_kernel;            /* antialias_ratio, antialias_kernel_size */
  dit_voc_final final_act;            /* final_act_fn */
  bool final_bias;
} dit_voc_gen_config;

typedef struct dit_vocoder_ltx2_config {
  bool bwe;                  /* LTX2VocoderWithBWE */
  dit_voc_gen_config voc;    /* the (first) vocoder */
  dit_voc_gen_config bwe_gen; /* bwe: the bandwidth extender */
  int filter_length, hop_length, window_length, num_mel_channels; /* bwe: the mel STFT */
  int input_sampling_rate;   /* bwe: the first vocoder's rate */
  int output_sampling_rate;  /* the output's rate */
} dit_vocoder_ltx2_config;

typedef struct dit_vocoder_ltx2 dit_vocoder_ltx2;

/* Loads folder/config.json (_class_name LTX2Vocoder or LTX2VocoderWithBWE; absent keys take
 * diffusers' defaults) and folder's safetensors weights into be. Options it cannot run are
 * refused with DIT_ERR_UNSUPPORTED naming the config field. On failure *out is NULL. */
dit_status dit_vocoder_ltx2_load(dit_backend *be, const char *folder, dit_vocoder_ltx2 **out, dit_error *err);
/* A BigVGAN generator under BigVGAN's own names with weight norm (MiniMax-H3's audio decoder): prefix +
 * conv_pre, ups.<l>.0, resblocks.<i>.convs1 / convs2.<k> with activations.<2k> / <2k + 1> (anti-aliased
 * snake-beta: act.alpha / act.beta, upsample.filter, downsample.lowpass.filter), activation_post, conv_post;
 * each weight_g / weight_v folded at load into weight_v g / |weight_v| (F32). c gives its geometry (no config
 * file of its own); the file's other tensors must start with one of ignore. Runs as the LTX-2.0 vocoder does
 * (dit_vocoder_ltx2_run), at sample_rate. */
dit_status dit_vocoder_bigvgan_load(dit_backend *be, const char *dir, const char *prefix, const char *const *ignore,
                                   const dit_voc_gen_config *c, int sample_rate, dit_vocoder_ltx2 **out,
                                   dit_error *err);
void dit_vocoder_ltx2_free(dit_vocoder_ltx2 *m);
const dit_vocoder_ltx2_config *dit_vocoder_ltx2_get_config(const dit_vocoder_ltx2 *m);

/* Waveform samples per channel for T_mel mel frames (0 for T_mel < 1). */
int64_t dit_vocoder_ltx2_output_samples(const dit_vocoder_ltx2 *m, int64_t T_mel);
/* The output's sampling rate (Hz) and audio channels. */
int dit_vocoder_ltx2_sample_rate(const dit_vocoder_ltx2 *m);
int dit_vocoder_ltx2_channels(const dit_vocoder_ltx2 *m);
/* The input's channels times mel bins (in_channels: the mel's C * M). */
int dit_vocoder_ltx2_in_channels(const dit_vocoder_ltx2 *m);

/* vocoder(mel): mel [B, C, T, M] F32 (contiguous, backend memory; C * M = in_channels) into out
 * [B, channels, output_samples(T)] F32 (contiguous, backend memory, caller-allocated). Items run
 * one after another; the activation buffers stay allocated for the next call that fits
 * (dit_vocoder_ltx2_free releases them). DIT_ERR_INVALID_ARG for NULL or mis-shaped tensors. */
dit_status dit_vocoder_ltx2_run(dit_vocoder_ltx2 *m, const dit_tensor *mel, dit_tensor *out, dit_error *err);
/* One item of T mel frames (core/cost.h): the generators' convolution FLOPs (the BWE's STFTs not counted) and
 * the activation arena a run allocates (kept with the vocoder until it is freed). */
void dit_vocoder_ltx2_cost(const dit_vocoder_ltx2 *m, int64_t T, dit_cost *out);

/* LTX2VocoderWithBWE only (DIT_ERR_UNSUPPORTED otherwise): the causal log-mel its BWE stage
 * takes of a waveform (MelSTFT per audio channel after zero padding to a multiple of the
 * hop): wave [B, channels, N] F32 into mel [B, channels, mel_frames(N), num_mel_channels] F32
 * (both contiguous, backend memory). */
int64_t dit_vocoder_ltx2_mel_frames(const dit_vocoder_ltx2 *m, int64_t N);
dit_status dit_vocoder_ltx2_log_mel(dit_vocoder_ltx2 *m, const dit_tensor *wave, dit_tensor *mel, dit_error *err);

#endif

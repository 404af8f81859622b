/* The LTX-2 vocoders' internals shared by vocoder_ltx2.c (config, weights, packing) and
 * vocoder_ltx2_run.c (the forward). */
#ifndef DIT_MODELS_VOCODER_LTX2_INTERNAL_H
#define DIT_MODELS_VOCODER_LTX2_INTERNAL_H

#include "io/safetensors.h"
#include "models/vocoder_ltx2.h"

/* A "same" Conv1d (or conv_in / conv_out): raw w [co, ci, k] and b [co] as stored (bound from
 * the checkpoint), packed w [co, k * ci] and b [co] (b.data NULL: no bias). */
typedef struct voc_conv {
  dit_tensor rw, rb, w, b;
  dit_tensor rg; /* weight norm (rg.data set): rw holds v, rg g [co, 1, 1]; w = v g / |v| per output channel */
  int ci, co, k, d;    /* channels, kernel, dilation */
  int pad_l, pad_r;    /* zero padding */
} voc_conv;

/* A ConvTranspose1d of stride s, kernel K, padding pad: raw w [ci, co, K], b [co]; packed
 * w [s * co, J * ci] (row r * co + o, column j * ci + c: w[c, o, (J - 1 - j) s + r], zero past
 * K) and b [s * co] (b[o] per phase), J = ceil(K / s). Output rows q0 .. q0 + Q - 1 of the
 * polyphase GEMM give samples q * s + r; the output starts at sample pad. */
typedef struct voc_upconv {
  dit_tensor rw, rb, w, b;
  dit_tensor rg; /* weight norm: g [ci, 1, 1] over rw's rows (the stored tensor's first dim) */
  int ci, co, K, s, J, pad;
} voc_upconv;

/* An activation: leaky ReLU (slope), or snake(-beta) with packed alpha, beta [C] F32
 * (exponentiated), plain or anti-aliased: resample1d up (fu: the reversed upsample filter,
 * offset up_off, gain ratio), snake, resample1d down (fd, offset down_off). */
typedef struct voc_act {
  bool snake, aa;
  float slope;
  int C, ratio, K, up_off, down_off;
  dit_tensor ralpha, rbeta, rfu, rfd; /* raw (rbeta.data NULL: snake without beta) */
  dit_tensor alpha, beta, fu, fd;     /* packed */
} voc_act;

typedef struct voc_res {
  int n; /* dilations */
  voc_conv c1[DIT_VOC_MAX_DIL], c2[DIT_VOC_MAX_DIL];
  voc_act a1[DIT_VOC_MAX_DIL], a2[DIT_VOC_MAX_DIL];
} voc_res;

/* One vocoder; res[l * n_res + i] is level l's resblock i. */
typedef struct voc_gen {
  dit_voc_gen_config c;
  voc_conv conv_in, conv_out;
  voc_upconv up[DIT_VOC_MAX_UP];
  voc_res *res;
  voc_act act_out;
} voc_gen;

struct dit_vocoder_ltx2 {
  dit_backend *be;
  dit_vocoder_ltx2_config cfg;
  int n_gen; /* 1, or 2 with the BWE */
  voc_gen gen[2];
  /* bwe: the STFT's DFT basis [2F, 1, L] and mel filterbank [M, F] (raw and packed as [2F, L],
   * [M, F]) and the Hann resampler's reversed filter (packed, F32) */
  dit_tensor rstft, rmel, stft, mel, hann;
  int hann_ratio, hann_off;
  dit_weights *weights; /* the checkpoint, open while loading */
  void *wblock;         /* the packed weights (backend memory) */
  void *zeros;          /* one F32 zero (backend memory): the padding's source, all strides 0 */
  float **wn;           /* the weight-normed weights folded to F32 on the host while packing (n_wn) */
  int n_wn;
  void *act;            /* the activation arena (backend memory), act_bytes */
  size_t act_bytes;
};

/* Output length of a generator for T input frames. */
int64_t voc_gen_out_len(const voc_gen *g, int64_t T);
/* The forward of one batch item (vocoder_ltx2_run.c): mel [C, T, M] view (contiguous item)
 * into out [channels, samples]; the activation arena grows to fit. */
dit_status voc_run_item(dit_vocoder_ltx2 *m, const dit_tensor *mel, dit_tensor *out, dit_error *err);
/* The log-mel of one item, wave [ch, N] into mel [ch, frames, M] (views as the public call's). */
dit_status voc_log_mel_item(dit_vocoder_ltx2 *m, const dit_tensor *wave, dit_tensor *mel, dit_error *err);

#endif

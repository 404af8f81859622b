/* AutoencoderKL (diffusers' AutoencoderKL, as used by Z-Image and FLUX.1): the decoder (a
 * 16-channel latent decoded to RGB by conv_in, a mid block with one single-head spatial
 * attention, UpDecoderBlock2D levels and GroupNorm+SiLU+conv_out) and, as its own object
 * loaded only when an image is encoded, the encoder (conv_in, DownEncoderBlock2D levels, the
 * same mid block, GroupNorm+SiLU+conv_out to the latent distribution's mean and log-variance,
 * quant_conv). The models read like the reference modules and call the backend ops;
 * activations live in a few planned, reused buffers. */
#ifndef DIT_MODELS_VAE_KL_H
#define DIT_MODELS_VAE_KL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/cost.h"
#include "core/error.h"
#include "core/tensor.h"

#define DIT_VAE_KL_MAX_LEVELS 8

typedef struct dit_vae_kl_config {
  int latent_channels;                           /* decoder input channels (16 for Flux/Z-Image) */
  int in_channels;                               /* encoder input channels (3) */
  int out_channels;                              /* image channels (3) */
  int n_levels;                                  /* len(block_out_channels) */
  int block_out_channels[DIT_VAE_KL_MAX_LEVELS]; /* the decoder's, encoder order: [128, 256, 512, 512] */
  int enc_n_levels;                              /* the encoder's levels (len(block_out_channels)) */
  int enc_block_out_channels[DIT_VAE_KL_MAX_LEVELS]; /* the encoder's widths (block_out_channels) */
  int layers_per_block;                          /* each up block has layers_per_block + 1 resnets */
  int norm_num_groups;                           /* GroupNorm groups (eps is 1e-6 throughout) */
  bool mid_block_add_attention;                  /* default true */
  bool use_post_quant_conv;                      /* 1x1 conv on z before the decoder; default true */
  bool use_quant_conv;                           /* 1x1 conv on the encoder's moments; default true */
  bool has_down_block_types;                     /* the config lists down_block_types */
  float scaling_factor;                          /* pipeline: z = latents / scaling_factor + shift_factor */
  float shift_factor;                            /* 0 when the config has none (null) */
  bool has_shift_factor;
} dit_vae_kl_config;

typedef struct dit_vae_kl dit_vae_kl;

/* path a folder: loads path/config.json and its safetensors (encoder.* and quant_conv.*
 * are ignored). path a regular file: dit_vae_kl_load_file(be, path, NULL, ...). Weights
 * stay mapped in their stored dtype. On failure *out is NULL and the message names the
 * config field or the tensors that are wrong. */
dit_status dit_vae_kl_load(dit_backend *be, const char *path, dit_vae_kl **out, dit_error *err);
/* Loads the decoder from one safetensors file, such as FLUX.1's ae.safetensors, named
 * either as diffusers does or the original LDM way (detected by
 * decoder.mid.block_1.norm1.weight; the attention's q/k/v/proj_out stored as 1x1
 * convolutions [C, C, 1, 1] are used as the linears [C, C] without a copy). config_json:
 * the path of a diffusers AutoencoderKL config.json, or NULL for FLUX.1's published VAE
 * (latent 16, block_out_channels [128, 256, 512, 512], layers_per_block 2, 32 groups,
 * mid-block attention, no post_quant_conv, scaling 0.3611, shift 0.1159). A missing or
 * mis-shaped tensor is named as the file names it. */
dit_status dit_vae_kl_load_file(dit_backend *be, const char *file, const char *config_json, dit_vae_kl **out,
                                dit_error *err);
void dit_vae_kl_free(dit_vae_kl *m);
const dit_vae_kl_config *dit_vae_kl_get_config(const dit_vae_kl *m);

/* Decodes z [B, latent_channels, h, w] F32 (host memory, contiguous) — the RAW decoder
 * input: the pipeline has already applied z = latents / scaling_factor + shift_factor —
 * into img [B, out_channels, f*h, f*w] F32 (host memory, contiguous, caller-allocated),
 * f = 2^(n_levels-1) (8 for 4 levels), in model space (about [-1, 1]). Batch items are
 * decoded one after another.
 *
 * tile = 0: the whole latent in one piece. tile = T > 0: tiles of T x T LATENT pixels
 * (T >= 4; a side shorter than T is taken whole), neighbours overlapping by at least
 * T/4 latent pixels; the tile count per axis is the smallest that covers it with that
 * overlap and the tiles are spread evenly (all the same size, none cut at the border).
 * Each tile is decoded on its own and the results are blended with weights that ramp
 * linearly across each overlap with a neighbour (1 elsewhere), normalised by the sum of
 * weights, so seams are cross-fades and any pixel is a convex combination of tiles. As
 * in diffusers, a tiled decode differs from the untiled one (GroupNorm statistics and
 * the mid-block attention see one tile), most visibly near tile borders. T >= h and
 * T >= w decodes untiled. Activation memory scales with the tile, not the image. On a GPU
 * backend the activation buffers stay allocated after a decode, for the next one of the
 * same size (tile) and dtype; a decode of another size, a dtype change or
 * dit_vae_kl_free releases them.
 *
 * Fails with DIT_ERR_INVALID_ARG on wrong shapes/dtypes, DIT_ERR_NUMERIC when z or the
 * output holds NaN/Inf (img contents are then unspecified), DIT_ERR_NOMEM when the
 * activation buffers cannot be allocated. */
/* Activation dtype of the decode: F32 (the default; the only one on the CPU backend) or BF16
 * (GPU backends: activations in bf16 between ops, fp32 accumulation in the convolutions and
 * fp32 statistics in the norms, as a bf16 PyTorch VAE runs; z and the image stay F32 on the
 * host). */
dit_status dit_vae_kl_set_act_dtype(dit_vae_kl *m, dit_dtype dt, dit_error *err);
dit_status dit_vae_kl_decode(dit_vae_kl *m, const dit_tensor *z, dit_tensor *img, int tile, dit_error *err);

/* ---- the encoder ---- */
typedef struct dit_vae_kl_enc dit_vae_kl_enc;

/* Loads the encoder of an AutoencoderKL-family checkpoint: path a folder (config.json, class
 * `cls`: "AutoencoderKL" or "AutoencoderKLFlux2"; NULL = AutoencoderKL) or a single
 * safetensors file (config_json as for dit_vae_kl_load_file; diffusers or LDM names).
 * encoder.* and quant_conv.* are bound; everything else is left alone. */
dit_status dit_vae_kl_enc_load(dit_backend *be, const char *path, const char *cls, const char *config_json,
                               dit_vae_kl_enc **out, dit_error *err);
/* An encoder of cfg with deterministic pseudo-random BF16 weights (benchmarks). */
dit_status dit_vae_kl_enc_create_random(dit_backend *be, const dit_vae_kl_config *cfg, uint64_t seed,
                                        dit_vae_kl_enc **out, dit_error *err);
void dit_vae_kl_enc_free(dit_vae_kl_enc *m);
const dit_vae_kl_config *dit_vae_kl_enc_get_config(const dit_vae_kl_enc *m);
/* Activation dtype, as dit_vae_kl_set_act_dtype. */
dit_status dit_vae_kl_enc_set_act_dtype(dit_vae_kl_enc *m, dit_dtype dt, dit_error *err);
/* img [B, in_channels, H, W] F32 (host, contiguous; model space, about [-1, 1]; H and W
 * multiples of f = 2^(levels-1)) -> moments [B, 2L, H/f, W/f] F32 (host, caller-allocated):
 * the latent distribution's mean (channels 0..L-1) and log-variance (L..2L-1), quant_conv
 * applied, as diffusers' `vae.encode(img).latent_dist.parameters`. tile as for the decode, in
 * LATENT pixels (0 = whole; tiles' moments are blended like the decode's pixels).
 * DIT_ERR_INVALID_ARG for bad shapes, DIT_ERR_NUMERIC for NaN/Inf in or out. */
dit_status dit_vae_kl_encode(dit_vae_kl_enc *m, const dit_tensor *img, dit_tensor *moments, int tile, dit_error *err);
/* The distribution's mode (mean) or a sample mean + exp(0.5 * clamp(logvar, -30, 20)) * noise
 * from moments [2L, n] (one batch item) into out [L, n]; noise [L, n] or NULL for the mode. */
void dit_vae_kl_latent(const float *moments, int L, size_t n, const float *noise, float *out);

/* ---- internal, for the benchmark and tests ---- */

/* Checks a config (sizes positive, within caps, channels divisible by the groups);
 * the message names the field. */
dit_status dit_vae_kl_config_check(const dit_vae_kl_config *c, dit_error *err);
/* The configuration of FLUX.1's published VAE (dit_vae_kl_load_file's default; also the
 * geometry the benchmarks decode at). */
void dit_vae_kl_config_flux1(dit_vae_kl_config *c);
/* Builds a decoder of this config with deterministic pseudo-random BF16 weights (seed),
 * scaled so activations stay O(1) — for benchmarks at the real geometry without files. */
dit_status dit_vae_kl_create_random(dit_backend *be, const dit_vae_kl_config *cfg, uint64_t seed, dit_vae_kl **out,
                                    dit_error *err);

/* What one decode of an h x w latent (one batch item) in tiles of `tile` latent pixels (0:
 * whole) costs (core/cost.h): FLOPs (convolutions/linears/attention matmuls only) and the
 * planned activation buffers plus the tile buffers. Nothing runs. */
dit_status dit_vae_kl_cost_of(const dit_vae_kl *m, int h, int w, int tile, dit_cost *out, dit_error *err);

#endif

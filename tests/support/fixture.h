/* Reading reference tensors out of the fixture .safetensors files as plain float32 or
 * int32 arrays, for comparing engine outputs against the diffusers references. */
#ifndef DIT_TEST_FIXTURE_H
#define DIT_TEST_FIXTURE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "ditrun.h"
#include "testing.h"

/* Loads tensor `name` of a .safetensors file as freshly malloc'd float32 (converting from
 * any dtype); shape/ndim out (shape must hold 8 values); returns 0 on success, prints the
 * error and returns -1 otherwise. */
int dt_load_f32(const char *file, const char *name, float **data, int64_t *shape, int *ndim);
/* The same as int32: integer and bool dtypes, or floats holding integral values in range. */
int dt_load_i32(const char *file, const char *name, int32_t **data, int64_t *shape, int *ndim);
/* The reference of a fixture folder dir: ref_file = dir/reference.safetensors (when set)
 * and dir/reference.json loaded and returned; a failed check and NULL when that cannot be
 * read. */
json_t *dt_load_reference(const char *dir, char *ref_file, size_t len);
/* Checks n values of a step's latents against tensor `name` of ref_file: the same element
 * count and a relative error <= tol; prints the error and stores it in *rel (-1 when the
 * sizes differ). Returns 0, or -1 after a failed check when the tensor is missing. */
int dt_check_latents(const char *ref_file, const char *name, const float *lat, size_t n, double tol, double *rel);
/* The on_step callback of a pipeline test: each step's latents checked against
 * [prefix_]latents_step<i> of ref (dt_check_latents); counts the steps whose reference was
 * found and keeps the largest error. */
typedef struct dt_step_check {
  double tol;         /* relative error bound on the latents */
  const char *ref;    /* reference.safetensors */
  const char *prefix; /* names' prefix ("turbo" for turbo_latents_step0), or NULL */
  int steps_seen;
  double worst;
} dt_step_check;
int dt_step_check_cb(void *user, int step, int total, const float *lat, size_t n, double secs);
/* Generation parameters of a reference run: defaults, then model_dir = model, prompt,
 * width, height and seed from reference.json rj, steps and guidance_scale (set) from run
 * (rj itself or one of its cases). */
void dt_gen_params_from_reference(dit_gen_params *p, const char *model, const json_t *rj, const json_t *run);
/* The reference run of a pipeline fixture through dit_generate (dt_gen_params_from_reference,
 * and max_sequence_length when reference.json has it; rope_bf16 as the generator's bf16 round
 * trip left the text encoder's RoPE frequencies): every step's latents within tol, the image
 * within one 8-bit level; then a width that is no multiple of 16 refused. */
void dt_check_reference_run(dit_ctx *ctx, const char *fixture, const char *ref_file, const json_t *rj, int rope_bf16,
                            double tol);
/* The family's defaults for fixture: family, 1024 x 1024 in multiples of 16, steps, guidance. */
void dt_check_family_defaults(dit_ctx *ctx, const char *fixture, const char *family, int steps, double guidance);
/* Tensor name of file as F32 when it has n elements; otherwise a failed check and NULL. */
float *dt_load_f32_n(const char *file, const char *name, size_t n);
/* Checks a PNG written by the CLI against image ref_name of ref_file (values in [0, 1]):
 * readable, w x h, within one 8-bit level everywhere; prints the largest difference. */
void dt_check_png(const char *png, const char *ref_file, const char *ref_name, int w, int h);
/* The zimage-tiny transformer case of components.safetensors: two items of different sizes
 * (dit_x0/1 [C, F, H, W], dit_cap0/1 [L, D], dit_out0/1) and their timesteps dit_t [2]. */
typedef struct dt_zimage_case {
  float *x[2], *cap[2], *ref[2], *t;
  int64_t xs[2][8], cs[2][8], rs[2][8], ts[8];
} dt_zimage_case;
/* Loads the case from file (d zeroed first); 0, or -1 when a tensor is missing or mis-shaped. */
int dt_zimage_case_load(const char *file, dt_zimage_case *d);
void dt_zimage_case_free(dt_zimage_case *d);
/* Host tensors of item i of the case: x [C, F, H, W] and cap [L, D]. */
void dt_zimage_case_item(const dt_zimage_case *d, int i, dit_tensor *x, dit_tensor *cap);
/* The flux2-klein-tiny transformer case of components.safetensors: hidden [1, S, C],
 * encoder [1, L, J], timestep t, image / text position ids and the output dit_out. */
typedef struct dt_flux2_case {
  float *hidden, *enc, *t, *img_ids, *txt_ids, *ref;
  int64_t hs[8], es[8], os[8], is[8], ts[8];
} dt_flux2_case;
/* Loads the case from file (c zeroed first); 0, or -1 when a tensor is missing. */
int dt_flux2_case_load(const char *file, dt_flux2_case *c);
void dt_flux2_case_free(dt_flux2_case *c);
/* Copies the safetensors file src to dst without the tensor named drop; with data_of, a
 * tensor named drop holding data_of's dtype, shape and data is stored instead (a wrong
 * shape). 0, or -1 on failure. */
int dt_st_rewrite(const char *src, const char *dst, const char *drop, const char *data_of);
/* The VAE case of a fixture's components.safetensors file: the decoder input vae_z
 * [B, L, h, w] and diffusers' decode of it vae_image [B, 3, H, W] (shapes into zs, is:
 * 8 values each). 0, or -1 after a failed check (nothing left allocated). */
int dt_vae_case_load(const char *file, float **z, int64_t *zs, float **img, int64_t *is);
/* Called by dt_st_rename once per tensor of the source (in name order) with its name and
 * shape: writes the copy's name into out (len bytes) and may change shape/ndim to another
 * of the same element count; returns 0 to keep the tensor, 1 to leave it out, -1 to fail. */
typedef int (*dt_st_rename_fn)(void *user, const char *name, char *out, size_t len, int64_t *shape, int *ndim);
/* Copies the safetensors file src to dst with every tensor passed through fn (same data
 * bytes). 0, or -1 on failure (fn failed, an element count changed, two names collide). */
int dt_st_rename(const char *src, const char *dst, dt_st_rename_fn fn, void *user);
/* One tensor of a file dt_st_compose writes: its name and the tensors of the source whose
 * data, back to back (rows of the same dtype and trailing dims), make it; half[k] 1 or 2
 * takes only the first or second half of source k's rows (0: all of them); group > 0
 * interleaves them instead: group rows of each source in turn (sources of equal rows, a
 * multiple of group), as MiniMax-H3's release stores q, k and v per head. */
typedef struct dt_st_piece {
  char name[256];
  char src[3][256];
  int n_src;
  int half[3];
  int group;
} dt_st_piece;
/* Writes dst with the n pieces (in that order), from the tensors of src. 0, or -1 on
 * failure (a missing source, mismatched parts, an I/O error). */
int dt_st_compose(const char *src, const char *dst, const dt_st_piece *p, size_t n);
/* Writes dst: the diffusers-named Z-Image transformer file src under the original
 * checkpoint's names with ComfyUI's prefix (fused attention.qkv; split_qkv: q, k, v as
 * "attention.qkv.weight", "...weight.1", "...weight.2", the layout stable-diffusion.cpp's
 * converter writes from a diffusers folder). 0, or -1 on failure. */
int dt_zimage_write_original(const char *src, const char *dst, bool split_qkv);
/* Writes dst: the diffusers-named FLUX.2 transformer file src under Black Forest Labs'
 * single-file names (flux-2-klein-*.safetensors: fused img/txt qkv, double_blocks /
 * single_blocks, *_norm.scale, the final modulation with shift before scale), with `prefix`
 * before every name ("" or ComfyUI's "model.diffusion_model."). The renaming is this test
 * suite's own table (tests/fixtures/gen/check_flux2_bfl.py checks a file it wrote against
 * diffusers' converter). 0, or -1 on failure. */
int dt_flux2_write_bfl(const char *src, const char *dst, const char *prefix);
/* Writes dst: src with every 2-D "*.weight" matrix stored as fp8 (f8: DIT_F8_E4M3 or
 * DIT_F8_E5M2) divided by a per-tensor scale (its absolute maximum over the type's largest
 * value), the scale beside it as "X.scale_weight" (ComfyUI's scaled fp8, with its
 * "scaled_fp8" marker) or "X.weight_scale" (weight_scale); with decoded, the same matrices
 * as F32 holding exactly the fp8 values times their scale instead (the reference the fp8
 * file must compute). 0, or -1 on failure. */
int dt_st_to_fp8(const char *src, const char *dst, dit_dtype f8, bool weight_scale, bool decoded);
/* dt_st_rename callback: transformers' Qwen3 names ("model."-prefixed) as llama.cpp's. */
int dt_qwen3_to_llama_cpp(void *user, const char *name, char *out, size_t len, int64_t *shape, int *ndim);
/* Copies a diffusers-named AutoencoderKL file (n_levels up/down blocks) to dst under the
 * original LDM names FLUX.1's ae.safetensors uses (the decoder's up blocks counted from the
 * other end; the mid attention's q/k/v/proj_out as [C, C, 1, 1] 1x1 convs unless
 * linear_attn). The renaming is this test suite's own table. 0, or -1 on failure. */
int dt_vae_write_ldm(const char *src, const char *dst, int n_levels, bool linear_attn);
/* img (8-bit) against ref_file's float image `name` ([H, W, 3] in [0, 1]): the same size and
 * within one level everywhere; label names it in the output. */
void dt_check_image(const char *ref_file, const char *name, const dit_image *img, const char *label);
/* A device copy of n host floats on be; NULL on failure. */
void *dt_to_device(dit_backend *be, const float *h, size_t n);
/* n floats of be's memory p as a malloc'd host copy (after a sync), or NULL (a failed check
 * naming the download's error). */
float *dt_to_host(dit_backend *be, const void *p, size_t n);
/* The error measure of a run on the fixture backend: relative error on the CPU, normalized MSE
 * on a GPU (1 more when an element is not finite). */
double dt_error_of(bool gpu, const float *got, const float *ref, size_t n);
/* The backend a component test runs on: the CUDA one when DIT_TEST_DEVICE=cuda (*gpu set),
 * else the CPU one (2 threads). A CUDA request without CUDA support fails with a message. */
dit_status dt_backend_from_env(dit_backend **be, bool *gpu, dit_error *err);
/* dt_main over cases on the backend dt_backend_from_env gives (*be, *gpu set while they run;
 * freed after); 1 when that backend cannot be made. */
int dt_main_on_env_backend(int argc, char **argv, void (*const *cases)(const dt_args *), size_t n, dit_backend **be,
                           bool *gpu);
/* A context (*ctx, freed by the caller also on failure) and the model folder dir opened through the public
 * API on the GPU (gpu) or the CPU; NULL and a failed check naming the error when it cannot be loaded. */
dit_model *dt_model_open(const char *dir, bool gpu, dit_ctx **ctx);
/* obj[key] as an int (0 when absent or not an integer). */
int dt_json_int(const json_t *obj, const char *key);

#endif

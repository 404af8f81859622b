/* ditrun public API: run diffusion-transformer image models from C.
 *
 * Everything a program (including the ditrun CLI) needs is declared here; the rest of
 * the source tree is private. Handles are opaque; every fallible call returns a
 * dit_status, and the context keeps a message saying what went wrong and where
 * (dit_ctx_last_error). Nothing here calls exit() or keeps global mutable state. */
#ifndef DITRUN_H
#define DITRUN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DITRUN_VERSION "0.1.0"

/* ---- status codes ---------------------------------------------------------------- */
typedef enum dit_status {
  DIT_OK = 0,
  DIT_ERR_INVALID_ARG,  /* bad usage: an option or parameter out of range      (exit 2) */
  DIT_ERR_FORMAT,       /* bad input: a malformed or inconsistent file          (exit 2) */
  DIT_ERR_IO,           /* a file could not be opened, read or written          (exit 1) */
  DIT_ERR_NOMEM,        /* an allocation failed                                 (exit 1) */
  DIT_ERR_UNSUPPORTED,  /* valid input this build cannot run (dtype, device...) (exit 2) */
  DIT_ERR_NUMERIC,      /* NaN/Inf or another numeric failure                   (exit 1) */
  DIT_ERR_INTERNAL,     /* a bug in ditrun                                      (exit 1) */
  DIT_ERR_CANCELLED     /* the step callback asked to stop; no output           (exit 1) */
} dit_status;

/* Short name of a status ("invalid argument", ...). Never NULL. */
const char *dit_status_str(dit_status s);
/* The CLI exit code for a status: 0 ok, 2 bad usage/input, 1 runtime failure. */
int dit_status_exit_code(dit_status s);

/* ---- element types ------------------------------------------------------------- */
typedef enum dit_dtype {
  DIT_F32 = 0, DIT_BF16, DIT_F16, DIT_F8_E4M3, DIT_F8_E5M2,
  DIT_F64, DIT_I8, DIT_I16, DIT_I32, DIT_I64, DIT_U8, DIT_U16, DIT_U32, DIT_U64, DIT_BOOL,
  /* Block-quantized weights in ggml's layouts (GGUF files): each row of the last dim is a
   * run of blocks of dit_dtype_block_elems() elements, dit_dtype_block_bytes() bytes each. */
  DIT_Q4_0, DIT_Q4_1, DIT_Q5_0, DIT_Q5_1, DIT_Q8_0, DIT_Q2_K, DIT_Q3_K, DIT_Q4_K, DIT_Q5_K, DIT_Q6_K,
  DIT_DTYPE_COUNT
} dit_dtype;

/* Name as safetensors spells it ("F32", "BF16", "F8_E4M3", ...); ggml's name in capitals
 * for the block types ("Q8_0", "Q4_K"). */
const char *dit_dtype_name(dit_dtype t);
/* Size of one element in bytes; 0 for the block types (see dit_dtype_block_bytes). */
size_t dit_dtype_size(dit_dtype t);
/* Elements per block (1 for element types) and bytes per block (the element size for
 * element types). */
size_t dit_dtype_block_elems(dit_dtype t);
size_t dit_dtype_block_bytes(dit_dtype t);

/* ---- engine context ------------------------------------------------------------ */
typedef enum dit_log_level { DIT_LOG_ERROR = 0, DIT_LOG_WARN, DIT_LOG_INFO, DIT_LOG_DEBUG } dit_log_level;
typedef void (*dit_log_fn)(void *user, dit_log_level level, const char *msg);

typedef struct dit_ctx_params {
  int n_threads;            /* CPU threads; 0 = the CPUs this process may use (affinity, cgroup quota) */
  dit_log_fn log;           /* NULL = messages to stderr */
  void *log_user;
  dit_log_level log_level;  /* messages above this level are dropped; default WARN */
} dit_ctx_params;

typedef struct dit_ctx dit_ctx;

void dit_ctx_params_default(dit_ctx_params *p);
/* Creates a context. Returns DIT_ERR_NOMEM (and *out = NULL) when allocation fails. */
dit_status dit_ctx_create(const dit_ctx_params *p, dit_ctx **out);
void dit_ctx_free(dit_ctx *ctx);
/* Message of the last failed call on this context ("" when none). */
const char *dit_ctx_last_error(const dit_ctx *ctx);

/* ---- model inspection (ditrun info) -------------------------------------------- */
/* Prints a human-readable description of a diffusers model folder, a component folder
 * or a single .safetensors / .safetensors.index.json file: components, architectures,
 * parameter counts, dtypes and bytes. Validates everything it reads. */
dit_status dit_info_print(dit_ctx *ctx, const char *path, FILE *out);
#define DIT_INFO_TENSORS 1u /* also list every tensor: name, dtype, shape */
/* dit_info_print with flags (DIT_INFO_*). */
dit_status dit_info_print_ex(dit_ctx *ctx, const char *path, unsigned flags, FILE *out);
/* What this machine gives ditrun: the CPU and its vector extensions, the CPU backend's GEMM
 * kernel path (DIT_CPU_ISA's choice when set; a path the CPU lacks is an error) and thread
 * count, and the CUDA devices of a CUDA build (`ditrun info --system`). */
dit_status dit_system_print(dit_ctx *ctx, FILE *out);

/* ---- image comparison (ditrun compare) ------------------------------------------ */
typedef struct dit_image_metrics {
  int width, height, channels; /* channels: 3 (RGB, gray expanded) or 4 (when either has alpha) */
  double psnr;                 /* dB, data range 255 over all channels; +inf when identical */
  double ssim;                 /* scikit-image's structural_similarity: 7x7 uniform window,
                                  sample covariance, K1 0.01, K2 0.03, mean over channels */
  int max_diff;                /* largest absolute difference of one channel value */
  double mean_abs_diff;
  uint64_t n_diff;             /* pixels with any channel different */
} dit_image_metrics;

/* Compares two PNG files of the same size (at least 7x7, SSIM's window). DIT_ERR_INVALID_ARG
 * naming both sizes when they differ; the reader's errors for unreadable files. */
dit_status dit_compare_png(dit_ctx *ctx, const char *a, const char *b, dit_image_metrics *out);

/* ---- quantized files (ditrun quantize) ------------------------------------------- */
typedef struct dit_quantize_params {
  const char *model_dir;  /* diffusers folder (model_index.json) */
  const char *component;  /* "transformer" (NULL: it) or "text_encoder" */
  dit_dtype type;         /* weight matrices to: a block type (DIT_Q8_0 ...), DIT_BF16, DIT_F16 or DIT_F32
                             (a .gguf output), or DIT_F8_E4M3 / DIT_F8_E5M2 (a .safetensors output) */
  const char *output;     /* the .gguf (for fp8: .safetensors) to write */
  int overwrite;          /* replace an existing output */
  /* called before each tensor is written (i of n, its name in the file); may be NULL */
  void (*on_tensor)(void *user, size_t i, size_t n, const char *name);
  void *user;
} dit_quantize_params;

/* Writes one component of a model folder as a GGUF file: its weight matrices (2-D
 * "*.weight" tensors whose rows are whole blocks, except the input and output projections
 * stable-diffusion.cpp also keeps: embedders and final layers) in p->type, the rest as
 * stored; the names those of the family's GGUF files elsewhere (Z-Image: the original
 * checkpoint's; Qwen3: llama.cpp's), others as stored. For fp8 a safetensors file as
 * ComfyUI's scaled fp8 checkpoints are: each matrix over its per-tensor scale, the scale as
 * "X.scale_weight", the "scaled_fp8" marker; Z-Image under the original names, Qwen3 under
 * transformers'. The output is written to a temporary file and renamed when complete. */
dit_status dit_quantize(dit_ctx *ctx, const dit_quantize_params *p);

/* ---- image generation (ditrun generate) ---------------------------------------- */
typedef enum dit_rng_kind {
  DIT_RNG_TORCH_CPU = 0  /* torch.randn with a CPU torch.Generator().manual_seed(seed), bit for bit */
} dit_rng_kind;

typedef enum dit_device_kind { DIT_DEVICE_CPU = 0, DIT_DEVICE_CUDA } dit_device_kind;

/* Called after each denoising step with the fp32 latents (step is 0-based). Return 0 to go
 * on; anything else stops the generate, which returns DIT_ERR_CANCELLED and no image. */
typedef int (*dit_step_fn)(void *user, int step, int total, const float *latents, size_t n, double step_seconds);

/* Precision of the CPU backend's linear layers (issue 9): FP32 = fp32 products, exactly as
 * the fixture references are checked; BF16 = activations rounded to bf16 and multiplied with
 * bf16 weights (AVX512-BF16 vdpbf16ps where available), fp32 accumulation: ~2x faster. */
typedef enum dit_cpu_precision { DIT_CPU_PRECISION_FP32 = 0, DIT_CPU_PRECISION_BF16 } dit_cpu_precision;

/* Precision of a GPU's transformer GEMMs: BF16 (the faithful default) or FP8, an explicit
 * choice for speed (issue 22): the transformer blocks' matrices become float8_e4m3 with a
 * per-tensor scale at load (embedders, the final layer and modulation stay bf16) and their
 * GEMMs run on fp8 tensor cores, each activation row quantized to e4m3 with its own scale
 * right before the GEMM; fp32 accumulation, bf16 output. Needs an fp8 GPU (compute
 * capability 8.9 or later); fp8 weight files run their GEMMs the same way under FP8 (under
 * BF16 they are widened to bf16 per GEMM). Refused on the CPU. */
typedef enum dit_gpu_precision { DIT_GPU_PRECISION_BF16 = 0, DIT_GPU_PRECISION_FP8 } dit_gpu_precision;

/* A single weights file standing in for a component of the model folder: "transformer"
 * (e.g. FLUX.1's flux1-dev.safetensors), "vae" (ae.safetensors), "text_encoder"
 * (clip_l.safetensors), "text_encoder_2" (t5xxl_fp16.safetensors). The folder still gives
 * the component's config.json when it has one. */
/* A LoRA (low-rank update) file merged into the transformer's weights when it is loaded:
 * diffusers/PEFT (lora_A/lora_B), kohya (lora_down/lora_up/alpha) and the original-names
 * layouts (ComfyUI, AI-Toolkit); W += scale * (alpha / rank, when the file has an alpha) * B A.
 * Keys that match nothing in the model are an error listing them. */
typedef struct dit_lora {
  const char *path;
  double scale;                 /* 1.0: as trained */
} dit_lora;
#define DIT_MAX_LORAS 8

typedef struct dit_component_file {
  const char *component;
  const char *path;
} dit_component_file;
#define DIT_MAX_COMPONENT_FILES 8

typedef struct dit_gen_params {
  const char *model_dir;        /* diffusers folder (model_index.json) */
  const dit_component_file *files; /* n_files single weight files replacing components' weights */
  int n_files;
  const char *prompt;           /* UTF-8 */
  const char *negative_prompt;  /* NULL = "" (used only with guidance) */
  int width, height;            /* pixels; 0 = the model's default (dit_gen_defaults_for) */
  int steps;                    /* 0 = the model's default */
  double guidance;              /* used when guidance_set; else the model's default */
  int guidance_set;
  double cfg_truncation;        /* Z-Image: guidance off once (1000 - t)/1000 exceeds this; default 1.0 */
  double cfg_normalization;     /* Z-Image: 0 = off; > 0 caps |pred| at this times |cond| */
  int max_sequence_length;      /* prompt tokens after the chat template; 0 = the family's (512; LTX-2: 1024) */
  int text_rope_bf16;           /* text encoder RoPE frequencies rounded to bf16, as in a reference run whose
                                   encoder was cast with .to(torch.bfloat16) (the shared fixtures); 0 = fp32,
                                   as transformers' from_pretrained keeps them */
  uint64_t seed;
  dit_rng_kind rng;
  dit_device_kind device;
  int vae_tile;                 /* 0 = decode in one piece; else tile size in latent pixels */
  dit_step_fn on_step;          /* may be NULL */
  void *user;
  /* Called as each stage of a generate begins, with user: "text encoder", "denoising", "VAE decode" and,
   * for a clip with sound, "sound" (for progress displays of long runs); may be NULL. */
  void (*on_stage)(void *user, const char *stage);
  dit_cpu_precision cpu_precision; /* CPU device: linear layers in fp32 (default) or bf16 */
  dit_gpu_precision gpu_precision; /* CUDA device: transformer GEMMs in bf16 (default) or fp8 */
  const dit_lora *loras;        /* dit_generate: LoRAs merged into the transformer (dit_model_generate: the
                                   model's own, from dit_model_opts) */
  int n_loras;
  const struct dit_image *init_image; /* image-to-image (Z-Image): start from this picture instead of pure noise,
                                   as diffusers' img2img pipeline; NULL = text-to-image. width/height 0: its size
                                   floored to the model's multiple; another size: it is resized (Lanczos) to it */
  double strength;              /* with init_image: the share of the schedule that is run, in (0, 1]; 0 = 0.6
                                   (diffusers' default). 1 renoises the picture completely */
  const struct dit_image *ref_images; /* FLUX.2 [klein] reference editing: the images the result is conditioned
                                   on (Flux2KleinPipeline's image=); width/height 0: the first one's prepared size */
  int n_ref_images;             /* at most DIT_MAX_REF_IMAGES */
  int image_crf;                /* image-to-video (LTX-2): the init image is first re-compressed as one H.264 frame
                                   at this CRF, as the model was trained (LTX2ImageToVideoPipeline's image_crf);
                                   0 = the model's default (33), negative = not re-compressed */
  int frames;                   /* video families (dit_model_generate_clip): frames; 0 = the model's default */
  double fps;                   /* video families: frames per second; 0 = the model's default */
} dit_gen_params;
#define DIT_MAX_REF_IMAGES 8

/* Bits of dit_gen_defaults.from_model_file: which defaults the model folder's own
 * ditrun.json set (the others are the family's). */
enum {
  DIT_DEFAULT_WIDTH = 1,
  DIT_DEFAULT_HEIGHT = 2,
  DIT_DEFAULT_STEPS = 4,
  DIT_DEFAULT_GUIDANCE = 8,
  DIT_DEFAULT_PROMPT = 16
};

/* Defaults of a model: the family's, as its published pipeline uses them, overridden by
 * the folder's optional ditrun.json (docs/MODEL_DEFAULTS.md). */
typedef struct dit_gen_defaults {
  const char *family;           /* "zimage", ... */
  int width, height, steps;
  double guidance;
  int size_multiple;            /* width and height must be multiples of this */
  int frames;                   /* video families: frames of a clip (0: the family makes images) */
  int frames_multiple;          /* video families: frames must be frames_offset + a multiple of this */
  int frames_offset;            /* (LTX-2: 1 + a multiple of 8; MiniMax-H3: 5 + a multiple of 17) */
  double fps;                   /* video families: frames per second */
  char prompt[1024];            /* a sample prompt from ditrun.json; "" when none */
  unsigned from_model_file;     /* DIT_DEFAULT_* bits set by ditrun.json */
} dit_gen_defaults;

typedef struct dit_gen_stats {
  double load_seconds, encode_seconds, denoise_seconds, decode_seconds, total_seconds;
  int steps;
  size_t peak_rss_bytes;
} dit_gen_stats;

typedef struct dit_image {
  int width, height;            /* 8-bit RGB, row-major, width*height*3 bytes */
  uint8_t *rgb;
} dit_image;

/* Reads a PNG or JPEG file as diffusers' load_image does (PIL's open, exif_transpose,
 * convert("RGB")) into out (8-bit RGB; free with dit_image_free). An image of more than
 * max_pixels pixels is refused from its header before decoding (max_pixels 0: 8192 x 8192);
 * damaged or truncated files, CMYK JPEGs and unknown formats are refused with a message. */
dit_status dit_image_load(dit_ctx *ctx, const char *path, int64_t max_pixels, dit_image *out);
/* The same from n bytes in memory (name is for messages). */
dit_status dit_image_load_mem(dit_ctx *ctx, const uint8_t *data, size_t n, const char *name, int64_t max_pixels,
                              dit_image *out);
#define DIT_IMAGE_DEFAULT_MAX_PIXELS ((int64_t)8192 * 8192)

void dit_gen_params_default(dit_gen_params *p);
/* Reads model_index.json (and ditrun.json, when the folder has one) and returns the
 * model's defaults. dit_generate fills the parameters left at 0 from the same values. */
dit_status dit_gen_defaults_for(dit_ctx *ctx, const char *model_dir, dit_gen_defaults *out);
/* Runs the whole pipeline once: prompt -> text encoder -> sampler loop -> VAE -> 8-bit
 * image (dit_model_load with nothing kept, dit_model_generate, dit_model_free). On failure
 * *out is empty and the context's message names the stage. stats may be NULL. */
dit_status dit_generate(dit_ctx *ctx, const dit_gen_params *p, dit_image *out, dit_gen_stats *stats);
void dit_image_free(dit_image *img);
/* Writes img as PNG with UTF-8 text chunks (iTXt), atomically (temp file + rename); an
 * existing file is kept and DIT_ERR_IO returned unless overwrite is nonzero (the CLI
 * checks this before generating and exits 2). */
dit_status dit_image_save_png(dit_ctx *ctx, const dit_image *img, const char *path, const char *const *keys,
                              const char *const *values, int n_text, int overwrite);

/* The PNG dit_image_save_png writes (same checks, same text chunks), into memory: *out
 * (malloc'd, free() it) holds *out_len bytes. */
dit_status dit_image_encode_png(dit_ctx *ctx, const dit_image *img, const char *const *keys,
                                const char *const *values, int n_text, uint8_t **out, size_t *out_len);

/* ---- resident models -------------------------------------------------------------- */
/* A model loaded once and used for many generates, with its weights resident on their
 * device. Threading: one dit_model_generate at a time per model (calls on one model must not
 * overlap); different models, each with its own dit_ctx, may run side by side in different
 * threads. A model uses its context for messages: keep the context alive until the model is
 * freed, and do not share that context with another thread while the model runs. */
typedef struct dit_model dit_model;

/* Components kept loaded between generates (dit_model_opts.keep). A component not kept is
 * loaded inside each generate and released after its stage, so the peak memory is the
 * largest component's rather than their sum (what one-shot dit_generate does). */
enum {
  DIT_KEEP_TEXT_ENCODER = 1,
  DIT_KEEP_TRANSFORMER = 2,
  DIT_KEEP_VAE = 4,
  DIT_KEEP_ALL = 7
};

typedef struct dit_model_opts {
  dit_device_kind device;          /* where the models run */
  dit_cpu_precision cpu_precision; /* CPU device: linear layers in fp32 (default) or bf16 */
  dit_gpu_precision gpu_precision; /* CUDA device: transformer GEMMs in bf16 (default) or fp8 */
  unsigned keep;                   /* DIT_KEEP_* bits; default DIT_KEEP_ALL */
  const dit_component_file *files; /* single weight files replacing components' weights */
  int n_files;                     /* 0..DIT_MAX_COMPONENT_FILES */
  const dit_lora *loras;           /* merged into the transformer whenever it is loaded */
  int n_loras;                     /* 0..DIT_MAX_LORAS */
} dit_model_opts;

void dit_model_opts_default(dit_model_opts *o);
/* Opens the folder, picks its family from model_index.json, creates the backends and loads
 * the components o->keep names (o may be NULL: the defaults). On failure *out is NULL and the
 * context's message says why (an unsupported pipeline lists the supported ones). */
dit_status dit_model_load(dit_ctx *ctx, const char *model_dir, const dit_model_opts *o, dit_model **out);
/* The configuration folder ditrun ships (models/z-image-turbo, models/flux1-dev,
 * models/flux1-schnell: configs and tokenizers, no weights) for the model whose single
 * transformer file `weights` is (told from its tensor names: Z-Image, FLUX.1 with or without
 * a guidance embedder), into dir; the folders' root is $DITRUN_MODELS, else the source tree's
 * models/ this build was made from. Lets `ditrun generate` run from single files without -m.
 * DIT_ERR_INVALID_ARG for a file of another family (FLUX.2 [klein]: no folder shipped yet). */
dit_status dit_model_dir_for_file(dit_ctx *ctx, const char *weights, char *dir, size_t len);
/* The model's defaults (family's, then its folder's ditrun.json). */
void dit_model_get_defaults(const dit_model *m, dit_gen_defaults *out);
/* One image from the resident model. p->model_dir, p->device and p->cpu_precision are not
 * read (the model's own apply); parameters left at 0 take the model's defaults. On failure
 * *out is empty; DIT_ERR_CANCELLED when p->on_step asked to stop. stats may be NULL. */
dit_status dit_model_generate(dit_model *m, const dit_gen_params *p, dit_image *out, dit_gen_stats *stats);

/* A video clip: 8-bit RGB frames and, when the model makes it, sound. */
typedef struct dit_clip {
  int width, height, n_frames;  /* frames of width*height*3 bytes, one after another, in rgb */
  double fps;
  uint8_t *rgb;
  int channels;                 /* sound: 1 or 2; 0 when the clip has none */
  int sample_rate;              /* Hz */
  int64_t n_samples;            /* per channel */
  float *samples;               /* n_samples x channels, interleaved, in [-1, 1] */
} dit_clip;

/* One clip from a video model (dit_gen_defaults.frames > 0: LTX-2), as dit_model_generate
 * makes an image; p->frames and p->fps left at 0 take the model's defaults. An image model
 * refuses it (and a video model refuses dit_model_generate) with DIT_ERR_INVALID_ARG. */
dit_status dit_model_generate_clip(dit_model *m, const dit_gen_params *p, dit_clip *out, dit_gen_stats *stats);
void dit_clip_free(dit_clip *c);
/* Writes c to path: an MP4 file (H.264 + AAC) when path ends in ".mp4" (a build without
 * FFmpeg's libraries says so), else a new folder of frame_00001.png ... and audio.wav. An
 * existing path is refused unless overwrite (a folder is never replaced). */
dit_status dit_clip_save(dit_ctx *ctx, const dit_clip *c, const char *path, int overwrite);
/* Replaces the model's LoRAs with these n (0: none), as if it had been loaded with them. A
 * resident transformer is changed in place: the tensors the old LoRAs changed are read again
 * from the checkpoint and the new ones merged (only those tensors are touched: on a GPU their
 * bytes are uploaded again, the rest stays). A transformer that is not resident takes them
 * when it loads. On failure (a file that does not fit, FLUX.1) the model keeps the LoRAs
 * and weights it had; the context's message says why. Not while a generate runs on m. */
dit_status dit_model_set_loras(dit_model *m, const dit_lora *loras, int n);
void dit_model_free(dit_model *m);
/* A cheap picture of the latents a step callback sees during a width x height generate on
 * m (for progress displays; not the decoded image): one pixel per latent pixel (1/8 of the
 * image's side), three latent channels as R, G, B, each stretched over its mean +- 2
 * standard deviations. Same thread rules as dit_model_generate (call it from the step
 * callback). DIT_ERR_INVALID_ARG when n does not fit the family's latent shape. */
dit_status dit_model_latent_preview(const dit_model *m, int width, int height, const float *latents, size_t n,
                                    dit_image *out);
/* The model families this build runs (the registry's rows), for listings: the i-th
 * family's short name ("zimage"), a title and its NULL-ended pipeline class names (the
 * model_index.json _class_name values it answers to). Returns 0 past the last family. */
int dit_family_get(size_t i, const char **name, const char **title, const char *const **pipelines);

/* ---- planning: what a generate takes, before it runs (ditrun plan) ------------------- */
#define DIT_PLAN_MAX_STAGES 8

/* One stage of a run: a component's weights and one run of it. */
typedef struct dit_plan_stage {
  char name[32];           /* "text encoder", "transformer", "VAE decode" */
  char component[32];      /* the folder its weights come from: "text_encoder", "transformer", "vae" */
  unsigned keep_bit;       /* its DIT_KEEP_* bit */
  size_t weight_bytes;     /* its weights as stored (the CPU maps them from the files) */
  size_t resident_weight_bytes; /* of them, what is resident at once (all of them, unless the component
                                   streams its layers from the files: MiniMax-H3's text encoder) */
  char weight_dtypes[64];  /* the stored dtypes by bytes: "bf16 98.7%, f32 1.3%" */
  size_t act_bytes;        /* what the stage allocates beyond the weights: activations, tables,
                              workspace, and the pipeline's host buffers held through it */
  size_t act_kept_bytes;   /* of those, what stays allocated with a kept component (a transformer's
                              activation buffer) */
  size_t load_bytes;       /* a transient while the component loads, before its weights are read
                              (a tokenizer's parsed JSON) */
  size_t peak_bytes;       /* the process's predicted memory in use during the stage */
  double flops;            /* over all its runs (2 per multiply-add of GEMMs, convolutions, attention) */
  int runs;                /* runs per generate (the transformer: its steps) */
} dit_plan_stage;

typedef struct dit_plan {
  char family[32];
  dit_device_kind device;
  int width, height, frames, steps;
  int batch;               /* items per transformer call (2 with classifier-free guidance) */
  int text_tokens;         /* the prompt's tokens as the text encoder sees them */
  unsigned keep;           /* the DIT_KEEP_* bits assumed: components kept loaded through the run */
  size_t base_bytes;       /* the process before any component loads (measured: this process's
                              resident memory when the plan began) */
  size_t peak_bytes;       /* the run's predicted peak: base + the largest stage */
  size_t start_peak_bytes; /* this process's peak before the plan began (a fresh `ditrun` process's:
                              loading its libraries); a fresh process peaks at the larger of the two */
  int peak_stage;          /* the stage where it peaks */
  double flops;            /* the whole run */
  int n_stages;
  dit_plan_stage stage[DIT_PLAN_MAX_STAGES];
} dit_plan;

/* What a generate with p would take (p->model_dir, sizes, steps, prompt; 0 = the model's
 * defaults, as dit_model_generate fills them) with the components o->keep holds (o NULL:
 * none kept, as dit_generate and the CLI's one image run): per stage the weights, the
 * activations and the FLOPs, and the peak memory of the run. From the folder's configs and
 * the weight files' headers: components are opened on the host, mapped, never run (a loader
 * may read the few small tensors it keeps on the host). Not counted yet: o's LoRAs (their merged
 * copies) and image inputs (refused). The CPU device only for now (DIT_ERR_UNSUPPORTED for CUDA, and for a family
 * the planner does not know yet). */
dit_status dit_model_plan(dit_ctx *ctx, const dit_gen_params *p, const dit_model_opts *o, dit_plan *out);

/* Fits a generate with p and o into limit bytes (0: the memory this machine has available
 * now, plus what this process already holds): plans it as asked, then with each component
 * loaded for its stage only (o->keep 0), then with the VAE decoded in tiles of 128, 96, 64, 48
 * or 32 latent pixels (the largest tile that fits; tiles change the picture slightly), and
 * takes the first whose planned peak, plus a 5% margin for what the plan does not see (thread
 * stacks, allocator slack: 2-5% on the machines measured), is within the limit: p->vae_tile and
 * o->keep are set to it, *out is its plan, and what (len bytes) says what was changed ("" when
 * nothing). When none fits: DIT_ERR_INVALID_ARG with the smallest limit that would in the
 * message, p and o set to the smallest plan found and *out that plan (n_stages > 0). Other
 * failures are the planner's (n_stages 0). */
dit_status dit_model_plan_fit(dit_ctx *ctx, dit_gen_params *p, dit_model_opts *o, size_t limit, dit_plan *out,
                              char *what, size_t len);

/* ---- generation parameters as text (PNG "parameters" chunk) -------------------- */
/* The text Stable Diffusion web UIs, civitai and most PNG-info readers parse: the prompt
 * (any number of lines), then a line "Negative prompt: ..." when there is one, then one line
 * of "Key: value" pairs joined by ", ". A value holding ',', ':', a newline or a leading '"'
 * is written as a JSON string ("..."), which those readers unquote. Keys are a word
 * character followed by word characters, spaces, '-' or '/'. Limits of the format: a prompt
 * line that begins with "Negative prompt:" cannot be told from the negative prompt, and
 * spaces at the ends of prompt lines are dropped by readers. */
#define DIT_INFOTEXT_MAX_FIELDS 32
typedef struct dit_infotext {
  const char *prompt;           /* may be NULL or "" */
  const char *negative_prompt;  /* NULL or "": no "Negative prompt:" line */
  int n_fields;
  const char *keys[DIT_INFOTEXT_MAX_FIELDS], *values[DIT_INFOTEXT_MAX_FIELDS];
  int owned;                    /* set by dit_infotext_parse: the strings are malloc'd */
} dit_infotext;

/* Writes t as text into *out (malloc'd, free() it). DIT_ERR_INVALID_ARG naming the key for a
 * key outside the format's rules or n_fields out of range, DIT_ERR_NOMEM. */
dit_status dit_infotext_format(const dit_infotext *t, char **out);
/* Parses text as the web UIs do (the last line is the parameters line only when it holds at
 * least three "Key: value" pairs; quoted values are unquoted). *out owns its strings: free
 * with dit_infotext_free. DIT_ERR_NOMEM only. */
dit_status dit_infotext_parse(const char *text, dit_infotext *out);
/* The value of key (exact match), or NULL. */
const char *dit_infotext_get(const dit_infotext *t, const char *key);
void dit_infotext_free(dit_infotext *t);

/* ---- tokenizer (ditrun tokenize) ------------------------------------------------ */
/* A Hugging Face tokenizer.json (byte-level BPE, e.g. Qwen3's), plus the chat template of
 * the pipeline it belongs to. */
typedef struct dit_tokenizer dit_tokenizer;

/* Loads model_dir/tokenizer/tokenizer.json, and takes the chat style from
 * model_dir/model_index.json's _class_name (ZImagePipeline: Qwen3 chat with thinking,
 * Flux2KleinPipeline: without). model_dir may also be a folder holding tokenizer.json
 * itself (then no chat style is known). A bad tokenizer.json fails with DIT_ERR_FORMAT
 * (DIT_ERR_UNSUPPORTED for features this build lacks) naming the field; a folder without
 * tokenizer.json with DIT_ERR_INVALID_ARG. */
dit_status dit_tokenizer_load(dit_ctx *ctx, const char *model_dir, dit_tokenizer **out);
/* Encodes len bytes of UTF-8 text into token ids (*ids malloc'd, free() it; NULL when
 * *n == 0). No BOS/EOS are added; special tokens written in the text are recognized.
 * chat != 0 first wraps the text as one user message in the model family's chat
 * template (fails if the family is unknown). Invalid UTF-8 -> DIT_ERR_INVALID_ARG with
 * the byte offset. */
dit_status dit_tokenizer_encode(dit_ctx *ctx, const dit_tokenizer *tok, const char *text, size_t len, int chat,
                                int32_t **ids, size_t *n);
/* Encodes text as a pipeline hands it to its text encoder (FLUX.1's CLIP and T5): the
 * tokenizer's post-processor adds its special tokens (CLIP: BOS ... EOS; T5: ... </s>) and
 * the ids are cut to max_length (>= 1) keeping the last special token, as transformers'
 * truncation does; no padding. */
dit_status dit_tokenizer_encode_model(dit_ctx *ctx, const dit_tokenizer *tok, const char *text, size_t len,
                                      size_t max_length, int32_t **ids, size_t *n);
/* Number of token ids (max id + 1). */
size_t dit_tokenizer_vocab_size(const dit_tokenizer *tok);
void dit_tokenizer_free(dit_tokenizer *tok);

/* ---- benchmark (ditrun bench) --------------------------------------------------- */
/* One DiT forward at a model's real geometry with deterministic random weights created
 * in memory (no files): total time (un-profiled, warmup then median of iters), a profiled
 * pass split per op (GEMM, attention, elementwise), FLOPs, TFLOP/s and peak memory. */
#define DIT_BENCH_MAX_OPS 24
#define DIT_BENCH_MAX_SHAPES 48
#define DIT_BENCH_E2E_REF_STEPS 64
typedef struct dit_bench_params {
  const char *arch;             /* one of dit_bench_arch_get's names: "zimage", "flux2-klein-4b", ... */
  int res;                      /* square image side in pixels (multiple of 16); default 1024 */
  int text_len;                 /* caption tokens; default 128 */
  dit_device_kind device;
  int cuda_device;              /* GPU index */
  dit_dtype dtype;              /* weights (and GPU activations): DIT_BF16 (default) or DIT_F32 */
  int iters, warmup;            /* timed runs (median reported), untimed first runs */
  int profile;                  /* nonzero (default): one extra profiled run split per op */
  uint64_t seed;
  double peak_tflops;           /* 0: the default peak of the device (see dit_bench_result) */
  /* geometry overrides for tests (0 = the real model's); FLUX.2: dim = inner dim, n_layers =
   * double blocks, n_refiner_layers = single blocks, cap_feat_dim = joint_attention_dim: */
  int dim, n_layers, n_refiner_layers, n_heads, cap_feat_dim;
  dit_cpu_precision cpu_precision; /* CPU device: linear layers in fp32 (default) or bf16 */
  dit_gpu_precision gpu_precision; /* CUDA device: transformer GEMMs in bf16 (default) or fp8 */
  int ref_bf16;                 /* nonzero (quantized dtypes): after timing, the same forward with bf16
                                   weights of the same random values; its relative error is reported */
  int ref_res;                  /* FLUX.2 [klein]: a reference image of ref_res x ref_res pixels in the
                                   sequence, as an edit runs (0 = none) */
  int height;                   /* video models: the frames' height (res is their width); 0 = res */
  int frames;                   /* video models: frames of the clip (0 = the model's default) */
} dit_bench_params;

typedef struct dit_bench_result {
  char arch[16], device[16], weight_dtype[8], act_dtype[8];
  int res, text_len, threads, ref_res;
  long long img_tokens, cap_tokens; /* as computed: Z-Image pads to a multiple of 32, FLUX.2 does not;
                                       image tokens include a reference image's */
  long long params;             /* weight elements */
  double flops;                 /* per forward: see dit_bench_print's formula line */
  double ms_median, ms_min, ms_max;
  int iters;
  double tflops, peak_tflops, pct_peak; /* achieved (median), the stated peak, ratio */
  char peak_what[96];
  /* profiled run: on a GPU each op timed by device events around it (no syncs between ops);
   * on the CPU op by op with a sync after each: */
  int profiled;
  int prof_device_timed;        /* 1: device event times; 0: host clock around synced ops */
  double phase_ms[3];           /* GEMM, attention, elementwise (incl. copies) */
  double prof_total_ms;         /* host wall time of the profiled forward */
  double prof_span_ms;          /* device-timed: first op's start to last op's end (the gaps are
                                   span - the ops' sum: launch latency, host waits) */
  int n_ops;
  const char *op_name[DIT_BENCH_MAX_OPS];
  double op_ms[DIT_BENCH_MAX_OPS];
  long op_calls[DIT_BENCH_MAX_OPS];
  int n_gemm_shapes;            /* linear calls by shape [m, k] x [n, k]^T, and convolutions as the
                                   GEMMs they are (m output pixels, n out channels, k in channels x
                                   kernel area; conv = 1) */
  struct {
    long long m, n, k;
    long calls;
    double ms;
    int conv;
  } gemm_shapes[DIT_BENCH_MAX_SHAPES];
  size_t weight_bytes;          /* weights in backend memory */
  size_t alloc_peak_bytes;      /* peak of weights + activations + inputs allocated by the model */
  size_t peak_mem_bytes;        /* CPU: peak RSS; GPU: peak device memory in use (cudaMemGetInfo) */
  size_t device_base_bytes;     /* GPU: in use before the backend existed (context, other processes) */
  double setup_s;               /* backend + random weights */
  double first_ms;              /* the first forward (a warmup one): it tunes each GEMM and conv shape unless
                                   the tuning cache file has its choice from an earlier process */
  double cpu_ms_min;            /* CPU: least process CPU time (all threads) of a timed run, ms */
  int output_finite;            /* the last output had no NaN/Inf */
  long graph_launches;          /* timed runs replayed from a captured graph (GPU; DIT_CUDA_GRAPHS=0: none) */
  int have_ref;                 /* ref_bf16 ran: the output against bf16 weights' output, */
  double ref_rel_l2, ref_rel_max; /* ||q - b|| / ||b|| and max |q - b| / max |b| */
  char cpu_isa[16];             /* device cpu: its kernel path (avx512bf16, avx512, avx2, portable) */
  int height, frames;           /* video models: res x height pixels, frames (0 for image models) */
  long long aux_tokens;         /* video models: the audio stream's tokens (img_tokens are the video's) */
} dit_bench_result;

/* End to end (ditrun bench --e2e STEPS, arch zimage): text encode + STEPS forwards + VAE decode
 * of one image with all three models at the real geometry (random weights) on p's device. */
typedef struct dit_bench_e2e_result {
  char device[16];
  int res, text_len, steps, iters;
  double encode_ms, steps_ms, step_ms, decode_ms, total_ms; /* medians over iters */
  double total_min_ms, total_max_ms, setup_s;
  size_t weight_bytes;                                      /* the transformer's */
  size_t peak_mem_bytes, device_base_bytes;                 /* GPU: memory in use (cudaMemGetInfo) */
  long graph_launches;                                      /* forwards replayed from a captured graph */
  int output_finite;
  /* --precision fp8 with ref_bf16: one more image with fp8, then with a bf16 transformer of the
   * same random weights; the relative L2 error of the latents after each step (the first
   * DIT_BENCH_E2E_REF_STEPS) and of the decoded image */
  int have_ref, ref_steps;
  double ref_step_rel_l2[DIT_BENCH_E2E_REF_STEPS], ref_img_rel_l2;
} dit_bench_e2e_result;
dit_status dit_bench_e2e_run(dit_ctx *ctx, const dit_bench_params *p, int steps, dit_bench_e2e_result *r);
void dit_bench_e2e_print(const dit_bench_e2e_result *r, int json, FILE *out);

/* The architectures dit_bench_run knows, for listings: the i-th one's name, its model
 * family and its default caption length. Returns 0 past the last. */
int dit_bench_arch_get(size_t i, const char **name, const char **family, int *text_len);
void dit_bench_params_default(dit_bench_params *p);
dit_status dit_bench_run(dit_ctx *ctx, const dit_bench_params *p, dit_bench_result *r);
/* The Flux / Z-Image VAE decoder alone (ditrun bench --vae): a p->res x p->res image from a
 * random latent, random BF16 weights, activations in p->dtype (bf16 or f32; f32 on the CPU);
 * fills r as dit_bench_run does (arch "vae-flux", text_len 0, no peak). */
dit_status dit_bench_vae_run(dit_ctx *ctx, const dit_bench_params *p, dit_bench_result *r);
/* Human-readable table (json == 0) or one JSON object (json != 0). */
void dit_bench_print(const dit_bench_result *r, int json, FILE *out);

#ifdef __cplusplus
}
#endif
#endif /* DITRUN_H */

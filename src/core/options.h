/* Run-time switches, in one struct. They exist for measurements and diagnosis (A/B timings,
 * turning one library or kernel family off); defaults are what ditrun ships. The context
 * holds one (dit_ctx.opts); backends and models get it when they are made. The environment
 * overrides the defaults in exactly one place, dit_run_opts_from_env, read once when a
 * context is created:
 *
 *   variable                      field                   default  meaning of the other value
 *   DIT_CUDA_GRAPHS=0             cuda_graphs             on       no CUDA graph replay
 *   DIT_CUDA_GEMM_TUNE=0          cuda_gemm_tune          on       cuBLASLt's first algorithm, untimed
 *   DIT_CUDA_GEMM_TUNE_LOG=1      cuda_gemm_tune_log      off      a stderr line per tuned GEMM shape
 *   DIT_CUDA_CUDNN=0              cuda_cudnn              on       no cuDNN: own attention and conv kernels
 *   DIT_CUDA_CUDNN_CONV_TUNE=0    cuda_cudnn_conv_tune    on       cuDNN's first conv engine, untimed
 *   DIT_CUDA_CUDNN_CONV_LAYOUT=   cuda_cudnn_conv_layout  both     nchw or nhwc: try only that layout
 *   DIT_CUDA_CUDNN_VERBOSE=N      cuda_cudnn_verbose      1        cuDNN messages: 0 none, 2 every plan
 *   DIT_CUDA_CUDNN_VERIFY=0       cuda_cudnn_verify       on       no first-call check of cuDNN against ours
 *   DIT_CUDA_FUSED=0              cuda_fused              on       fused norm ops run as their sequences
 *   DIT_CUDA_VEC=0                cuda_vec                on       scalar elementwise kernels
 *   DIT_CUDA_ATTN=2|3             cuda_attn_version       1        another flash-attention kernel
 *   DIT_ZIMAGE_STACK_QKV=0        zimage_stack_qkv        on       three q/k/v GEMMs instead of one
 *   DIT_TUNE_CACHE=0              tune_cache              on       tuning results not read from or saved to a file
 *   DITRUN_CACHE_DIR=DIR          tune_cache_path         (below)  the tuning cache file is DIR/tune.bin
 *
 * dit_run_opts_from_env resolves tune_cache_path with dit_tune_cache_default_path (tune_cache.h):
 * $DITRUN_CACHE_DIR/tune.bin, else $XDG_CACHE_HOME/ditrun/tune.bin (absolute only), else
 * $HOME/.cache/ditrun/tune.bin (absolute only); "" when none is usable or the path is longer
 * than the field (then there is no cache file, whatever tune_cache says).
 */
#ifndef DIT_CORE_OPTIONS_H
#define DIT_CORE_OPTIONS_H

#include <stdbool.h>

enum { DIT_CONV_LAYOUT_BOTH = 0, DIT_CONV_LAYOUT_NCHW, DIT_CONV_LAYOUT_NHWC };

typedef struct dit_run_opts {
  bool cuda_graphs, cuda_gemm_tune, cuda_gemm_tune_log, cuda_cudnn, cuda_cudnn_conv_tune, cuda_cudnn_verify;
  int cuda_cudnn_conv_layout; /* DIT_CONV_LAYOUT_* */
  int cuda_cudnn_verbose;
  bool cuda_fused, cuda_vec;
  int cuda_attn_version;      /* 1, 2 or 3 */
  bool zimage_stack_qkv;
  bool tune_cache;            /* read and save the tuning cache file (core/tune_cache.h) */
  char tune_cache_path[1024]; /* that file, or "" when no folder is usable */
} dit_run_opts;

/* The shipped defaults (the table above). */
void dit_run_opts_default(dit_run_opts *o);
/* Overrides the fields whose variables are set (the only reader of these variables). */
void dit_run_opts_from_env(dit_run_opts *o);

#endif

/* The run-time switches (see options.h): defaults and the environment's overrides. */
#include "core/options.h"

#include <stdlib.h>
#include <string.h>

#include "core/tune_cache.h"

void dit_run_opts_default(dit_run_opts *o) {
  memset(o, 0, sizeof *o);
  o->cuda_graphs = o->cuda_gemm_tune = o->cuda_cudnn = o->cuda_cudnn_conv_tune = o->cuda_cudnn_verify = true;
  o->cuda_cudnn_conv_layout = DIT_CONV_LAYOUT_BOTH;
  o->cuda_cudnn_verbose = 1;
  o->cuda_fused = o->cuda_vec = true;
  o->cuda_attn_version = 1;
  o->zimage_stack_qkv = true;
  o->tune_cache = true; /* tune_cache_path: "" (memset); only the environment names a folder */
}

/* A switch that is on unless the variable is "0". */
static void on_unless_zero(const char *name, bool *field) {
  const char *v = getenv(name);
  if (v) *field = strcmp(v, "0") != 0;
}

void dit_run_opts_from_env(dit_run_opts *o) {
  on_unless_zero("DIT_CUDA_GRAPHS", &o->cuda_graphs);
  on_unless_zero("DIT_CUDA_GEMM_TUNE", &o->cuda_gemm_tune);
  on_unless_zero("DIT_CUDA_CUDNN", &o->cuda_cudnn);
  on_unless_zero("DIT_CUDA_CUDNN_CONV_TUNE", &o->cuda_cudnn_conv_tune);
  on_unless_zero("DIT_CUDA_CUDNN_VERIFY", &o->cuda_cudnn_verify);
  on_unless_zero("DIT_CUDA_FUSED", &o->cuda_fused);
  on_unless_zero("DIT_CUDA_VEC", &o->cuda_vec);
  on_unless_zero("DIT_ZIMAGE_STACK_QKV", &o->zimage_stack_qkv);
  on_unless_zero("DIT_TUNE_CACHE", &o->tune_cache);
  /* no usable folder: the path stays "" (no cache file) */
  (void)dit_tune_cache_default_path(o->tune_cache_path, sizeof o->tune_cache_path, getenv("DITRUN_CACHE_DIR"),
                                    getenv("XDG_CACHE_HOME"), getenv("HOME"), NULL);
  const char *v = getenv("DIT_CUDA_GEMM_TUNE_LOG");
  if (v) o->cuda_gemm_tune_log = strcmp(v, "1") == 0;
  if ((v = getenv("DIT_CUDA_CUDNN_CONV_LAYOUT")))
    o->cuda_cudnn_conv_layout = !strcmp(v, "nhwc")   ? DIT_CONV_LAYOUT_NHWC
                                : !strcmp(v, "nchw") ? DIT_CONV_LAYOUT_NCHW
                                                     : DIT_CONV_LAYOUT_BOTH;
  if ((v = getenv("DIT_CUDA_CUDNN_VERBOSE"))) o->cuda_cudnn_verbose = atoi(v);
  if ((v = getenv("DIT_CUDA_ATTN")) && (!strcmp(v, "2") || !strcmp(v, "3"))) o->cuda_attn_version = v[0] - '0';
}

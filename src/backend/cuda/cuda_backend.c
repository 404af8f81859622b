/* The CUDA backend: creation (device, one owned stream, cuBLASLt handle, workspaces),
 * device memory through cudaMalloc / cudaMemcpyAsync on that stream, teardown, and the
 * argument checks shared by the op files. Ops take device pointers (device DIT_DEV_CUDA). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cudnn_sdpa.h"

#define CU_WORKSPACE_BYTES ((size_t)64 << 20)

dit_status cu_check(cudaError_t e, const char *op, const char *what, dit_error *err) {
  if (e == cudaSuccess) return DIT_OK;
  dit_status s = e == cudaErrorMemoryAllocation ? DIT_ERR_NOMEM : DIT_ERR_INTERNAL;
  if (e == cudaErrorInvalidValue) s = DIT_ERR_INVALID_ARG;
  return dit_errorf(err, s, "%s: %s: CUDA error %s (%s)", op, what, cudaGetErrorName(e), cudaGetErrorString(e));
}

dit_status cu_check_lt(cublasStatus_t st, const char *op, const char *what, dit_error *err) {
  if (st == CUBLAS_STATUS_SUCCESS) return DIT_OK;
  dit_status s = st == CUBLAS_STATUS_NOT_SUPPORTED ? DIT_ERR_UNSUPPORTED
                 : st == CUBLAS_STATUS_ALLOC_FAILED ? DIT_ERR_NOMEM
                                                    : DIT_ERR_INTERNAL;
  return dit_errorf(err, s, "%s: %s: cuBLASLt error %d (%s)", op, what, (int)st, cublasLtGetStatusString(st));
}

dit_status cu_scratch(dit_backend *be, size_t bytes, void **out, dit_error *err) {
  cu_impl *im = cu_im(be);
  if (bytes > im->scratch_bytes) {
    size_t n = bytes + bytes / 4;
    n = (n + 255) & ~(size_t)255;
    if (im->scratch) {
      DIT_TRY(cu_check(cudaStreamSynchronize(im->stream), "cuda scratch", "stream sync", err));
      cudaFree(im->scratch);
      im->scratch = NULL;
      im->scratch_bytes = 0;
    }
    im->moves++;
    DIT_TRY(cu_check(cudaMalloc(&im->scratch, n), "cuda scratch", "cudaMalloc", err));
    im->scratch_bytes = n;
  }
  *out = im->scratch;
  return DIT_OK;
}

dit_status cu_result_hash(cu_impl *im, const void *p, int elt, int64_t rows, int64_t cols, int64_t ld, uint64_t *h,
                          dit_error *err) {
  const char *op = "cuda result hash";
  unsigned long long v = 0;
  DIT_TRY(cu_check(cuk_hash(p, elt, rows, cols, ld, im->hash, im->stream), op, "hash kernel", err));
  DIT_TRY(cu_check(cudaMemcpyAsync(&v, im->hash, sizeof v, cudaMemcpyDeviceToHost, im->stream), op, "read back", err));
  DIT_TRY(cu_check(cudaStreamSynchronize(im->stream), op, "stream sync", err));
  *h = v;
  return DIT_OK;
}

dit_status cu_random_operands(cu_impl *im, int k, const int64_t *n, const int *dt, void **block, void **ptr,
                              dit_error *err) {
  const char *op = "cuda tuning operands";
  size_t off[8], total = 0;
  if (k < 1 || k > 8) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %d operands", op, k);
  for (int i = 0; i < k; i++)
    off[i] = total, total += ((size_t)n[i] * dit_dtype_size((dit_dtype)dt[i]) + 255) & ~(size_t)255;
  *block = NULL;
  cudaError_t e = cudaMalloc(block, total ? total : 256);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *block = NULL;
    return dit_errorf(err, DIT_ERR_NOMEM, "%s: no room for %zu bytes", op, total);
  }
  for (int i = 0; i < k; i++) {
    ptr[i] = (char *)*block + off[i];
    const uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
    dit_status s = cu_check(cuk_fill_random(ptr[i], dt[i], n[i], seed, im->stream), op, "fill", err);
    if (s != DIT_OK) return cudaFree(*block), *block = NULL, s;
  }
  return DIT_OK;
}

static dit_status cu_alloc(dit_backend *be, size_t bytes, void **out, dit_error *err) {
  *out = NULL;
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return dit_errorf(err, DIT_ERR_NOMEM, "cuda alloc: %zu bytes: CUDA error %s (%s)", bytes, cudaGetErrorName(e),
                      cudaGetErrorString(e));
  }
  *out = p;
  return DIT_OK;
}

static void cu_free(dit_backend *be, void *p) {
  if (p) cudaFree(p);
}

static dit_status cu_upload(dit_backend *be, void *dst, const void *src, size_t bytes, dit_error *err) {
  if (!bytes) return DIT_OK;
  if (!dst || !src) return dit_errorf(err, DIT_ERR_INVALID_ARG, "cuda upload: NULL pointer");
  return cu_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cu_im(be)->stream), "cuda upload",
                  "cudaMemcpyAsync", err);
}

/* Waits for the copy: the host buffer is valid when download returns. */
static dit_status cu_download(dit_backend *be, void *dst, const void *src, size_t bytes, dit_error *err) {
  if (!bytes) return DIT_OK;
  if (!dst || !src) return dit_errorf(err, DIT_ERR_INVALID_ARG, "cuda download: NULL pointer");
  cu_impl *im = cu_im(be);
  DIT_TRY(cu_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, im->stream), "cuda download",
                   "cudaMemcpyAsync", err));
  DIT_TRY(cu_check(cudaStreamSynchronize(im->stream), "cuda download", "stream sync", err));
  return cu_sdpa_check(im->sdpa, err); /* a key mask cuDNN could not express */
}

static dit_status cu_sync(dit_backend *be, dit_error *err) {
  DIT_TRY(cu_check(cudaStreamSynchronize(cu_im(be)->stream), "cuda sync", "stream sync", err));
  return cu_sdpa_check(cu_im(be)->sdpa, err);
}

static void cu_destroy(dit_backend *be) {
  cu_impl *im = cu_im(be);
  if (!im) return;
  cudaSetDevice(im->device);
  if (im->stream) cudaStreamSynchronize(im->stream);
  cu_tc_close(im);
  cu_sdpa_destroy(im->sdpa);
  cu_timer_destroy(im);
  for (int i = 0; i < im->n_plans; i++) {
    cu_plan *p = &im->plans[i];
    cublasLtMatmulDescDestroy(p->desc);
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->ld);
  }
  if (im->lt) cublasLtDestroy(im->lt);
  cudaFree(im->workspace);
  cudaFree(im->scratch);
  cudaFree(im->flag);
  cudaFree(im->hash);
  if (im->stream) cudaStreamDestroy(im->stream);
  free(im);
  be->impl = NULL;
}

static dit_backend_ops cu_ops_table(void) {
  dit_backend_ops o;
  memset(&o, 0, sizeof o);
  o.name = "cuda";
  o.alloc = cu_alloc;
  o.free = cu_free;
  o.upload = cu_upload;
  o.download = cu_download;
  o.sync = cu_sync;
  o.destroy = cu_destroy;
#define CU_OP(name, params, args) o.name = cu_##name;
  DIT_BACKEND_OPS(CU_OP)
#undef CU_OP
  cu_register_graph_ops(&o);
  cu_register_timer_ops(&o);
  return o;
}

/* The ops table lives in the backend allocation (no mutable globals). */
typedef struct cu_backend_box {
  dit_backend be;
  dit_backend_ops ops;
} cu_backend_box;

static dit_status cu_init(cu_impl *im, int device, dit_error *err) {
  const char *op = "cuda backend create";
  int n = 0;
  DIT_TRY(cu_check(cudaGetDeviceCount(&n), op, "cudaGetDeviceCount", err));
  if (device < 0 || device >= n)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: device %d out of range (%d CUDA devices)", op, device, n);
  DIT_TRY(cu_check(cudaSetDevice(device), op, "cudaSetDevice", err));
  im->device = device;
  im->attn_version = im->opts.cuda_attn_version;
  im->vec = im->opts.cuda_vec;
  im->fused = im->opts.cuda_fused;
  im->cudnn = im->opts.cuda_cudnn;
  im->graphs = im->opts.cuda_graphs;
  im->gemm_tune = im->opts.cuda_gemm_tune;
  DIT_TRY(cu_check(cudaDeviceGetAttribute(&im->max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), op,
                   "cudaDeviceGetAttribute", err));
  DIT_TRY(cu_check(cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking), op, "cudaStreamCreate", err));
  DIT_TRY(cu_check_lt(cublasLtCreate(&im->lt), op, "cublasLtCreate", err));
  DIT_TRY(cu_check(cudaMalloc(&im->workspace, CU_WORKSPACE_BYTES), op, "workspace cudaMalloc", err));
  im->workspace_bytes = CU_WORKSPACE_BYTES;
  DIT_TRY(cu_check(cudaMalloc((void **)&im->flag, sizeof(int)), op, "flag cudaMalloc", err));
  DIT_TRY(cu_check(cudaMemsetAsync(im->flag, 0, sizeof(int), im->stream), op, "cudaMemsetAsync", err));
  DIT_TRY(cu_check(cudaMalloc((void **)&im->hash, sizeof *im->hash), op, "hash cudaMalloc", err));
  cu_tc_open(im);
  return DIT_OK;
}

/* fp8 compute asked of device im->device: its tensor cores must have fp8 (compute capability 8.9+). */
static dit_status check_fp8(const cu_impl *im, dit_error *err) {
  int major = 0, minor = 0;
  DIT_TRY(cu_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, im->device), "cuda backend",
                   "compute capability", err));
  DIT_TRY(cu_check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, im->device), "cuda backend",
                   "compute capability", err));
  if (major * 10 + minor < 89)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "fp8 precision needs a GPU with fp8 tensor cores (compute capability "
                      "8.9 or later); device %d has %d.%d: use bf16", im->device, major, minor);
  return DIT_OK;
}

dit_status dit_backend_cuda_create(int device, dit_gpu_precision precision, const dit_run_opts *opts,
                                   dit_backend **out, dit_error *err) {
  *out = NULL;
  if (precision != DIT_GPU_PRECISION_BF16 && precision != DIT_GPU_PRECISION_FP8)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "gpu precision: unknown value %d (bf16 or fp8)", (int)precision);
  cu_backend_box *box = calloc(1, sizeof *box);
  cu_impl *im = calloc(1, sizeof *im);
  if (!box || !im) {
    free(box);
    free(im);
    return dit_errorf(err, DIT_ERR_NOMEM, "cuda backend create: out of memory");
  }
  box->ops = cu_ops_table();
  box->be.ops = &box->ops;
  box->be.n_threads = 1;
  box->be.impl = im;
  if (opts) im->opts = *opts;
  else dit_run_opts_default(&im->opts);
  dit_status s = cu_init(im, device, err);
  if (s == DIT_OK && precision == DIT_GPU_PRECISION_FP8) s = check_fp8(im, err);
  box->be.fp8 = precision == DIT_GPU_PRECISION_FP8;
  if (s != DIT_OK) {
    cudaGetLastError();
    cu_destroy(&box->be);
    free(box);
    return s;
  }
  *out = &box->be;
  return DIT_OK;
}

dit_status cu_check_strided4(const char *op, const char *name, const dit_tensor *t, dit_error *err) {
  DIT_TRY(dit_check_placed(op, name, t, DIT_DEV_CUDA, err));
  DIT_TRY(dit_check_dtype(op, name, t, CU_ACT_DTYPES, err));
  if (t->ndim != 4 || (t->stride[3] != 1 && t->shape[3] > 1))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s must be 4-D [B, S, H, D] with unit stride on D", op, name);
  if (dit_tensor_is_contiguous(t)) return DIT_OK; /* the ops check what they need of contiguous shapes */
  for (int i = 0; i < 3; i++)
    if (t->stride[i] < 0 || (t->stride[i] % 8 != 0 && t->shape[i] > 1))
      return dit_errorf(err, DIT_ERR_UNSUPPORTED,
                        "%s: %s strides must be non-negative multiples of 8 elements (16-byte rows), got %lld", op,
                        name, (long long)t->stride[i]);
  return DIT_OK;
}

int dit_cuda_device_count(void) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

dit_status dit_cuda_mem_info(int device, size_t *free_b, size_t *total_b, dit_error *err) {
  *free_b = *total_b = 0;
  int prev = 0;
  DIT_TRY(cu_check(cudaGetDevice(&prev), "cuda memory", "cudaGetDevice", err));
  DIT_TRY(cu_check(cudaSetDevice(device), "cuda memory", "cudaSetDevice", err));
  dit_status s = cu_check(cudaMemGetInfo(free_b, total_b), "cuda memory", "cudaMemGetInfo", err);
  cudaSetDevice(prev);
  return s;
}

/* CUDA kernels of the video ops: the im2col of conv3d (cuda_video.c runs the GEMM; pixel_norm
 * shares channel_rms_norm's kernel in k_norm.cu). */
#include "backend/cuda/cu_common.cuh"
#include "backend/cuda/cuda_internal.h"

#define GS_LOOP(i, n) for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); \
                           i += (int64_t)gridDim.x * blockDim.x)

/* col[k, j] for output positions p0 + j (j < np) of one item x [Ci, T, H, W]; row k is the
 * kernel tap (ci, kz, ky, kx) in w's [Co, Ci, kt, kh, kw] order; zero outside the input. */
template <typename C, typename X>
__global__ void k_im2col3d(C *col, const X *x, cu_conv3d_geom g, int64_t p0, int64_t np, int64_t n) {
  GS_LOOP(i, n) {
    const int64_t j = i % np, kk = i / np;
    const int kx = (int)(kk % g.kw), ky = (int)((kk / g.kw) % g.kh), kz = (int)((kk / ((int64_t)g.kw * g.kh)) % g.kt);
    const int64_t ci = kk / ((int64_t)g.kw * g.kh * g.kt);
    const int64_t p = p0 + j, ox = p % g.Wo, oy = (p / g.Wo) % g.Ho, oz = p / (g.Wo * g.Ho);
    const int64_t iz = oz - g.pt + kz, iy = oy - g.ph + ky, ix = ox - g.pw + kx;
    float v = 0.0f;
    if (iz >= 0 && iz < g.T && iy >= 0 && iy < g.H && ix >= 0 && ix < g.W)
      v = cu_ld(x, ((ci * g.T + iz) * g.H + iy) * g.W + ix);
    cu_st(col, i, v);
  }
}

extern "C" cudaError_t cuk_im2col3d(void *col, int cdt, const void *x, int xdt, const cu_conv3d_geom *g, int64_t p0,
                                    int64_t np, cudaStream_t s) {
  const int64_t n = g->Ci * g->kt * g->kh * g->kw * np;
  if (n <= 0) return cudaSuccess;
  CU_DISPATCH(cdt, TC, CU_DISPATCH(xdt, TX, k_im2col3d<TC, TX><<<cu_blocks(n, 256), 256, 0, s>>>(
                                               (TC *)col, (const TX *)x, *g, p0, np, n)));
  return cudaGetLastError();
}

// CPU stand-ins for the CUDA builtins the emulated kernels use (see run.sh).
// CPU emulation of the few CUDA builtins k_fused.cu uses: one std::thread per CUDA thread of a block,
// __syncthreads and __shfl_xor_sync via a block barrier (all threads call them uniformly in these kernels).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <barrier>
#include <thread>
#include <vector>
#include <cmath>
#include <cstring>
#define __launch_bounds__(...)
inline float rsqrtf(float v) { return 1.0f / sqrtf(v); }
struct dim3e { unsigned x = 1, y = 1, z = 1; };
extern thread_local dim3e threadIdx, blockIdx;
extern dim3e blockDim, gridDim;
extern std::barrier<> *g_bar;
extern float *g_slot;
inline void __syncthreads() { g_bar->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int o) {
  g_slot[threadIdx.x] = v;
  g_bar->arrive_and_wait();
  float r = g_slot[threadIdx.x ^ o];
  g_bar->arrive_and_wait();
  return r;
}

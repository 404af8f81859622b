/* The activation functions, written once for every backend: included by host C (the CPU
 * backend) and by CUDA device code (cu_common.cuh). `a` is a dit_act value (backend.h):
 * 0 none, 1 SiLU, 2 exact (erf) GELU, 3 tanh-approximated GELU, 4 sigmoid. */
#ifndef DIT_BACKEND_ACT_MATH_H
#define DIT_BACKEND_ACT_MATH_H

#include <math.h>

#ifdef __CUDACC__
#define DIT_ACT_FN __host__ __device__ __forceinline__
#else
#define DIT_ACT_FN static inline
#endif

DIT_ACT_FN float dit_act_apply(float v, int a) {
  switch (a) {
    case 1: return v / (1.0f + expf(-v));
    case 2: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    case 3: {
      float u = 0.79788456080286536f * (v + 0.044715f * v * v * v);
      return 0.5f * v * (1.0f + tanhf(u));
    }
    case 4: return 1.0f / (1.0f + expf(-v));
    default: return v;
  }
}

#endif

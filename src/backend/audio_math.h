/* The elementwise functions of the audio ops (the unary op's dit_unary functions and snake-beta),
 * written once for every backend: included by host C (the CPU backend) and by CUDA device code
 * (k_audio.cu), as act_math.h is. */
#ifndef DIT_BACKEND_AUDIO_MATH_H
#define DIT_BACKEND_AUDIO_MATH_H

#include <math.h>

#include "backend/act_math.h"

/* fn is a dit_unary value (backend.h): 0 leaky ReLU (slope a), 1 tanh, 2 clamp to [a, b], 3 log of
 * the clamp from below at a. */
DIT_ACT_FN float dit_unary_apply(float v, int fn, float a, float b) {
  switch (fn) {
    case 0: return v > 0.0f ? v : v * a;
    case 1: return tanhf(v);
    case 2: return v < a ? a : (v > b ? b : v);
    case 3: return logf(v < a ? a : v);
    default: return v;
  }
}

/* Snake-beta of v with the channel's alpha and inv = 1 / (beta + eps): v + inv * sin(v alpha)^2. */
DIT_ACT_FN float dit_snake_apply(float v, float alpha, float inv) {
  const float s = sinf(v * alpha);
  return v + inv * (s * s);
}

#endif

/* SplitMix64's output function: a fast, well-mixed 64-bit hash, what ditrun's
 * deterministic random weights and benchmark inputs are drawn from. */
#ifndef DIT_CORE_SPLITMIX_H
#define DIT_CORE_SPLITMIX_H

#include <stdint.h>

#define DIT_SPLITMIX64_GAMMA 0x9E3779B97F4A7C15ull

/* The mix of x + gamma (SplitMix64's next output from state x). */
static inline uint64_t dit_splitmix64(uint64_t x) {
  x += DIT_SPLITMIX64_GAMMA;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

#endif

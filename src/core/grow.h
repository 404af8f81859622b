/* Growable arrays: the one way the library makes room for one more element. */
#ifndef DIT_CORE_GROW_H
#define DIT_CORE_GROW_H

#include <stdint.h>
#include <stdlib.h>

/* Returns arr with room for element n: when n == *cap it is reallocated to twice *cap
 * elements of elem bytes (`first` when *cap is 0) and *cap updated. NULL when out of memory
 * or the size overflows (arr and *cap unchanged, still valid). */
static inline void *dit_grow(void *arr, size_t n, size_t *cap, size_t elem, size_t first) {
  if (n < *cap) return arr;
  size_t c = *cap ? 2 * *cap : first;
  if (c <= n || !elem || c > SIZE_MAX / elem) return NULL;
  void *p = realloc(arr, c * elem);
  if (p) *cap = c;
  return p;
}

#endif

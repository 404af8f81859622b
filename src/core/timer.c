/* Timers and peak RSS (see timer.h). */
#include "core/timer.h"

#include <stdio.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

double dit_time_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t dit_peak_rss_bytes(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
#if defined(__APPLE__)
  return (size_t)ru.ru_maxrss; /* macOS reports bytes */
#else
  return (size_t)ru.ru_maxrss * 1024u; /* Linux reports KiB */
#endif
}

size_t dit_rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  const int got = fscanf(f, "%llu %llu", &size, &resident);
  fclose(f);
  const long page = sysconf(_SC_PAGESIZE);
  return got == 2 && page > 0 ? (size_t)resident * (size_t)page : 0;
}

void dit_heap_trim(void) {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

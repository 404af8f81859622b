/* Timers and peak RSS (see timer.h). */
#include "core/timer.h"

#include <sys/resource.h>
#include <time.h>

double dit_time_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t dit_peak_rss_bytes(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return (size_t)ru.ru_maxrss * 1024u; /* Linux reports KiB */
}

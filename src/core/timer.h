/* Wall-clock timing and memory high-water marks, for progress lines, stage summaries
 * and benchmarks. */
#ifndef DIT_CORE_TIMER_H
#define DIT_CORE_TIMER_H

#include <stddef.h>

/* Seconds on a monotonic clock. */
double dit_time_now(void);
/* Peak resident set size of this process in bytes (0 if unknown). */
size_t dit_peak_rss_bytes(void);

#endif

/* Wall-clock timing and memory high-water marks, for progress lines, stage summaries
 * and benchmarks. */
#ifndef DIT_CORE_TIMER_H
#define DIT_CORE_TIMER_H

#include <stddef.h>

/* Seconds on a monotonic clock. */
double dit_time_now(void);
/* Peak resident set size of this process in bytes (0 if unknown). */
size_t dit_peak_rss_bytes(void);
/* Resident set size of this process now, in bytes (0 where /proc/self/statm is missing). */
size_t dit_rss_bytes(void);
/* Gives the heap's free memory back to the system (glibc's malloc_trim; nothing elsewhere):
 * after a large transient, such as a parsed tokenizer.json, so it does not stay resident. */
void dit_heap_trim(void);

#endif

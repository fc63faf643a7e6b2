#ifndef SLOT_CLOCK_H
#define SLOT_CLOCK_H

#include <stdint.h>

/* Monotonic time in microseconds: for timeouts, RTTs and rate limits. */
uint64_t clock_mono_us(void);

/* Wall-clock time in microseconds since the Unix epoch: only for message
 * timestamps, which must be comparable between hosts. */
uint64_t clock_real_us(void);

#endif

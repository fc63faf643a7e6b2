/* Monotonic and wall-clock time in microseconds. */

#include <stdint.h>
#include <time.h>

#include "slot/clock.h"

static uint64_t
clock_us(clockid_t id)
{
	struct timespec ts;

	/* Cannot fail for these clocks on Linux; keep the result defined. */
	if (clock_gettime(id, &ts) == -1)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

uint64_t
clock_mono_us(void)
{
	return clock_us(CLOCK_MONOTONIC);
}

uint64_t
clock_real_us(void)
{
	return clock_us(CLOCK_REALTIME);
}

/* SPDX-License-Identifier: MIT */
/*
 * The clock the waiter reads: the real one, or, while frozen_ns is set, that
 * instant, as a clock too coarse to move between two reads would give it.
 * Replaces clock_gettime for the whole test binary: include it once.
 */
#ifndef RDMAQ_TEST_FROZEN_CLOCK_H
#define RDMAQ_TEST_FROZEN_CLOCK_H

#include <dlfcn.h>
#include <stdint.h>
#include <time.h>

static int64_t frozen_ns;

int clock_gettime(clockid_t id, struct timespec *ts)
{
	static int (*real)(clockid_t, struct timespec *);

	if (frozen_ns && id == CLOCK_MONOTONIC) {
		*ts = (struct timespec){ .tv_sec = frozen_ns / 1000000000LL,
					 .tv_nsec = frozen_ns % 1000000000LL };
		return 0;
	}
	if (!real)
		real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
	return real(id, ts);
}

#endif

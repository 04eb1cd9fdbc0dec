/* SPDX-License-Identifier: MIT */
/*
 * busy.c replaced by a CPU that is never busy and ignores preemptions, so the
 * machine's load cannot change what a test of the waiting sees.  Defines the
 * two functions for the whole test binary: include it once, instead of busy.c.
 */
#ifndef RDMAQ_TEST_NEVER_BUSY_H
#define RDMAQ_TEST_NEVER_BUSY_H

#include <stdbool.h>
#include <stdint.h>

#include "busy.h"

bool rdmaq_cpu_busy(int64_t now_ns)
{
	(void)now_ns;
	return false;
}

bool rdmaq_cpu_busy_preempted(int64_t now_ns)
{
	(void)now_ns;
	return true; /* a gap in the clock is a preemption */
}

#endif

/* SPDX-License-Identifier: MIT */
/*
 * busy.c replaced by a CPU the test says is busy or not (cpu_busy), that
 * takes any gap in the clock for a preemption, so the machine's load cannot
 * change what a test of the waiting sees.  Defines the two functions for the
 * whole test binary: include it once, instead of busy.c.
 */
#ifndef RDMAQ_TEST_CHOSEN_BUSY_H
#define RDMAQ_TEST_CHOSEN_BUSY_H

#include <stdbool.h>
#include <stdint.h>

#include "busy.h"

static bool cpu_busy; /* what rdmaq_cpu_busy() says: the tests choose */

bool rdmaq_cpu_busy(int64_t now_ns)
{
	(void)now_ns;
	return cpu_busy;
}

bool rdmaq_cpu_busy_preempted(int64_t now_ns)
{
	(void)now_ns;
	return true; /* a gap in the clock is a preemption */
}

#endif

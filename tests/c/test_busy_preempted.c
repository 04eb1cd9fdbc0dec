/* SPDX-License-Identifier: MIT */
/*
 * busy.c after a spin lost its CPU (rdmaq_cpu_busy_preempted): the next verdict
 * weighs only what came after the preemption.  Linked
 * with this file's rdmaq_thread_schedstat() and the other readers of schedstat.h,
 * so the test chooses what the scheduler did; the clock is passed in, so nothing is timed.
 */
#include "busy.h"
#include "check.h"
#include "schedstat.h"

static uint64_t ran, delayed, slices; /* what the fake schedstat says */

bool rdmaq_thread_schedstat(uint64_t *ran_ns, uint64_t *delayed_ns, uint64_t *slices_run)
{
	*ran_ns = ran;
	*delayed_ns = delayed;
	*slices_run = slices;
	return true;
}

int rdmaq_cpus_crowded(void)
{
	return 1; /* others are runnable: the delay decides */
}

int64_t rdmaq_cpus_idle_ns(void)
{
	return -1; /* unknown: the running count says */
}

int64_t rdmaq_thread_preemptions(void)
{
	return -1; /* unknown: every gap is a preemption */
}

#define MS 1000000LL

/*
 * Running before the preemption dilutes no wait after it: 100 ms run before the
 * spin lost its CPU must not hide the 2 ms waited in the 12 ms that came after,
 * which is contention.
 */
static void test_the_running_before_a_preemption_dilutes_no_wait_after_it(void)
{
	int64_t now = 1000 * MS;

	ran = 100 * MS;
	CHECK(!rdmaq_cpu_busy(now));
	ran += 100 * MS, slices += 100; /* not judged before the spin is preempted */
	rdmaq_cpu_busy_preempted(now + 1);
	ran += 10 * MS;
	delayed += 2 * MS; /* a sixth of what came after, in no new slice */
	CHECK(rdmaq_cpu_busy(now + 1 + RDMAQ_BUSY_HOLD_NS));
}

int main(void)
{
	test_the_running_before_a_preemption_dilutes_no_wait_after_it();
	return check_report("busy_preempted");
}

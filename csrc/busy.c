/* SPDX-License-Identifier: MIT */
/* Is this thread's CPU contended?  See busy.h. */
#include "busy.h"
#include "schedstat.h"

/* Per thread: the verdict is about the CPU this thread gets. */
static __thread int64_t busy_checked = INT64_MIN;
static __thread uint64_t ran_before, delayed_before; /* at the last verdict */
static __thread bool busy_state;
static __thread int64_t busy_hold_until = INT64_MIN;

bool rdmaq_busy_verdict(uint64_t ran_ns, uint64_t delayed_ns, int (*crowded)(void))
{
	if (delayed_ns * RDMAQ_BUSY_DELAY_SHARE <= ran_ns + delayed_ns)
		return false;
	/* Waited: for others, or for a halted vCPU to wake (then nothing else runs). */
	return crowded() != 0; /* unknown (<0): the delay decides */
}

bool rdmaq_cpu_busy(int64_t now)
{
	uint64_t ran, delayed, slices;

	if (now < busy_hold_until ||
	    (busy_checked != INT64_MIN && now - busy_checked < RDMAQ_BUSY_PERIOD_NS))
		return busy_state;
	busy_checked = now;
	if (!rdmaq_thread_schedstat(&ran, &delayed, &slices)) {
		busy_state = false; /* unknown: not busy, until a verdict says otherwise */
		return false;
	}
	/* Too little seen since the last verdict (the first judges the thread's life). */
	if (ran - ran_before + delayed - delayed_before < (uint64_t)RDMAQ_BUSY_MIN_SEEN_NS)
		return busy_state;
	busy_state =
		rdmaq_busy_verdict(ran - ran_before, delayed - delayed_before, rdmaq_cpus_crowded);
	if (busy_state)
		busy_hold_until = now + RDMAQ_BUSY_HOLD_NS;
	ran_before = ran;
	delayed_before = delayed;
	return busy_state;
}

void rdmaq_cpu_busy_preempted(int64_t now)
{
	uint64_t ran, delayed, slices;

	busy_state = true;
	busy_hold_until = now + RDMAQ_BUSY_HOLD_NS;
	/* The next verdict judges what comes after the hold. */
	if (rdmaq_thread_schedstat(&ran, &delayed, &slices)) {
		ran_before = ran;
		delayed_before = delayed;
	}
}

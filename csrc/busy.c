/* SPDX-License-Identifier: MIT */
/* Is this thread's CPU contended?  See busy.h. */
#include "busy.h"
#include "schedstat.h"

/* Per thread: the verdict is about the CPU this thread gets. */
static __thread int64_t busy_checked = INT64_MIN;
static __thread uint64_t ran_before, delayed_before; /* at the last verdict */
static __thread bool busy_state;
static __thread int64_t busy_hold_until = INT64_MIN;
/* The CPUs' idle time at the last verdict (-1: unknown) and when; at this one, and now. */
static __thread int64_t idle_before = -1, idle_before_at, idle_now, idle_now_at;
/* The thread's involuntary switches at the last look (-1: none yet). */
static __thread int64_t preemptions_seen = -1;

bool rdmaq_busy_verdict(uint64_t ran_ns, uint64_t delayed_ns, int (*crowded)(void))
{
	if (delayed_ns * RDMAQ_BUSY_DELAY_SHARE <= ran_ns + delayed_ns)
		return false;
	/* Waited: for others, or for a halted vCPU to wake (then its CPU was idle). */
	return crowded() != 0; /* unknown (<0): the delay decides */
}

/*
 * Did others keep the CPUs since the last verdict?  Less than half a CPU idle on average
 * says so; with the idle time unknown at either end, the running count says.
 */
static int busy_crowded(void)
{
	if (idle_before < 0 || idle_now < idle_before)
		return rdmaq_cpus_crowded();
	return (idle_now - idle_before) * 2 < idle_now_at - idle_before_at;
}

/* What the next verdict is judged from: the counters and the idle time now. */
static void busy_start_period(uint64_t ran, uint64_t delayed, int64_t idle, int64_t now)
{
	ran_before = ran;
	delayed_before = delayed;
	idle_before = idle;
	idle_before_at = now;
}

bool rdmaq_cpu_busy(int64_t now)
{
	uint64_t ran, delayed, slices;

	if (now < busy_hold_until ||
	    (busy_checked != INT64_MIN && now - busy_checked < RDMAQ_BUSY_PERIOD_NS))
		return busy_state;
	busy_checked = now;
	preemptions_seen = rdmaq_thread_preemptions(); /* a later gap's baseline */
	if (!rdmaq_thread_schedstat(&ran, &delayed, &slices)) {
		busy_state = false; /* unknown: not busy, until a verdict says otherwise */
		return false;
	}
	/* Too little seen since the last verdict (the first judges the thread's life). */
	if (ran - ran_before + delayed - delayed_before < (uint64_t)RDMAQ_BUSY_MIN_SEEN_NS)
		return busy_state;
	idle_now = rdmaq_cpus_idle_ns();
	idle_now_at = now;
	busy_state = rdmaq_busy_verdict(ran - ran_before, delayed - delayed_before, busy_crowded);
	if (busy_state)
		busy_hold_until = now + RDMAQ_BUSY_HOLD_NS;
	busy_start_period(ran, delayed, idle_now, now);
	return busy_state;
}

bool rdmaq_cpu_busy_preempted(int64_t now)
{
	uint64_t ran, delayed, slices;
	int64_t preemptions = rdmaq_thread_preemptions();

	/* No involuntary switch since the last look: no task here took the CPU, the host did. */
	if (preemptions >= 0 && preemptions == preemptions_seen)
		return false;
	preemptions_seen = preemptions;
	/* A task took the CPU while the CPUs had idle time to spare since the last verdict:
	 * one passing through (a waking writer, a kernel worker), not a crowd; the
	 * scheduler gives the spin a CPU back at once.  Spin on. */
	idle_now = rdmaq_cpus_idle_ns();
	idle_now_at = now;
	if (busy_crowded() == 0)
		return false;
	busy_state = true;
	busy_hold_until = now + RDMAQ_BUSY_HOLD_NS;
	/* The next verdict judges what comes after the hold. */
	if (rdmaq_thread_schedstat(&ran, &delayed, &slices))
		busy_start_period(ran, delayed, idle_now, now);
	return true;
}

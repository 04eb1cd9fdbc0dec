/* SPDX-License-Identifier: MIT */
/*
 * Is this thread's CPU contended?  Spinning only pays when it costs nobody
 * a CPU: a spinning waiter that others want the CPU from burns the slice it
 * will need when its message comes, then waits behind them.  Two signals,
 * both needed:
 *
 * - the thread's own run delay (/proc/thread-self/schedstat: time spent
 *   runnable without a CPU) over the last RDMAQ_BUSY_PERIOD_NS, against
 *   the time it ran: what the scheduler did to this thread, so CPU hogs
 *   that cannot take its CPU (SCHED_IDLE, another cgroup or session that
 *   gets its share elsewhere) do not count;
 * - more tasks runnable now than CPUs this thread may use (/proc/loadavg's
 *   running count, this thread included, against sched_getaffinity): run
 *   delay alone cannot tell contention from a wake-up on a VM, where the
 *   vCPU a sleeper wakes on may be halted and the host takes 100-300 µs to
 *   run it, counted as run delay on an idle machine.  Read only when the
 *   delay says busy.
 *
 * Either unreadable: schedstat's means "not busy" (spinning is bounded by
 * the adaptive budget anyway); the running count's leaves the delay to
 * decide alone.
 */
#ifndef RDMAQ_BUSY_H
#define RDMAQ_BUSY_H

#include <stdbool.h>
#include <stdint.h>

#define RDMAQ_BUSY_PERIOD_NS   20000000LL
/* Contended when the thread waited for a CPU more than 1/RDMAQ_BUSY_DELAY_SHARE of
 * the time it was runnable; judged once it was runnable RDMAQ_BUSY_MIN_SEEN_NS since
 * the last verdict (a thread that mostly sleeps is judged over several periods). */
#define RDMAQ_BUSY_DELAY_SHARE 8
#define RDMAQ_BUSY_MIN_SEEN_NS 1000000LL

/* A thread found busy, or whose spin lost its CPU, stays busy this long, whatever its
 * schedstat says meanwhile (sleeping, it preempts the hogs it would lose a spin to). */
#define RDMAQ_BUSY_HOLD_NS 1000000000LL

bool rdmaq_cpu_busy(int64_t now_ns);
/* This thread's spin lost its CPU at now_ns: others want it. */
void rdmaq_cpu_busy_preempted(int64_t now_ns);

/* The verdict on the growth of the thread's run time and run delay since the last one;
 * crowded: rdmaq_cpus_crowded()'s answer (asked only when the delay says busy). */
bool rdmaq_busy_verdict(uint64_t ran_ns, uint64_t delayed_ns, int (*crowded)(void));

#endif

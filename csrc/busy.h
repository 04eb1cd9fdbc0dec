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
 * - the CPUs it may use were short of idle time since the last verdict:
 *   less than half a CPU idle on average (/proc/uptime's idle time, summed
 *   over the CPUs).  Run delay alone cannot tell contention from a wake-up
 *   on a VM, where the vCPU a sleeper wakes on may be halted and the host
 *   takes 100-300 µs to run it, counted as run delay on an idle machine;
 *   but that vCPU was idle while the sleeper waited, where a contended one
 *   ran others.  Where the idle time does not say (a thread that may use
 *   only some of the CPUs: the file sums them all), more tasks runnable now
 *   than CPUs the thread may use (/proc/loadavg's running count, this
 *   thread included, against sched_getaffinity) decides instead: on a
 *   2-CPU VM the writer, the reader and one other task already outnumber
 *   the CPUs, so an idle reader judged by the count alone was busy on most
 *   waits.  Asked only when the delay says busy.
 *
 * A spin that loses its CPU (a gap in its clock) holds the thread busy,
 * unless no other task took the CPU (no involuntary switch of the thread
 * since the last look): the host ran something else on the vCPU (steal),
 * which spinning or not costs nobody here; or unless the CPUs were not
 * short of idle time since the last verdict (as above): a task passing
 * through took it (the writer waking, a kernel worker), and on an idle
 * 2-CPU VM one such switch held a reader busy, asleep, for a whole second.
 *
 * Unreadable: schedstat's means "not busy" (spinning is bounded by
 * the adaptive budget anyway); the idle time's and the running count's leave
 * the delay to decide alone; the switch count's makes every gap a preemption.
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
/* This thread's spin found a gap in its clock at now_ns: true when another task took its
 * CPU (then it is busy), false when none did (the host took the vCPU: spin on). */
bool rdmaq_cpu_busy_preempted(int64_t now_ns);

/* The verdict on the growth of the thread's run time and run delay since the last one;
 * crowded: whether others kept its CPUs (1), did not (0) or unknown (<0), asked only when
 * the delay says busy. */
bool rdmaq_busy_verdict(uint64_t ran_ns, uint64_t delayed_ns, int (*crowded)(void));

#endif

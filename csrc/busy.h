/* SPDX-License-Identifier: MIT */
/*
 * Is this thread's CPU contended?  Spinning only pays when it costs nobody
 * a CPU: a spinning waiter that others want the CPU from burns the slice it
 * will need when its message comes, then waits behind them.  The answer is
 * the thread's own run delay (/proc/thread-self/schedstat: time spent
 * runnable without a CPU) over the last RDMAQ_BUSY_PERIOD_NS, against the
 * time it ran: what the scheduler did to this thread, so CPU hogs that
 * cannot take its CPU (SCHED_IDLE, another cgroup or session that gets
 * its share elsewhere) do not count, where the machine-wide count of
 * runnable tasks (/proc/loadavg) would.
 */
#ifndef RDMAQ_BUSY_H
#define RDMAQ_BUSY_H

#include <stdbool.h>
#include <stdint.h>

#define RDMAQ_BUSY_PERIOD_NS   20000000LL
/* Contended when the thread waited for a CPU more than 1/RDMAQ_BUSY_DELAY_SHARE of
 * the time it was runnable; judged once it was runnable RDMAQ_BUSY_MIN_SEEN_NS since
 * the last verdict (a thread that mostly sleeps is judged over several periods).  Up to
 * RDMAQ_BUSY_WAKE_NS of each wait for a CPU is a wake-up's, not contention's: in a VM
 * the vCPU a sleeper wakes on may be halted, and the host takes 100-300 µs to run it,
 * which the guest counts as run delay on an idle machine. */
#define RDMAQ_BUSY_DELAY_SHARE 8
#define RDMAQ_BUSY_MIN_SEEN_NS 1000000LL
#define RDMAQ_BUSY_WAKE_NS     300000ULL

/* A thread found busy, or whose spin lost its CPU, stays busy this long, whatever its
 * schedstat says meanwhile (sleeping, it preempts the hogs it would lose a spin to). */
#define RDMAQ_BUSY_HOLD_NS 1000000000LL

bool rdmaq_cpu_busy(int64_t now_ns);
/* This thread's spin lost its CPU at now_ns: others want it. */
void rdmaq_cpu_busy_preempted(int64_t now_ns);

/* The verdict on the growth of the thread's run time, run delay and timeslices since
 * the last one. */
bool rdmaq_busy_verdict(uint64_t ran_ns, uint64_t delayed_ns, uint64_t slices);

#endif

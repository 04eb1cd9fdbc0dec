/* SPDX-License-Identifier: MIT */
/*
 * What the scheduler does to the calling thread, for busy.c: its time on a
 * CPU, its time runnable without one and its timeslices
 * (/proc/thread-self/schedstat), how often another task took its CPU
 * (getrusage), whether more tasks are runnable than CPUs it may use
 * (/proc/loadavg, sched_getaffinity) and how long those CPUs were idle
 * (/proc/uptime).
 */
#ifndef RDMAQ_SCHEDSTAT_H
#define RDMAQ_SCHEDSTAT_H

#include <stdbool.h>
#include <stdint.h>

/* Since the thread started: ns on a CPU, ns runnable without one, and how many times it
 * was put on a CPU; false when the kernel does not say. */
bool rdmaq_thread_schedstat(uint64_t *ran_ns, uint64_t *delayed_ns, uint64_t *slices);

/* 1 when more tasks are runnable now, machine-wide and this thread included, than CPUs
 * this thread may run on; 0 when not; -1 when either cannot be read. */
int rdmaq_cpus_crowded(void);

/* How often, since it started, the thread lost its CPU while it could run (involuntary
 * context switches); -1 when the kernel does not say. */
int64_t rdmaq_thread_preemptions(void);

/* The time the CPUs this thread may use were idle since boot, summed over them, in ns (10 ms
 * steps); -1 when it cannot be read, or when the thread may use only some of the online CPUs
 * (the file sums them all). */
int64_t rdmaq_cpus_idle_ns(void);

#endif

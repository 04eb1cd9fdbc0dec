/* SPDX-License-Identifier: MIT */
/*
 * A short scheduler slice while blocked.
 *
 * Under CPU contention a woken reader waits behind whatever holds its CPU
 * until that task's slice ends (EEVDF: ~3 ms on 16 CPUs, and the tick is
 * 4 ms at HZ=250).  Since Linux 6.12 a SCHED_OTHER thread may ask for its
 * own, shorter slice through sched_attr.sched_runtime, without privilege,
 * and a woken task with a shorter slice preempts the running one
 * (PREEMPT_SHORT).  So a waiter asks for a short slice just before it
 * first blocks, and by default keeps it.  300 µs by default rather than the
 * kernel's 100 µs minimum: a woken reader that has run out of its slice is
 * preempted by the hogs while it unpickles its message (seen in scheduler
 * traces).  But where a queue's readers and writer outnumber the CPUs,
 * readers woken together share a CPU, and there 100 µs halved the 10 ms
 * pace's p99 (rdmaq/policy.py asks for it; docs/benchmarks/waiting.md).
 * Giving the thread its own slice back after each wake-up (restore) was
 * measured too (docs/benchmarks/micro-h200.md): a reader that is then
 * preempted by a sibling woken on its CPU queues behind the CPU hogs for a
 * whole slice, and at a 1 ms pace that left 3 ms tails where keeping the
 * short slice had 0.1-0.2 ms.
 *
 * Older kernels ignore sched_runtime for SCHED_OTHER; that is detected
 * once per process and the request is then silently off (stats and
 * `rdmaq doctor` say so).  Threads with another policy are left alone.
 */
#ifndef RDMAQ_SLICE_H
#define RDMAQ_SLICE_H

#include <stdbool.h>
#include <stdint.h>

/* struct sched_attr of sched_setattr(2), SCHED_ATTR_SIZE_VER1. */
struct rdmaq_sched_attr {
	uint32_t size;
	uint32_t sched_policy;
	uint64_t sched_flags;
	int32_t sched_nice;
	uint32_t sched_priority;
	uint64_t sched_runtime;
	uint64_t sched_deadline;
	uint64_t sched_period;
	uint32_t sched_util_min;
	uint32_t sched_util_max;
};

struct rdmaq_slice {
	uint32_t want_ns; /* 0: never ask */
	bool restore;	  /* the thread's own slice back after every wake-up */
	bool applied;	  /* asked for in the current block */
};

/* Ask for the short slice before blocking: 1 applied, 0 not (off, unsupported, other policy). */
int rdmaq_slice_enter(struct rdmaq_slice *s);
/* After waking: give the thread its own slice back if `restore`, else keep the short one. */
void rdmaq_slice_leave(struct rdmaq_slice *s);
/* The slice in effect for this endpoint's blocks: want_ns, or 0 when the kernel refuses it. */
uint32_t rdmaq_slice_effective(const struct rdmaq_slice *s);

#endif

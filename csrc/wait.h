/* SPDX-License-Identifier: MIT */
/*
 * Waiting for a condition on shared memory: anticipate, spin, then block
 * (the strategy is described in wait.c).  The ring engine waits through
 * this API; transports supply how to block (struct rdmaq_wait_ops).
 */
#ifndef RDMAQ_WAIT_H
#define RDMAQ_WAIT_H

#include <stdbool.h>
#include <stdint.h>

#include "cadence.h"
#include "rdmaq.h"
#include "slice.h"

#define RDMAQ_PEER_CHECK_NS	100000000LL	   /* liveness check period when blocked */
#define RDMAQ_MIN_SPIN_NS	1000U		   /* the adaptive spin never shrinks below */
#define RDMAQ_SETTLE_FAR_NS	3000000LL	   /* settle_far_ns of a waiter never configured */
#define RDMAQ_MAX_SETTLE_FAR_NS 1000000000000000LL /* wait_config.settle_far_ns at most */

/*
 * How an endpoint blocks.  prepare() announces the sleep (so peers know to
 * wake us), the caller re-checks its condition, then block() sleeps until a
 * wake-up (0), the timeout (1) or an interrupt (<0); finish() retracts the
 * announcement.
 * check_peer() reports a dead peer as -EOWNERDEAD with rdmaq_errmsg() set.
 */
struct rdmaq_wait_ops {
	int (*prepare)(void *ep);
	int (*block)(void *ep, int64_t timeout_ns);
	void (*finish)(void *ep);
	int (*check_peer)(void *ep);
};

/* How the last wait ended (rdmaq_trace.how). */
enum rdmaq_wait_how {
	RDMAQ_HOW_NONE = 0,
	RDMAQ_HOW_READY,  /* the condition already held */
	RDMAQ_HOW_SPIN,	  /* met during the adaptive spin */
	RDMAQ_HOW_WINDOW, /* met in a window predicted from the cadence */
	RDMAQ_HOW_WOKEN,  /* met after blocking in the kernel */
};

struct rdmaq_waiter {
	const struct rdmaq_wait_ops *ops;
	void *ep; /* what the ops are called with: the endpoint, unless its transport says */
	/* Runs once before the first block of a wait (a reader returns credit). */
	int (*before_block)(struct rdmaq_waiter *wt);
	uint32_t spin_max_ns;
	uint32_t spin_ns;	   /* adaptive budget, in [spin_min, spin_max] */
	int cancelled;		   /* set by another thread: fail with -ECANCELED */
	bool anticipate;	   /* readers: use the cadence (rdmaq_wait_next) */
	bool eintr_on_main_thread; /* return -EINTR every RDMAQ_PEER_CHECK_NS on the main thread */
	bool busy_noted;	   /* the nap before this wait counted stats->busy already */
	/* Settle the scheduler lag before blocking when the next message is this far (0: never). */
	int64_t settle_far_ns;
	/* Experiment (wait_config.busy_spin_ns): spin this long even on a contended CPU. */
	uint32_t busy_spin_ns;
	/* Policy "auto": spin up to this long while the CPU is not contended and the next
	 * message can come within it, in place of napping (0: policy "efficient"). */
	uint32_t free_spin_ns;
	/* Experiment (wait_config.free_spin_busy): the free spin also on a contended CPU,
	 * through preemptions, as vLLM's readers spin. */
	bool free_spin_busy;
	struct rdmaq_slice slice;
	int64_t met_ns; /* when the last wait's condition was seen to hold */
	/* When check_peer last ran (0: never): a wait that blocks or times out checks
	 * again once it is RDMAQ_PEER_CHECK_NS old, whatever its callers' timeouts. */
	int64_t peer_checked_ns;
	enum rdmaq_wait_how how;
	struct rdmaq_stats *stats;
};

/* A waiter for endpoint `ep`, spinning up to spin_ns, counting into *stats. */
void rdmaq_waiter_init(struct rdmaq_waiter *wt, const struct rdmaq_wait_ops *wops, void *ep,
		       uint32_t spin_ns, struct rdmaq_stats *stats);
/* Apply a user's wait configuration; -EINVAL (nothing changed) when it is out of range.
 * The core reads no environment: rdmaq's Python layer parses the RDMAQ_* variables
 * (rdmaq/settings.py) before it creates or attaches anything, and passes them here. */
int rdmaq_waiter_configure(struct rdmaq_waiter *wt, const struct rdmaq_wait_config *wc);

/*
 * Returns 1 when the condition holds, 0 to keep waiting, or a negative
 * errno to stop.
 */
typedef int (*rdmaq_cond_fn)(void *arg);

/*
 * 0 when cond holds, else a negative errno (-ETIMEDOUT, -EINTR, ...).  A wait
 * that would time out first checks the peer if the endpoint's last check is
 * RDMAQ_PEER_CHECK_NS old: a dead peer is -EOWNERDEAD, for a caller polling
 * with short timeouts as for one that blocks.
 */
int rdmaq_wait(struct rdmaq_waiter *wt, rdmaq_cond_fn cond, void *arg, int64_t deadline_ns);
/*
 * The same, first trying a window predicted by `cad` (may be NULL), or the
 * window `planned` by rdmaq_wait_prepare_window (may be NULL).
 */
int rdmaq_wait_next(struct rdmaq_waiter *wt, struct rdmaq_cadence *cad,
		    const struct rdmaq_cad_window *planned, rdmaq_cond_fn cond, void *arg,
		    int64_t deadline_ns);
/*
 * Nap until the window `cad` predicts opens (policy "auto" on a free CPU:
 * spin to RDMAQ_WARM_LEAD_NS before it, time for the caller to warm its
 * caches): 1 when the window is near and cond does not hold yet (*win says
 * until when to spin), 0 when there is no window or cond holds, <0 error.
 */
int rdmaq_wait_prepare_window(struct rdmaq_waiter *wt, struct rdmaq_cadence *cad,
			      rdmaq_cond_fn cond, void *arg, int64_t deadline_ns,
			      struct rdmaq_cad_window *win);

/* CLOCK_MONOTONIC in ns, the clock of every deadline and stamp. */
int64_t rdmaq_now_ns(void);
/* The deadline `timeout_ns` from now; -1 (never) for a negative timeout. */
int64_t rdmaq_deadline(int64_t timeout_ns);

#endif

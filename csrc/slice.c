/* SPDX-License-Identifier: MIT */
/* A short scheduler slice while blocked: see slice.h for why. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "error.h"
#include "rdmaq.h"
#include "slice.h"

#define RDMAQ_SCHED_FLAG_RESET_ON_FORK 0x01ULL

/* Process-wide: 0 not probed yet, 1 honoured, -errno refused or ignored. */
static int rdmaq_slice_state;
static char rdmaq_slice_why[160];
/* This thread was left with the short slice (kept): skip the syscalls. */
static __thread uint32_t rdmaq_thread_slice_ns;
/* The thread's own attributes, from before its first short slice: what a restore gives back. */
static __thread struct rdmaq_sched_attr rdmaq_thread_saved;

static int sched_getattr_self(struct rdmaq_sched_attr *a)
{
	memset(a, 0, sizeof(*a));
	if (syscall(SYS_sched_getattr, 0, a, sizeof(*a), 0) < 0)
		return -errno;
	return 0;
}

/*
 * With `short_slice`, also reset-on-fork: the slice is for this waiting
 * thread, not for the threads and processes it starts (they would inherit it).
 */
static int sched_setattr_self(const struct rdmaq_sched_attr *cur, uint64_t runtime_ns,
			      bool short_slice)
{
	struct rdmaq_sched_attr a = {
		.size = sizeof(a),
		.sched_policy = cur->sched_policy,
		.sched_flags = (cur->sched_flags & RDMAQ_SCHED_FLAG_RESET_ON_FORK) |
			       (short_slice ? RDMAQ_SCHED_FLAG_RESET_ON_FORK : 0),
		.sched_nice = cur->sched_nice,
		.sched_runtime = runtime_ns,
	};

	if (syscall(SYS_sched_setattr, 0, &a, 0) < 0)
		return -errno;
	return 0;
}

static bool fair_policy(uint32_t policy)
{
	return policy == SCHED_OTHER || policy == SCHED_BATCH;
}

/* First use in this process: does the kernel honour sched_runtime for SCHED_OTHER? */
static int slice_probe(const struct rdmaq_sched_attr *cur, uint32_t want_ns)
{
	struct rdmaq_sched_attr got;
	int ret;

	ret = sched_setattr_self(cur, want_ns, true);
	if (ret) {
		snprintf(rdmaq_slice_why, sizeof(rdmaq_slice_why),
			 "sched_setattr(sched_runtime=%u ns) refused: %s", want_ns, strerror(-ret));
		return ret;
	}
	ret = sched_getattr_self(&got);
	if (ret) {
		snprintf(rdmaq_slice_why, sizeof(rdmaq_slice_why), "sched_getattr: %s",
			 strerror(-ret));
		return ret;
	}
	if (got.sched_runtime != want_ns) {
		snprintf(rdmaq_slice_why, sizeof(rdmaq_slice_why),
			 "the kernel ignores sched_runtime for SCHED_OTHER threads "
			 "(custom slices need Linux 6.12 or later)");
		return -EOPNOTSUPP;
	}
	return 1;
}

int rdmaq_slice_enter(struct rdmaq_slice *s)
{
	int state = __atomic_load_n(&rdmaq_slice_state, __ATOMIC_ACQUIRE);
	struct rdmaq_sched_attr *saved = &rdmaq_thread_saved;
	int ret;

	s->applied = false;
	if (!s->want_ns || state < 0)
		return 0;
	if (rdmaq_thread_slice_ns == s->want_ns) {
		s->applied = true;
		return 1;
	}
	if (sched_getattr_self(saved) || !fair_policy(saved->sched_policy))
		return 0; /* SCHED_IDLE, real-time, ...: the caller chose; leave it */
	if (state == 0) {
		ret = slice_probe(saved, s->want_ns);
		__atomic_store_n(&rdmaq_slice_state, ret > 0 ? 1 : ret, __ATOMIC_RELEASE);
		if (ret <= 0) {
			sched_setattr_self(saved, saved->sched_runtime, false);
			return 0;
		}
	} else if (saved->sched_runtime == s->want_ns) {
		/* Already short: the user asked for this slice. */
	} else if (sched_setattr_self(saved, s->want_ns, true)) {
		return 0;
	}
	s->applied = true;
	rdmaq_thread_slice_ns = s->want_ns;
	return 1;
}

void rdmaq_slice_leave(struct rdmaq_slice *s)
{
	struct rdmaq_sched_attr *saved = &rdmaq_thread_saved;

	if (!s->applied)
		return;
	s->applied = false;
	if (!s->restore)
		return;
	rdmaq_thread_slice_ns = 0;
	if (saved->sched_runtime != s->want_ns)
		sched_setattr_self(saved, saved->sched_runtime, false);
}

uint32_t rdmaq_slice_effective(const struct rdmaq_slice *s)
{
	return __atomic_load_n(&rdmaq_slice_state, __ATOMIC_ACQUIRE) < 0 ? 0 : s->want_ns;
}

int rdmaq_sched_slice_probe(uint32_t slice_ns)
{
	struct rdmaq_sched_attr cur;
	int state = __atomic_load_n(&rdmaq_slice_state, __ATOMIC_ACQUIRE);
	int ret;

	if (slice_ns < RDMAQ_MIN_SLICE_NS || slice_ns > RDMAQ_MAX_SLICE_NS)
		return rdmaq_set_err(-EINVAL, "slice must be in %d..%d ns, got %u",
				     RDMAQ_MIN_SLICE_NS, RDMAQ_MAX_SLICE_NS, slice_ns);
	if (state < 0) {
		rdmaq_set_err(state, "%s", rdmaq_slice_why);
		return 0;
	}
	ret = sched_getattr_self(&cur);
	if (ret)
		return rdmaq_set_err(ret, "sched_getattr: %s", strerror(-ret));
	if (!fair_policy(cur.sched_policy)) {
		rdmaq_set_err(-EPERM, "this thread's policy is %u, not SCHED_OTHER",
			      cur.sched_policy);
		return 0;
	}
	ret = slice_probe(&cur, slice_ns);
	sched_setattr_self(&cur, cur.sched_runtime, false);
	__atomic_store_n(&rdmaq_slice_state, ret > 0 ? 1 : ret, __ATOMIC_RELEASE);
	if (ret > 0)
		return 1;
	rdmaq_set_err(ret, "%s", rdmaq_slice_why);
	return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * Adaptive spin-then-block waiting.
 *
 * Spinning wins when the next event is microseconds away; blocking wins
 * when it is milliseconds away or when the CPU is oversubscribed.  The
 * budget adapts like folly's TurnSequencer: a wait that ends while
 * spinning raises the budget to twice the time it took, a wait that had
 * to block halves it, so an idle or paced reader converges to a short
 * spin and ~0 CPU.
 */
#include <time.h>

#include "barrier.h"
#include "ring.h"

#define RDMAQ_MIN_SPIN_NS	1000U

int64_t rdmaq_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t rdmaq_deadline(int64_t timeout_ns)
{
	return timeout_ns < 0 ? -1 : rdmaq_now_ns() + timeout_ns;
}

static int rdmaq_wait_cancelled(struct rdmaq_waiter *wt)
{
	return READ_ONCE(wt->cancelled) ? rdmaq_set_err(-ECANCELED, "cancelled: endpoint closed") : 0;
}

static int rdmaq_wait_spin(struct rdmaq_waiter *wt, rdmaq_cond_fn cond, void *arg,
			   int64_t deadline)
{
	int64_t start = rdmaq_now_ns();
	int64_t spin_end = start + wt->spin_ns;
	unsigned int i;
	int ret;

	for (i = 1;; i++) {
		ret = cond(arg);
		if (ret > 0) {
			uint64_t took = 2 * (uint64_t)(rdmaq_now_ns() - start);

			if (took > wt->spin_ns)
				wt->spin_ns = took < wt->spin_max_ns ? (uint32_t)took : wt->spin_max_ns;
			wt->stats->spins++;
			return 1;
		}
		if (ret < 0)
			return ret;
		cpu_relax();
		/* clock_gettime is ~20 ns: look at the clock every 64 rounds. */
		if ((i & 63) == 0) {
			int64_t now = rdmaq_now_ns();

			ret = rdmaq_wait_cancelled(wt);
			if (ret)
				return ret;
			if (deadline >= 0 && now >= deadline)
				return rdmaq_set_err(-ETIMEDOUT, "timed out");
			if (now >= spin_end)
				break;
		}
	}
	wt->spin_ns = wt->spin_ns / 2 > RDMAQ_MIN_SPIN_NS ? wt->spin_ns / 2 : RDMAQ_MIN_SPIN_NS;
	if (wt->spin_ns > wt->spin_max_ns)
		wt->spin_ns = wt->spin_max_ns;
	return 0;
}

int rdmaq_wait(struct rdmaq_waiter *wt, rdmaq_cond_fn cond, void *arg, int64_t deadline)
{
	int64_t last_check = rdmaq_now_ns();
	int ret;

	ret = cond(arg);
	if (ret)
		return ret < 0 ? ret : 0;
	ret = rdmaq_wait_cancelled(wt);
	if (ret)
		return ret;
	if (wt->spin_max_ns) {
		ret = rdmaq_wait_spin(wt, cond, arg, deadline);
		if (ret)
			return ret < 0 ? ret : 0;
	}
	if (wt->before_block) {
		ret = wt->before_block(wt->ep);
		if (ret < 0)
			return ret;
	}
	for (;;) {
		int64_t now, slice;

		ret = wt->ops->prepare(wt->ep);
		if (ret < 0)
			return ret;
		/* Re-check after announcing the sleep: a wake-up sent before
		 * the announcement was seen would otherwise be lost. */
		ret = cond(arg);
		if (!ret)
			ret = rdmaq_wait_cancelled(wt);
		now = rdmaq_now_ns();
		if (!ret && deadline >= 0 && now >= deadline)
			ret = rdmaq_set_err(-ETIMEDOUT, "timed out");
		if (ret) {
			wt->ops->finish(wt->ep);
			return ret < 0 ? ret : 0;
		}
		slice = RDMAQ_PEER_CHECK_NS - (now - last_check);
		if (slice < 0)
			slice = 0;
		if (deadline >= 0 && deadline - now < slice)
			slice = deadline - now;
		wt->stats->sleeps++;
		ret = wt->ops->block(wt->ep, slice);
		wt->ops->finish(wt->ep);
		if (ret < 0)
			return ret;
		now = rdmaq_now_ns();
		if (now - last_check >= RDMAQ_PEER_CHECK_NS) {
			last_check = now;
			/* Data already in the ring wins over a dead peer. */
			ret = cond(arg);
			if (ret)
				return ret < 0 ? ret : 0;
			ret = wt->ops->check_peer(wt->ep);
			if (ret < 0)
				return ret;
		}
	}
}

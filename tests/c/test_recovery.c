/* SPDX-License-Identifier: MIT */
/*
 * Adaptive state recovers: what shrinks or backs off under one load comes
 * back when the load goes.  The adaptive spin budget, halved by waits that
 * had to block, grows again when messages come within it; the cadence
 * back-off, doubled by preempted windows, returns to its minimum after
 * runs of clean windows; the nap margin, raised by late wake-ups, falls
 * again with punctual ones.  Counted, never timed: a message here lands a
 * set fraction of the current budget after the wait starts, read from the
 * waiter itself, and the checks are on the waiter's and the cadence's state.
 * Linked with this file's rdmaq_cpu_busy(), as test_wait.c.
 */
#include <string.h>

#include "busy.h"
#include "check.h"
#include "fake_endpoint.h"
#include "never_busy.h"
#include "wait.h"

#define SPIN_MAX_NS 1000000U
#define US	    1000LL
#define MS	    1000000LL

/* A message that lands at `at_ns` (CLOCK_MONOTONIC), or when the waiter blocks. */
struct message {
	int64_t at_ns;
	int landed;
};

static int message_landed(void *arg)
{
	struct message *m = arg;

	return m->landed || rdmaq_now_ns() >= m->at_ns;
}

static int fake_block(void *ep, int64_t timeout_ns)
{
	(void)timeout_ns;
	((struct message *)ep)->landed = 1;
	return 0;
}

static const struct rdmaq_wait_ops fake_ops = FAKE_WAIT_OPS(fake_block);

static struct message msg;
static struct rdmaq_stats stats;

static void test_a_shrunk_spin_budget_grows_back(void)
{
	struct rdmaq_waiter wt;
	uint32_t most = 0;
	int i;

	memset(&stats, 0, sizeof(stats));
	rdmaq_waiter_init(&wt, &fake_ops, &msg, SPIN_MAX_NS, &stats);
	wt.slice.want_ns = 0;
	/* An idle spell: every wait blocks, the budget falls to its floor. */
	for (i = 0; i < 64; i++) {
		msg = (struct message){ .at_ns = INT64_MAX };
		CHECK(rdmaq_wait(&wt, message_landed, &msg, -1) == 0);
	}
	CHECK(wt.spin_ns == RDMAQ_MIN_SPIN_NS);
	/* Then messages come again, each within the budget (at 3/4 of it): the
	 * spins that find them must raise it.  A spin that loses its CPU on a
	 * loaded machine drops it to the floor again, so give it many tries. */
	for (i = 0; i < 100000 && most < SPIN_MAX_NS / 4; i++) {
		msg = (struct message){ .at_ns = rdmaq_now_ns() + wt.spin_ns * 3 / 4 };
		CHECK(rdmaq_wait(&wt, message_landed, &msg, -1) == 0);
		if (wt.spin_ns > most)
			most = wt.spin_ns;
	}
	CHECK(most >= SPIN_MAX_NS / 4);
	CHECK(wt.spin_ns <= SPIN_MAX_NS);
	CHECK(stats.spins > 0);
}

/* From 64 us: a spin that short rarely loses its CPU, and one that does is retried. */
static void test_each_blocked_wait_halves_the_budget(void)
{
	struct rdmaq_waiter wt;
	int clean_runs = 0;

	for (int attempt = 0; attempt < 50 && !clean_runs; attempt++) {
		memset(&stats, 0, sizeof(stats));
		rdmaq_waiter_init(&wt, &fake_ops, &msg, 64 * US, &stats);
		wt.slice.want_ns = 0;
		for (uint32_t want = 32 * US; want > RDMAQ_MIN_SPIN_NS && !stats.preempted;
		     want /= 2) {
			msg = (struct message){ .at_ns = INT64_MAX };
			CHECK(rdmaq_wait(&wt, message_landed, &msg, -1) == 0);
			if (!stats.preempted)
				CHECK(wt.spin_ns == want);
		}
		clean_runs += !stats.preempted;
	}
	CHECK(clean_runs == 1);
}

static void test_the_spin_budget_never_passes_its_maximum(void)
{
	struct rdmaq_waiter wt;
	int i;

	memset(&stats, 0, sizeof(stats));
	rdmaq_waiter_init(&wt, &fake_ops, &msg, 20 * US, &stats);
	wt.slice.want_ns = 0;
	for (i = 0; i < 200; i++) {
		/* each message at the end of the budget: a doubling would pass the maximum */
		msg = (struct message){ .at_ns = rdmaq_now_ns() + wt.spin_ns * 9 / 10 };
		CHECK(rdmaq_wait(&wt, message_landed, &msg, -1) == 0);
		CHECK(wt.spin_ns <= 20 * US && wt.spin_ns >= RDMAQ_MIN_SPIN_NS);
	}
}

/* A steady 1 ms writer seen for `n` messages; returns the last stamp. */
static int64_t steady(struct rdmaq_cadence *c, int64_t t, int n)
{
	for (int i = 0; i < n; i++, t += MS)
		rdmaq_cadence_observe(c, t, t + 5 * US);
	return t - MS;
}

static void test_the_back_off_returns_to_its_minimum(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t t;
	unsigned int i, cleans = 0;

	rdmaq_cadence_init(&c);
	t = steady(&c, 1000 * MS, 40);
	for (i = 0; i < 20; i++)
		rdmaq_cadence_preempted(&c);
	CHECK(c.backoff == RDMAQ_CAD_BACKOFF_MAX);
	/* Each clean window, after the skipped ones, earns part of it back. */
	while (c.backoff > 4 && cleans < 100000) {
		if (rdmaq_cadence_window(&c, t + 10 * US, &w)) {
			rdmaq_cadence_clean(&c);
			cleans++;
		}
	}
	CHECK(c.backoff == 4);
	CHECK(cleans == RDMAQ_CAD_CLEAN_RUN * 8); /* 1024 -> 4: eight halvings */
	for (i = 0; i < 4 * RDMAQ_CAD_CLEAN_RUN; i++)
		rdmaq_cadence_clean(&c);
	CHECK(c.backoff == 4);
	/* and a preemption now skips only the minimum */
	rdmaq_cadence_preempted(&c);
	for (i = 0; rdmaq_cadence_window(&c, t + 10 * US, &w) == false; i++)
		;
	CHECK(i == 4);
}

static void test_the_nap_margin_falls_after_late_wake_ups(void)
{
	struct rdmaq_cadence c;
	int64_t late_margin;
	int i;

	rdmaq_cadence_init(&c);
	for (i = 0; i < 64; i++)
		rdmaq_cadence_napped(&c, 0, 300 * US);
	late_margin = rdmaq_cadence_margin(&c);
	CHECK(late_margin >= 200 * US);
	for (i = 0; i < 200; i++)
		rdmaq_cadence_napped(&c, 0, 0);
	CHECK(rdmaq_cadence_margin(&c) < late_margin / 10);
	/* waking early is not lateness */
	rdmaq_cadence_napped(&c, 100 * US, 0);
	CHECK(rdmaq_cadence_margin(&c) < late_margin / 10);
}

int main(void)
{
	test_a_shrunk_spin_budget_grows_back();
	test_each_blocked_wait_halves_the_budget();
	test_the_spin_budget_never_passes_its_maximum();
	test_the_back_off_returns_to_its_minimum();
	test_the_nap_margin_falls_after_late_wake_ups();
	return check_report("recovery");
}

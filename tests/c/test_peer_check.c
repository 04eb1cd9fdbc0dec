/* SPDX-License-Identifier: MIT */
/*
 * The peer check runs every RDMAQ_PEER_CHECK_NS of the endpoint's time, not of
 * one call's: a caller that polls with short timeouts (0, 1 ms, 50 ms) learns
 * of a dead peer within a period, as one that blocks does; a live peer is
 * checked no more often than that; data already there wins over a dead peer.
 * The waiter's clock is frozen and moved by the test (the caller's own work
 * between calls, a block sleeping out its timeout): nothing is timed.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "fake_endpoint.h"
#include "frozen_clock.h"
#include "never_busy.h"
#include "wait.h"

#define MS 1000000LL

static struct rdmaq_stats stats;
static int peer_checks, peer_dead, landed;

static int checked_peer(void *ep)
{
	(void)ep;
	peer_checks++;
	return peer_dead ? -EOWNERDEAD : 0;
}

/* Nothing wakes it: it sleeps out its timeout. */
static int sleep_out(void *ep, int64_t timeout_ns)
{
	(void)ep;
	frozen_ns += timeout_ns;
	return 1;
}

static int message(void *arg)
{
	(void)arg;
	return landed;
}

static const struct rdmaq_wait_ops ops = {
	.prepare = fake_prepare,
	.block = sleep_out,
	.finish = fake_finish,
	.check_peer = checked_peer,
};

/* A reader that spins as little as it may, its peer last checked now. */
static void waiter_init(struct rdmaq_waiter *wt)
{
	rdmaq_waiter_init(wt, &ops, NULL, 0, &stats);
	wt->slice.want_ns = 0;
	wt->settle_far_ns = 0;
	wt->peer_checked_ns = frozen_ns;
	peer_checks = peer_dead = landed = 0;
}

/*
 * A caller polling with `timeout_ns` and doing `gap_ns` of its own work between
 * two calls, its peer dead from the start: how many calls timed out before one
 * reported the death (-1: none in 10 periods' worth of calls).
 */
static int polls_until_dead(int64_t timeout_ns, int64_t gap_ns, uint32_t spin_ns)
{
	struct rdmaq_waiter wt;
	int64_t start;
	int i, ret = 0;

	frozen_ns = start = rdmaq_now_ns();
	waiter_init(&wt);
	wt.spin_max_ns = wt.spin_ns = spin_ns;
	peer_dead = 1;
	for (i = 0; frozen_ns < start + 10 * RDMAQ_PEER_CHECK_NS; i++) {
		ret = rdmaq_wait(&wt, message, NULL, frozen_ns + timeout_ns);
		if (ret == -EOWNERDEAD)
			break;
		CHECK(ret == -ETIMEDOUT);
		frozen_ns += gap_ns;
	}
	if (ret == -EOWNERDEAD) /* and so on: each later call reports it too, at once */
		CHECK(rdmaq_wait(&wt, message, NULL, frozen_ns + timeout_ns) == -EOWNERDEAD);
	ret = ret == -EOWNERDEAD ? i : -1;
	frozen_ns = 0;
	return ret;
}

/*
 * Timeouts of 0 (1 ms of work between calls), 1 ms and 50 ms: reported once the
 * period has passed since the last check (a period's worth of calls), never before.  A wait
 * that spins times out there, before it would block: the timeout checks too.
 * (The frozen clock moves only between calls: a spin would never end but by its
 * deadline, so only the timeout of 0 spins.)
 */
static void test_short_timeouts_report_a_dead_peer_within_a_period(void)
{
	int n0 = polls_until_dead(0, MS, 0), n0_spin = polls_until_dead(0, MS, 50000),
	    n1 = polls_until_dead(MS, 0, 0), n50 = polls_until_dead(50 * MS, 0, 0);

	CHECK(n0 == RDMAQ_PEER_CHECK_NS / MS);
	CHECK(n0_spin == RDMAQ_PEER_CHECK_NS / MS);
	/* a wait that blocks reports it in the call under way when the period ends */
	CHECK(n1 == RDMAQ_PEER_CHECK_NS / MS - 1);
	CHECK(n50 == RDMAQ_PEER_CHECK_NS / (50 * MS) - 1);
}

/* A blocking wait checks at once when the last check is a period old, before it
 * sleeps: a dead peer is not slept on for a further period. */
static void test_a_blocking_wait_checks_first_when_the_check_is_due(void)
{
	struct rdmaq_waiter wt;

	frozen_ns = rdmaq_now_ns();
	waiter_init(&wt);
	peer_dead = 1;
	frozen_ns += RDMAQ_PEER_CHECK_NS;
	memset(&stats, 0, sizeof(stats));
	CHECK(rdmaq_wait(&wt, message, NULL, -1) == -EOWNERDEAD);
	frozen_ns = 0;
	CHECK(stats.sleeps == 0 && peer_checks == 1);
}

/* A live peer polled with timeouts of 0: checked once per period, not per call. */
static void test_a_live_peer_is_checked_once_a_period(void)
{
	struct rdmaq_waiter wt;
	int i;

	frozen_ns = rdmaq_now_ns();
	waiter_init(&wt);
	for (i = 0; i < 1000; i++) {
		CHECK(rdmaq_wait(&wt, message, NULL, frozen_ns) == -ETIMEDOUT);
		frozen_ns += MS;
	}
	frozen_ns = 0;
	/* 1000 calls 1 ms apart: a check at 100, 200, ..., 900 ms */
	CHECK(peer_checks == 1000 * MS / RDMAQ_PEER_CHECK_NS - 1);
}

/* A message that lands by the peer check (the wait's second look) is returned. */
static int looks;

static int lands_at_the_second_look(void *arg)
{
	(void)arg;
	return ++looks >= 2;
}

static void test_data_found_at_the_check_wins_over_a_dead_peer(void)
{
	struct rdmaq_waiter wt;

	frozen_ns = rdmaq_now_ns();
	waiter_init(&wt);
	peer_dead = 1;
	looks = 0;
	frozen_ns += RDMAQ_PEER_CHECK_NS;
	CHECK(rdmaq_wait(&wt, lands_at_the_second_look, NULL, frozen_ns) == 0);
	frozen_ns = 0;
	CHECK(looks == 2 && peer_checks == 0);
}

/* The timeout's own message stays when the check finds the peer alive. */
static void test_a_live_peer_leaves_the_timeout(void)
{
	struct rdmaq_waiter wt;

	frozen_ns = rdmaq_now_ns();
	waiter_init(&wt);
	frozen_ns += RDMAQ_PEER_CHECK_NS;
	CHECK(rdmaq_wait(&wt, message, NULL, frozen_ns) == -ETIMEDOUT);
	frozen_ns = 0;
	CHECK(peer_checks == 1);
	CHECK(strcmp(rdmaq_errmsg(), "timed out") == 0);
}

int main(void)
{
	test_short_timeouts_report_a_dead_peer_within_a_period();
	test_a_blocking_wait_checks_first_when_the_check_is_due();
	test_a_live_peer_is_checked_once_a_period();
	test_data_found_at_the_check_wins_over_a_dead_peer();
	test_a_live_peer_leaves_the_timeout();
	return check_report("peer_check");
}

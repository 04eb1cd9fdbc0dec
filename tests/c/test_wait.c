/* SPDX-License-Identifier: MIT */
/*
 * The adaptive spin on its own: a waiter with made-up blocking ops and a
 * condition that turns true after a set number of looks (or when the
 * waiter blocks), so what is checked is counted, never timed.  Linked
 * with chosen_busy.h's rdmaq_cpu_busy() instead of busy.c: the machine's
 * load must not decide whether a wait spins here.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "chosen_busy.h"
#include "fake_endpoint.h"
#include "frozen_clock.h"
#include "wait.h"

#define SPIN_MAX_NS 1000000U /* 1 ms: a failed full spin costs little here */

/* A message that lands after `due` looks at the ring, or when the reader blocks. */
struct message {
	unsigned long looks;
	unsigned long due; /* 0: only a wake-up brings it */
	int landed;
};

static int message_landed(void *arg)
{
	struct message *m = arg;

	m->looks++;
	return m->landed || (m->due && m->looks >= m->due);
}

/* Blocking ends with the message: the writer's wake-up. */
static int fake_block(void *ep, int64_t timeout_ns)
{
	(void)timeout_ns;
	((struct message *)ep)->landed = 1;
	return 0;
}

static const struct rdmaq_wait_ops fake_ops = FAKE_WAIT_OPS(fake_block);

static struct message msg;
static struct rdmaq_stats stats;

static void waiter_init(struct rdmaq_waiter *wt)
{
	memset(&stats, 0, sizeof(stats));
	rdmaq_waiter_init(wt, &fake_ops, &msg, SPIN_MAX_NS, &stats);
	wt->slice.want_ns = 0; /* leave the scheduler alone */
}

/* One get of a message due after `due` looks (0: only when woken). */
static void one_wait(struct rdmaq_waiter *wt, unsigned long due)
{
	msg = (struct message){ .due = due };
	CHECK(rdmaq_wait(wt, message_landed, &msg, -1) == 0);
}

static void test_a_spin_that_finds_its_message_never_blocks(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt);
	for (int i = 0; i < 32; i++)
		one_wait(&wt, 200); /* a few µs of looking: far inside the budget */
	/* A spin that lost its CPU gives up on purpose. */
	if (!stats.preempted) {
		CHECK(stats.spins == 32 && stats.sleeps == 0);
		CHECK(wt.spin_ns == SPIN_MAX_NS);
	}
	CHECK(stats.spins >= 1);
}

/* Each blocked wait halves the budget: 1 ms reaches the floor in 10. */
static void test_waits_that_block_shrink_the_spin_to_the_minimum(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt);
	for (int i = 0; i < 64; i++) {
		one_wait(&wt, 0);
		CHECK(wt.spin_ns == RDMAQ_MIN_SPIN_NS || i < 10);
	}
	CHECK(stats.spins == 0 && stats.sleeps == 64 && stats.woken == 64);
}

static void test_no_spin_budget_never_spins(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt);
	wt.spin_max_ns = wt.spin_ns = 0;
	for (int i = 0; i < 32; i++)
		one_wait(&wt, 1000);
	CHECK(stats.spins == 0);
	/* Each wait looked once, re-checked once after announcing its sleep,
	 * and once more when woken: no spin in between. */
	CHECK(msg.looks == 3);
}

/*
 * A spin set by rdmaq_waiter_configure (the writer's, created with none) holds
 * from the next wait on: a message a few µs of looking away is spun for.
 */
static void test_a_configured_spin_takes_effect_at_the_next_wait(void)
{
	struct rdmaq_wait_config wc = { .spin_ns = SPIN_MAX_NS };
	struct rdmaq_waiter wt;

	memset(&stats, 0, sizeof(stats));
	rdmaq_waiter_init(&wt, &fake_ops, &msg, 0, &stats);
	CHECK(rdmaq_waiter_configure(&wt, &wc) == 0);
	one_wait(&wt, 200);
	/* A spin that lost its CPU gives up on purpose. */
	CHECK((stats.spins == 1 && stats.sleeps == 0) || stats.preempted);
}

/*
 * The spin reads the clock once every 64 looks, so a spin that runs out of its
 * budget has looked a whole number of 64 rounds: to the floor's 1 µs it still
 * looks 64 times, never just once.
 */
static void test_a_spin_looks_at_the_clock_every_64_rounds(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt);
	for (int i = 0; i < 8; i++) {
		wt.spin_ns = RDMAQ_MIN_SPIN_NS;
		one_wait(&wt, 0);
		/* the spin's looks, less the first look, the re-check and the look once woken */
		CHECK(msg.looks > 3 && (msg.looks - 3) % 64 == 0);
	}
	CHECK(stats.spins == 0 && stats.sleeps == 8);
}

/*
 * A deadline that has come is past: a wait that finds the clock at its deadline
 * (a zero timeout, the clock not moved since) times out without blocking.
 */
static void test_a_wait_at_its_deadline_times_out_without_blocking(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt);
	wt.spin_max_ns = wt.spin_ns = 0;
	msg = (struct message){ .due = 0 };
	frozen_ns = rdmaq_now_ns();
	CHECK(rdmaq_wait(&wt, message_landed, &msg, rdmaq_deadline(0)) == -ETIMEDOUT);
	frozen_ns = 0;
	CHECK(stats.sleeps == 0 && !msg.landed);
}

/* No message; after `thaw` looks the clock runs again (a wait the frozen clock would hold). */
static int nothing_then_thaw(void *arg)
{
	struct message *m = arg;

	if (++m->looks >= m->due)
		frozen_ns = 0;
	return 0;
}

/*
 * The same deadline met inside a spin: a spin whose clock reads exactly its
 * deadline times out at that look, not at the next one that reads past it.
 */
static void test_a_spin_that_reads_its_deadline_times_out_there(void)
{
	struct rdmaq_waiter wt;
	int64_t now;

	waiter_init(&wt);
	wt.spin_max_ns = wt.spin_ns = 1000000; /* its budget ends after the deadline */
	msg = (struct message){ .due = 10000 };
	now = rdmaq_now_ns();
	frozen_ns = now + 1; /* rdmaq_deadline(1) from `now`: the clock at the deadline */
	CHECK(rdmaq_wait(&wt, nothing_then_thaw, &msg, now + 1) == -ETIMEDOUT);
	frozen_ns = 0;
	CHECK(msg.looks <= 64 + 1); /* its first clock look, at the 64th round */
	CHECK(stats.sleeps == 0);
}

/* A message that lands `after_ns` after the spin's first look (or when the reader blocks). */
struct timed_message {
	unsigned long looks;
	int64_t after_ns;
	int64_t first_ns; /* the spin's first look */
	int64_t found_ns; /* the look that found it */
};

static struct timed_message timed;

static int timed_message_landed(void *arg)
{
	struct timed_message *m = arg;
	int64_t now = rdmaq_now_ns();

	if (++m->looks == 2) /* the first was the look before the spin */
		m->first_ns = now;
	if (msg.landed || (m->looks >= 2 && now - m->first_ns >= m->after_ns)) {
		m->found_ns = now;
		return 1;
	}
	return 0;
}

/*
 * A spin that finds its message late in its budget raises the budget to twice
 * the time the spin took, so that the next message, as late, is found too: the
 * time from its first look to the message is a lower bound of that (150 µs into
 * a 200 µs budget).
 */
static void test_a_spin_that_ends_late_doubles_its_budget(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt);
	wt.spin_ns = 200000;
	msg = (struct message){ 0 };
	timed = (struct timed_message){ .after_ns = 150000 };
	CHECK(rdmaq_wait(&wt, timed_message_landed, &timed, -1) == 0);
	/* a spin that lost its CPU, or ran out on a loaded machine, is not one to check */
	if (stats.preempted || stats.spins != 1)
		return;
	CHECK(wt.spin_ns >= 2 * (timed.found_ns - timed.first_ns) || wt.spin_ns == SPIN_MAX_NS);
}

/* A ring that fails its first look (a torn record, a dead peer) fails the nap's
 * preparation with that error: nothing is planned over it. */
static int broken_ring(void *arg)
{
	(void)arg;
	return -EPROTO;
}

static void test_a_failed_first_look_fails_the_nap_s_preparation(void)
{
	struct rdmaq_cad_window win;
	struct rdmaq_cadence cad;
	struct rdmaq_waiter wt;

	waiter_init(&wt);
	rdmaq_cadence_init(&cad);
	CHECK(rdmaq_wait_prepare_window(&wt, &cad, broken_ring, NULL, -1, &win) == -EPROTO);
	CHECK(stats.naps == 0 && stats.sleeps == 0);
}

/*
 * A get naps first (rdmaq_wait_prepare_window), then waits: an oversubscribed
 * CPU seen by both is one get that did not spin, counted once.
 */
static void test_a_busy_cpu_counts_once_per_get(void)
{
	struct rdmaq_cad_window win;
	struct rdmaq_cadence cad;
	struct rdmaq_waiter wt;

	waiter_init(&wt);
	rdmaq_cadence_init(&cad);
	cpu_busy = true;
	for (int i = 0; i < 8; i++) {
		msg = (struct message){ .due = 0 };
		CHECK(rdmaq_wait_prepare_window(&wt, &cad, message_landed, &msg, -1, &win) == 0);
		CHECK(rdmaq_wait_next(&wt, &cad, NULL, message_landed, &msg, -1) == 0);
	}
	CHECK(stats.busy == 8 && stats.sleeps == 8 && stats.spins == 0);
	/* A wait without a nap before it counts for itself. */
	one_wait(&wt, 0);
	CHECK(stats.busy == 9);
	cpu_busy = false;
}

/*
 * A get whose message landed after its nap, so that no wait followed, was
 * counted by its nap; the next get counts for itself: once per get.
 */
static void test_a_get_that_did_not_wait_leaves_the_next_get_its_count(void)
{
	struct rdmaq_cad_window win;
	struct rdmaq_cadence cad;
	struct rdmaq_waiter wt;

	waiter_init(&wt);
	rdmaq_cadence_init(&cad);
	cpu_busy = true;
	msg = (struct message){ .due = 0 };
	CHECK(rdmaq_wait_prepare_window(&wt, &cad, message_landed, &msg, -1, &win) == 0);
	CHECK(stats.busy == 1);
	msg = (struct message){ .due = 0 }; /* the next get: its nap, then its wait */
	CHECK(rdmaq_wait_prepare_window(&wt, &cad, message_landed, &msg, -1, &win) == 0);
	CHECK(rdmaq_wait_next(&wt, &cad, NULL, message_landed, &msg, -1) == 0);
	CHECK(stats.busy == 2 && stats.sleeps == 1);
	cpu_busy = false;
}

/*
 * On an oversubscribed CPU a wait blocks at once; with a busy-spin budget
 * (the experiment busy_spin_us) it spins first, and a message that comes within the
 * budget is taken without blocking.  The budget is fixed: blocked waits do
 * not shrink it, and it applies with no adaptive spin at all.
 */
static void test_a_busy_cpu_spins_only_with_a_busy_spin_budget(void)
{
	struct rdmaq_waiter wt;

	cpu_busy = true;
	waiter_init(&wt);
	for (int i = 0; i < 8; i++)
		one_wait(&wt, 200);
	CHECK(stats.busy == 8 && stats.spins == 0 && stats.sleeps == 8);
	/* without a budget no look at all between the first and the re-check before blocking */
	CHECK(msg.looks == 3);

	waiter_init(&wt);
	wt.spin_max_ns = wt.spin_ns = 0;
	wt.busy_spin_ns = SPIN_MAX_NS;
	for (int i = 0; i < 8; i++)
		one_wait(&wt, 200); /* a few µs of looking: far inside the budget */
	/* a spin that lost its CPU gives up on purpose */
	if (!stats.preempted)
		CHECK(stats.busy == 8 && stats.spins == 8 && stats.sleeps == 0);
	CHECK(stats.spins >= 1 && stats.spins + stats.sleeps == 8);

	waiter_init(&wt);
	wt.busy_spin_ns = 50000; /* 50 µs, then the wake-up brings it */
	for (int i = 0; i < 4; i++)
		one_wait(&wt, 0);
	CHECK(stats.busy == 4 && stats.spins == 0 && stats.sleeps == 4);
	CHECK(wt.busy_spin_ns == 50000);
	cpu_busy = false;
}

/* Not oversubscribed: the budget changes nothing, the adaptive spin runs as before. */
static void test_a_busy_spin_budget_leaves_an_idle_cpu_alone(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt);
	wt.busy_spin_ns = SPIN_MAX_NS;
	for (int i = 0; i < 12; i++)
		one_wait(&wt, 0);
	CHECK(stats.busy == 0 && stats.spins == 0 && stats.sleeps == 12);
	CHECK(wt.spin_ns == RDMAQ_MIN_SPIN_NS); /* halved by each blocked wait, as without */

	/* nor does it make a waiter without an adaptive spin spin: it blocks at once */
	waiter_init(&wt);
	wt.spin_max_ns = wt.spin_ns = 0;
	wt.busy_spin_ns = SPIN_MAX_NS;
	one_wait(&wt, 1000);
	CHECK(stats.spins == 0 && stats.sleeps == 1 && msg.looks == 3);
}

/*
 * The experiments and the settle distance come from the configuration, whose
 * limits are values it takes (1 s of busy and of free spin, 1 for the free spin's switch,
 * RDMAQ_MAX_SETTLE_FAR_NS) while one more is refused, naming what, and leaves
 * the waiter as it was.  The core reads no environment variable.
 */
static void test_the_configuration_s_limits_are_inclusive(void)
{
	struct rdmaq_wait_config wc = { .spin_ns = SPIN_MAX_NS };
	struct rdmaq_waiter wt;

	waiter_init(&wt);
	CHECK(wt.busy_spin_ns == 0 && !wt.free_spin_busy && wt.settle_far_ns == RDMAQ_SETTLE_FAR_NS);
	setenv("RDMAQ_BUSY_SPIN_US", "250", 1); /* read by nobody */
	wc.busy_spin_ns = RDMAQ_MAX_SPIN_NS;
	wc.free_spin_ns = RDMAQ_MAX_SPIN_NS;
	wc.free_spin_busy = 1;
	wc.settle_far_ns = RDMAQ_MAX_SETTLE_FAR_NS;
	CHECK(rdmaq_waiter_configure(&wt, &wc) == 0);
	CHECK(wt.busy_spin_ns == RDMAQ_MAX_SPIN_NS && wt.free_spin_ns == RDMAQ_MAX_SPIN_NS &&
	      wt.free_spin_busy && wt.settle_far_ns == RDMAQ_MAX_SETTLE_FAR_NS);
	unsetenv("RDMAQ_BUSY_SPIN_US");

	wc = (struct rdmaq_wait_config){ .spin_ns = 7, .busy_spin_ns = RDMAQ_MAX_SPIN_NS + 1U };
	CHECK(rdmaq_waiter_configure(&wt, &wc) == -EINVAL);
	CHECK(strcmp(rdmaq_errmsg(), "busy spin must be at most 1000000000 ns, got 1000000001") ==
	      0);
	wc = (struct rdmaq_wait_config){ .spin_ns = 7, .free_spin_ns = RDMAQ_MAX_SPIN_NS + 1U };
	CHECK(rdmaq_waiter_configure(&wt, &wc) == -EINVAL);
	CHECK(strcmp(rdmaq_errmsg(), "free spin must be at most 1000000000 ns, got 1000000001") ==
	      0);
	wc = (struct rdmaq_wait_config){ .spin_ns = 7, .free_spin_busy = 2 };
	CHECK(rdmaq_waiter_configure(&wt, &wc) == -EINVAL);
	CHECK(strstr(rdmaq_errmsg(), "free_spin_busy") != NULL);
	wc = (struct rdmaq_wait_config){ .spin_ns = 7,
					 .settle_far_ns = RDMAQ_MAX_SETTLE_FAR_NS + 1ULL };
	CHECK(rdmaq_waiter_configure(&wt, &wc) == -EINVAL);
	CHECK(strstr(rdmaq_errmsg(), "settle distance") != NULL);
	/* refused: nothing changed */
	CHECK(wt.spin_max_ns == SPIN_MAX_NS && wt.busy_spin_ns == RDMAQ_MAX_SPIN_NS &&
	      wt.free_spin_ns == RDMAQ_MAX_SPIN_NS && wt.free_spin_busy &&
	      wt.settle_far_ns == RDMAQ_MAX_SETTLE_FAR_NS);

	wc = (struct rdmaq_wait_config){ .spin_ns = 7, .busy_spin_ns = 1000, .settle_far_ns = 7000 };
	CHECK(rdmaq_waiter_configure(&wt, &wc) == 0);
	CHECK(wt.busy_spin_ns == 1000 && !wt.free_spin_ns && !wt.free_spin_busy &&
	      wt.settle_far_ns == 7000);
}

/* A negative timeout is no deadline: -1, whatever the timeout (wait.h). */
static void test_a_negative_timeout_is_no_deadline(void)
{
	CHECK(rdmaq_deadline(-1) == -1);
	CHECK(rdmaq_deadline(-7) == -1);
	CHECK(rdmaq_deadline(INT64_MIN) == -1);
}

/* A cadence whose last message was stamped now and whose intervals are all `iv`. */
static void cadence_until_now(struct rdmaq_cadence *cad, int64_t iv)
{
	int64_t now = rdmaq_now_ns();

	rdmaq_cadence_init(cad);
	for (int i = 12; i >= 0; i--)
		rdmaq_cadence_observe(cad, now - i * iv, now - i * iv + 2000);
}

/* One get that blocks (no window, no spin), told the cadence. */
static void one_blocked_get(struct rdmaq_waiter *wt, struct rdmaq_cadence *cad)
{
	msg = (struct message){ .due = 0 };
	CHECK(rdmaq_wait_next(wt, cad, NULL, message_landed, &msg, -1) == 0);
}

/*
 * A block settles the thread's lag first only when the next message cannot
 * come soon (1 s apart against the threshold; 1 ms apart: never), and
 * never without a cadence or with settling off (settle_far_ns 0).
 */
static void test_settles_before_blocking_only_when_the_next_message_is_far(void)
{
	struct rdmaq_cadence cad;
	struct rdmaq_waiter wt;

	waiter_init(&wt);
	wt.anticipate = false;
	wt.spin_max_ns = wt.spin_ns = 0;
	cadence_until_now(&cad, 1000000000LL);
	one_blocked_get(&wt, &cad);
	CHECK(stats.settles == 1 && stats.sleeps == 1);
	cadence_until_now(&cad, 1000000LL);
	one_blocked_get(&wt, &cad);
	CHECK(stats.settles == 1 && stats.sleeps == 2);
	one_blocked_get(&wt, NULL);
	CHECK(stats.settles == 1 && stats.sleeps == 3);
	wt.settle_far_ns = 0;
	cadence_until_now(&cad, 1000000000LL);
	one_blocked_get(&wt, &cad);
	CHECK(stats.settles == 1 && stats.sleeps == 4);
}

/* By default a waiter settles when the next message is 3 ms away or more, not nearer. */
static void test_settling_is_on_by_default_from_3_ms(void)
{
	struct rdmaq_cadence cad;
	struct rdmaq_waiter wt;

	waiter_init(&wt);
	wt.anticipate = false;
	wt.spin_max_ns = wt.spin_ns = 0;
	cadence_until_now(&cad, 10000000LL);
	one_blocked_get(&wt, &cad);
	CHECK(stats.settles == 1);
	cadence_until_now(&cad, 2000000LL);
	one_blocked_get(&wt, &cad);
	CHECK(stats.settles == 1 && stats.sleeps == 2);
}

/* A cadence whose intervals are all `iv` and whose last message was stamped at `end`. */
static void cadence_until(struct rdmaq_cadence *cad, int64_t iv, int64_t end)
{
	rdmaq_cadence_init(cad);
	for (int i = 12; i >= 0; i--)
		rdmaq_cadence_observe(cad, end - i * iv, end - i * iv + 2000);
}

/* One wait told the cadence, for a message due after `due` looks (0: when woken). */
static void one_paced_wait(struct rdmaq_waiter *wt, struct rdmaq_cadence *cad, unsigned long due)
{
	msg = (struct message){ .due = due };
	CHECK(rdmaq_wait_next(wt, cad, NULL, message_landed, &msg, -1) == 0);
}

/* A waiter of policy "auto" (20 ms of free spin) with no other spin. */
static void auto_waiter_init(struct rdmaq_waiter *wt)
{
	waiter_init(wt);
	wt->anticipate = false;
	wt->spin_max_ns = wt->spin_ns = 0;
	wt->free_spin_ns = 20000000U;
}

/* A free spin configured through rdmaq_waiter_configure (the library's way) is the one
 * the next paced wait uses: a due message is spun for, not blocked for. */
static void test_a_configured_free_spin_takes_effect(void)
{
	struct rdmaq_wait_config wc = { .free_spin_ns = 20000000U };
	struct rdmaq_cadence cad;
	struct rdmaq_waiter wt;

	waiter_init(&wt);
	CHECK(rdmaq_waiter_configure(&wt, &wc) == 0); /* no adaptive spin, no anticipation */
	cadence_until(&cad, 1000000LL, rdmaq_now_ns());
	one_paced_wait(&wt, &cad, 100000);
	if (!stats.preempted) /* a spin that lost its CPU gives up on purpose */
		CHECK(stats.spins == 1 && stats.sleeps == 0);
}

/*
 * Policy "auto": on a CPU nobody else wants, a wait spins up to free_spin_ns
 * for a message the writer's rhythm says is due, whatever the adaptive budget
 * (none here); on a busy CPU, with no rhythm, or for a message further away
 * or long overdue, it blocks as the "efficient" policy does.
 */
static void test_a_free_cpu_spins_for_a_message_that_is_due(void)
{
	struct rdmaq_cadence cad;
	struct rdmaq_waiter wt;

	auto_waiter_init(&wt);
	cadence_until(&cad, 1000000LL, rdmaq_now_ns()); /* 1 ms apart */
	one_paced_wait(&wt, &cad, 100000);
	if (!stats.preempted) /* a spin that lost its CPU gives up on purpose */
		CHECK(stats.spins == 1 && stats.sleeps == 0 && wt.how == RDMAQ_HOW_SPIN);
}

/* On a busy CPU it blocks, unless the experiment free_spin_busy says spin. */
static void test_a_busy_cpu_blocks_unless_told_to_spin(void)
{
	struct rdmaq_cadence cad;
	struct rdmaq_waiter wt;

	auto_waiter_init(&wt);
	cadence_until(&cad, 1000000LL, rdmaq_now_ns());
	cpu_busy = true;
	one_paced_wait(&wt, &cad, 100000);
	CHECK(stats.spins == 0 && stats.sleeps == 1 && stats.busy == 1);
	wt.free_spin_busy = true;
	cadence_until(&cad, 1000000LL, rdmaq_now_ns()); /* due again, however long the block took */
	one_paced_wait(&wt, &cad, 100000);
	if (!stats.preempted) /* a spin that lost its CPU gives up on purpose */
		CHECK(stats.spins == 1 && stats.sleeps == 1);
	cpu_busy = false;
}

static void test_only_a_message_that_is_due_is_spun_for(void)
{
	struct rdmaq_cadence cad;
	struct rdmaq_waiter wt;
	int64_t now = rdmaq_now_ns();

	auto_waiter_init(&wt);
	one_wait(&wt, 100000); /* no cadence: a spin would have found it */
	CHECK(stats.spins == 0 && stats.sleeps == 1);
	cadence_until(&cad, 1000000000LL, now); /* the next one is a second away */
	one_paced_wait(&wt, &cad, 100000);
	CHECK(stats.spins == 0 && stats.sleeps == 2);
	cadence_until(&cad, 1000000LL, now - 1000000000LL); /* 1 ms apart, but a second ago */
	one_paced_wait(&wt, &cad, 100000);
	CHECK(stats.spins == 0 && stats.sleeps == 3);
	wt.free_spin_ns = 0; /* policy "efficient" */
	cadence_until(&cad, 1000000LL, now);
	one_paced_wait(&wt, &cad, 100000);
	CHECK(stats.spins == 0 && stats.sleeps == 4);
}

/*
 * The same with anticipation on (the library's default): a message that is due is
 * spun for at once, never napped for; one further away is napped for, as policy
 * "efficient" does; on a busy CPU the due one is blocked for, not spun or napped for.
 */
static void test_anticipation_on_spins_for_a_due_message_and_naps_for_a_far_one(void)
{
	struct rdmaq_cadence cad;
	struct rdmaq_waiter wt;
	int64_t now = rdmaq_now_ns();

	auto_waiter_init(&wt);
	wt.anticipate = true;
	cadence_until(&cad, 1000000LL, now); /* 1 ms apart: the next one is due */
	one_paced_wait(&wt, &cad, 100000);
	CHECK(stats.naps == 0 && stats.windows == 0);
	if (!stats.preempted) /* a spin that lost its CPU gives up on purpose */
		CHECK(stats.spins == 1 && stats.sleeps == 0 && wt.how == RDMAQ_HOW_SPIN);
	cadence_until(&cad, 100000000LL, rdmaq_now_ns()); /* 100 ms apart: far */
	memset(&stats, 0, sizeof(stats));
	one_paced_wait(&wt, &cad, 0);
	CHECK(stats.naps == 1);
	cpu_busy = true;
	memset(&stats, 0, sizeof(stats));
	cadence_until(&cad, 1000000LL, rdmaq_now_ns());
	one_paced_wait(&wt, &cad, 100000);
	CHECK(stats.spins == 0 && stats.naps == 0 && stats.sleeps == 1 && stats.busy == 1);
	cpu_busy = false;
}

int main(void)
{
	test_waits_that_block_shrink_the_spin_to_the_minimum();
	test_a_spin_that_finds_its_message_never_blocks();
	test_no_spin_budget_never_spins();
	test_a_configured_spin_takes_effect_at_the_next_wait();
	test_a_configured_free_spin_takes_effect();
	test_a_spin_looks_at_the_clock_every_64_rounds();
	test_a_spin_that_ends_late_doubles_its_budget();
	test_a_negative_timeout_is_no_deadline();
	test_a_wait_at_its_deadline_times_out_without_blocking();
	test_a_spin_that_reads_its_deadline_times_out_there();
	test_a_failed_first_look_fails_the_nap_s_preparation();
	test_a_busy_cpu_counts_once_per_get();
	test_a_get_that_did_not_wait_leaves_the_next_get_its_count();
	test_a_busy_cpu_spins_only_with_a_busy_spin_budget();
	test_a_busy_spin_budget_leaves_an_idle_cpu_alone();
	test_the_configuration_s_limits_are_inclusive();
	test_settles_before_blocking_only_when_the_next_message_is_far();
	test_settling_is_on_by_default_from_3_ms();
	test_a_free_cpu_spins_for_a_message_that_is_due();
	test_a_busy_cpu_blocks_unless_told_to_spin();
	test_only_a_message_that_is_due_is_spun_for();
	test_anticipation_on_spins_for_a_due_message_and_naps_for_a_far_one();
	return check_report("wait");
}

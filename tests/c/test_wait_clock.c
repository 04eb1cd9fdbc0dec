/* SPDX-License-Identifier: MIT */
/*
 * The waiter on a clock the test holds (frozen_clock.h): each boundary of a
 * wait met to the nanosecond, and what each way of ending a wait records.
 * The clock moves only when the ring's condition or the endpoint moves it (a
 * look that takes time, a block that sleeps out its timeout, a peer check
 * that stalls), so what is checked is counted (looks at the ring, the stats,
 * the timeout each block asked for, prepare/finish pairs), never timed.
 * Linked with chosen_busy.h's rdmaq_cpu_busy(): the tests choose whether the
 * CPU is contended.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "chosen_busy.h"
#include "far_writer.h"
#include "frozen_clock.h"
#include "wait.h"

#define US 1000LL
#define MS 1000000LL
#define T0 (1000 * 1000 * MS) /* where each test freezes the clock: 1000 s after boot */

/* wait.c's own limits */
#define PREEMPT_GAP_NS 200000LL /* a spin round this long lost its CPU (RDMAQ_PREEMPT_GAP_NS) */
#define MIN_NAP_NS     20000LL	/* no shorter nap (RDMAQ_MIN_NAP_NS) */
#define NAP_LATE_NS    500000LL /* a nap this late past its margin lost its CPU (RDMAQ_NAP_LATE_NS) */
#define WARM_LEAD_NS   50000LL /* a spin to the window ends this early (RDMAQ_WARM_LEAD_NS) */

/*
 * The ring the wait looks at: the message is there from look `due` on (0: only
 * a wake-up brings it).  Each look moves the clock `step_ns`, look `jump_at`
 * `jump_ns` more (the thread lost its CPU there); at look `cancel_at` the
 * endpoint is closed (*cancelled set, as rdmaq's close does from another thread).
 */
struct ring {
	unsigned long looks, due, jump_at, cancel_at;
	int64_t step_ns, jump_ns;
	bool landed;
	int *cancelled;
};

static struct ring ring;

static int message_there(void *arg)
{
	struct ring *r = arg;

	r->looks++;
	frozen_ns += r->step_ns;
	if (r->looks == r->jump_at)
		frozen_ns += r->jump_ns;
	if (r->looks == r->cancel_at)
		*r->cancelled = 1;
	return r->landed || (r->due && r->looks >= r->due);
}

/*
 * What each block does, in turn: it lasts `ns`, plus its timeout when `out`,
 * then returns `ret` (0: woken, 1: timed out, <0: an error), the wake-up
 * bringing the message when `brings`.  Past the script, the message wakes a
 * block at once.
 */
struct block {
	bool out, brings;
	int64_t ns;
	int ret;
};

#define SLEEPS_OUT ((struct block){ .out = true, .ret = 1 })

static struct endpoint {
	struct block script[4];
	int steps;
	int blocks, prepares, finishes, peer_checks;
	int64_t asked[4];      /* the timeout each block asked for */
	int64_t peer_check_ns; /* how long a peer check takes */
	bool peer_dead;
} ep;

static int ep_prepare(void *arg)
{
	(void)arg;
	ep.prepares++;
	return 0;
}

static int ep_block(void *arg, int64_t timeout_ns)
{
	int i = ep.blocks++;
	struct block b = i < ep.steps ? ep.script[i] : (struct block){ .brings = true };

	(void)arg;
	if (i < 4)
		ep.asked[i] = timeout_ns;
	frozen_ns += b.ns + (b.out ? timeout_ns : 0);
	if (b.brings)
		ring.landed = true;
	return b.ret;
}

static void ep_finish(void *arg)
{
	(void)arg;
	ep.finishes++;
}

static int ep_check_peer(void *arg)
{
	(void)arg;
	ep.peer_checks++;
	frozen_ns += ep.peer_check_ns;
	return ep.peer_dead ? -EOWNERDEAD : 0;
}

static const struct rdmaq_wait_ops ops = {
	.prepare = ep_prepare,
	.block = ep_block,
	.finish = ep_finish,
	.check_peer = ep_check_peer,
};

static struct rdmaq_stats stats;

/* A waiter spinning up to `spin_ns`, the clock frozen at T0, its peer checked then. */
static void waiter_init(struct rdmaq_waiter *wt, uint32_t spin_ns)
{
	frozen_ns = T0;
	memset(&stats, 0, sizeof(stats));
	ep = (struct endpoint){ 0 };
	ring = (struct ring){ .cancelled = &wt->cancelled };
	rdmaq_waiter_init(wt, &ops, NULL, spin_ns, &stats);
	wt->slice.want_ns = 0; /* leave the scheduler alone */
}

static int wait_for_ring(struct rdmaq_waiter *wt, int64_t deadline)
{
	return rdmaq_wait(wt, message_there, &ring, deadline);
}

/* ---------------------------------------------------------------- the spin */

/*
 * The spin reads the clock once every 64 looks: a clock past the budget from
 * the spin's first look on (100 µs on: past its 1 µs, short of a preemption) is
 * seen at its 64th look, not before.
 */
static void test_a_spin_looks_64_times_before_it_reads_the_clock(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt, RDMAQ_MIN_SPIN_NS);
	ring.jump_at = 2; /* the spin's first look */
	ring.jump_ns = 100 * US;
	CHECK(wait_for_ring(&wt, -1) == 0);
	/* the first look, 64 in the spin, the re-check before blocking, the one once woken */
	CHECK(ring.looks == 1 + 64 + 2);
	CHECK(stats.spins == 0 && stats.sleeps == 1 && stats.preempted == 0);
	frozen_ns = 0;
}

/*
 * A spin whose clock reads exactly its budget's end has spent it: 6.4 µs of
 * budget, 100 ns a look, ends at the 64th look, where it reads the clock.
 */
static void test_a_spin_ends_at_the_look_that_reads_its_budget_s_end(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt, 6400);
	ring.step_ns = 100;
	CHECK(wait_for_ring(&wt, -1) == 0);
	CHECK(ring.looks == 1 + 64 + 2);
	CHECK(stats.spins == 0 && stats.sleeps == 1);
	frozen_ns = 0;
}

/*
 * A spin round of exactly the preemption gap (200 µs between two readings of
 * the clock) did not lose its CPU: the spin goes on and finds its message.  One
 * ns more did: the spin gives up, counts a preemption, and the wait blocks.
 */
static void test_a_spin_round_of_exactly_the_gap_is_no_preemption(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt, 1 * MS);
	ring.jump_at = 2;
	ring.jump_ns = PREEMPT_GAP_NS;
	ring.due = 100; /* past the first reading of the clock */
	CHECK(wait_for_ring(&wt, -1) == 0);
	CHECK(stats.preempted == 0 && stats.spins == 1 && stats.sleeps == 0);

	waiter_init(&wt, 1 * MS);
	ring.jump_at = 2;
	ring.jump_ns = PREEMPT_GAP_NS + 1;
	ring.due = 100;
	CHECK(wait_for_ring(&wt, -1) == 0);
	CHECK(stats.preempted == 1 && stats.spins == 0 && stats.sleeps == 1);
	CHECK(ring.looks == 1 + 64 + 2);
	frozen_ns = 0;
}

/*
 * An endpoint closed while its reader spins ends the spin at its next reading
 * of the clock (-ECANCELED), not at the end of its budget: no sleep is
 * announced.  (A spin that missed it would run its 1 ms, 1 ns a look.)
 */
static void test_a_spin_sees_its_endpoint_closed_at_its_next_reading_of_the_clock(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt, 1 * MS);
	ring.step_ns = 1;
	ring.cancel_at = 10;
	CHECK(wait_for_ring(&wt, -1) == -ECANCELED);
	CHECK(ring.looks == 1 + 64);
	CHECK(ep.prepares == 0 && stats.sleeps == 0 && stats.spins == 0);
	frozen_ns = 0;
}

/*
 * A deadline is any instant of the clock from 0 on (test_spin_preempted.c): a
 * spin given one at 0 times out at its first reading of the clock, without
 * spinning out its budget or announcing a sleep.
 */
static void test_a_spin_times_out_at_a_deadline_of_clock_zero(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt, 1 * MS);
	ring.step_ns = 100; /* the budget would last 10000 looks */
	CHECK(wait_for_ring(&wt, 0) == -ETIMEDOUT);
	CHECK(ring.looks == 1 + 64);
	CHECK(ep.prepares == 0 && stats.sleeps == 0);
	frozen_ns = 0;
}

/*
 * Each wait that blocks halves the spin budget, never below its floor: 4.8 µs
 * becomes 2.4, 1.2, then 1 µs (not 0.6), and stays there.
 */
static void test_each_blocked_wait_halves_the_spin_down_to_its_floor(void)
{
	static const uint32_t halved[] = { 2400, 1200, RDMAQ_MIN_SPIN_NS, RDMAQ_MIN_SPIN_NS };
	struct rdmaq_waiter wt;

	waiter_init(&wt, 4800);
	for (int i = 0; i < 4; i++) {
		ring = (struct ring){ .step_ns = 100 }; /* only the wake-up brings it */
		CHECK(wait_for_ring(&wt, -1) == 0);
		CHECK(wt.spin_ns == halved[i]);
	}
	CHECK(stats.sleeps == 4 && stats.spins == 0 && stats.preempted == 0);
	frozen_ns = 0;
}

/*
 * A message found by the busy spin (the experiment busy_spin_ns, on a
 * contended CPU) or by policy "auto"'s free spin is stamped with the clock at
 * the look that found it: 10 looks of 100 ns into the wait.
 */
static void test_the_busy_and_free_spins_stamp_the_message_when_they_see_it(void)
{
	struct rdmaq_cadence cad;
	struct rdmaq_waiter wt;

	waiter_init(&wt, 0);
	wt.busy_spin_ns = 1 * MS;
	ring.step_ns = 100;
	ring.due = 10;
	cpu_busy = true;
	CHECK(wait_for_ring(&wt, -1) == 0);
	cpu_busy = false;
	CHECK(stats.busy == 1 && stats.spins == 1 && stats.sleeps == 0);
	CHECK(wt.how == RDMAQ_HOW_SPIN && wt.met_ns == T0 + 10 * 100);

	waiter_init(&wt, 0);
	wt.anticipate = false;
	wt.free_spin_ns = 20 * MS;
	rdmaq_cadence_init(&cad);
	for (int i = 12; i >= 0; i--) /* 1 ms apart, the last one now: the next is due */
		rdmaq_cadence_observe(&cad, T0 - i * MS, T0 - i * MS);
	ring.step_ns = 100;
	ring.due = 10;
	CHECK(rdmaq_wait_next(&wt, &cad, NULL, message_there, &ring, -1) == 0);
	CHECK(stats.spins == 1 && stats.sleeps == 0);
	CHECK(wt.how == RDMAQ_HOW_SPIN && wt.met_ns == T0 + 10 * 100);
	frozen_ns = 0;
}

/* ------------------------------------------------------------ the blocking */

/*
 * A message found by the re-check after the sleep is announced: the wait never
 * slept (no sleep counted, met as by a spin), and its announcement is taken
 * back (finish after prepare).
 */
static void test_a_message_found_by_the_re_check_before_blocking_never_slept(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt, 0);
	ring.due = 2;
	CHECK(wait_for_ring(&wt, -1) == 0);
	CHECK(ep.blocks == 0 && stats.sleeps == 0 && stats.woken == 0);
	CHECK(wt.how == RDMAQ_HOW_SPIN && wt.met_ns == T0);
	CHECK(ep.prepares == 1 && ep.finishes == 1);
	frozen_ns = 0;
}

/*
 * A block that sleeps out its timeout counts as expired.  A wait with a
 * deadline 10 ms away blocks for those 10 ms (less than a peer-check period),
 * then times out at its re-check, without blocking again; every announced
 * sleep is taken back.
 */
static void test_a_block_that_sleeps_out_its_timeout_counts_as_expired(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt, 0);
	ep.script[0] = SLEEPS_OUT;
	ep.steps = 1;
	CHECK(wait_for_ring(&wt, T0 + 10 * MS) == -ETIMEDOUT);
	CHECK(ep.blocks == 1 && ep.asked[0] == 10 * MS);
	CHECK(stats.expired == 1 && stats.sleeps == 1 && stats.woken == 0);
	CHECK(ep.prepares == 2 && ep.finishes == 2);
	frozen_ns = 0;
}

/*
 * A block asks for what is left of the peer-check period: a whole period
 * first, and after a wake-up that brought nothing 10 ms in (another reader's,
 * a signal), 10 ms less.
 */
static void test_a_block_after_an_empty_wake_up_asks_for_the_rest_of_the_period(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt, 0);
	ep.script[0] = (struct block){ .ns = 10 * MS };
	ep.steps = 1;
	CHECK(wait_for_ring(&wt, -1) == 0);
	CHECK(ep.blocks == 2);
	CHECK(ep.asked[0] == RDMAQ_PEER_CHECK_NS && ep.asked[1] == RDMAQ_PEER_CHECK_NS - 10 * MS);
	CHECK(stats.sleeps == 2 && stats.woken == 1 && stats.expired == 0);
	CHECK(wt.how == RDMAQ_HOW_WOKEN && ep.peer_checks == 0);
	frozen_ns = 0;
}

/*
 * A peer check that took longer than a period (its poll lost the CPU) leaves
 * nothing of the period to block for: the block asks for 0 ns.
 */
static void test_a_peer_check_that_overran_its_period_leaves_a_block_of_0(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt, 0);
	wt.peer_checked_ns = T0 - RDMAQ_PEER_CHECK_NS; /* due as the wait begins */
	ep.peer_check_ns = 3 * RDMAQ_PEER_CHECK_NS / 2;
	CHECK(wait_for_ring(&wt, -1) == 0);
	CHECK(ep.peer_checks == 1 && ep.blocks == 1 && ep.asked[0] == 0);
	frozen_ns = 0;
}

/*
 * The peer check due as a wait is about to block looks at the ring first: a
 * message found there ends the wait then, unslept, stamped with that instant.
 */
static void test_a_message_found_by_the_check_before_blocking_is_met_there(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt, 0);
	wt.peer_checked_ns = T0 - RDMAQ_PEER_CHECK_NS;
	ring.due = 2;
	CHECK(wait_for_ring(&wt, -1) == 0);
	CHECK(wt.how == RDMAQ_HOW_SPIN && wt.met_ns == T0);
	CHECK(ep.prepares == 0 && stats.sleeps == 0 && ep.peer_checks == 0);
	frozen_ns = 0;
}

/*
 * The periodic peer check of a blocked wait looks at the ring first: a
 * message found there was woken for, at the instant of the check.
 */
static void test_a_message_found_by_the_periodic_peer_check_was_woken_for(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt, 0);
	ep.script[0] = SLEEPS_OUT;
	ep.steps = 1;
	ring.due = 4; /* the first look, the re-check, the look after the block, the check's */
	CHECK(wait_for_ring(&wt, -1) == 0);
	CHECK(ep.blocks == 1 && ep.asked[0] == RDMAQ_PEER_CHECK_NS && ep.peer_checks == 0);
	CHECK(wt.how == RDMAQ_HOW_WOKEN && wt.met_ns == T0 + RDMAQ_PEER_CHECK_NS);
	frozen_ns = 0;
}

/*
 * A peer found dead stays dead: the next wait checks it again at once, before
 * blocking, whatever the clock reads (here 100 ms after boot, when "never
 * checked" is exactly a period old).
 */
static void test_a_dead_peer_is_checked_again_by_the_next_wait(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt, 0);
	frozen_ns = RDMAQ_PEER_CHECK_NS;
	wt.peer_checked_ns = 0; /* never */
	ep.peer_dead = true;
	ep.script[0] = ep.script[1] = SLEEPS_OUT;
	ep.steps = 2;
	CHECK(wait_for_ring(&wt, -1) == -EOWNERDEAD);
	CHECK(wait_for_ring(&wt, -1) == -EOWNERDEAD);
	CHECK(ep.peer_checks == 2 && ep.blocks == 0 && stats.sleeps == 0);
	frozen_ns = 0;
}

/* ----------------------------------------------------------------- the nap */

/* A window planned (rdmaq_wait_prepare_window's) to open `in_ns` from now, spun to its opening. */
static struct rdmaq_cad_window window_in(int64_t in_ns)
{
	int64_t at = frozen_ns + in_ns;

	return (struct rdmaq_cad_window){ .sleep_until = at, .spin_from = at, .spin_until = at };
}

static int wait_in(struct rdmaq_waiter *wt, struct rdmaq_cadence *cad,
		   const struct rdmaq_cad_window *win)
{
	return rdmaq_wait_next(wt, cad, win, message_there, &ring, -1);
}

/*
 * A window that opens within the shortest nap (20 µs) is spun for, not napped
 * for; one that opens 1 ns later is napped for.
 */
static void test_no_nap_for_a_window_opening_within_the_shortest_nap(void)
{
	struct rdmaq_cad_window win;
	struct rdmaq_cadence cad;
	struct rdmaq_waiter wt;

	waiter_init(&wt, 0);
	rdmaq_cadence_init(&cad);
	win = window_in(MIN_NAP_NS);
	ring.due = 2;
	CHECK(wait_in(&wt, &cad, &win) == 0);
	CHECK(stats.naps == 0 && stats.windows == 1 && wt.how == RDMAQ_HOW_WINDOW);

	waiter_init(&wt, 0);
	rdmaq_cadence_init(&cad);
	win = window_in(MIN_NAP_NS + 1);
	CHECK(wait_in(&wt, &cad, &win) == 0);
	CHECK(stats.naps == 1);
	frozen_ns = 0;
}

/*
 * A nap whose re-check after announcing it finds the message never blocked: the
 * message was met as by a spin, not woken for, and the announcement taken back.
 */
static void test_a_nap_that_finds_its_message_before_blocking_never_slept(void)
{
	struct rdmaq_cad_window win;
	struct rdmaq_cadence cad;
	struct rdmaq_waiter wt;

	waiter_init(&wt, 0);
	rdmaq_cadence_init(&cad);
	win = window_in(1 * MS);
	ring.due = 2;
	CHECK(wait_in(&wt, &cad, &win) == 0);
	CHECK(stats.naps == 1 && stats.woken == 0 && ep.blocks == 0);
	CHECK(wt.how == RDMAQ_HOW_SPIN && wt.met_ns == T0);
	CHECK(ep.prepares == 1 && ep.finishes == 1);
	frozen_ns = 0;
}

/*
 * A nap that ends exactly when it asked to is one the cadence learns from: it
 * was 0 late, and the lateness it expects of naps falls.
 */
static void test_a_nap_that_ends_on_time_lowers_the_expected_lateness(void)
{
	struct rdmaq_cad_window win;
	struct rdmaq_cadence cad;
	struct rdmaq_waiter wt;
	int64_t late;

	waiter_init(&wt, 0);
	rdmaq_cadence_init(&cad);
	rdmaq_cadence_napped(&cad, T0, T0 + 200 * US); /* an earlier nap ended 200 µs late */
	late = cad.late;
	CHECK(late > 0);
	win = window_in(1 * MS);
	ep.script[0] = SLEEPS_OUT;
	ep.steps = 1;
	ring.due = 4; /* found in the window's spin */
	CHECK(wait_in(&wt, &cad, &win) == 0);
	CHECK(ep.asked[0] == 1 * MS && stats.naps == 1 && stats.windows == 1);
	CHECK(cad.late == late - late / 8);
	frozen_ns = 0;
}

/*
 * A nap that ends its margin plus 500 µs late still had its CPU; one ns later
 * it had lost it: one preemption counted, and anticipation backs off.
 */
static void test_a_nap_later_than_its_margin_allows_lost_its_cpu(void)
{
	for (int64_t more = 0; more <= 1; more++) {
		struct rdmaq_cad_window win;
		struct rdmaq_cadence cad;
		struct rdmaq_waiter wt;

		waiter_init(&wt, 0);
		rdmaq_cadence_init(&cad);
		win = window_in(1 * MS);
		ep.script[0] = SLEEPS_OUT;
		ep.script[0].ns = rdmaq_cadence_margin(&cad) + NAP_LATE_NS + more;
		ep.steps = 1;
		ring.due = 4;
		CHECK(wait_in(&wt, &cad, &win) == 0);
		CHECK(stats.naps == 1 && stats.windows == 1);
		CHECK(stats.preempted == (uint64_t)more && (cad.skip != 0) == more);
	}
	frozen_ns = 0;
}

/* A nap interrupted (a signal) fails the nap's preparation with that error. */
static void test_an_interrupted_nap_fails_its_preparation(void)
{
	struct rdmaq_cad_window win;
	struct rdmaq_cadence cad;
	struct rdmaq_waiter wt;

	waiter_init(&wt, 0);
	far_writer(&cad);
	ep.script[0] = (struct block){ .ret = -EINTR };
	ep.steps = 1;
	CHECK(rdmaq_wait_prepare_window(&wt, &cad, message_there, &ring, -1, &win) == -EINTR);
	CHECK(stats.naps == 1 && ep.blocks == 1 && ep.prepares == 1 && ep.finishes == 1);
	frozen_ns = 0;
}

/* ------------------------------------------------- policy auto: the spin to the window */

/* A waiter of policy "auto" (a free spin of up to 200 ms) facing far_writer's rhythm. */
static void auto_waiter_init(struct rdmaq_waiter *wt, struct rdmaq_cadence *cad)
{
	waiter_init(wt, 0);
	wt->free_spin_ns = 200 * MS;
	far_writer(cad);
}

/*
 * auto_waiter_init, and the window its cadence predicts now (*planned); each look at
 * the ring from here moves the clock 100 ns (a spin reads it every 6.4 µs).
 */
static void auto_waiter_planned(struct rdmaq_waiter *wt, struct rdmaq_cadence *cad,
				struct rdmaq_cad_window *planned)
{
	auto_waiter_init(wt, cad);
	CHECK(rdmaq_cadence_window(cad, frozen_ns, planned));
	ring.step_ns = 100;
}

/*
 * On a free CPU a wait of policy auto spins to the window instead of napping to it,
 * and stops the warm-up's lead (50 µs) before it opens: the caller warms its caches
 * there.  The nap is then spent: the wait that follows spins through the window
 * without blocking for the few µs left.
 */
static void test_policy_auto_spins_to_the_window_and_stops_a_warm_up_before_it(void)
{
	struct rdmaq_cad_window win, planned;
	struct rdmaq_cadence cad;
	struct rdmaq_waiter wt;

	auto_waiter_planned(&wt, &cad, &planned);
	CHECK(rdmaq_wait_prepare_window(&wt, &cad, message_there, &ring, -1, &win) == 1);
	CHECK(win.spin_from == planned.spin_from && win.spin_until == planned.spin_until);
	CHECK(stats.naps == 0 && ep.prepares == 0 && ep.blocks == 0);
	CHECK(frozen_ns >= planned.sleep_until - WARM_LEAD_NS);
	CHECK(frozen_ns < planned.sleep_until - WARM_LEAD_NS + 64 * ring.step_ns);
	CHECK(win.sleep_until == frozen_ns);

	ring.due = ring.looks + 100;
	CHECK(wait_in(&wt, &cad, &win) == 0);
	CHECK(stats.windows == 1 && stats.naps == 0 && ep.prepares == 0 && ep.blocks == 0);
	CHECK(wt.how == RDMAQ_HOW_WINDOW);
	frozen_ns = 0;
}

/*
 * A window that opens within the warm-up's lead plus the shortest nap (70 µs) is
 * not spun to (no time for a warm-up: the wait spins for the message as it comes);
 * one that opens 1 ns later is.
 */
static void test_policy_auto_spins_to_no_window_opening_within_a_warm_up(void)
{
	for (int64_t more = 0; more <= 1; more++) {
		struct rdmaq_cad_window win, planned;
		struct rdmaq_cadence cad;
		struct rdmaq_waiter wt;

		auto_waiter_planned(&wt, &cad, &planned);
		frozen_ns = planned.sleep_until - WARM_LEAD_NS - MIN_NAP_NS - more - ring.step_ns;
		CHECK(rdmaq_wait_prepare_window(&wt, &cad, message_there, &ring, -1, &win) == more);
		CHECK(stats.naps == 0 && ep.blocks == 0);
	}
	frozen_ns = 0;
}

/*
 * A window whose warm-up would start at the wait's deadline or later is not spun to
 * (the wait spins for the message, or times out, as it would without a window); one
 * whose warm-up starts 1 ns before the deadline is.
 */
static void test_policy_auto_spins_to_no_window_past_the_deadline(void)
{
	for (int64_t more = 0; more <= 1; more++) {
		struct rdmaq_cad_window win, planned;
		struct rdmaq_cadence cad;
		struct rdmaq_waiter wt;

		auto_waiter_planned(&wt, &cad, &planned);
		rdmaq_wait_prepare_window(&wt, &cad, message_there, &ring,
					  planned.sleep_until - WARM_LEAD_NS + more, &win);
		CHECK(more ? ring.looks > 1 : ring.looks == 1);
		CHECK(stats.naps == 0 && ep.blocks == 0);
	}
	frozen_ns = 0;
}

/*
 * A spin to the window that loses its CPU plans no window: the caller does not warm
 * up, and its wait decides afresh (on a CPU now judged busy: it blocks) instead of
 * spinning through the window; the preemption is counted and anticipation backs off.
 */
static void test_policy_auto_plans_no_window_after_a_spin_to_it_lost_its_cpu(void)
{
	struct rdmaq_cad_window win;
	struct rdmaq_cadence cad;
	struct rdmaq_waiter wt;

	auto_waiter_init(&wt, &cad);
	ring.jump_at = 2;
	ring.jump_ns = PREEMPT_GAP_NS + 1;
	CHECK(rdmaq_wait_prepare_window(&wt, &cad, message_there, &ring, -1, &win) == 0);
	CHECK(stats.preempted == 1 && stats.spins == 0 && stats.naps == 0 && ep.blocks == 0);
	CHECK(cad.skip != 0);
	CHECK(ring.looks == 1 + 64);
	frozen_ns = 0;
}

/* On a contended CPU a wait of policy auto neither spins nor naps to the window. */
static void test_policy_auto_on_a_busy_cpu_goes_to_no_window(void)
{
	struct rdmaq_cad_window win;
	struct rdmaq_cadence cad;
	struct rdmaq_waiter wt;

	auto_waiter_init(&wt, &cad);
	cpu_busy = true;
	CHECK(rdmaq_wait_prepare_window(&wt, &cad, message_there, &ring, -1, &win) == 0);
	CHECK(ring.looks == 1 && stats.naps == 0 && ep.blocks == 0 && stats.busy == 1);
	cpu_busy = false;
	frozen_ns = 0;
}

int main(void)
{
	test_a_spin_looks_64_times_before_it_reads_the_clock();
	test_a_spin_ends_at_the_look_that_reads_its_budget_s_end();
	test_a_spin_round_of_exactly_the_gap_is_no_preemption();
	test_a_spin_sees_its_endpoint_closed_at_its_next_reading_of_the_clock();
	test_a_spin_times_out_at_a_deadline_of_clock_zero();
	test_each_blocked_wait_halves_the_spin_down_to_its_floor();
	test_the_busy_and_free_spins_stamp_the_message_when_they_see_it();
	test_a_message_found_by_the_re_check_before_blocking_never_slept();
	test_a_block_that_sleeps_out_its_timeout_counts_as_expired();
	test_a_block_after_an_empty_wake_up_asks_for_the_rest_of_the_period();
	test_a_peer_check_that_overran_its_period_leaves_a_block_of_0();
	test_a_message_found_by_the_check_before_blocking_is_met_there();
	test_a_message_found_by_the_periodic_peer_check_was_woken_for();
	test_a_dead_peer_is_checked_again_by_the_next_wait();
	test_no_nap_for_a_window_opening_within_the_shortest_nap();
	test_a_nap_that_finds_its_message_before_blocking_never_slept();
	test_a_nap_that_ends_on_time_lowers_the_expected_lateness();
	test_a_nap_later_than_its_margin_allows_lost_its_cpu();
	test_an_interrupted_nap_fails_its_preparation();
	test_policy_auto_spins_to_the_window_and_stops_a_warm_up_before_it();
	test_policy_auto_spins_to_no_window_opening_within_a_warm_up();
	test_policy_auto_spins_to_no_window_past_the_deadline();
	test_policy_auto_on_a_busy_cpu_goes_to_no_window();
	test_policy_auto_plans_no_window_after_a_spin_to_it_lost_its_cpu();
	return check_report("wait_clock");
}

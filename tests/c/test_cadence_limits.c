/* SPDX-License-Identifier: MIT */
/*
 * The cadence predictor's arithmetic and every one of its limits at the
 * boundary: the window's exact place and width, the shortest and longest
 * interval it anticipates, how irregular a writer may be, when it is too
 * late for a window, and the clamps of the nap lateness.  Made-up stamps,
 * no clock (test_cadence.c has the behaviours; this file pins the numbers).
 */
#include "cadence.h"
#include "check.h"

#define US	     1000LL
#define MS	     1000000LL
#define OFFSET_CREEP 10 /* cadence.c: ns per message */
#define BACKOFF_MIN  4U

/* Messages stamped at t + iv[0], + iv[1], ... each seen `transit` later. */
static int64_t feed_ivs(struct rdmaq_cadence *c, int64_t t, const int64_t *iv, int n,
			int64_t transit)
{
	for (int i = 0; i < n; i++) {
		t += iv[i];
		rdmaq_cadence_observe(c, t, t + transit);
	}
	return t;
}

static int64_t feed(struct rdmaq_cadence *c, int64_t t, int n, int64_t iv, int64_t transit)
{
	for (int i = 0; i < n; i++) {
		t += iv;
		rdmaq_cadence_observe(c, t, t + transit);
	}
	return t;
}

static void test_the_window_of_a_steady_writer_exactly(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t t, due;

	rdmaq_cadence_init(&c);
	t = feed(&c, 1000 * MS, 20, MS, 2 * US);
	/* the fastest transit: kept by each message as fast, crept up by each
	 * one that was not faster than the crept value (every other one here) */
	CHECK(c.offset == 2 * US + OFFSET_CREEP);
	CHECK(c.n == 19);
	CHECK(rdmaq_cadence_window(&c, t + 10 * US, &w));
	due = t + c.offset + MS;
	CHECK(w.spin_from == due - RDMAQ_CAD_GUARD_NS);
	CHECK(w.spin_until == w.spin_from + MS / RDMAQ_CAD_BUDGET_DIV);
	CHECK(w.sleep_until == w.spin_from); /* no lateness seen yet */
}

/* 20 intervals of `med`, one of `lo` and one of `hi`: the middle 80 % is steady. */
static int64_t feed_spread(struct rdmaq_cadence *c, int64_t med, int64_t lo, int64_t hi)
{
	int64_t iv[22];

	for (int i = 0; i < 22; i++)
		iv[i] = med;
	iv[3] = lo;
	iv[17] = hi;
	rdmaq_cadence_observe(c, 1000 * MS, 1000 * MS);
	return feed_ivs(c, 1000 * MS, iv, 22, 0);
}

static void test_the_spin_budget_is_a_sixth_of_the_interval_up_to_1_ms(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t t;

	rdmaq_cadence_init(&c);
	t = feed_spread(&c, 3 * MS, 1 * MS, 5 * MS); /* a window far wider than the budget */
	CHECK(rdmaq_cadence_window(&c, t + 10 * US, &w));
	CHECK(w.spin_until - w.spin_from == 3 * MS / RDMAQ_CAD_BUDGET_DIV);
	/* it goes where most intervals fell (20 of the 22 at 3 ms), not from the shortest */
	CHECK(w.spin_from == t + c.offset + 3 * MS - RDMAQ_CAD_GUARD_NS);

	rdmaq_cadence_init(&c);
	t = feed_spread(&c, 12 * MS, 6 * MS, 18 * MS);
	CHECK(rdmaq_cadence_window(&c, t + 10 * US, &w));
	CHECK(w.spin_until - w.spin_from == RDMAQ_CAD_MAX_SPIN_NS);
}

/*
 * The window starts a guard (15 us + a quarter of the spread) before the
 * shortest interval seen while the spread and both guards fit the budget,
 * to the ns; past that the budget starts at the densest run, here from the
 * shortest interval.  Either way it lasts the budget.
 */
static void test_the_window_covers_every_interval_while_it_fits_with_both_guards(void)
{
	/* 312 + 2 * (15 + 78) us: the budget of 498 us exactly */
	const int64_t med = 2988 * US, fits = 312 * US;
	const int64_t budget = med / RDMAQ_CAD_BUDGET_DIV, guard = RDMAQ_CAD_GUARD_NS + fits / 4;
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t t;

	CHECK(fits + 2 * guard == budget);
	rdmaq_cadence_init(&c);
	t = feed_spread(&c, med, med - fits / 2, med + fits / 2);
	CHECK(rdmaq_cadence_window(&c, t + 10 * US, &w));
	CHECK(w.spin_from == t + c.offset + med - fits / 2 - guard);
	CHECK(w.spin_until == t + c.offset + med + fits / 2 + guard); /* the budget, exactly */

	/* 4 ns wider: the guards grow by 1 ns each, 6 ns over the budget */
	rdmaq_cadence_init(&c);
	t = feed_spread(&c, med, med - fits / 2 - 2, med + fits / 2 + 2);
	CHECK(rdmaq_cadence_window(&c, t + 10 * US, &w));
	CHECK(w.spin_from == t + c.offset + med - fits / 2 - 2 - RDMAQ_CAD_GUARD_NS);
	CHECK(w.spin_until == w.spin_from + budget);
}

/* Two early steps (a writer catching up) below 20 steady ones: the budget starts at the steady ones. */
static void test_the_densest_run_is_found_past_the_shortest_intervals(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t iv[23];
	int64_t t;

	for (int i = 0; i < 23; i++)
		iv[i] = 3 * MS;
	iv[4] = 2 * MS;
	iv[9] = 2 * MS + 10 * US;
	iv[15] = 3 * MS + 200 * US;
	rdmaq_cadence_init(&c);
	rdmaq_cadence_observe(&c, 1000 * MS, 1000 * MS);
	t = feed_ivs(&c, 1000 * MS, iv, 23, 0);
	CHECK(rdmaq_cadence_window(&c, t + 10 * US, &w));
	CHECK(w.spin_from == t + c.offset + 3 * MS - RDMAQ_CAD_GUARD_NS);
	CHECK(w.spin_until == w.spin_from + 3 * MS / RDMAQ_CAD_BUDGET_DIV);
}

static void test_the_shortest_and_longest_intervals_anticipated(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t t;

	rdmaq_cadence_init(&c);
	t = feed(&c, 1000 * MS, 12, RDMAQ_CAD_MIN_IV_NS, 0);
	CHECK(rdmaq_cadence_window(&c, t + 1 * US, &w));
	rdmaq_cadence_init(&c);
	t = feed(&c, 1000 * MS, 12, RDMAQ_CAD_MIN_IV_NS - 1, 0);
	CHECK(!rdmaq_cadence_window(&c, t + 1 * US, &w));

	rdmaq_cadence_init(&c);
	t = feed(&c, 1000 * MS, 12, RDMAQ_CAD_MAX_IV_NS, 0);
	CHECK(rdmaq_cadence_window(&c, t + 1 * US, &w));
	rdmaq_cadence_init(&c);
	t = feed(&c, 1000 * MS, 12, RDMAQ_CAD_MAX_IV_NS + 1, 0);
	CHECK(!rdmaq_cadence_window(&c, t + 1 * US, &w));
}

static void test_fewest_intervals_anticipated(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t t;

	rdmaq_cadence_init(&c);
	t = feed(&c, 1000 * MS, RDMAQ_CAD_MIN_SEEN, MS, 0); /* the first stamp is no interval */
	CHECK(c.n == RDMAQ_CAD_MIN_SEEN - 1);
	CHECK(!rdmaq_cadence_window(&c, t + 1 * US, &w));
	t = feed(&c, t, 1, MS, 0);
	CHECK(rdmaq_cadence_window(&c, t + 1 * US, &w));
	/* the same stamp twice is no interval */
	rdmaq_cadence_observe(&c, t, t);
	CHECK(c.n == RDMAQ_CAD_MIN_SEEN);
}

/* Ten intervals of 1 ms, the longest `top`: the spread judged is iv[9] - iv[1]. */
static bool window_with_top(int64_t top)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t iv[10] = { MS, MS, MS, MS, MS, MS, MS, MS, MS, top };
	int64_t t;

	rdmaq_cadence_init(&c);
	rdmaq_cadence_observe(&c, 1000 * MS, 1000 * MS);
	t = feed_ivs(&c, 1000 * MS, iv, 10, 0);
	return rdmaq_cadence_window(&c, t + 1 * US, &w);
}

static void test_how_irregular_a_writer_may_be(void)
{
	/* spread at most half the median */
	CHECK(window_with_top(MS + MS / 2));
	CHECK(!window_with_top(MS + MS / 2 + 1));
}

static void test_too_late_for_a_window_from_its_end(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w, w2;
	int64_t t;

	rdmaq_cadence_init(&c);
	t = feed(&c, 1000 * MS, 20, MS, 0);
	CHECK(rdmaq_cadence_window(&c, t, &w));
	CHECK(rdmaq_cadence_window(&c, w.spin_until - 1, &w2));
	CHECK(w2.spin_until == w.spin_until);
	CHECK(!rdmaq_cadence_window(&c, w.spin_until, &w2));
}

static void test_nap_lateness_is_averaged_and_clamped(void)
{
	struct rdmaq_cadence c;

	rdmaq_cadence_init(&c);
	rdmaq_cadence_napped(&c, 0, 80 * US);
	CHECK(c.late == 10 * US && c.late_dev == 10 * US); /* an eighth of each */
	CHECK(rdmaq_cadence_margin(&c) == 40 * US);	   /* late + 3 deviations */

	rdmaq_cadence_init(&c);
	rdmaq_cadence_napped(&c, MS, 0); /* early: not late at all */
	CHECK(c.late == 0 && c.late_dev == 0);
	rdmaq_cadence_napped(&c, 0, 80 * US);
	rdmaq_cadence_napped(&c, MS, 0); /* early again: 0 late, the average down by an eighth */
	CHECK(c.late == 10 * US - 10 * US / 8);

	rdmaq_cadence_init(&c);
	for (int i = 0; i < 300; i++)
		rdmaq_cadence_napped(&c, 0, 50 * MS); /* very late: counted as the maximum */
	CHECK(c.late <= RDMAQ_CAD_MAX_LATE_NS && c.late > RDMAQ_CAD_MAX_LATE_NS - 8);
}

/* A window asked for (wait.c asks before each), then met cleanly. */
static void clean_window(struct rdmaq_cadence *c)
{
	struct rdmaq_cad_window w;

	rdmaq_cadence_window(c, 0, &w);
	rdmaq_cadence_clean(c);
}

static void test_a_preemption_skips_the_back_off_and_doubles_it(void)
{
	struct rdmaq_cadence c;
	unsigned int i;

	rdmaq_cadence_init(&c);
	CHECK(c.backoff == BACKOFF_MIN && c.skip == 0);
	rdmaq_cadence_preempted(&c);
	CHECK(c.skip == BACKOFF_MIN && c.backoff == 2 * BACKOFF_MIN && c.clean == 0);
	/* RDMAQ_CAD_CLEAN_RUN clean windows halve it, not one fewer */
	for (i = 1; i < RDMAQ_CAD_CLEAN_RUN; i++)
		clean_window(&c);
	CHECK(c.backoff == 2 * BACKOFF_MIN);
	clean_window(&c);
	CHECK(c.backoff == BACKOFF_MIN && c.clean == 0);
}

/*
 * A run takes in an interval exactly its width (the budget less both guards:
 * 470 us at 3 ms) above its first: 3 intervals of 2.53 ms and 20 of 3 ms
 * make one run of 23 from 2.53 ms, denser than the 20 from 3 ms.
 */
static void test_a_run_takes_in_an_interval_exactly_its_width_away(void)
{
	const int64_t width = 3 * MS / RDMAQ_CAD_BUDGET_DIV - 2 * RDMAQ_CAD_GUARD_NS;
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t iv[23];
	int64_t t;

	for (int i = 0; i < 23; i++)
		iv[i] = i % 7 == 3 ? 3 * MS - width : 3 * MS;
	rdmaq_cadence_init(&c);
	rdmaq_cadence_observe(&c, 1000 * MS, 1000 * MS);
	t = feed_ivs(&c, 1000 * MS, iv, 23, 0);
	CHECK(c.sorted[2] == 3 * MS - width && c.sorted[3] == 3 * MS);
	CHECK(rdmaq_cadence_window(&c, t + 10 * US, &w));
	CHECK(w.spin_from == t + c.offset + 3 * MS - width - RDMAQ_CAD_GUARD_NS);
	CHECK(w.spin_until == w.spin_from + 3 * MS / RDMAQ_CAD_BUDGET_DIV);
}

/*
 * Of two runs as dense, the earliest: 11 intervals of 2.7 ms and 11 of 3.3 ms
 * (the median: a budget of 550 us, runs 520 us wide) are two runs of 11.
 */
static void test_of_two_runs_as_dense_the_budget_takes_the_earliest(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t iv[22];
	int64_t t;

	for (int i = 0; i < 22; i++)
		iv[i] = i % 2 ? 3300 * US : 2700 * US;
	rdmaq_cadence_init(&c);
	rdmaq_cadence_observe(&c, 1000 * MS, 1000 * MS);
	t = feed_ivs(&c, 1000 * MS, iv, 22, 0);
	CHECK(rdmaq_cadence_window(&c, t + 10 * US, &w));
	CHECK(w.spin_from == t + c.offset + 2700 * US - RDMAQ_CAD_GUARD_NS);
	CHECK(w.spin_until == w.spin_from + 3300 * US / RDMAQ_CAD_BUDGET_DIV);
}

int main(void)
{
	test_the_window_of_a_steady_writer_exactly();
	test_the_spin_budget_is_a_sixth_of_the_interval_up_to_1_ms();
	test_the_window_covers_every_interval_while_it_fits_with_both_guards();
	test_the_densest_run_is_found_past_the_shortest_intervals();
	test_a_run_takes_in_an_interval_exactly_its_width_away();
	test_of_two_runs_as_dense_the_budget_takes_the_earliest();
	test_the_shortest_and_longest_intervals_anticipated();
	test_fewest_intervals_anticipated();
	test_how_irregular_a_writer_may_be();
	test_too_late_for_a_window_from_its_end();
	test_nap_lateness_is_averaged_and_clamped();
	test_a_preemption_skips_the_back_off_and_doubles_it();
	return check_report("cadence_limits");
}

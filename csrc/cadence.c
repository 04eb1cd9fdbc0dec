/* SPDX-License-Identifier: MIT */
/* Cadence: predicting when the next message lands.  See cadence.h. */
#include <string.h>

#include "cadence.h"

#define RDMAQ_CAD_BACKOFF_MIN  4U
#define RDMAQ_CAD_OFFSET_CREEP 10 /* ns per message: ~10 µs per 1000 messages */

void rdmaq_cadence_init(struct rdmaq_cadence *c)
{
	*c = (struct rdmaq_cadence){ .backoff = RDMAQ_CAD_BACKOFF_MIN };
}

/* Index of the first of v[0..n) not below x (v sorted). */
static uint32_t lower_bound(const int64_t *v, uint32_t n, int64_t x)
{
	uint32_t lo = 0, hi = n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (v[mid] < x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Add an interval; past RDMAQ_CAD_WINDOW of them the oldest leaves the ring and the sorted copy. */
static void cadence_push(struct rdmaq_cadence *c, int64_t iv)
{
	int64_t *s = c->sorted;
	uint32_t i;

	if (c->n == RDMAQ_CAD_WINDOW) {
		i = lower_bound(s, c->n, c->iv[c->pos]);
		memmove(&s[i], &s[i + 1], (c->n - i - 1) * sizeof(s[0]));
		c->n--;
	}
	i = lower_bound(s, c->n, iv);
	memmove(&s[i + 1], &s[i], (c->n - i) * sizeof(s[0]));
	s[i] = iv;
	c->n++;
	c->iv[c->pos] = iv;
	c->pos = (c->pos + 1) % RDMAQ_CAD_WINDOW;
}

void rdmaq_cadence_observe(struct rdmaq_cadence *c, int64_t stamp, int64_t seen)
{
	int64_t off = seen - stamp;

	if (c->last_stamp && stamp > c->last_stamp)
		cadence_push(c, stamp - c->last_stamp);
	c->last_stamp = stamp;
	/* A message found waiting says nothing about transit time, but it
	 * can only raise the minimum, which the creep allows anyway. */
	if (!c->have_offset || off < c->offset) {
		c->offset = off;
		c->have_offset = true;
	} else {
		c->offset += RDMAQ_CAD_OFFSET_CREEP;
	}
}

/*
 * Where, in sorted[], the most intervals fit within `width` of the first
 * of them: the earliest such run when several do.
 */
static uint32_t densest_run(const struct rdmaq_cadence *c, int64_t width)
{
	const int64_t *iv = c->sorted;
	uint32_t i, j = 0, best = 0, best_i = 0;

	if (width < 0)
		width = 0;
	for (i = 0; i < c->n; i++) {
		while (j < c->n && iv[j] - iv[i] <= width)
			j++;
		if (j - i > best) {
			best = j - i;
			best_i = i;
		}
	}
	return best_i;
}

bool rdmaq_cadence_window(struct rdmaq_cadence *c, int64_t now, struct rdmaq_cad_window *w)
{
	const int64_t *iv = c->sorted;
	int64_t lo, hi, med, budget, due, guard;

	c->lost = false; /* a new window */
	if (c->n < RDMAQ_CAD_MIN_SEEN || !c->have_offset)
		return false;
	if (c->skip) {
		c->skip--;
		return false;
	}
	med = iv[c->n / 2];
	if (med < RDMAQ_CAD_MIN_IV_NS || med > RDMAQ_CAD_MAX_IV_NS)
		return false;
	/* Regular enough?  Judge by the middle 80 %: one stall must not
	 * switch anticipation off for a whole window of messages. */
	if (iv[c->n * 9 / 10] - iv[c->n / 10] > med / 2)
		return false;
	lo = iv[0];
	hi = iv[c->n - 1];
	budget = med / RDMAQ_CAD_BUDGET_DIV;
	if (budget > RDMAQ_CAD_MAX_SPIN_NS)
		budget = RDMAQ_CAD_MAX_SPIN_NS;
	due = c->last_stamp + c->offset;
	guard = RDMAQ_CAD_GUARD_NS + (hi - lo) / 4;
	if (hi - lo + 2 * guard <= budget) {
		/* The window covers every interval seen: what the tail needs. */
		w->spin_from = due + lo - guard;
	} else {
		/* It cannot: spend the budget where most intervals fell, not
		 * from the shortest one (one stall, or the writer's early
		 * catch-up, would otherwise end every window before its message). */
		lo = iv[densest_run(c, budget - 2 * RDMAQ_CAD_GUARD_NS)];
		w->spin_from = due + lo - RDMAQ_CAD_GUARD_NS;
	}
	/* Either way it stays open to the budget's end: a message later than
	 * every interval seen (about one in 16 of 32) still finds the reader
	 * spinning, where blocking would cost a wake-up, and one on time ends
	 * the spin where it would have ended anyway. */
	w->spin_until = w->spin_from + budget;
	if (now >= w->spin_until)
		return false; /* late already: block as usual */
	w->sleep_until = w->spin_from - rdmaq_cadence_margin(c);
	return true;
}

bool rdmaq_cadence_due(const struct rdmaq_cadence *c, int64_t now, int64_t ns)
{
	int64_t due;

	if (c->n < RDMAQ_CAD_MIN_SEEN || !c->have_offset)
		return false;
	due = c->last_stamp + c->offset;
	/* Overdue past the median interval, not the longest: a bursty writer's pauses are
	 * among the last intervals, and against the longest every pause would be due. */
	return due + c->sorted[0] - now < ns && now - (due + c->sorted[c->n / 2]) < ns;
}

bool rdmaq_cadence_far(const struct rdmaq_cadence *c, int64_t now, int64_t ns)
{
	if (c->n < RDMAQ_CAD_MIN_SEEN || !c->have_offset)
		return false;
	return c->last_stamp + c->offset + c->sorted[0] - now >= ns;
}

void rdmaq_cadence_napped(struct rdmaq_cadence *c, int64_t asked, int64_t woke)
{
	int64_t late = woke - asked, dev;

	if (late < 0)
		late = 0;
	if (late > RDMAQ_CAD_MAX_LATE_NS)
		late = RDMAQ_CAD_MAX_LATE_NS;
	dev = late > c->late ? late - c->late : c->late - late;
	c->late += (late - c->late) / 8;
	c->late_dev += (dev - c->late_dev) / 8;
}

int64_t rdmaq_cadence_margin(const struct rdmaq_cadence *c)
{
	return c->late + 3 * c->late_dev;
}

void rdmaq_cadence_preempted(struct rdmaq_cadence *c)
{
	c->skip = c->backoff;
	c->backoff =
		c->backoff * 2 < RDMAQ_CAD_BACKOFF_MAX ? c->backoff * 2 : RDMAQ_CAD_BACKOFF_MAX;
	c->clean = 0;
	c->lost = true;
}

void rdmaq_cadence_clean(struct rdmaq_cadence *c)
{
	/* A window whose nap woke late still spins and may find its message:
	 * counted clean, it would start the run the preemption just ended. */
	if (c->lost)
		return;
	if (++c->clean < RDMAQ_CAD_CLEAN_RUN)
		return;
	c->clean = 0;
	c->backoff =
		c->backoff / 2 > RDMAQ_CAD_BACKOFF_MIN ? c->backoff / 2 : RDMAQ_CAD_BACKOFF_MIN;
}

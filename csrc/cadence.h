/* SPDX-License-Identifier: MIT */
/*
 * Cadence: predicting when the next message lands.
 *
 * Decode steps reach the workers at a steady rhythm.  A reader that knows
 * it can sleep until just before the next message is due and spin through
 * a short window, so the message finds it running: no wake-up to pay
 * (~100 µs for an idle vCPU in a VM), at a CPU cost bounded per message.
 * The rhythm is learnt from the writer's stamps (its clock when the
 * message was published), not from when this reader happened to see
 * messages, so late wake-ups do not skew it.
 *
 * Anticipation switches itself off when it cannot pay: when the rhythm is
 * irregular or too fast or too slow to matter, and, with an exponential
 * back-off, when a spin loses its CPU (under contention a spinning reader
 * burns its slice and then waits behind the hogs; blocking with a short
 * slice does better there).
 */
#ifndef RDMAQ_CADENCE_H
#define RDMAQ_CADENCE_H

#include <stdbool.h>
#include <stdint.h>

#define RDMAQ_CAD_WINDOW      32	   /* intervals the window is learnt from */
#define RDMAQ_CAD_MIN_SEEN    8		   /* intervals needed before predicting */
#define RDMAQ_CAD_MIN_IV_NS   30000LL	   /* faster: the adaptive spin covers it */
#define RDMAQ_CAD_MAX_IV_NS   2000000000LL /* slower: not worth a window */
#define RDMAQ_CAD_GUARD_NS    15000LL	   /* margin each side of the window */
#define RDMAQ_CAD_BUDGET_DIV  6		   /* spin at most 1/6 of the interval per message */
#define RDMAQ_CAD_MAX_SPIN_NS 1000000LL
#define RDMAQ_CAD_MAX_LATE_NS 500000LL
#define RDMAQ_CAD_BACKOFF_MAX 1024U
#define RDMAQ_CAD_CLEAN_RUN   16U /* clean windows that halve the back-off */

struct rdmaq_cadence {
	int64_t last_stamp; /* writer's stamp of the previous message; 0: none */
	/* The last RDMAQ_CAD_WINDOW intervals between stamps, in arrival order
	 * (a ring at `pos`) and sorted: the window reads quantiles without sorting. */
	int64_t iv[RDMAQ_CAD_WINDOW];
	int64_t sorted[RDMAQ_CAD_WINDOW];
	uint32_t n, pos;
	/* min(seen - stamp): our clock minus the writer's, plus the transit.
	 * It creeps up slowly so a clock step cannot pin it low for ever. */
	int64_t offset;
	bool have_offset;
	int64_t late;	  /* how late our timed sleeps end: average */
	int64_t late_dev; /* ... and its mean deviation */
	uint32_t skip;	  /* messages left with anticipation off */
	uint32_t backoff; /* skip after the next preempted spin */
	uint32_t clean;	  /* windows since the last preempted one */
	bool lost;	  /* the window under way lost its CPU (maybe in its nap): not clean */
};

/* Where the next message is expected, in this reader's clock. */
struct rdmaq_cad_window {
	int64_t sleep_until; /* nap until here (already early by `late`) */
	int64_t spin_from;
	int64_t spin_until; /* then block as usual */
};

void rdmaq_cadence_init(struct rdmaq_cadence *c);
/* A message stamped `stamp` by the writer was seen at `seen`. */
void rdmaq_cadence_observe(struct rdmaq_cadence *c, int64_t stamp, int64_t seen);
/*
 * Is the next message predictable from `now`?  Fills *w if so: the spin
 * budget's worth of window, from the shortest recent interval when the
 * budget spans every one of them (with a guard each side), else from
 * where most recent intervals fall.
 */
bool rdmaq_cadence_window(struct rdmaq_cadence *c, int64_t now, struct rdmaq_cad_window *w);
/*
 * Can the next message not come within `ns` of `now`?  True only with a
 * rhythm learnt and the shortest recent interval still that far away.
 */
bool rdmaq_cadence_far(const struct rdmaq_cadence *c, int64_t now, int64_t ns);
/*
 * Can the next message come within `ns` of `now`?  True only with a rhythm
 * learnt, the shortest recent interval no further than that, and the
 * median not passed by more than `ns` (a writer that paused is not due,
 * nor one that pauses between bursts).
 */
bool rdmaq_cadence_due(const struct rdmaq_cadence *c, int64_t now, int64_t ns);
/* A nap asked to end at `asked` ended at `woke`. */
void rdmaq_cadence_napped(struct rdmaq_cadence *c, int64_t asked, int64_t woke);
/* How much earlier than the window a nap ends: our expected lateness and its spread. */
int64_t rdmaq_cadence_margin(const struct rdmaq_cadence *c);
/*
 * A window's spin lost its CPU (or its nap woke far too late): turn
 * anticipation off for a while, twice as long as last time.  Clean
 * windows earn that back slowly, so a busy machine that lets a few
 * windows through is not probed every few messages.
 */
void rdmaq_cadence_preempted(struct rdmaq_cadence *c);
/* A window met its message without losing its CPU, in its nap or its spin. */
void rdmaq_cadence_clean(struct rdmaq_cadence *c);

#endif

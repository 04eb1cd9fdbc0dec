/* SPDX-License-Identifier: MIT */
/*
 * Waiting: anticipate, spin briefly, then block with a short slice.
 *
 * 1. Anticipate (readers waiting for the next message, when the writer
 *    keeps a steady rhythm; see cadence.h): nap until just before the
 *    message is due, then spin through a short window.  The message finds
 *    the reader running, so no wake-up is paid, for a CPU cost bounded
 *    per message.
 * 2. Spin briefly, within an adaptive budget: a wait that ends while
 *    spinning raises it to twice the time it took, a wait that had to
 *    block halves it, down to RDMAQ_MIN_SPIN_NS, so a paced or idle reader
 *    converges to a 1 µs spin and ~0 CPU.  Once there it stays there until
 *    a message arrives within that microsecond.  folly's TurnSequencer
 *    adapts its spin too, but probes back up: MPMCQueue spins the whole
 *    budget again every 128th turn to learn whether spinning pays again.
 *    Such a probe was measured here and left out (docs/benchmarks/caveats.md:
 *    on the 2-core machine its spins gained nothing and its failed
 *    probes showed at p99); steady traffic is left to (1).
 * 3. Block in the kernel (futex, completion channel), asking for a short
 *    scheduler slice (slice.h) so that, on a busy machine, the wake-up
 *    preempts whatever runs instead of queueing behind it; when the next
 *    message is far, settle the scheduler lag first (rdmaq_wait_settle).
 *
 * 0. Policy "auto" (free_spin_ns): while the writer's rhythm says the next
 *    message can come within free_spin_ns, spin for it instead of (1): a
 *    nap's wake-up on an idle vCPU is what a spinning reader never pays.
 *    Only while spinning costs nobody a CPU (busy.h): spinning on a
 *    contended CPU through preemptions, as vLLM's readers do
 *    (the experiment free_spin_busy), gained serving on a GPU
 *    under CPU hogs and cost tens of milliseconds where eight readers
 *    shared two CPUs (docs/benchmarks.md).  With no message due, or a
 *    contended CPU, it waits as policy "efficient" (1-3) does.  Between
 *    messages it spins to just before the window (rdmaq_wait_spin_to)
 *    where (1) would nap, so the caller warms its caches as after a nap.
 *
 * A spin that loses its CPU to another task (a gap in the clock; busy.h) stops spinning: under
 * contention spinning only burns the slice that blocking would keep.  On a
 * contended CPU (this thread's own run delay, busy.h) a wait does not spin
 * at all, unless the experiment busy_spin_ns gives it a fixed budget.
 *
 * Blocked waits return -EINTR when a signal handler ran and, if asked
 * (eintr_on_main_thread), on the main thread every RDMAQ_PEER_CHECK_NS: Python's
 * handlers run only when the interpreter gets control back, and a signal
 * that lands while we spin interrupts no system call.
 *
 * The peer's liveness is checked after each RDMAQ_PEER_CHECK_NS a wait blocks,
 * and also by the endpoint's time, not only one call's: a wait about to block,
 * or that would time out, first checks when the endpoint's last check is that
 * old.  A caller polling with short timeouts (vLLM's readers wait 1 ms at a
 * time) learns of a dead peer as one that blocks does; the check (one poll()
 * of a pidfd or socket per peer) runs at most once a period, never cuts a
 * block short, and so costs a reader that messages keep busy nothing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "barrier.h"
#include "busy.h"
#include "error.h"
#include "wait.h"

/* A spin round this long means we lost the CPU (host steal in a VM is shorter). */
#define RDMAQ_PREEMPT_GAP_NS   200000LL
#define RDMAQ_MIN_NAP_NS       20000LL	/* shorter naps cost more than they save */
#define RDMAQ_NAP_LATE_NS      500000LL /* a nap ending this late: the CPU is taken */
#define RDMAQ_DEFAULT_SLICE_NS 300000U	/* see slice.h */
#define RDMAQ_WARM_LEAD_NS     50000LL	/* a cold warm-up (~10-60 µs), ahead of the window */

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

void rdmaq_waiter_init(struct rdmaq_waiter *wt, const struct rdmaq_wait_ops *wops, void *ep,
		       uint32_t spin_ns, struct rdmaq_stats *stats)
{
	*wt = (struct rdmaq_waiter){
		.ops = wops,
		.ep = ep,
		.spin_max_ns = spin_ns,
		.spin_ns = spin_ns,
		.anticipate = true,
		.settle_far_ns = RDMAQ_SETTLE_FAR_NS,
		.slice = { .want_ns = RDMAQ_DEFAULT_SLICE_NS },
		.peer_checked_ns = rdmaq_now_ns(), /* the first check, a period after this one */
		.stats = stats,
	};
}

int rdmaq_waiter_configure(struct rdmaq_waiter *wt, const struct rdmaq_wait_config *wc)
{
	if (wc->spin_ns > RDMAQ_MAX_SPIN_NS)
		return rdmaq_set_err(-EINVAL, "spin must be at most %d ns, got %u",
				     RDMAQ_MAX_SPIN_NS, wc->spin_ns);
	if (wc->free_spin_ns > RDMAQ_MAX_SPIN_NS)
		return rdmaq_set_err(-EINVAL, "free spin must be at most %d ns, got %u",
				     RDMAQ_MAX_SPIN_NS, wc->free_spin_ns);
	if (wc->slice_ns && (wc->slice_ns < RDMAQ_MIN_SLICE_NS || wc->slice_ns > RDMAQ_MAX_SLICE_NS))
		return rdmaq_set_err(-EINVAL, "slice must be 0 (off) or %d..%d ns, got %u",
				     RDMAQ_MIN_SLICE_NS, RDMAQ_MAX_SLICE_NS, wc->slice_ns);
	if (wc->busy_spin_ns > RDMAQ_MAX_SPIN_NS)
		return rdmaq_set_err(-EINVAL, "busy spin must be at most %d ns, got %u",
				     RDMAQ_MAX_SPIN_NS, wc->busy_spin_ns);
	if (wc->free_spin_busy > 1)
		return rdmaq_set_err(-EINVAL, "free_spin_busy must be 0 or 1, got %u",
				     wc->free_spin_busy);
	if (wc->settle_far_ns > (uint64_t)RDMAQ_MAX_SETTLE_FAR_NS)
		return rdmaq_set_err(-EINVAL, "settle distance must be at most %lld ns, got %llu",
				     RDMAQ_MAX_SETTLE_FAR_NS,
				     (unsigned long long)wc->settle_far_ns);
	wt->spin_max_ns = wc->spin_ns;
	wt->spin_ns = wc->spin_ns;
	wt->anticipate = wc->anticipate != 0;
	wt->eintr_on_main_thread = wc->eintr_on_main_thread != 0;
	wt->slice = (struct rdmaq_slice){ .want_ns = wc->slice_ns, .restore = wc->restore_slice };
	wt->free_spin_ns = wc->free_spin_ns;
	wt->busy_spin_ns = wc->busy_spin_ns;
	wt->free_spin_busy = wc->free_spin_busy != 0;
	wt->settle_far_ns = (int64_t)wc->settle_far_ns;
	return 0;
}

/* Signal handlers run on the main thread only; it must come back to them. */
static bool rdmaq_on_main_thread(void)
{
	static __thread int main_thread = -1;

	if (main_thread < 0)
		main_thread = syscall(SYS_gettid) == getpid();
	return main_thread;
}

static int rdmaq_wait_cancelled(struct rdmaq_waiter *wt)
{
	if (!READ_ONCE(wt->cancelled))
		return 0;
	return rdmaq_set_err(-ECANCELED, "cancelled: endpoint closed");
}

static int rdmaq_wait_met(struct rdmaq_waiter *wt, enum rdmaq_wait_how how, int64_t now)
{
	wt->met_ns = now ? now : rdmaq_now_ns();
	wt->how = how;
	return 1;
}

/*
 * Check the peer now: 1 when cond holds (data already in the ring wins over a
 * dead peer), 0 when the peer lives, <0 its death (or cond's error).
 */
static int rdmaq_wait_peer_now(struct rdmaq_waiter *wt, rdmaq_cond_fn cond, void *arg, int64_t now)
{
	int ret;

	wt->peer_checked_ns = now;
	ret = cond(arg);
	if (ret)
		return ret;
	ret = wt->ops->check_peer(wt->ep);
	if (ret < 0)
		wt->peer_checked_ns = 0; /* a dead peer stays dead: the next wait checks at once */
	return ret;
}

/* The same, if the endpoint's last check is RDMAQ_PEER_CHECK_NS old (else 0). */
static int rdmaq_wait_check_peer(struct rdmaq_waiter *wt, rdmaq_cond_fn cond, void *arg, int64_t now)
{
	if (now - wt->peer_checked_ns < RDMAQ_PEER_CHECK_NS)
		return 0;
	return rdmaq_wait_peer_now(wt, cond, arg, now);
}

/* A wait's -ETIMEDOUT, unless the peer check that is due finds the peer dead or cond met. */
static int rdmaq_wait_timed_out(struct rdmaq_waiter *wt, rdmaq_cond_fn cond, void *arg)
{
	int64_t now = rdmaq_now_ns();
	int ret = rdmaq_wait_check_peer(wt, cond, arg, now);

	if (ret > 0)
		return rdmaq_wait_met(wt, RDMAQ_HOW_READY, now);
	if (ret < 0)
		return ret;
	return rdmaq_set_err(-ETIMEDOUT, "timed out");
}

/*
 * Spin until cond holds (1), `until` passes (0) or an error (<0).
 * *preempted is set when the spin lost its CPU.
 */
static int rdmaq_spin(struct rdmaq_waiter *wt, rdmaq_cond_fn cond, void *arg, int64_t until,
		      int64_t deadline, bool *preempted)
{
	int64_t last = rdmaq_now_ns(), now;
	unsigned int i;
	int ret;

	*preempted = false;
	for (i = 1;; i++) {
		ret = cond(arg);
		if (ret)
			break;
		cpu_relax();
		/* clock_gettime is ~20 ns: look at the clock every 64 rounds. */
		if ((i & 63) == 0) {
			now = rdmaq_now_ns();
			/* A gap no task here took (the host did) is no preemption: spin on. */
			if (now - last > RDMAQ_PREEMPT_GAP_NS && rdmaq_cpu_busy_preempted(now)) {
				*preempted = true;
				wt->stats->preempted++;
				return 0;
			}
			last = now;
			ret = rdmaq_wait_cancelled(wt);
			if (ret)
				return ret;
			if (deadline >= 0 && now >= deadline)
				return rdmaq_set_err(-ETIMEDOUT, "timed out");
			if (now >= until)
				return 0;
		}
	}
	/* Found it, but maybe only after losing the CPU for a while: that
	 * must count, or anticipation never learns it is being preempted. */
	now = rdmaq_now_ns();
	if (ret > 0 && now - last > RDMAQ_PREEMPT_GAP_NS && rdmaq_cpu_busy_preempted(now)) {
		*preempted = true;
		wt->stats->preempted++;
	}
	return ret;
}

static int rdmaq_wait_adaptive_spin(struct rdmaq_waiter *wt, rdmaq_cond_fn cond, void *arg,
				    int64_t deadline)
{
	int64_t start = rdmaq_now_ns();
	bool preempted;
	int ret;

	ret = rdmaq_spin(wt, cond, arg, start + wt->spin_ns, deadline, &preempted);
	if (ret > 0 && preempted) {
		wt->spin_ns = RDMAQ_MIN_SPIN_NS;
		wt->stats->spins++;
		return rdmaq_wait_met(wt, RDMAQ_HOW_SPIN, 0);
	}
	if (ret > 0) {
		int64_t now = rdmaq_now_ns();
		uint64_t took = 2 * (uint64_t)(now - start);

		if (took > wt->spin_ns)
			wt->spin_ns = took < wt->spin_max_ns ? (uint32_t)took : wt->spin_max_ns;
		wt->stats->spins++;
		return rdmaq_wait_met(wt, RDMAQ_HOW_SPIN, now);
	}
	if (ret < 0)
		return ret;
	if (preempted)
		wt->spin_ns = RDMAQ_MIN_SPIN_NS;
	else
		wt->spin_ns =
			wt->spin_ns / 2 > RDMAQ_MIN_SPIN_NS ? wt->spin_ns / 2 : RDMAQ_MIN_SPIN_NS;
	if (wt->spin_ns > wt->spin_max_ns)
		wt->spin_ns = wt->spin_max_ns;
	return 0;
}

/*
 * One blocking round: announce, re-check, block for up to `block_ns`.
 * Returns 1 when cond holds, 0 after a wake-up or block_ns, <0 error.
 */
static int rdmaq_block_once(struct rdmaq_waiter *wt, rdmaq_cond_fn cond, void *arg,
			    int64_t deadline, int64_t block_ns, bool *blocked)
{
	int64_t now;
	int ret;

	*blocked = false;
	ret = wt->ops->prepare(wt->ep);
	if (ret < 0)
		return ret;
	/* Re-check after announcing the sleep: a wake-up sent before the
	 * announcement was seen would otherwise be lost. */
	ret = cond(arg);
	if (!ret)
		ret = rdmaq_wait_cancelled(wt);
	now = rdmaq_now_ns();
	if (!ret && deadline >= 0 && now >= deadline)
		ret = rdmaq_set_err(-ETIMEDOUT, "timed out");
	if (ret) {
		wt->ops->finish(wt->ep);
		return ret;
	}
	if (deadline >= 0 && deadline - now < block_ns)
		block_ns = deadline - now;
	*blocked = true;
	ret = wt->ops->block(wt->ep, block_ns);
	wt->ops->finish(wt->ep);
	if (ret < 0)
		return ret;
	if (ret > 0)
		wt->stats->expired++;
	return cond(arg);
}

/*
 * Nap until the predicted window opens.  1 when cond holds already (the
 * message came early), 0 when the window is open, <0 error.
 */
static int rdmaq_wait_nap(struct rdmaq_waiter *wt, struct rdmaq_cadence *cad, rdmaq_cond_fn cond,
			  void *arg, int64_t deadline, const struct rdmaq_cad_window *win)
{
	int64_t now = rdmaq_now_ns();
	bool blocked;
	int ret;

	if (win->sleep_until - now <= RDMAQ_MIN_NAP_NS ||
	    (deadline >= 0 && win->sleep_until >= deadline))
		return 0;
	if (wt->before_block) {
		ret = wt->before_block(wt);
		if (ret < 0)
			return ret;
	}
	wt->stats->naps++;
	rdmaq_slice_enter(&wt->slice);
	ret = rdmaq_block_once(wt, cond, arg, deadline, win->sleep_until - now, &blocked);
	rdmaq_slice_leave(&wt->slice);
	now = rdmaq_now_ns();
	if (ret > 0) {
		/* Early: the writer's wake-up beat the window. */
		if (blocked)
			wt->stats->woken++;
		return rdmaq_wait_met(wt, blocked ? RDMAQ_HOW_WOKEN : RDMAQ_HOW_SPIN, now);
	}
	if (ret < 0)
		return ret;
	if (now >= win->sleep_until) {
		/* Woken this late, we did not get the CPU when the timer fired. */
		if (now - win->sleep_until > rdmaq_cadence_margin(cad) + RDMAQ_NAP_LATE_NS) {
			wt->stats->preempted++;
			rdmaq_cadence_preempted(cad);
		}
		rdmaq_cadence_napped(cad, win->sleep_until, now);
	}
	return 0;
}

/* Spin through an open window: 1 when cond holds, 0 when it closed without, <0 error. */
static int rdmaq_wait_window(struct rdmaq_waiter *wt, struct rdmaq_cadence *cad, rdmaq_cond_fn cond,
			     void *arg, int64_t deadline, const struct rdmaq_cad_window *win)
{
	bool preempted;
	int ret;

	ret = rdmaq_wait_nap(wt, cad, cond, arg, deadline, win);
	if (ret)
		return ret;
	ret = rdmaq_spin(wt, cond, arg, win->spin_until, deadline, &preempted);
	if (preempted)
		rdmaq_cadence_preempted(cad);
	if (ret > 0) {
		wt->stats->spins++;
		wt->stats->windows++;
		if (!preempted)
			rdmaq_cadence_clean(cad);
		return rdmaq_wait_met(wt, RDMAQ_HOW_WINDOW, 0);
	}
	if (ret < 0)
		return ret;
	if (!preempted)
		wt->stats->misses++;
	return 0;
}

/*
 * Are the CPUs oversubscribed (then a wait must not spin)?  Counted in
 * stats->busy once per wait, whichever step asks first: *counted.
 */
static bool rdmaq_wait_busy(struct rdmaq_waiter *wt, int64_t now, bool *counted)
{
	if (!rdmaq_cpu_busy(now))
		return false;
	if (!*counted) {
		wt->stats->busy++;
		*counted = true;
	}
	return true;
}

/* Policy "auto": spin for the message rather than nap (the CPU is known not to be busy)? */
static bool rdmaq_wait_spin_free(struct rdmaq_waiter *wt, struct rdmaq_cadence *cad, int64_t now)
{
	return wt->free_spin_ns && cad && rdmaq_cadence_due(cad, now, wt->free_spin_ns);
}

/* Should this wait anticipate?  Fills *win with the window. */
static bool rdmaq_wait_plan(struct rdmaq_waiter *wt, struct rdmaq_cadence *cad,
			    struct rdmaq_cad_window *win, bool *busy_counted)
{
	int64_t now = rdmaq_now_ns();

	if (!cad || !wt->anticipate || rdmaq_wait_spin_free(wt, cad, now) ||
	    rdmaq_wait_busy(wt, now, busy_counted))
		return false;
	return rdmaq_cadence_window(cad, now, win);
}

/*
 * Policy "auto" on a free CPU: spin to the predicted window rather than nap to it,
 * ending RDMAQ_WARM_LEAD_NS early, so that the caller warms its caches (the unpickling
 * path) before the message as after a nap.  A spin of milliseconds loses them as a
 * nap does (ticks, the host): on the 2-vCPU VM, TP=1 at 10 ms, the reader's side
 * (message seen to object returned) took 9-44 µs p50 after a bare spin, 4-12 µs
 * warmed (64 B and 2 KB, six runs each).  1 when cond holds, 0 when the window is
 * near, 2 when the spin lost its CPU (no window: the wait decides afresh, on a CPU
 * now judged busy, instead of warming up and spinning through the window), <0 error.
 */
static int rdmaq_wait_spin_to(struct rdmaq_waiter *wt, struct rdmaq_cadence *cad,
			      rdmaq_cond_fn cond, void *arg, int64_t deadline,
			      struct rdmaq_cad_window *win)
{
	bool preempted;
	int ret;

	ret = rdmaq_spin(wt, cond, arg, win->sleep_until - RDMAQ_WARM_LEAD_NS, deadline, &preempted);
	if (preempted)
		rdmaq_cadence_preempted(cad);
	if (ret > 0) {
		wt->stats->spins++;
		return rdmaq_wait_met(wt, RDMAQ_HOW_SPIN, 0);
	}
	if (ret == 0 && preempted)
		return 2;
	/* The window's nap is spent: the wait spins from here (a nap of the last
	 * 50 µs would cost a wake-up). */
	win->sleep_until = rdmaq_now_ns();
	return ret;
}

/*
 * Should this wait spin to the window (policy "auto", a free CPU, the window far
 * enough for a warm-up and before the deadline)?  Fills *win.
 */
static bool rdmaq_wait_plan_spin(struct rdmaq_waiter *wt, struct rdmaq_cadence *cad,
				 struct rdmaq_cad_window *win, bool *busy_counted, int64_t deadline)
{
	int64_t now = rdmaq_now_ns(), until;

	if (!cad || !wt->anticipate || !rdmaq_wait_spin_free(wt, cad, now) ||
	    rdmaq_wait_busy(wt, now, busy_counted) || !rdmaq_cadence_window(cad, now, win))
		return false;
	until = win->sleep_until - RDMAQ_WARM_LEAD_NS;
	return until - now > RDMAQ_MIN_NAP_NS && (deadline < 0 || until < deadline);
}

int rdmaq_wait_prepare_window(struct rdmaq_waiter *wt, struct rdmaq_cadence *cad,
			      rdmaq_cond_fn cond, void *arg, int64_t deadline,
			      struct rdmaq_cad_window *win)
{
	int ret;

	wt->busy_noted = false;
	ret = cond(arg);
	if (ret)
		return ret < 0 ? ret : 0;
	/* A busy CPU found here is the next wait's: it counts once (busy_noted). */
	if (rdmaq_wait_plan(wt, cad, win, &wt->busy_noted))
		ret = rdmaq_wait_nap(wt, cad, cond, arg, deadline, win);
	else if (rdmaq_wait_plan_spin(wt, cad, win, &wt->busy_noted, deadline))
		ret = rdmaq_wait_spin_to(wt, cad, cond, arg, deadline, win);
	else
		return 0;
	if (ret == -ETIMEDOUT) {
		ret = rdmaq_wait_timed_out(wt, cond, arg);
		return ret > 0 ? 0 : ret;
	}
	return ret < 0 ? ret : ret == 0;
}

/*
 * Settle the thread's scheduler lag before a long sleep (settle_far_ns).
 *
 * EEVDF keeps a sleeper's lag: a thread that went to sleep owing CPU time
 * (it ran ahead of its share: every reader that just handled a message
 * under CPU hogs) comes back with no credit at best, and then preempts a
 * hog only when its deadline, one short slice away, is earlier than the
 * hog's: a hog within a slice of its own deadline keeps the CPU until the
 * next tick (up to 4 ms at HZ=250; the 1.3 ms tail of the 10 ms pace).  A
 * thread that waited in the run queue before sleeping owes nothing and is
 * owed time: woken with positive lag, the hog is not eligible and the
 * thread runs at once.  Waiting costs a tick at most, so it is done only
 * when the next message is far: sched_yield() runs the thread behind what
 * it owes now, and is an instant no-op when nothing else is runnable or the
 * thread is owed time already.  (Asking for the short slice again, which
 * also re-places the thread, was measured too: docs/benchmarks/tails-diagnosed.md.)
 */
static void rdmaq_wait_settle(struct rdmaq_waiter *wt)
{
	sched_yield();
	wt->stats->settles++;
}

static int rdmaq_wait_blocking(struct rdmaq_waiter *wt, rdmaq_cond_fn cond, void *arg,
			       int64_t deadline, bool far)
{
	int64_t last_check = rdmaq_now_ns();
	bool blocked;
	int ret;

	/* A check due by the endpoint's time (a caller that returns before one of
	 * its calls has blocked a whole period) comes first: it costs no wake-up. */
	ret = rdmaq_wait_check_peer(wt, cond, arg, last_check);
	if (ret)
		return ret > 0 ? rdmaq_wait_met(wt, RDMAQ_HOW_SPIN, last_check) : ret;
	if (wt->before_block) {
		ret = wt->before_block(wt);
		if (ret < 0)
			return ret;
	}
	rdmaq_slice_enter(&wt->slice);
	if (far)
		rdmaq_wait_settle(wt);
	for (;;) {
		int64_t now = rdmaq_now_ns();
		/* Until the next peer check at most. */
		int64_t block_ns = RDMAQ_PEER_CHECK_NS - (now - last_check);

		if (block_ns < 0)
			block_ns = 0;
		wt->stats->sleeps++;
		ret = rdmaq_block_once(wt, cond, arg, deadline, block_ns, &blocked);
		if (!blocked)
			wt->stats->sleeps--; /* the re-check found it: never slept */
		if (ret > 0) {
			if (blocked)
				wt->stats->woken++;
			ret = rdmaq_wait_met(wt, blocked ? RDMAQ_HOW_WOKEN : RDMAQ_HOW_SPIN, 0);
			break;
		}
		if (ret < 0)
			break;
		now = rdmaq_now_ns();
		if (now - last_check >= RDMAQ_PEER_CHECK_NS) {
			last_check = now;
			ret = rdmaq_wait_peer_now(wt, cond, arg, now);
			if (ret > 0) {
				ret = rdmaq_wait_met(wt, RDMAQ_HOW_WOKEN, now);
				break;
			}
			if (ret < 0)
				break;
			if (wt->eintr_on_main_thread && rdmaq_on_main_thread()) {
				ret = rdmaq_set_err(-EINTR, "returning to run signal handlers");
				break;
			}
		}
	}
	rdmaq_slice_leave(&wt->slice);
	return ret;
}

/*
 * Spin through busy_spin_ns on an oversubscribed CPU: 1 when cond holds, 0 when
 * the budget ran out or the spin lost its CPU, <0 error.  The budget is fixed
 * (a blocked wait does not shrink it): it is the user's bound on the CPU a
 * wait may burn while other tasks are runnable.
 */
static int rdmaq_wait_busy_spin(struct rdmaq_waiter *wt, rdmaq_cond_fn cond, void *arg,
				int64_t deadline)
{
	bool preempted;
	int ret;

	ret = rdmaq_spin(wt, cond, arg, rdmaq_now_ns() + wt->busy_spin_ns, deadline, &preempted);
	if (ret <= 0)
		return ret;
	wt->stats->spins++;
	return rdmaq_wait_met(wt, RDMAQ_HOW_SPIN, 0);
}

/*
 * Policy "auto": spin up to free_spin_ns while nobody else wants the CPU.  1 when
 * cond holds, 0 when the spin ran out or lost its CPU, <0 error.
 */
static int rdmaq_wait_free_spin(struct rdmaq_waiter *wt, rdmaq_cond_fn cond, void *arg,
				int64_t deadline)
{
	int64_t until = rdmaq_now_ns() + wt->free_spin_ns;
	bool preempted;
	int ret;

	do
		ret = rdmaq_spin(wt, cond, arg, until, deadline, &preempted);
	while (!ret && preempted && wt->free_spin_busy);
	if (ret <= 0)
		return ret;
	wt->stats->spins++;
	return rdmaq_wait_met(wt, RDMAQ_HOW_SPIN, 0);
}

static int rdmaq_wait_inner(struct rdmaq_waiter *wt, struct rdmaq_cadence *cad,
			    const struct rdmaq_cad_window *planned, rdmaq_cond_fn cond, void *arg,
			    int64_t deadline)
{
	struct rdmaq_cad_window win;
	bool busy_counted = wt->busy_noted, far, busy = false;
	int ret;

	wt->busy_noted = false;
	ret = cond(arg);
	if (ret)
		return ret < 0 ? ret : rdmaq_wait_met(wt, RDMAQ_HOW_READY, 0);
	ret = rdmaq_wait_cancelled(wt);
	if (ret)
		return ret;
	if (planned || rdmaq_wait_plan(wt, cad, &win, &busy_counted)) {
		ret = rdmaq_wait_window(wt, cad, cond, arg, deadline, planned ? planned : &win);
		if (ret)
			return ret;
	}
	if (wt->spin_max_ns || wt->busy_spin_ns || wt->free_spin_ns)
		busy = rdmaq_wait_busy(wt, rdmaq_now_ns(), &busy_counted);
	if ((!busy || wt->free_spin_busy) && rdmaq_wait_spin_free(wt, cad, rdmaq_now_ns())) {
		ret = rdmaq_wait_free_spin(wt, cond, arg, deadline);
		if (ret)
			return ret;
	} else if (wt->spin_max_ns && !busy) {
		ret = rdmaq_wait_adaptive_spin(wt, cond, arg, deadline);
		if (ret)
			return ret;
	} else if (busy && wt->busy_spin_ns) {
		ret = rdmaq_wait_busy_spin(wt, cond, arg, deadline);
		if (ret)
			return ret;
	}
	far = cad && wt->settle_far_ns && rdmaq_cadence_far(cad, rdmaq_now_ns(), wt->settle_far_ns);
	return rdmaq_wait_blocking(wt, cond, arg, deadline, far);
}

int rdmaq_wait_next(struct rdmaq_waiter *wt, struct rdmaq_cadence *cad,
		    const struct rdmaq_cad_window *planned, rdmaq_cond_fn cond, void *arg,
		    int64_t deadline)
{
	int ret = rdmaq_wait_inner(wt, cad, planned, cond, arg, deadline);

	if (ret == -ETIMEDOUT)
		ret = rdmaq_wait_timed_out(wt, cond, arg);
	return ret > 0 ? 0 : ret;
}

int rdmaq_wait(struct rdmaq_waiter *wt, rdmaq_cond_fn cond, void *arg, int64_t deadline)
{
	return rdmaq_wait_next(wt, NULL, NULL, cond, arg, deadline);
}

/* SPDX-License-Identifier: MIT */
/*
 * The ring engine: framing, flow control, message assembly.  The memory
 * format it writes and reads is described in format.h.
 */
#include <pthread.h>
#include <string.h>
#include <sys/random.h>

#include "barrier.h"
#include "ring.h"

uint32_t rdmaq_slot_payload(uint32_t slot_bytes)
{
	/* The trailer is 8-byte aligned, so only whole 8-byte words count. */
	return (slot_bytes - (uint32_t)RDMAQ_REC_OVERHEAD) & ~7U;
}

/* The limits (rdmaq.h) fit the format: a slot holds a record's overhead and starts a cache line. */
_Static_assert(RDMAQ_MIN_SLOT_BYTES >= RDMAQ_REC_OVERHEAD + 8, "a slot too small for a record");
_Static_assert(RDMAQ_SLOT_ALIGN % RDMAQ_CACHELINE == 0, "slots off cache lines");
_Static_assert(RDMAQ_MAX_READERS % 64 == 0, "rdmaq_writer.dropped is in 64-bit words");

int rdmaq_config_check(const struct rdmaq_config *cfg)
{
	if (cfg->n_readers < 1 || cfg->n_readers > RDMAQ_MAX_READERS)
		return rdmaq_set_err(-EINVAL, "n_readers must be in 1..%d, got %u",
				     RDMAQ_MAX_READERS, cfg->n_readers);
	if (cfg->slot_bytes < RDMAQ_MIN_SLOT_BYTES || cfg->slot_bytes > RDMAQ_MAX_SLOT_BYTES ||
	    cfg->slot_bytes % RDMAQ_SLOT_ALIGN)
		return rdmaq_set_err(-EINVAL,
				     "slot_bytes must be a multiple of %d in %d..%d, got %u",
				     RDMAQ_SLOT_ALIGN, RDMAQ_MIN_SLOT_BYTES, RDMAQ_MAX_SLOT_BYTES,
				     cfg->slot_bytes);
	if (cfg->slots < RDMAQ_MIN_SLOTS || cfg->slots > RDMAQ_MAX_SLOTS)
		return rdmaq_set_err(-EINVAL, "slots must be in %d..%d, got %u", RDMAQ_MIN_SLOTS,
				     RDMAQ_MAX_SLOTS, cfg->slots);
	if ((uint64_t)cfg->slot_bytes * cfg->slots > (1ULL << 34))
		return rdmaq_set_err(-EINVAL, "ring of %u x %u bytes is larger than 16 GiB",
				     cfg->slots, cfg->slot_bytes);
	if (cfg->max_message < 1)
		return rdmaq_set_err(-EINVAL, "max_message must be at least 1");
	return 0;
}

uint32_t rdmaq_forks;

static void rdmaq_count_fork(void)
{
	/* In the child, which has one thread now. */
	__atomic_store_n(&rdmaq_forks, rdmaq_forks + 1, __ATOMIC_RELAXED);
}

static void rdmaq_watch_forks(void)
{
	pthread_atfork(NULL, NULL, rdmaq_count_fork);
}

uint32_t rdmaq_fork_count(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, rdmaq_watch_forks);
	return __atomic_load_n(&rdmaq_forks, __ATOMIC_RELAXED);
}

static int rdmaq_forked_err(const char *what)
{
	return rdmaq_set_err(-ESTALE, "%s belongs to the parent process (fork)", what);
}

uint64_t rdmaq_random_u64(void)
{
	uint64_t v = 0;

	/* No entropy yet (early boot): an address still differs from stale payload. */
	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != sizeof(v))
		v = (uint64_t)(uintptr_t)&v ^ 0x9e3779b97f4a7c15ULL;
	return v | 1;
}

void rdmaq_writer_init(struct rdmaq_writer *w, const struct rdmaq_writer_ops *ops,
		       const struct rdmaq_wait_ops *wops, const struct rdmaq_config *cfg,
		       uint64_t key, struct rdmaq_credit *credits)
{
	w->ops = ops;
	w->cfg = *cfg;
	w->key = key;
	w->next_seq = 1;
	w->credits = credits;
	w->payload = rdmaq_slot_payload(cfg->slot_bytes);
	w->forks = rdmaq_fork_count();
	rdmaq_waiter_init(&w->waiter, wops, w, cfg->spin_ns, &w->stats);
}

static int rdmaq_reader_before_block(struct rdmaq_waiter *wt);

void rdmaq_reader_init(struct rdmaq_reader *r, const struct rdmaq_reader_ops *ops,
		       const struct rdmaq_wait_ops *wops, const struct rdmaq_config *cfg,
		       uint32_t index, uint64_t key, uint8_t *ring)
{
	r->ops = ops;
	r->cfg = *cfg;
	r->index = index;
	r->key = key;
	r->ring = ring;
	r->payload = rdmaq_slot_payload(cfg->slot_bytes);
	r->next_seq = 1;
	r->credited = 1;
	r->credit_batch = cfg->slots / 4 ? cfg->slots / 4 : 1;
	r->forks = rdmaq_fork_count();
	rdmaq_waiter_init(&r->waiter, wops, r, cfg->spin_ns, &r->stats);
	r->waiter.before_block = rdmaq_reader_before_block;
	rdmaq_cadence_init(&r->cadence);
}

size_t rdmaq_rec_frame(uint8_t *slot, uint64_t key, const struct rdmaq_rec_hdr *hdr,
		       const struct rdmaq_iovec *iov, int iovcnt, size_t iov_off)
{
	struct rdmaq_rec_hdr *dst = (struct rdmaq_rec_hdr *)slot;
	uint8_t *out = slot + sizeof(*dst);
	size_t left = hdr->len, toff;
	int i;

	dst->msg_len = hdr->msg_len;
	dst->len = hdr->len;
	dst->flags = hdr->flags;
	dst->stamp_ns = hdr->stamp_ns;
	for (i = 0; i < iovcnt && left; i++) {
		size_t n;

		if (iov_off >= iov[i].len) {
			iov_off -= iov[i].len;
			continue;
		}
		n = iov[i].len - iov_off;
		if (n > left)
			n = left;
		memcpy(out, (const uint8_t *)iov[i].base + iov_off, n);
		out += n;
		left -= n;
		iov_off = 0;
	}
	toff = rdmaq_rec_trailer_off(hdr->len);
	smp_store_release((uint64_t *)(slot + toff), hdr->seq ^ key);
	/* Last, with release: pairs with the acquire load of seq in
	 * rdmaq_reader_has_record, so a reader that sees this seq sees the
	 * fields, payload and trailer stored above (format.h). */
	smp_store_release(&dst->seq, hdr->seq);
	return toff + sizeof(uint64_t);
}

/* ---- writer ------------------------------------------------------------- */

struct rdmaq_room {
	struct rdmaq_writer *w;
	uint64_t last_seq; /* need credit up to and including this seq */
};

/* 1 when every open reader has room for last_seq. */
static int rdmaq_writer_has_room(void *arg)
{
	struct rdmaq_room *room = arg;
	struct rdmaq_writer *w = room->w;
	uint32_t i, open = 0;

	for (i = 0; i < w->cfg.n_readers; i++) {
		uint64_t c = smp_load_acquire(&w->credits[i].next_seq);

		if (c == RDMAQ_CREDIT_CLOSED || rdmaq_writer_dropped(w, i))
			continue;
		/* Credit is peer-written memory: never trust it past what was sent. */
		if (c > w->next_seq)
			return rdmaq_set_err(-EPROTO,
					     "reader %u reports credit %llu, only %llu records were sent",
					     i, (unsigned long long)c,
					     (unsigned long long)w->next_seq - 1);
		open++;
		if (room->last_seq - c >= w->cfg.slots)
			return 0;
	}
	if (!open)
		return rdmaq_set_err(-EPIPE, "all %u readers have closed or were dropped",
				     w->cfg.n_readers);
	return 1;
}

static int rdmaq_writer_poll_ready(void *arg)
{
	struct rdmaq_writer *w = arg;

	return w->ops->poll_ready(w);
}

int rdmaq_writer_wait_ready(struct rdmaq_writer *w, int64_t timeout_ns)
{
	int ret;

	if (rdmaq_forked(w->forks))
		return rdmaq_forked_err("writer");
	if (w->ready)
		return 0;
	ret = rdmaq_wait(&w->waiter, rdmaq_writer_poll_ready, w, rdmaq_deadline(timeout_ns));
	if (ret == -ETIMEDOUT && w->ops->ready_timeout)
		return w->ops->ready_timeout(w);
	if (ret)
		return ret;
	ret = w->ops->connect(w);
	if (ret)
		return ret;
	w->ready = true;
	return 0;
}

/* Reserve room for up to `want` records starting at next_seq. */
static int rdmaq_writer_reserve(struct rdmaq_writer *w, uint64_t want, int64_t deadline)
{
	struct rdmaq_room room = { .w = w, .last_seq = w->next_seq + want - 1 };
	int ret;

	ret = rdmaq_writer_has_room(&room);
	if (ret)
		return ret < 0 ? ret : 0;
	w->stats.credits++;
	/* Readers must see what is already emitted, or they never free room. */
	ret = w->ops->flush(w, true);
	if (ret)
		return ret;
	/* A reader holding its credit lazily must not stall us: fetch it. */
	if (w->ops->refresh_credit) {
		ret = w->ops->refresh_credit(w);
		if (ret)
			return ret;
		ret = rdmaq_writer_has_room(&room);
		if (ret)
			return ret < 0 ? ret : 0;
	}
	return rdmaq_wait(&w->waiter, rdmaq_writer_has_room, &room, deadline);
}

static int rdmaq_writer_emit_abort(struct rdmaq_writer *w, int64_t deadline)
{
	struct rdmaq_rec_hdr hdr = { .seq = w->next_seq, .flags = RDMAQ_REC_ABORT };
	int ret;

	ret = rdmaq_writer_reserve(w, 1, deadline);
	if (ret)
		return ret;
	ret = w->ops->emit(w, hdr.seq, &hdr, NULL, 0, 0);
	if (ret)
		return ret;
	w->next_seq++;
	w->abort_pending = false;
	return 0;
}

/* Emit the message described by w->put from where it stopped. */
static int rdmaq_writer_emit_message(struct rdmaq_writer *w, const struct rdmaq_iovec *iov,
				     int iovcnt, int64_t deadline)
{
	struct rdmaq_put_state *p = &w->put;
	int ret;

	/* The marker ending a message given up goes first; if waiting for its
	 * slot is interrupted, the resumed put still owes it. */
	if (w->abort_pending) {
		ret = rdmaq_writer_emit_abort(w, deadline);
		if (ret)
			return ret;
	}
	/* A message that fits the ring is reserved whole, so a timeout never
	 * leaves half of it behind; a longer one streams through. */
	if (p->k == 0 && p->nrec <= w->cfg.slots) {
		ret = rdmaq_writer_reserve(w, p->nrec, deadline);
		if (ret)
			return ret;
	}
	if (p->k == 0)
		p->stamp_ns = rdmaq_now_ns();
	for (; p->k < p->nrec; p->k++) {
		struct rdmaq_rec_hdr hdr = {
			.seq = w->next_seq,
			.msg_len = p->total,
			.len = (uint32_t)(p->total - p->off < w->payload ? p->total - p->off
									 : w->payload),
			.flags = (p->k == 0 ? RDMAQ_REC_FIRST : 0) |
				 (p->k == p->nrec - 1 ? RDMAQ_REC_LAST : 0),
			.stamp_ns = p->stamp_ns,
		};

		if (p->nrec > w->cfg.slots) {
			ret = rdmaq_writer_reserve(w, 1, deadline);
			if (ret)
				return ret;
		}
		ret = w->ops->emit(w, hdr.seq, &hdr, iov, iovcnt, p->off);
		if (ret)
			return ret;
		p->off += hdr.len;
		w->next_seq++;
	}
	return 0;
}

/*
 * The put in progress will not complete: a put that fails delivers nothing.
 * If records of it were emitted, an ABORT record owed before the next
 * message tells readers to drop what they have of it.
 */
static void rdmaq_writer_abandon(struct rdmaq_writer *w)
{
	if (w->put.active && w->put.k)
		w->abort_pending = true;
	w->put.active = false;
}

/* The writer can take a call: not a fork's copy, not closed, ready. */
static int rdmaq_writer_check_usable(struct rdmaq_writer *w)
{
	if (rdmaq_forked(w->forks))
		return rdmaq_forked_err("writer");
	if (w->closed)
		return rdmaq_set_err(-EBADF, "writer is closed");
	if (!w->ready)
		return rdmaq_set_err(-ENOTCONN, "writer is not ready: call wait_ready() first");
	return 0;
}

static int rdmaq_writer_send(struct rdmaq_writer *w, const struct rdmaq_iovec *iov, int iovcnt,
			     int64_t timeout_ns, bool resume)
{
	int64_t deadline = rdmaq_deadline(timeout_ns);
	uint64_t total = 0;
	int i, ret;

	w->trace = (struct rdmaq_trace){ .start_ns = rdmaq_now_ns() };
	ret = rdmaq_writer_check_usable(w);
	if (ret)
		return ret;
	if (iovcnt < 0)
		return rdmaq_set_err(-EINVAL, "negative iovcnt");
	for (i = 0; i < iovcnt; i++)
		total += iov[i].len;
	if (resume && (!w->put.active || w->put.total != total))
		return rdmaq_set_err(-EINVAL, "nothing to resume: no interrupted put of %llu bytes",
				     (unsigned long long)total);
	if (!resume) {
		/* A put left interrupted (its caller gave up on it) is abandoned. */
		rdmaq_writer_abandon(w);
		if (total > w->cfg.max_message)
			return rdmaq_set_err(-EMSGSIZE,
					     "message of %llu bytes exceeds max_message_bytes=%llu",
					     (unsigned long long)total,
					     (unsigned long long)w->cfg.max_message);
		w->put = (struct rdmaq_put_state){
			.active = true,
			.total = total,
			.nrec = total ? (total + w->payload - 1) / w->payload : 1,
		};
	}
	ret = rdmaq_writer_emit_message(w, iov, iovcnt, deadline);
	if (ret) {
		if (ret != -EINTR) /* -EINTR: resumable */
			rdmaq_writer_abandon(w);
		return ret;
	}
	w->put.active = false;
	w->trace.mid_ns = rdmaq_now_ns();
	ret = w->ops->flush(w, true);
	if (ret)
		return ret;
	w->trace.end_ns = rdmaq_now_ns();
	w->stats.messages++;
	w->stats.bytes += total;
	return 0;
}

int rdmaq_writer_put(struct rdmaq_writer *w, const struct rdmaq_iovec *iov, int iovcnt,
		     int64_t timeout_ns)
{
	return rdmaq_writer_send(w, iov, iovcnt, timeout_ns, false);
}

int rdmaq_writer_try_put(struct rdmaq_writer *w, const struct rdmaq_iovec *iov, int iovcnt)
{
	struct rdmaq_room room;
	uint64_t total = 0;
	int i, ret;

	if (rdmaq_writer_check_usable(w) || w->put.active || w->abort_pending || iovcnt < 0)
		return -EAGAIN;
	for (i = 0; i < iovcnt; i++)
		total += iov[i].len;
	if (total > w->cfg.max_message || (total ? (total - 1) / w->payload + 1 : 1) > w->cfg.slots)
		return -EAGAIN;
	room = (struct rdmaq_room){ .w = w,
				    .last_seq =
					    w->next_seq + (total ? (total - 1) / w->payload : 0) };
	if (rdmaq_writer_has_room(&room) != 1)
		return -EAGAIN;
	/* Room for the whole message: the put below reserves it without waiting. */
	ret = rdmaq_writer_send(w, iov, iovcnt, -1, false);
	if (!ret)
		w->stats.immediate++;
	return ret;
}

int rdmaq_writer_try_put2(struct rdmaq_writer *w, const void *head, size_t head_len,
			  const void *body, size_t body_len)
{
	const struct rdmaq_iovec iov[2] = { { head, head_len }, { body, body_len } };

	return rdmaq_writer_try_put(w, iov, 2);
}

int rdmaq_writer_resume(struct rdmaq_writer *w, const struct rdmaq_iovec *iov, int iovcnt,
			int64_t timeout_ns)
{
	return rdmaq_writer_send(w, iov, iovcnt, timeout_ns, true);
}

int rdmaq_writer_close(struct rdmaq_writer *w)
{
	if (w->closed)
		return 0;
	w->closed = true;
	if (rdmaq_forked(w->forks))
		return 0; /* the parent's queue stays open */
	/* Before ready too: readers already waiting for it must learn it. */
	return w->ops->mark_closed(w, w->next_seq);
}

static int rdmaq_writer_check_index(struct rdmaq_writer *w, uint32_t index)
{
	int ret = rdmaq_writer_check_usable(w);

	if (ret)
		return ret;
	if (index >= w->cfg.n_readers)
		return rdmaq_set_err(-EINVAL, "reader index %u out of range: queue has %u readers",
				     index, w->cfg.n_readers);
	return 0;
}

/* Closed or dropped: the writer has nothing more to do with reader `index`. */
static bool rdmaq_writer_gone(struct rdmaq_writer *w, uint32_t index)
{
	return rdmaq_writer_dropped(w, index) ||
	       smp_load_acquire(&w->credits[index].next_seq) == RDMAQ_CREDIT_CLOSED;
}

int rdmaq_writer_reader_dead(struct rdmaq_writer *w, uint32_t index)
{
	int ret = rdmaq_writer_check_index(w, index);

	if (ret)
		return ret;
	return rdmaq_writer_gone(w, index) ? 0 : w->ops->reader_dead(w, index);
}

int rdmaq_writer_drop_reader(struct rdmaq_writer *w, uint32_t index)
{
	int ret = rdmaq_writer_reader_dead(w, index);

	if (ret < 0)
		return ret;
	if (rdmaq_writer_gone(w, index))
		return 0;
	if (!ret)
		return rdmaq_set_err(-EINVAL,
				     "reader %u is alive: only a reader whose process has ended "
				     "can be dropped",
				     index);
	w->dropped[index / 64] |= 1ULL << (index % 64);
	/* As if it had closed, for the transport's checks: a dead process
	 * writes its credit entry no more. */
	smp_store_release(&w->credits[index].next_seq, RDMAQ_CREDIT_CLOSED);
	/* Records a failed write to it held back go to the others now; an error
	 * here is another reader's, which the next put reports. */
	w->ops->flush(w, true);
	return 0;
}

void rdmaq_writer_cancel(struct rdmaq_writer *w)
{
	__atomic_store_n(&w->waiter.cancelled, 1, __ATOMIC_SEQ_CST);
	w->ops->interrupt(w);
}

void rdmaq_writer_destroy(struct rdmaq_writer *w)
{
	if (w)
		w->ops->destroy(w);
}

void rdmaq_writer_stats(const struct rdmaq_writer *w, struct rdmaq_stats *out)
{
	*out = w->stats;
	out->slice_ns = rdmaq_slice_effective(&w->waiter.slice);
}

void rdmaq_writer_trace(const struct rdmaq_writer *w, struct rdmaq_trace *out)
{
	*out = w->trace;
}

int rdmaq_writer_set_wait(struct rdmaq_writer *w, const struct rdmaq_wait_config *wc)
{
	return rdmaq_waiter_configure(&w->waiter, wc);
}

/* ---- reader ------------------------------------------------------------- */

static struct rdmaq_ring_ctrl *rdmaq_reader_ctrl(struct rdmaq_reader *r)
{
	return (struct rdmaq_ring_ctrl *)r->ring;
}

static int rdmaq_reader_publish(struct rdmaq_reader *r)
{
	int ret;

	if (r->credited == r->next_seq)
		return 0;
	ret = r->ops->credit(r, r->next_seq);
	if (ret)
		return ret;
	r->credited = r->next_seq;
	r->stats.credits++;
	return 0;
}

static int rdmaq_reader_before_block(struct rdmaq_waiter *wt)
{
	return rdmaq_reader_publish(container_of(wt, struct rdmaq_reader, waiter));
}

/* 1 when record next_seq has landed whole. */
static int rdmaq_reader_has_record(void *arg)
{
	struct rdmaq_reader *r = arg;
	uint8_t *slot = rdmaq_ring_slot(r->ring, &r->cfg, r->next_seq);
	struct rdmaq_rec_hdr *hdr = (struct rdmaq_rec_hdr *)slot;
	uint64_t seq = smp_load_acquire(&hdr->seq);
	uint64_t closed;
	uint32_t len;

	if (seq == r->next_seq) {
		len = READ_ONCE(hdr->len);
		if (len > r->payload)
			return rdmaq_set_err(-EBADMSG, "record %llu claims %u bytes, slot holds %u",
					     (unsigned long long)seq, len, r->payload);
		if (smp_load_acquire((uint64_t *)(slot + rdmaq_rec_trailer_off(len))) ==
		    (seq ^ r->key))
			return 1;
		return 0; /* header landed, payload still landing */
	}
	if (seq > r->next_seq)
		return rdmaq_set_err(-EBADMSG, "ring overrun: found record %llu, expected %llu",
				     (unsigned long long)seq, (unsigned long long)r->next_seq);
	closed = smp_load_acquire(&rdmaq_reader_ctrl(r)->closed_seq);
	if (closed && r->next_seq >= closed)
		return rdmaq_set_err(-EPIPE, "writer closed the queue");
	return 0;
}

static int rdmaq_reader_is_ready(void *arg)
{
	struct rdmaq_reader *r = arg;

	if (smp_load_acquire(&rdmaq_reader_ctrl(r)->ready))
		return 1;
	if (smp_load_acquire(&rdmaq_reader_ctrl(r)->closed_seq))
		return rdmaq_set_err(-EPIPE, "writer closed the queue before it was ready");
	return 0;
}

int rdmaq_reader_wait_ready(struct rdmaq_reader *r, int64_t timeout_ns)
{
	if (rdmaq_forked(r->forks))
		return rdmaq_forked_err("reader");
	if (r->closed)
		return rdmaq_set_err(-EBADF, "reader is closed");
	return rdmaq_wait(&r->waiter, rdmaq_reader_is_ready, r, rdmaq_deadline(timeout_ns));
}

static int rdmaq_reader_consume(struct rdmaq_reader *r)
{
	r->next_seq++;
	if (r->cursor)
		smp_store_release(r->cursor, r->next_seq);
	if (r->next_seq - r->credited >= r->credit_batch)
		return rdmaq_reader_publish(r);
	return 0;
}

/* Wait for record next_seq; `first` when it starts a message, so the cadence applies. */
static int rdmaq_reader_wait_record(struct rdmaq_reader *r, int64_t deadline, bool first)
{
	bool planned = first && r->planned;

	if (rdmaq_forked(r->forks))
		return rdmaq_forked_err("reader");
	if (r->closed)
		return rdmaq_set_err(-EBADF, "reader is closed");
	r->planned = false;
	return rdmaq_wait_next(&r->waiter, first ? &r->cadence : NULL, planned ? &r->window : NULL,
			       rdmaq_reader_has_record, r, deadline);
}

int rdmaq_reader_nap(struct rdmaq_reader *r, int64_t timeout_ns)
{
	int ret;

	if (rdmaq_forked(r->forks))
		return rdmaq_forked_err("reader");
	if (r->closed)
		return rdmaq_set_err(-EBADF, "reader is closed");
	if (r->in_message || r->planned)
		return 0;
	ret = rdmaq_wait_prepare_window(&r->waiter, &r->cadence, rdmaq_reader_has_record, r,
					rdmaq_deadline(timeout_ns), &r->window);
	if (ret > 0)
		r->planned = true;
	return ret;
}

static int rdmaq_reader_peek_until(struct rdmaq_reader *r, uint64_t *msg_len, int64_t deadline)
{
	struct rdmaq_rec_hdr *hdr;
	int ret;

	while (!r->in_message) {
		ret = rdmaq_reader_wait_record(r, deadline, true);
		if (ret)
			return ret;
		hdr = (struct rdmaq_rec_hdr *)rdmaq_ring_slot(r->ring, &r->cfg, r->next_seq);
		if (hdr->flags & RDMAQ_REC_ABORT) {
			/* The writer gave up on a message we never started. */
			ret = rdmaq_reader_consume(r);
			if (ret)
				return ret;
			continue;
		}
		if (!(hdr->flags & RDMAQ_REC_FIRST))
			return rdmaq_set_err(-EBADMSG,
					     "record %llu continues a message that never started",
					     (unsigned long long)hdr->seq);
		if (hdr->msg_len > r->cfg.max_message)
			return rdmaq_set_err(-EBADMSG,
					     "record %llu announces %llu bytes, above max_message %llu",
					     (unsigned long long)hdr->seq,
					     (unsigned long long)hdr->msg_len,
					     (unsigned long long)r->cfg.max_message);
		r->in_message = true;
		r->msg_len = hdr->msg_len;
		r->msg_off = 0;
		r->trace = (struct rdmaq_trace){
			.start_ns = hdr->stamp_ns,
			.mid_ns = r->waiter.met_ns,
			.how = r->waiter.how,
		};
		rdmaq_cadence_observe(&r->cadence, hdr->stamp_ns, r->waiter.met_ns);
	}
	*msg_len = r->msg_len;
	return 0;
}

static int rdmaq_reader_read_until(struct rdmaq_reader *r, void *buf, uint64_t len, int64_t deadline)
{
	int ret;

	if (!r->in_message)
		return rdmaq_set_err(-EINVAL, "no message in progress: call peek first");
	if (len != r->msg_len)
		return rdmaq_set_err(-EINVAL, "buffer of %llu bytes for a %llu-byte message",
				     (unsigned long long)len, (unsigned long long)r->msg_len);
	for (;;) {
		uint8_t *slot;
		struct rdmaq_rec_hdr *hdr;
		uint32_t flags;

		ret = rdmaq_reader_wait_record(r, deadline, false);
		if (ret) {
			if (ret == -EPIPE || ret == -EOWNERDEAD)
				r->in_message = false; /* never completes */
			return ret;
		}
		slot = rdmaq_ring_slot(r->ring, &r->cfg, r->next_seq);
		hdr = (struct rdmaq_rec_hdr *)slot;
		flags = hdr->flags;
		if (flags & RDMAQ_REC_ABORT) {
			r->in_message = false;
			ret = rdmaq_reader_consume(r);
			if (ret)
				return ret;
			return rdmaq_set_err(-ECONNABORTED, "writer abandoned the message");
		}
		if (r->msg_off && (flags & RDMAQ_REC_FIRST))
			return rdmaq_set_err(-EBADMSG,
					     "record %llu starts a new message mid-message",
					     (unsigned long long)hdr->seq);
		if (hdr->len > r->msg_len - r->msg_off)
			return rdmaq_set_err(-EBADMSG, "record %llu overruns its message",
					     (unsigned long long)hdr->seq);
		memcpy((uint8_t *)buf + r->msg_off, slot + sizeof(*hdr), hdr->len);
		r->msg_off += hdr->len;
		ret = rdmaq_reader_consume(r);
		if (ret)
			return ret;
		if (flags & RDMAQ_REC_LAST)
			break;
	}
	if (r->msg_off != r->msg_len)
		return rdmaq_set_err(-EBADMSG, "message ended after %llu of %llu bytes",
				     (unsigned long long)r->msg_off,
				     (unsigned long long)r->msg_len);
	r->in_message = false;
	r->trace.end_ns = rdmaq_now_ns();
	r->stats.messages++;
	r->stats.bytes += r->msg_len;
	return 0;
}

int rdmaq_reader_peek(struct rdmaq_reader *r, uint64_t *msg_len, int64_t timeout_ns)
{
	return rdmaq_reader_peek_until(r, msg_len, rdmaq_deadline(timeout_ns));
}

int rdmaq_reader_read(struct rdmaq_reader *r, void *buf, uint64_t len, int64_t timeout_ns)
{
	return rdmaq_reader_read_until(r, buf, len, rdmaq_deadline(timeout_ns));
}

int rdmaq_reader_recv(struct rdmaq_reader *r, void *buf, uint64_t cap, uint64_t *msg_len,
		      int64_t timeout_ns)
{
	int64_t deadline = rdmaq_deadline(timeout_ns);
	int ret;

	ret = rdmaq_reader_peek_until(r, msg_len, deadline);
	if (ret)
		return ret;
	if (*msg_len > cap)
		return -ENOBUFS; /* not an error: the caller brings a bigger buffer */
	return rdmaq_reader_read_until(r, buf, *msg_len, deadline);
}

int rdmaq_reader_try_recv(struct rdmaq_reader *r, void *buf, uint64_t cap, uint64_t *msg_len)
{
	struct rdmaq_rec_hdr *hdr;
	int ret;

	if (rdmaq_forked(r->forks) || r->closed || r->in_message)
		return -EAGAIN;
	for (;;) {
		if (rdmaq_reader_has_record(r) != 1)
			return -EAGAIN;
		hdr = (struct rdmaq_rec_hdr *)rdmaq_ring_slot(r->ring, &r->cfg, r->next_seq);
		if (!(hdr->flags & RDMAQ_REC_ABORT))
			break;
		/* The end of a message the writer gave up before we started it. */
		ret = rdmaq_reader_consume(r);
		if (ret)
			return ret;
	}
	if ((hdr->flags & (RDMAQ_REC_FIRST | RDMAQ_REC_LAST)) !=
		    (RDMAQ_REC_FIRST | RDMAQ_REC_LAST) ||
	    hdr->msg_len != hdr->len || hdr->msg_len > cap)
		return -EAGAIN;
	/* The whole message is there: recv finds it without waiting. */
	ret = rdmaq_reader_recv(r, buf, cap, msg_len, -1);
	if (!ret)
		r->stats.immediate++;
	return ret;
}

int rdmaq_reader_close(struct rdmaq_reader *r)
{
	if (r->closed)
		return 0;
	r->closed = true;
	if (rdmaq_forked(r->forks))
		return 0; /* the parent's reader reads on */
	/* Tell the writer not to wait for us any more. */
	return r->ops->credit(r, RDMAQ_CREDIT_CLOSED);
}

void rdmaq_reader_cancel(struct rdmaq_reader *r)
{
	__atomic_store_n(&r->waiter.cancelled, 1, __ATOMIC_SEQ_CST);
	r->ops->interrupt(r);
}

void rdmaq_reader_destroy(struct rdmaq_reader *r)
{
	if (r)
		r->ops->destroy(r);
}

void rdmaq_reader_stats(const struct rdmaq_reader *r, struct rdmaq_stats *out)
{
	*out = r->stats;
	out->slice_ns = rdmaq_slice_effective(&r->waiter.slice);
}

void rdmaq_reader_trace(const struct rdmaq_reader *r, struct rdmaq_trace *out)
{
	*out = r->trace;
}

int rdmaq_reader_set_wait(struct rdmaq_reader *r, const struct rdmaq_wait_config *wc)
{
	return rdmaq_waiter_configure(&r->waiter, wc);
}

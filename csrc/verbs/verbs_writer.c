/* SPDX-License-Identifier: MIT */
/*
 * verbs writer: records are framed once into a local staging ring with the
 * readers' layout, then RDMA-written to the same offsets of every open
 * reader's ring.  Records emitted since the last flush are contiguous in
 * the ring, so a flush is one WRITE per reader (two when the run wraps;
 * more only above the port's max message size).
 *
 * Doorbell: the last WRITE of a flush carries immediate data naming the
 * reader endpoint.  Its receive completion is generated only after the
 * data is placed, so a sleeping reader woken by it finds the record, and
 * a spinning reader never looks at the CQ at all.  Each flush's WRITEs
 * and doorbell go on one QP, so even when a migrating thread switches
 * QPs between flushes every landed record is followed by its doorbell.
 *
 * Credits come back as WRITE_WITH_IMM into the credit array, so a writer
 * blocked on a full ring is woken the same way.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "barrier.h"
#include "ring.h"
#include "verbs_ctx.h"
#include "verbs_ep.h"
#include "verbs_grave.h"
#include "verbs_live.h"
#include "verbs_pool.h"
#include "verbs_qp.h"

/* Readers' rings are in the ring format, which crosses hosts under the bootstrap's
 * protocol version (PROTO, rdmaq/transport/verbs/protocol.py): a new ring format is a
 * new PROTO, then this. */
_Static_assert(RDMAQ_VERSION == 2, "the ring format changed: bump the verbs bootstrap's PROTO");

#define RDMAQ_VERBS_BATCH 32 /* WRs per ibv_post_send */

struct rdmaq_verbs_wpeer {
	struct rdmaq_verbs_pool *pool;
	struct rdmaq_verbs_qp *q; /* this flush's QP */
	uint64_t ring_addr;
	uint32_t rkey;
	uint32_t ep_id;
	struct rdmaq_verbs_live live;
	bool attached;
	char who[128]; /* "reader 2 (pid 42 on host x)", for errors */
};

struct rdmaq_verbs_writer {
	struct rdmaq_writer w;
	struct rdmaq_verbs_ep ep;
	struct rdmaq_verbs_ctx *ctx;
	uint8_t *staging; /* ctrl + slots, as in every reader */
	size_t ring_bytes;
	size_t staging_len;
	struct ibv_mr *staging_mr;
	struct rdmaq_credit *credits;
	size_t credit_len;
	/* One MR per reader's credit slot: a reader can write its own slot
	 * and nothing else of ours. */
	struct ibv_mr **credit_mrs;
	uint64_t *cursors; /* after the staging ring: readers' cursors, READ when short of credit */
	uint32_t attached;
	bool pending; /* records emitted, not yet written */
	uint64_t pend_first;
	uint64_t pend_last;
	size_t pend_last_bytes;
	uint64_t max_write;  /* port's max message size */
	int pin_cpu;	     /* >= 0: unannounced data went via this CPU's QP */
	struct pollfd *pfds; /* RDMAQ_VERBS_EP_NFDS, then one liveness socket per reader */
	bool *done;	     /* per reader, scratch for flush grouping */
	struct rdmaq_verbs_wr wrs[RDMAQ_VERBS_BATCH];
	struct rdmaq_verbs_wpeer peers[];
};

#define to_vwriter(wp) container_of(wp, struct rdmaq_verbs_writer, w)

/* Reader i gets records: attached, and neither closed nor dropped. */
static bool peer_receives(struct rdmaq_verbs_writer *w, uint32_t i)
{
	return w->peers[i].attached && READ_ONCE(w->credits[i].next_seq) != RDMAQ_CREDIT_CLOSED &&
	       !rdmaq_writer_dropped(&w->w, i);
}

/* Reader i's liveness socket ended (known, or checked now): stop polling it. */
static bool peer_gone(struct rdmaq_verbs_writer *w, uint32_t i)
{
	if (!rdmaq_verbs_live_ended(&w->peers[i].live))
		return false;
	w->pfds[RDMAQ_VERBS_EP_NFDS + i].fd = -1; /* or ppoll spins */
	return true;
}

/* Attached, and its liveness socket has not ended (checked now). */
static bool peer_alive(struct rdmaq_verbs_writer *w, uint32_t i)
{
	return w->peers[i].attached && !peer_gone(w, i);
}

/* ---- posting ------------------------------------------------------------ */

/* A WRITE of staging[off, off+len) to the same offset of reader i's ring. */
static void staged_write(struct rdmaq_verbs_writer *w, uint32_t i, struct rdmaq_verbs_qp *q,
			 struct rdmaq_verbs_wr *wr, size_t off, size_t len)
{
	struct rdmaq_verbs_wpeer *p = &w->peers[i];

	rdmaq_verbs_wr_write(wr, q, w->staging_mr, w->staging + off, len, p->ring_addr + off,
			     p->rkey);
}

struct wbatch {
	struct rdmaq_verbs_writer *w;
	struct rdmaq_verbs_qp *q;
	uint32_t n;
};

static int wbatch_flush(struct wbatch *b)
{
	int ret;

	if (!b->n)
		return 0;
	ret = rdmaq_verbs_qp_post(b->q, b->w->wrs, b->n);
	b->n = 0;
	return ret;
}

/* Queue one WRITE of staging[off, off+len) to reader i's ring. */
static int wbatch_add(struct wbatch *b, uint32_t i, size_t off, size_t len, bool imm)
{
	struct rdmaq_verbs_writer *w = b->w;
	struct rdmaq_verbs_wr *wr;
	int ret;

	if (b->n == RDMAQ_VERBS_BATCH) {
		ret = wbatch_flush(b);
		if (ret)
			return ret;
	}
	wr = &w->wrs[b->n++];
	staged_write(w, i, b->q, wr, off, len);
	if (imm)
		rdmaq_verbs_wr_doorbell(wr, w->peers[i].ep_id);
	return 0;
}

/* The staging byte ranges of the pending records: one run, two if wrapped. */
static uint32_t pending_runs(struct rdmaq_verbs_writer *w, size_t off[2], size_t len[2])
{
	const struct rdmaq_config *cfg = &w->w.cfg;
	uint64_t first = w->pend_first % cfg->slots, last = w->pend_last % cfg->slots;
	size_t end = RDMAQ_RING_DATA_OFF + (size_t)last * cfg->slot_bytes + w->pend_last_bytes;

	off[0] = RDMAQ_RING_DATA_OFF + (size_t)first * cfg->slot_bytes;
	if (w->pend_last - w->pend_first < cfg->slots && first <= last) {
		len[0] = end - off[0];
		return 1;
	}
	len[0] = w->ring_bytes - off[0];
	off[1] = RDMAQ_RING_DATA_OFF;
	len[1] = end - off[1];
	return 2;
}

/* Queue reader i's share of this flush: the runs, cut at max_write. */
static int wbatch_add_runs(struct wbatch *b, uint32_t i, const size_t *off, const size_t *len,
			   uint32_t nruns, bool doorbell)
{
	uint32_t r;
	int ret;

	for (r = 0; r < nruns; r++) {
		size_t o = off[r], left = len[r];

		while (left) {
			size_t k = left < b->w->max_write ? left : b->w->max_write;

			ret = wbatch_add(b, i, o, k, doorbell && r == nruns - 1 && k == left);
			if (ret)
				return ret;
			o += k;
			left -= k;
		}
	}
	return 0;
}

/* ---- writer ops --------------------------------------------------------- */

static int vw_poll_ready(struct rdmaq_writer *wp)
{
	struct rdmaq_verbs_writer *w = to_vwriter(wp);

	return w->attached == wp->cfg.n_readers;
}

/* Write ctrl field [off, off+len) of the staging ring to reader i, with a doorbell. */
static int vw_post_ctrl(struct rdmaq_verbs_writer *w, uint32_t i, size_t off, size_t len)
{
	struct wbatch b = { .w = w, .q = rdmaq_verbs_pool_pick(w->peers[i].pool, true) };
	int ret;

	ret = wbatch_add(&b, i, off, len, true);
	if (!ret)
		ret = wbatch_flush(&b);
	return ret;
}

static int vw_connect(struct rdmaq_writer *wp)
{
	struct rdmaq_verbs_writer *w = to_vwriter(wp);
	struct rdmaq_ring_ctrl *ctrl = (struct rdmaq_ring_ctrl *)w->staging;
	uint32_t i;
	int ret;

	ctrl->ready = 1;
	for (i = 0; i < wp->cfg.n_readers; i++) {
		ret = vw_post_ctrl(w, i, offsetof(struct rdmaq_ring_ctrl, ready),
				   sizeof(ctrl->ready));
		if (ret) {
			char why[256];

			/* The message is formatted into the buffer it quotes. */
			snprintf(why, sizeof(why), "%s", rdmaq_errmsg());
			return rdmaq_set_err(ret, "%s: %s", w->peers[i].who, why);
		}
	}
	return 0;
}

static int vw_emit(struct rdmaq_writer *wp, uint64_t seq, const struct rdmaq_rec_hdr *hdr,
		   const struct rdmaq_iovec *iov, int iovcnt, size_t iov_off)
{
	struct rdmaq_verbs_writer *w = to_vwriter(wp);
	uint8_t *slot = rdmaq_ring_slot(w->staging, &wp->cfg, seq);

	w->pend_last_bytes = rdmaq_rec_frame(slot, wp->key, hdr, iov, iovcnt, iov_off);
	if (!w->pending) {
		w->pend_first = seq;
		w->pending = true;
	}
	w->pend_last = seq;
	return 0;
}

static int vw_flush(struct rdmaq_writer *wp, bool doorbell)
{
	struct rdmaq_verbs_writer *w = to_vwriter(wp);
	uint32_t n = wp->cfg.n_readers, i, j, nruns;
	size_t off[2], len[2];
	int cpu, ret = 0;

	if (!w->pending)
		goto out;
	nruns = pending_runs(w, off, len);
	cpu = w->pin_cpu >= 0 ? w->pin_cpu : sched_getcpu();
	if (cpu < 0)
		cpu = 0;
	/* Without a doorbell, the next flush must use the same QPs, or its
	 * doorbell could overtake this data on another QP. */
	w->pin_cpu = doorbell ? -1 : cpu;
	for (i = 0; i < n; i++) {
		struct rdmaq_verbs_wpeer *p = &w->peers[i];

		w->done[i] = !peer_receives(w, i);
		if (w->done[i])
			continue;
		p->q = &p->pool->qps[(uint32_t)cpu % p->pool->n];
		if (rdmaq_verbs_qp_broken(p->q))
			return rdmaq_verbs_qp_peer_err(p->q, p->who);
	}
	/* One ibv_post_send per QP: readers in one process share it. */
	for (i = 0; i < n; i++) {
		struct wbatch b = { .w = w };

		if (w->done[i])
			continue;
		b.q = w->peers[i].q;
		for (j = i; j < n; j++) {
			if (w->done[j] || w->peers[j].q != b.q)
				continue;
			w->done[j] = true;
			ret = wbatch_add_runs(&b, j, off, len, nruns, doorbell);
			if (ret)
				break;
			if (doorbell)
				wp->stats.wakeups++;
		}
		if (!ret)
			ret = wbatch_flush(&b);
		if (ret) {
			if (rdmaq_verbs_qp_broken(b.q))
				return rdmaq_verbs_qp_peer_err(b.q, w->peers[i].who);
			return ret;
		}
	}
	w->pending = false;
out:
	/* Take in credit doorbells now and then, or they pile up in the SRQ
	 * of a writer that never has to wait. */
	rdmaq_verbs_ep_poll(&w->ep);
	return ret;
}

static int vw_mark_closed(struct rdmaq_writer *wp, uint64_t closed_seq)
{
	struct rdmaq_verbs_writer *w = to_vwriter(wp);
	struct rdmaq_ring_ctrl *ctrl = (struct rdmaq_ring_ctrl *)w->staging;
	uint32_t i;

	vw_flush(wp, true);
	ctrl->closed_seq = closed_seq;
	/* Best effort per reader: a dead reader must not fail close(). */
	for (i = 0; i < wp->cfg.n_readers; i++)
		if (peer_receives(w, i) && peer_alive(w, i) &&
		    !rdmaq_verbs_pool_broken(w->peers[i].pool, true))
			vw_post_ctrl(w, i, offsetof(struct rdmaq_ring_ctrl, closed_seq),
				     sizeof(ctrl->closed_seq));
	return 0;
}

/*
 * Short of room.  Readers return credit lazily, so one that consumed
 * records but is busy elsewhere holds room we need: read the cursor it
 * keeps in its ring (rdmaq_ring_ctrl.consumed) with an RDMA READ, which
 * needs nothing of its CPU.  A READ that fails changes nothing: the
 * liveness checks of the wait that follows report a dead peer.
 */
static int vw_refresh_credit(struct rdmaq_writer *wp)
{
	struct rdmaq_verbs_writer *w = to_vwriter(wp);
	uint32_t i;

	for (i = 0; i < wp->cfg.n_readers; i++) {
		struct rdmaq_verbs_wpeer *p = &w->peers[i];
		uint64_t c = READ_ONCE(w->credits[i].next_seq), v;
		struct rdmaq_verbs_wr wr;

		if (!peer_receives(w, i) || !peer_alive(w, i) ||
		    rdmaq_verbs_pool_broken(p->pool, true) || c >= wp->next_seq)
			continue;
		rdmaq_verbs_wr_read(&wr, w->staging_mr, &w->cursors[i], sizeof(w->cursors[i]),
				    p->ring_addr + offsetof(struct rdmaq_ring_ctrl, consumed),
				    p->rkey);
		if (rdmaq_verbs_qp_fence(rdmaq_verbs_pool_pick(p->pool, true), &wr,
					 RDMAQ_VERBS_FENCE_NS))
			continue;
		v = READ_ONCE(w->cursors[i]);
		/* Peer-written: only ever raise credit, and never past what was sent. */
		if (v > c && v <= wp->next_seq)
			__atomic_compare_exchange_n(&w->credits[i].next_seq, &c, v, false,
						    __ATOMIC_RELEASE, __ATOMIC_RELAXED);
	}
	return 0;
}

static int vw_reader_dead(struct rdmaq_writer *wp, uint32_t i)
{
	return peer_receives(to_vwriter(wp), i) && peer_gone(to_vwriter(wp), i);
}

static void vw_interrupt(struct rdmaq_writer *wp)
{
	rdmaq_verbs_ep_wake(&to_vwriter(wp)->ep);
}

/*
 * Make sure no WRITE of ours is still in flight on any QP we used, so the
 * readers may free their rings once we shut our liveness sockets.
 */
static void vw_fence(struct rdmaq_verbs_writer *w)
{
	struct rdmaq_ring_ctrl *ctrl = (struct rdmaq_ring_ctrl *)w->staging;
	uint32_t i, j, k;

	for (i = 0; i < w->w.cfg.n_readers; i++) {
		struct rdmaq_verbs_pool *pool = w->peers[i].pool;

		/* Gone peers need no promise from us. */
		if (!peer_alive(w, i) || rdmaq_verbs_pool_broken(w->peers[i].pool, true))
			continue;
		for (j = 0; j < i; j++)
			if (peer_alive(w, j) && w->peers[j].pool == pool)
				break;
		if (j < i)
			continue; /* fenced with reader j */
		for (k = 0; k < pool->n; k++) {
			struct rdmaq_verbs_qp *q = &pool->qps[k];
			struct rdmaq_verbs_wr wr;

			if (!rdmaq_verbs_qp_busy(q))
				continue;
			/* Rewrites closed_seq with the value it already has. */
			staged_write(w, i, q, &wr, offsetof(struct rdmaq_ring_ctrl, closed_seq),
				     sizeof(ctrl->closed_seq));
			rdmaq_verbs_qp_fence(q, &wr, RDMAQ_VERBS_FENCE_NS);
		}
	}
}

static void vw_destroy(struct rdmaq_writer *wp)
{
	struct rdmaq_verbs_writer *w = to_vwriter(wp);
	struct rdmaq_verbs_grave *g;
	uint32_t i, n = wp->cfg.n_readers;

	if (rdmaq_verbs_ctx_stale(w->ctx))
		goto free_w; /* forked child: the objects are the parent's */
	if (!wp->closed)
		rdmaq_writer_close(wp);
	vw_fence(w);
	rdmaq_verbs_ep_fini(&w->ep);
	g = rdmaq_verbs_grave_new(n + 1, n);
	for (i = 0; i < n; i++) {
		struct rdmaq_verbs_wpeer *p = &w->peers[i];

		if (!p->attached)
			continue;
		/* "I will not write to you again"; keep reading for their EOF. */
		shutdown(p->live.fd, SHUT_WR);
		if (g)
			g->fds[g->nfds++] = p->live.fd;
		else
			close(p->live.fd);
		rdmaq_verbs_pool_put(p->pool);
	}
	if (g) {
		memcpy(g->mrs, w->credit_mrs, n * sizeof(g->mrs[0]));
		g->mrs[n] = w->staging_mr;
		g->mem[0] = w->credits;
		g->len[0] = w->credit_len;
		g->mem[1] = w->staging;
		g->len[1] = w->staging_len;
		rdmaq_verbs_grave_add(&w->ctx->graveyard, g);
	} else {
		/* Out of memory: leak the registered memory rather than risk a
		 * reader's WRITE hitting a deregistered key. */
		free(g);
	}
free_w:
	free(w->pfds);
	free(w->done);
	free(w->credit_mrs);
	free(w);
}

/* ---- waiting ------------------------------------------------------------ */

/* Note readers whose liveness socket ended; those still open are dead. */
static int vw_check_live(struct rdmaq_verbs_writer *w, bool poll_all)
{
	uint32_t i;

	for (i = 0; i < w->w.cfg.n_readers; i++)
		if (w->peers[i].attached && (poll_all || w->pfds[RDMAQ_VERBS_EP_NFDS + i].revents))
			peer_gone(w, i);
	return 0;
}

static int vw_prepare(void *ep)
{
	return rdmaq_verbs_ep_prepare(&to_vwriter(ep)->ep);
}

static int vw_block(void *ep, int64_t timeout_ns)
{
	struct rdmaq_verbs_writer *w = to_vwriter(ep);
	int ret;

	ret = rdmaq_verbs_ep_block(&w->ep, w->pfds, w->w.cfg.n_readers, timeout_ns);
	vw_check_live(w, false);
	return ret;
}

static void vw_finish(void *ep)
{
	rdmaq_verbs_ep_finish(&to_vwriter(ep)->ep);
}

static int vw_check_peer(void *ep)
{
	struct rdmaq_verbs_writer *w = to_vwriter(ep);
	uint32_t i;

	vw_check_live(w, true);
	for (i = 0; i < w->w.cfg.n_readers; i++) {
		struct rdmaq_verbs_wpeer *p = &w->peers[i];
		struct rdmaq_verbs_qp *q;

		if (!peer_receives(w, i))
			continue;
		if (p->live.gone)
			return rdmaq_verbs_live_err(&p->live, p->who);
		q = rdmaq_verbs_pool_check(p->pool, true);
		if (q)
			return rdmaq_verbs_qp_peer_err(q, p->who);
	}
	return 0;
}

static const struct rdmaq_writer_ops vw_ops = {
	.poll_ready = vw_poll_ready,
	.connect = vw_connect,
	.emit = vw_emit,
	.flush = vw_flush,
	.mark_closed = vw_mark_closed,
	.refresh_credit = vw_refresh_credit,
	.interrupt = vw_interrupt,
	.reader_dead = vw_reader_dead,
	.destroy = vw_destroy,
};

static const struct rdmaq_wait_ops vw_wait_ops = {
	.prepare = vw_prepare,
	.block = vw_block,
	.finish = vw_finish,
	.check_peer = vw_check_peer,
};

/* ---- set-up ------------------------------------------------------------- */

static void *map_zeroed(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static size_t page_round(size_t n)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	return (n + pg - 1) / pg * pg;
}

int rdmaq_verbs_writer_create(struct rdmaq_writer **out, struct rdmaq_verbs_ctx *ctx,
			      const struct rdmaq_config *cfg)
{
	struct rdmaq_verbs_writer *w;
	uint32_t i;
	int ret;

	ret = rdmaq_verbs_ctx_check(ctx);
	if (ret)
		return ret;
	ret = rdmaq_config_check(cfg);
	if (ret)
		return ret;
	w = calloc(1, sizeof(*w) + cfg->n_readers * sizeof(w->peers[0]));
	if (!w)
		return rdmaq_set_err(-ENOMEM, "out of memory");
	w->ctx = ctx;
	w->ep.efd = -1;
	w->pin_cpu = -1;
	w->max_write = ctx->port_attr.max_msg_sz ? ctx->port_attr.max_msg_sz : 1U << 30;
	w->pfds = calloc(RDMAQ_VERBS_EP_NFDS + cfg->n_readers, sizeof(*w->pfds));
	w->done = calloc(cfg->n_readers, sizeof(*w->done));
	w->credit_mrs = calloc(cfg->n_readers, sizeof(*w->credit_mrs));
	if (!w->pfds || !w->done || !w->credit_mrs) {
		ret = rdmaq_set_err(-ENOMEM, "out of memory");
		goto clean_w;
	}
	for (i = 0; i < cfg->n_readers; i++) {
		w->peers[i].live.fd = -1;
		w->pfds[RDMAQ_VERBS_EP_NFDS + i].fd = -1;
	}

	w->ring_bytes = rdmaq_ring_bytes(cfg->slot_bytes, cfg->slots);
	w->staging_len = page_round(w->ring_bytes + cfg->n_readers * sizeof(*w->cursors));
	w->staging = map_zeroed(w->staging_len);
	if (!w->staging) {
		ret = rdmaq_set_err(-ENOMEM, "cannot map a %zu-byte staging ring", w->staging_len);
		goto clean_w;
	}
	w->cursors = (uint64_t *)(w->staging + w->ring_bytes);
	/* Local only: the staging ring is a WRITE source (and the cursors a READ
	 * target), never a remote target. */
	ret = rdmaq_verbs_reg(ctx, w->staging, w->staging_len, IBV_ACCESS_LOCAL_WRITE,
			      "staging ring", &w->staging_mr);
	if (ret)
		goto clean_staging;
	w->credit_len = page_round(cfg->n_readers * sizeof(struct rdmaq_credit));
	w->credits = map_zeroed(w->credit_len);
	if (!w->credits) {
		ret = rdmaq_set_err(-ENOMEM, "cannot map the credit array");
		goto clean_staging_mr;
	}
	for (i = 0; i < cfg->n_readers; i++) {
		w->credits[i].next_seq = 1;
		ret = rdmaq_verbs_reg(ctx, &w->credits[i], sizeof(w->credits[i]),
				      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
				      "credit slot", &w->credit_mrs[i]);
		if (ret)
			goto clean_credit_mrs;
	}
	ret = rdmaq_verbs_ep_init(&w->ep, ctx);
	if (ret)
		goto clean_credit_mrs;
	rdmaq_writer_init(&w->w, &vw_ops, &vw_wait_ops, cfg, rdmaq_random_u64(), w->credits);
	((struct rdmaq_ring_ctrl *)w->staging)->magic = RDMAQ_MAGIC;
	*out = &w->w;
	return 0;

clean_credit_mrs:
	for (i = 0; i < cfg->n_readers; i++)
		if (w->credit_mrs[i])
			ibv_dereg_mr(w->credit_mrs[i]);
	munmap(w->credits, w->credit_len);
clean_staging_mr:
	ibv_dereg_mr(w->staging_mr);
clean_staging:
	munmap(w->staging, w->staging_len);
clean_w:
	free(w->pfds);
	free(w->done);
	free(w->credit_mrs);
	free(w);
	return ret;
}

int rdmaq_verbs_writer_info(struct rdmaq_writer *wp, uint32_t index, struct rdmaq_verbs_ep_info *out)
{
	struct rdmaq_verbs_writer *w = to_vwriter(wp);

	if (index >= wp->cfg.n_readers)
		return rdmaq_set_err(-EINVAL, "reader index %u out of range: queue has %u readers",
				     index, wp->cfg.n_readers);
	*out = (struct rdmaq_verbs_ep_info){
		.ep_id = w->ep.hub.id,
		.rkey = w->credit_mrs[index]->rkey,
		.addr = (uintptr_t)&w->credits[index],
		.key = wp->key,
	};
	return 0;
}

int rdmaq_verbs_writer_attach(struct rdmaq_writer *wp, uint32_t index, uint64_t pool_id,
			      const struct rdmaq_verbs_ep_info *reader, int live_fd,
			      const char *desc)
{
	struct rdmaq_verbs_writer *w = to_vwriter(wp);
	struct rdmaq_verbs_wpeer *p;
	int ret = rdmaq_verbs_ctx_check(w->ctx);

	if (ret)
		return ret;
	if (index >= wp->cfg.n_readers)
		return rdmaq_set_err(-EINVAL, "reader index %u out of range: queue has %u readers",
				     index, wp->cfg.n_readers);
	p = &w->peers[index];
	if (p->attached)
		return rdmaq_set_err(-EBUSY, "reader index %u is already attached", index);
	if (wp->ready)
		return rdmaq_set_err(-EISCONN, "the queue is already connected");
	if (!reader->addr || reader->addr > UINT64_MAX - w->ring_bytes)
		return rdmaq_set_err(-EPROTO,
				     "reader %u: ring address 0x%llx cannot hold a %zu-byte ring",
				     index, (unsigned long long)reader->addr, w->ring_bytes);
	if (live_fd < 0)
		return rdmaq_set_err(-EINVAL, "reader %u: no liveness socket", index);
	p->pool = rdmaq_verbs_pool_get(w->ctx, pool_id);
	if (!p->pool)
		return -ENOENT;
	p->ring_addr = reader->addr;
	p->rkey = reader->rkey;
	p->ep_id = reader->ep_id;
	p->live.fd = live_fd;
	snprintf(p->who, sizeof(p->who), "reader %u (%.95s)", index, desc && *desc ? desc : "?");
	p->attached = true;
	w->pfds[RDMAQ_VERBS_EP_NFDS + index].fd = live_fd;
	w->attached++;
	return 0;
}

uint32_t rdmaq_verbs_writer_attached(struct rdmaq_writer *wp)
{
	return to_vwriter(wp)->attached;
}

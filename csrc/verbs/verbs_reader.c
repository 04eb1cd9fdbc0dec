/* SPDX-License-Identifier: MIT */
/*
 * verbs reader: the ring lives in reader memory, registered for remote
 * write; the writer RDMA-writes records into it and the core polls it like
 * any other ring.  Credit goes back as WRITE_WITH_IMM of next_seq into the
 * reader's slot of the writer's credit array.
 *
 * Credits must land in order (a stale value landing last could leave the
 * writer waiting for room that exists), so they always use one QP of the
 * pool, chosen at connect time; RC keeps WRITEs on one QP in order.
 */
#define _GNU_SOURCE
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

struct rdmaq_verbs_reader {
	struct rdmaq_reader r;
	struct rdmaq_verbs_ep ep;
	struct rdmaq_verbs_ctx *ctx;
	uint8_t *map; /* ring, then one page of local scratch */
	size_t map_len;
	size_t ring_len;
	struct ibv_mr *ring_mr;
	struct ibv_mr *scratch_mr; /* local only: source of credit WRITEs */
	uint64_t *scratch;
	struct rdmaq_verbs_pool *pool;
	struct rdmaq_verbs_qp *credit_qp;
	uint64_t credit_addr;
	uint32_t credit_rkey;
	uint32_t writer_ep;
	struct rdmaq_verbs_live live; /* to the writer */
	bool connected;
	char who[128]; /* "writer (pid 42 on host x)", for errors */
	struct pollfd pfds[RDMAQ_VERBS_EP_NFDS + 1];
};

#define to_vreader(rp) container_of(rp, struct rdmaq_verbs_reader, r)

static int vr_post_credit(struct rdmaq_verbs_reader *r, uint64_t value, bool imm, bool fence)
{
	struct rdmaq_verbs_qp *q = r->credit_qp;
	struct rdmaq_verbs_wr wr;

	rdmaq_verbs_wr_write(&wr, q, r->scratch_mr, r->scratch, sizeof(*r->scratch), r->credit_addr,
			     r->credit_rkey);
	if (imm)
		rdmaq_verbs_wr_doorbell(&wr, r->writer_ep);
	/* Without inline the NIC may read the scratch word after a later
	 * credit overwrote it: it then sends the newer value, which is fine. */
	WRITE_ONCE(*r->scratch, value);
	if (fence)
		return rdmaq_verbs_qp_fence(q, &wr, RDMAQ_VERBS_FENCE_NS);
	return rdmaq_verbs_qp_post(q, &wr, 1);
}

static int vr_credit(struct rdmaq_reader *rp, uint64_t next_seq)
{
	struct rdmaq_verbs_reader *r = to_vreader(rp);
	int ret;

	if (!r->connected)
		return next_seq == RDMAQ_CREDIT_CLOSED
			       ? 0
			       : rdmaq_set_err(-ENOTCONN, "reader %u is not connected", rp->index);
	/* Doorbells pile up in the SRQ while we spin: take them in here. */
	rdmaq_verbs_ep_poll(&r->ep);
	if (rdmaq_verbs_qp_broken(r->credit_qp)) {
		if (next_seq == RDMAQ_CREDIT_CLOSED)
			return 0; /* closing towards a dead writer */
		return rdmaq_verbs_qp_peer_err(r->credit_qp, r->who);
	}
	ret = vr_post_credit(r, next_seq, true, false);
	if (!ret)
		rp->stats.wakeups++; /* the immediate is the writer's doorbell */
	if (ret && next_seq == RDMAQ_CREDIT_CLOSED)
		return 0;
	return ret;
}

static void vr_interrupt(struct rdmaq_reader *rp)
{
	rdmaq_verbs_ep_wake(&to_vreader(rp)->ep);
}

static void vr_destroy(struct rdmaq_reader *rp)
{
	struct rdmaq_verbs_reader *r = to_vreader(rp);
	struct rdmaq_verbs_grave *g;
	bool writer_gone;

	if (rdmaq_verbs_ctx_stale(r->ctx)) {
		free(r); /* forked child: the objects are the parent's */
		return;
	}
	rdmaq_verbs_ep_fini(&r->ep);
	if (!r->connected) {
		/* The writer never learnt that we are ready: it has not
		 * written to the ring and never will. */
		ibv_dereg_mr(r->scratch_mr);
		ibv_dereg_mr(r->ring_mr);
		munmap(r->map, r->map_len);
		free(r);
		return;
	}
	writer_gone = rdmaq_verbs_live_ended(&r->live);
	/* A gone writer reads no credit: do not wait for its QPs to time out. */
	if (!rp->closed && !writer_gone)
		rdmaq_reader_close(rp);
	/* Our last credit WRITE must be done before we shut the socket. */
	if (!writer_gone && !rdmaq_verbs_qp_broken(r->credit_qp) &&
	    rdmaq_verbs_qp_busy(r->credit_qp))
		vr_post_credit(r, RDMAQ_CREDIT_CLOSED, false, true);
	shutdown(r->live.fd, SHUT_WR);
	rdmaq_verbs_pool_put(r->pool);
	g = rdmaq_verbs_grave_new(2, 1);
	if (!g) {
		/* Leak the ring rather than risk the writer hitting a dead key. */
		close(r->live.fd);
		free(r);
		return;
	}
	g->mrs[0] = r->ring_mr;
	g->mrs[1] = r->scratch_mr;
	g->mem[0] = r->map;
	g->len[0] = r->map_len;
	g->fds[0] = r->live.fd;
	g->nfds = 1;
	rdmaq_verbs_grave_add(&r->ctx->graveyard, g);
	free(r);
}

static int vr_prepare(void *ep)
{
	return rdmaq_verbs_ep_prepare(&to_vreader(ep)->ep);
}

static int vr_block(void *ep, int64_t timeout_ns)
{
	struct rdmaq_verbs_reader *r = to_vreader(ep);
	uint32_t nlive = 0;
	int ret;

	if (r->connected && !r->live.gone) {
		r->pfds[RDMAQ_VERBS_EP_NFDS].fd = r->live.fd;
		nlive = 1;
	}
	ret = rdmaq_verbs_ep_block(&r->ep, r->pfds, nlive, timeout_ns);
	/* Report it from check_peer, after the core has looked at the ring
	 * once more: records that landed before the writer died still count. */
	if (nlive && r->pfds[RDMAQ_VERBS_EP_NFDS].revents)
		rdmaq_verbs_live_ended(&r->live);
	return ret;
}

static void vr_finish(void *ep)
{
	rdmaq_verbs_ep_finish(&to_vreader(ep)->ep);
}

static int vr_check_peer(void *ep)
{
	struct rdmaq_verbs_reader *r = to_vreader(ep);
	struct rdmaq_verbs_qp *q;

	if (!r->connected)
		return 0;
	if (rdmaq_verbs_live_ended(&r->live))
		return rdmaq_verbs_live_err(&r->live, r->who);
	q = rdmaq_verbs_pool_check(r->pool, false);
	return q ? rdmaq_verbs_qp_peer_err(q, r->who) : 0;
}

static const struct rdmaq_reader_ops vr_ops = {
	.credit = vr_credit,
	.interrupt = vr_interrupt,
	.destroy = vr_destroy,
};

static const struct rdmaq_wait_ops vr_wait_ops = {
	.prepare = vr_prepare,
	.block = vr_block,
	.finish = vr_finish,
	.check_peer = vr_check_peer,
};

int rdmaq_verbs_reader_create(struct rdmaq_reader **out, struct rdmaq_verbs_ctx *ctx,
			      const struct rdmaq_config *cfg, uint32_t index)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	struct rdmaq_verbs_reader *r;
	void *p;
	int ret;

	ret = rdmaq_verbs_ctx_check(ctx);
	if (ret)
		return ret;
	ret = rdmaq_config_check(cfg);
	if (ret)
		return ret;
	if (index >= cfg->n_readers)
		return rdmaq_set_err(-EINVAL, "reader index %u out of range: queue has %u readers",
				     index, cfg->n_readers);
	r = calloc(1, sizeof(*r));
	if (!r)
		return rdmaq_set_err(-ENOMEM, "out of memory");
	r->ctx = ctx;
	r->live.fd = -1;
	r->ep.efd = -1;
	r->ring_len = (rdmaq_ring_bytes(cfg->slot_bytes, cfg->slots) + pg - 1) / pg * pg;
	r->map_len = r->ring_len + pg;
	p = mmap(NULL, r->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		ret = rdmaq_set_err(-ENOMEM, "cannot map a %zu-byte ring", r->map_len);
		goto clean_r;
	}
	r->map = p;
	r->scratch = (uint64_t *)(r->map + r->ring_len);
	/* The ring is the only thing the writer may write (and read: our
	 * cursor in its control block, when it is short of credit). */
	ret = rdmaq_verbs_reg(ctx, r->map, r->ring_len,
			      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				      IBV_ACCESS_REMOTE_READ,
			      "reader ring", &r->ring_mr);
	if (ret)
		goto clean_map;
	ret = rdmaq_verbs_reg(ctx, r->scratch, pg, IBV_ACCESS_LOCAL_WRITE, "credit scratch",
			      &r->scratch_mr);
	if (ret)
		goto clean_ring_mr;
	ret = rdmaq_verbs_ep_init(&r->ep, ctx);
	if (ret)
		goto clean_scratch_mr;
	/* The trailer key arrives with the writer's details at connect. */
	rdmaq_reader_init(&r->r, &vr_ops, &vr_wait_ops, cfg, index, 0, r->map);
	((struct rdmaq_ring_ctrl *)r->map)->magic = RDMAQ_MAGIC;
	((struct rdmaq_ring_ctrl *)r->map)->consumed = 1;
	r->r.cursor = &((struct rdmaq_ring_ctrl *)r->map)->consumed;
	*out = &r->r;
	return 0;

clean_scratch_mr:
	ibv_dereg_mr(r->scratch_mr);
clean_ring_mr:
	ibv_dereg_mr(r->ring_mr);
clean_map:
	munmap(r->map, r->map_len);
clean_r:
	free(r);
	return ret;
}

void rdmaq_verbs_reader_info(struct rdmaq_reader *rp, struct rdmaq_verbs_ep_info *out)
{
	struct rdmaq_verbs_reader *r = to_vreader(rp);

	*out = (struct rdmaq_verbs_ep_info){
		.ep_id = r->ep.hub.id,
		.rkey = r->ring_mr->rkey,
		.addr = (uintptr_t)r->map,
	};
}

int rdmaq_verbs_reader_connect(struct rdmaq_reader *rp, uint64_t pool_id,
			       const struct rdmaq_verbs_ep_info *writer, int live_fd,
			       const char *desc)
{
	struct rdmaq_verbs_reader *r = to_vreader(rp);
	int ret = rdmaq_verbs_ctx_check(r->ctx);

	if (ret)
		return ret;
	if (r->connected)
		return rdmaq_set_err(-EISCONN, "reader %u is already connected", rp->index);
	if (!writer->addr || writer->addr > UINT64_MAX - sizeof(struct rdmaq_credit))
		return rdmaq_set_err(-EPROTO, "writer's credit address 0x%llx is not an address",
				     (unsigned long long)writer->addr);
	if (live_fd < 0)
		return rdmaq_set_err(-EINVAL, "reader %u: no liveness socket", rp->index);
	r->pool = rdmaq_verbs_pool_get(r->ctx, pool_id);
	if (!r->pool)
		return -ENOENT;
	r->credit_qp = rdmaq_verbs_pool_pick(r->pool, false);
	/* The writer names our own slot; its MR covers that slot alone. */
	r->credit_addr = writer->addr;
	r->credit_rkey = writer->rkey;
	r->writer_ep = writer->ep_id;
	rp->key = writer->key;
	r->live.fd = live_fd;
	snprintf(r->who, sizeof(r->who), "writer (%.95s)", desc && *desc ? desc : "?");
	r->connected = true;
	return 0;
}

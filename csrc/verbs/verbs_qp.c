/* SPDX-License-Identifier: MIT */
/*
 * One RC queue pair and its send CQ.
 *
 * Send accounting is per QP: WRs get increasing indexes, every
 * sig_every-th is signaled, and a signaled completion retires every WR up
 * to it (RC completes in order), so the SQ never overflows.  A failure,
 * whether seen here (a failed send completion) or by the hub (a failed
 * receive, an async event), is sticky: every later post returns it.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "barrier.h"
#include "ring.h"
#include "verbs_errno.h"
#include "verbs_qp.h"
#include "verbs_stats.h"

static void qp_fail_locked(struct rdmaq_verbs_qp *q, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Caller holds q->lock.  The first failure is the one reported. */
static void qp_fail_locked(struct rdmaq_verbs_qp *q, int err, const char *fmt, ...)
{
	va_list ap;

	if (q->err)
		return;
	va_start(ap, fmt);
	vsnprintf(q->errmsg, sizeof(q->errmsg), fmt, ap);
	va_end(ap);
	__atomic_store_n(&q->err, err, __ATOMIC_RELEASE);
	q->on_fail(q->owner);
}

/* The hub's callback: a failed receive or an async event broke the QP. */
static void qp_hub_fail(struct rdmaq_verbs_hub_client *c, int err, const char *why)
{
	struct rdmaq_verbs_qp *q = container_of(c, struct rdmaq_verbs_qp, hub);

	pthread_mutex_lock(&q->lock);
	qp_fail_locked(q, err, "%s", why);
	pthread_mutex_unlock(&q->lock);
}

int rdmaq_verbs_qp_create(struct rdmaq_verbs_ctx *ctx, struct rdmaq_verbs_qp *q,
			  void (*on_fail)(void *owner), void *owner)
{
	uint32_t depth = RDMAQ_VERBS_SQ_DEPTH;
	uint32_t inl = __atomic_load_n(&ctx->max_inline, __ATOMIC_RELAXED);
	struct ibv_qp_init_attr ia;
	int ret;

	if (ctx->dev_attr.max_qp_wr > 0 && depth > (uint32_t)ctx->dev_attr.max_qp_wr)
		depth = (uint32_t)ctx->dev_attr.max_qp_wr;
	pthread_mutex_init(&q->lock, NULL);
	q->ctx = ctx;
	q->on_fail = on_fail;
	q->owner = owner;
	q->hub = (struct rdmaq_verbs_hub_client){ .fail = qp_hub_fail };
	errno = 0;
	q->scq = ibv_create_cq(ctx->ibctx, (int)depth, NULL, NULL, 0);
	if (!q->scq) {
		ret = rdmaq_verbs_null_err(-ENOMEM);
		return rdmaq_set_err(ret, "ibv_create_cq (send, %u entries): %s", depth,
				     strerror(-ret));
	}
	for (;;) {
		ia = (struct ibv_qp_init_attr){
			.qp_context = &q->hub,
			.send_cq = q->scq,
			.recv_cq = ctx->hub.rcq,
			.srq = ctx->hub.srq,
			.cap = { .max_send_wr = depth, .max_send_sge = 1, .max_inline_data = inl },
			.qp_type = IBV_QPT_RC,
		};
		errno = 0;
		q->qp = ibv_create_qp(ctx->pd, &ia);
		if (q->qp || inl == 0 || (errno != EINVAL && errno != ENOMEM))
			break;
		/* Not every device inlines (or inlines this much): ask for less. */
		inl = inl > 64 ? 64 : 0;
	}
	if (!q->qp) {
		ret = rdmaq_verbs_null_err(-ENOMEM);
		ret = rdmaq_set_err(ret, "ibv_create_qp (RC on %s): %s", ctx->info.device,
				    strerror(-ret));
		goto clean_cq;
	}
	__atomic_store_n(&ctx->max_inline, inl, __ATOMIC_RELAXED);
	q->max_inline = ia.cap.max_inline_data;
	q->sq_depth = depth;
	q->sig_every = depth / 4 ? depth / 4 : 1;
	q->psn = (uint32_t)rdmaq_random_u64() & 0xffffff;
	ret = ibv_modify_qp(q->qp,
			    &(struct ibv_qp_attr){
				    .qp_state = IBV_QPS_INIT,
				    .pkey_index = 0,
				    .port_num = (uint8_t)ctx->info.port,
				    /* READ: a writer short of credit reads a reader's cursor. */
				    .qp_access_flags =
					    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
			    },
			    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (ret) {
		ret = rdmaq_verbs_err(ret);
		ret = rdmaq_set_err(ret, "ibv_modify_qp(INIT, QP %u on %s): %s", q->qp->qp_num,
				    ctx->info.device, strerror(-ret));
		goto clean_qp;
	}
	q->hub.id = q->qp->qp_num;
	rdmaq_verbs_hub_add_qp(&ctx->hub, &q->hub);
	RDMAQ_VSTAT_ADD(qps_created, 1);
	RDMAQ_VSTAT_ADD(qps_live, 1);
	return 0;

clean_qp:
	ibv_destroy_qp(q->qp);
	q->qp = NULL;
clean_cq:
	ibv_destroy_cq(q->scq);
	q->scq = NULL;
	return ret;
}

void rdmaq_verbs_qp_destroy(struct rdmaq_verbs_qp *q)
{
	if (q->qp) {
		rdmaq_verbs_hub_del(&q->ctx->hub, &q->hub);
		ibv_destroy_qp(q->qp);
		RDMAQ_VSTAT_ADD(qps_live, -1);
	}
	if (q->scq)
		ibv_destroy_cq(q->scq);
	q->qp = NULL;
	q->scq = NULL;
	pthread_mutex_destroy(&q->lock);
}

int rdmaq_verbs_qp_connect(struct rdmaq_verbs_qp *q, const struct rdmaq_verbs_port *remote,
			   const struct rdmaq_verbs_qp_info *rq)
{
	const struct rdmaq_verbs_port *local = &q->ctx->info;
	enum ibv_mtu mtu = (enum ibv_mtu)(remote->mtu < local->mtu ? remote->mtu : local->mtu);
	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = mtu,
		.dest_qp_num = rq->qpn,
		.rq_psn = rq->psn & 0xffffff,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,	/* 0.64 ms */
		.ah_attr = {
			.dlid = (uint16_t)remote->lid,
			.port_num = (uint8_t)local->port,
		},
	};
	int ret;

	if (mtu < IBV_MTU_256)
		attr.path_mtu = IBV_MTU_1024;
	/* RoCE has no LIDs: address by GID (RoCEv2 = UDP/IP underneath). */
	if (local->link_layer == IBV_LINK_LAYER_ETHERNET || remote->lid == 0) {
		attr.ah_attr.is_global = 1;
		memcpy(attr.ah_attr.grh.dgid.raw, remote->gid, 16);
		attr.ah_attr.grh.sgid_index = (uint8_t)local->gid_index;
		attr.ah_attr.grh.hop_limit = 64;
	}
	ret = ibv_modify_qp(q->qp, &attr,
			    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				    IBV_QP_MIN_RNR_TIMER);
	if (ret) {
		ret = rdmaq_verbs_err(ret);
		return rdmaq_set_err(ret, "ibv_modify_qp(RTR, QP %u to QP %u): %s", q->qp->qp_num,
				     rq->qpn, strerror(-ret));
	}
	/* timeout 14 = 67 ms, 7 retries: a vanished peer fails a WRITE in
	 * about half a second; rnr_retry 7 = wait for receives forever (the
	 * peer drains its SRQ whenever it waits or returns credit). */
	ret = ibv_modify_qp(q->qp,
			    &(struct ibv_qp_attr){
				    .qp_state = IBV_QPS_RTS,
				    .timeout = 14,
				    .retry_cnt = 7,
				    .rnr_retry = 7,
				    .sq_psn = q->psn,
				    .max_rd_atomic = 1,
			    },
			    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	if (ret) {
		ret = rdmaq_verbs_err(ret);
		return rdmaq_set_err(ret, "ibv_modify_qp(RTS, QP %u): %s", q->qp->qp_num,
				     strerror(-ret));
	}
	return 0;
}

void rdmaq_verbs_qp_info(const struct rdmaq_verbs_qp *q, struct rdmaq_verbs_qp_info *out)
{
	out->qpn = q->qp->qp_num;
	out->psn = q->psn;
}

/* The QP's error as the calling thread's. */
static int qp_err(const struct rdmaq_verbs_qp *q)
{
	return rdmaq_set_err(__atomic_load_n(&q->err, __ATOMIC_ACQUIRE), "%s", q->errmsg);
}

int rdmaq_verbs_qp_peer_err(const struct rdmaq_verbs_qp *q, const char *who)
{
	int err = __atomic_load_n(&q->err, __ATOMIC_ACQUIRE);

	return rdmaq_set_err(err, "%s%s: %s", who,
			     err == -EOWNERDEAD ? " died or became unreachable" : "", q->errmsg);
}

/*
 * A port that is down fails what is posted on it at once on some devices
 * (rxe: local QP operation error): say so in the QP's error.
 */
static const char *port_note(struct rdmaq_verbs_ctx *ctx, char *buf, size_t len)
{
	struct ibv_port_attr pa;

	if (ibv_query_port(ctx->ibctx, (uint8_t)ctx->info.port, &pa) || pa.state == IBV_PORT_ACTIVE)
		return "";
	snprintf(buf, len, "; local port %s:%u is %s", ctx->info.device, ctx->info.port,
		 ibv_port_state_str(pa.state));
	return buf;
}

/* Retire completed sends; a failed one breaks the QP.  Caller holds q->lock. */
static int qp_reap_locked(struct rdmaq_verbs_qp *q)
{
	char note[96];
	struct ibv_wc wc[16];
	int n, i;

	n = ibv_poll_cq(q->scq, 16, wc);
	if (n < 0) {
		qp_fail_locked(q, -EIO, "ibv_poll_cq (send CQ of QP %u) failed: %s", q->qp->qp_num,
			       strerror(-rdmaq_verbs_err(n)));
		return q->err;
	}
	for (i = 0; i < n; i++) {
		if (wc[i].status == IBV_WC_SUCCESS) {
			if (wc[i].wr_id > q->completed)
				q->completed = wc[i].wr_id;
			continue;
		}
		/* Retry exhaustion means nobody answers at the other end. */
		qp_fail_locked(q,
			       wc[i].status == IBV_WC_RETRY_EXC_ERR ||
					       wc[i].status == IBV_WC_RNR_RETRY_EXC_ERR
				       ? -EOWNERDEAD
				       : -EIO,
			       "RDMA WRITE on queue pair %u failed: %s (wc status %d)%s",
			       q->qp->qp_num, ibv_wc_status_str(wc[i].status), wc[i].status,
			       q->err ? "" : port_note(q->ctx, note, sizeof(note)));
	}
	return q->err ? q->err : n;
}

int rdmaq_verbs_qp_reap(struct rdmaq_verbs_qp *q)
{
	int ret;

	pthread_mutex_lock(&q->lock);
	ret = q->qp ? qp_reap_locked(q) : 0;
	pthread_mutex_unlock(&q->lock);
	return ret < 0 ? ret : 0;
}

/* Caller holds q->lock.  Posts n (<= sig_every) WRs. */
static int qp_post_locked(struct rdmaq_verbs_qp *q, struct rdmaq_verbs_wr *wrs, uint32_t n,
			  bool force_signal)
{
	int64_t deadline = 0;
	struct ibv_send_wr *bad = NULL;
	uint32_t i;
	int ret;

	if (q->err)
		return qp_err(q);
	/* Outstanding > depth - n implies a signaled WR is among them
	 * (n <= sig_every <= depth / 4), so reaping makes progress. */
	while (q->posted - q->completed + n > q->sq_depth) {
		ret = qp_reap_locked(q);
		if (ret < 0)
			return qp_err(q);
		if (ret > 0)
			continue;
		if (!deadline)
			deadline = rdmaq_now_ns() + RDMAQ_VERBS_SQ_WAIT_NS;
		else if (rdmaq_now_ns() > deadline)
			return rdmaq_set_err(-ETIMEDOUT,
					     "send queue of QP %u stayed full for %lld s: "
					     "the peer stopped acknowledging",
					     q->qp->qp_num, RDMAQ_VERBS_SQ_WAIT_NS / 1000000000LL);
		cpu_relax();
	}
	for (i = 0; i < n; i++) {
		uint64_t idx = q->posted + 1 + i;

		wrs[i].wr.wr_id = idx;
		if (idx % q->sig_every == 0 || (force_signal && i == n - 1))
			wrs[i].wr.send_flags |= IBV_SEND_SIGNALED;
		wrs[i].wr.next = i + 1 < n ? &wrs[i + 1].wr : NULL;
	}
	ret = ibv_post_send(q->qp, &wrs[0].wr, &bad);
	if (ret) {
		/* bad_wr is the wr member, first in its rdmaq_verbs_wr. */
		struct rdmaq_verbs_wr *first_bad = (struct rdmaq_verbs_wr *)bad;

		ret = rdmaq_verbs_err(ret);
		/* The WRs before `bad` went out and will complete. */
		if (first_bad >= wrs && first_bad < wrs + n)
			q->posted += (uint64_t)(first_bad - wrs);
		return rdmaq_set_err(ret, "ibv_post_send on QP %u: %s", q->qp->qp_num,
				     strerror(-ret));
	}
	q->posted += n;
	return 0;
}

int rdmaq_verbs_qp_post(struct rdmaq_verbs_qp *q, struct rdmaq_verbs_wr *wrs, uint32_t n)
{
	int ret = 0;

	pthread_mutex_lock(&q->lock);
	while (n && !ret) {
		uint32_t k = n < q->sig_every ? n : q->sig_every;

		ret = qp_post_locked(q, wrs, k, false);
		wrs += k;
		n -= k;
	}
	pthread_mutex_unlock(&q->lock);
	return ret;
}

/*
 * Post `wr` signaled and wait until it (and so everything before it on this
 * QP) has completed: the peer's memory holds all our writes.
 */
int rdmaq_verbs_qp_fence(struct rdmaq_verbs_qp *q, struct rdmaq_verbs_wr *wr, int64_t timeout_ns)
{
	int64_t deadline = rdmaq_now_ns() + timeout_ns;
	uint64_t idx;
	int ret;

	pthread_mutex_lock(&q->lock);
	ret = qp_post_locked(q, wr, 1, true);
	idx = q->posted;
	pthread_mutex_unlock(&q->lock);
	if (ret)
		return ret;
	for (;;) {
		pthread_mutex_lock(&q->lock);
		ret = qp_reap_locked(q);
		if (ret >= 0 && q->completed >= idx) {
			pthread_mutex_unlock(&q->lock);
			return 0;
		}
		pthread_mutex_unlock(&q->lock);
		if (ret < 0)
			return qp_err(q);
		if (rdmaq_now_ns() > deadline)
			return rdmaq_set_err(-ETIMEDOUT, "QP %u: no completion within %lld ms",
					     q->qp->qp_num, (long long)(timeout_ns / 1000000));
		sched_yield();
	}
}

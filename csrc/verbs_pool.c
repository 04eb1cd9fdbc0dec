/* SPDX-License-Identifier: MIT */
/*
 * Per-CPU queue-pair pools (KRCore-style).
 *
 * A process keeps, per peer process, one pool of RC QPs indexed by CPU.
 * Every queue between the two processes posts on that pool, so a second
 * queue costs no QP and no connection set-up.  A posting thread takes the
 * QP of the CPU it runs on (sched_getcpu), whose lock is uncontended
 * unless the thread migrates mid-post; there is no process-wide lock on
 * the data path.  RDMAQ_QPS_PER_PEER caps the pool (rxe loses completions
 * when many QPs are busy at once, so tests there use 1).
 *
 * Send accounting is per QP: WRs get increasing indexes, every
 * sig_every-th is signaled, and a signaled completion retires every WR up
 * to it (RC completes in order), so the SQ never overflows.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "barrier.h"
#include "verbs.h"

/* ---- one QP ------------------------------------------------------------ */

static int qp_create(struct rdmaq_verbs_ctx *ctx, struct rdmaq_verbs_qp *q,
		     struct rdmaq_verbs_pool *pool)
{
	uint32_t depth = RDMAQ_VERBS_SQ_DEPTH;
	uint32_t inl = __atomic_load_n(&ctx->max_inline, __ATOMIC_RELAXED);
	struct ibv_qp_init_attr ia;
	int ret;

	if (ctx->dev_attr.max_qp_wr > 0 && depth > (uint32_t)ctx->dev_attr.max_qp_wr)
		depth = (uint32_t)ctx->dev_attr.max_qp_wr;
	pthread_mutex_init(&q->lock, NULL);
	q->pool = pool;
	errno = 0;
	q->scq = ibv_create_cq(ctx->ibctx, (int)depth, NULL, NULL, 0);
	if (!q->scq) {
		ret = rdmaq_verbs_null_err(-ENOMEM);
		return rdmaq_set_err(ret, "ibv_create_cq (send, %u entries): %s", depth, strerror(-ret));
	}
	for (;;) {
		ia = (struct ibv_qp_init_attr){
			.qp_context = q,
			.send_cq = q->scq,
			.recv_cq = ctx->rcq,
			.srq = ctx->srq,
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
		ret = rdmaq_set_err(ret, "ibv_create_qp (RC on %s): %s", ctx->info.device, strerror(-ret));
		goto clean_cq;
	}
	__atomic_store_n(&ctx->max_inline, inl, __ATOMIC_RELAXED);
	q->max_inline = ia.cap.max_inline_data;
	q->sq_depth = depth;
	q->sig_every = depth / 4 ? depth / 4 : 1;
	q->psn = (uint32_t)rdmaq_random_u64() & 0xffffff;
	ret = ibv_modify_qp(q->qp, &(struct ibv_qp_attr){
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = (uint8_t)ctx->info.port,
		/* READ: a writer short of credit reads a reader's cursor. */
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
	}, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (ret) {
		ret = rdmaq_verbs_err(ret);
		ret = rdmaq_set_err(ret, "ibv_modify_qp(INIT, QP %u on %s): %s", q->qp->qp_num,
				    ctx->info.device, strerror(-ret));
		goto clean_qp;
	}
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

static void qp_destroy(struct rdmaq_verbs_qp *q)
{
	if (q->qp) {
		ibv_destroy_qp(q->qp);
		RDMAQ_VSTAT_ADD(qps_live, -1);
	}
	if (q->scq)
		ibv_destroy_cq(q->scq);
	q->qp = NULL;
	q->scq = NULL;
	pthread_mutex_destroy(&q->lock);
}

static int qp_connect(struct rdmaq_verbs_ctx *ctx, struct rdmaq_verbs_qp *q,
		      const struct rdmaq_verbs_port *remote, const struct rdmaq_verbs_qp_info *rq)
{
	enum ibv_mtu mtu = (enum ibv_mtu)(remote->mtu < ctx->info.mtu ? remote->mtu : ctx->info.mtu);
	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = mtu,
		.dest_qp_num = rq->qpn,
		.rq_psn = rq->psn & 0xffffff,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,	/* 0.64 ms */
		.ah_attr = {
			.dlid = (uint16_t)remote->lid,
			.port_num = (uint8_t)ctx->info.port,
		},
	};
	int ret;

	if (mtu < IBV_MTU_256)
		attr.path_mtu = IBV_MTU_1024;
	/* RoCE has no LIDs: address by GID (RoCEv2 = UDP/IP underneath). */
	if (ctx->info.link_layer == IBV_LINK_LAYER_ETHERNET || remote->lid == 0) {
		attr.ah_attr.is_global = 1;
		memcpy(attr.ah_attr.grh.dgid.raw, remote->gid, 16);
		attr.ah_attr.grh.sgid_index = (uint8_t)ctx->info.gid_index;
		attr.ah_attr.grh.hop_limit = 64;
	}
	ret = ibv_modify_qp(q->qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			    IBV_QP_MIN_RNR_TIMER);
	if (ret) {
		ret = rdmaq_verbs_err(ret);
		return rdmaq_set_err(ret, "ibv_modify_qp(RTR, QP %u to QP %u): %s", q->qp->qp_num, rq->qpn,
				     strerror(-ret));
	}
	/* timeout 14 = 67 ms, 7 retries: a vanished peer fails a WRITE in
	 * about half a second; rnr_retry 7 = wait for receives forever (the
	 * peer drains its SRQ whenever it waits or returns credit). */
	ret = ibv_modify_qp(q->qp, &(struct ibv_qp_attr){
		.qp_state = IBV_QPS_RTS,
		.timeout = 14,
		.retry_cnt = 7,
		.rnr_retry = 7,
		.sq_psn = q->psn,
		.max_rd_atomic = 1,
	}, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
	   IBV_QP_MAX_QP_RD_ATOMIC);
	if (ret) {
		ret = rdmaq_verbs_err(ret);
		return rdmaq_set_err(ret, "ibv_modify_qp(RTS, QP %u): %s", q->qp->qp_num, strerror(-ret));
	}
	return 0;
}

void rdmaq_verbs_qp_fail(struct rdmaq_verbs_qp *q, int err, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&q->lock);
	if (!q->err) {
		va_start(ap, fmt);
		vsnprintf(q->errmsg, sizeof(q->errmsg), fmt, ap);
		va_end(ap);
		__atomic_store_n(&q->err, err, __ATOMIC_RELEASE);
		__atomic_store_n(&q->pool->state, RDMAQ_POOL_BROKEN, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&q->lock);
}

static void qp_fail_locked(struct rdmaq_verbs_qp *q, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void qp_fail_locked(struct rdmaq_verbs_qp *q, int err, const char *fmt, ...)
{
	va_list ap;

	if (q->err)
		return;
	va_start(ap, fmt);
	vsnprintf(q->errmsg, sizeof(q->errmsg), fmt, ap);
	va_end(ap);
	__atomic_store_n(&q->err, err, __ATOMIC_RELEASE);
	__atomic_store_n(&q->pool->state, RDMAQ_POOL_BROKEN, __ATOMIC_RELEASE);
}

int rdmaq_verbs_fail_err(const struct rdmaq_verbs_qp *q)
{
	return rdmaq_set_err(__atomic_load_n(&q->err, __ATOMIC_ACQUIRE), "%s", q->errmsg);
}

int rdmaq_verbs_qp_peer_err(const struct rdmaq_verbs_qp *q, const char *who)
{
	int err = __atomic_load_n(&q->err, __ATOMIC_ACQUIRE);

	return rdmaq_set_err(err, "%s%s: %s", who, err == -EOWNERDEAD ? " died or became unreachable" : "",
			     q->errmsg);
}

void rdmaq_verbs_qp_fail_by_num(struct rdmaq_verbs_ctx *ctx, uint32_t qp_num,
				enum ibv_wc_status status)
{
	struct rdmaq_verbs_pool *p;
	uint32_t i;

	pthread_mutex_lock(&ctx->pool_lock);
	for (p = ctx->pools; p; p = p->next) {
		for (i = 0; i < (p->self ? 2 * p->n : p->n); i++) {
			struct rdmaq_verbs_qp *q = &p->qps[i];

			/* Lock order: pool_lock, then a QP's lock. */
			if (q->qp && q->qp->qp_num == qp_num) {
				rdmaq_verbs_qp_fail(q, -EOWNERDEAD, "queue pair %u to the peer failed: "
						    "%s (wc status %d)", qp_num, ibv_wc_status_str(status),
						    status);
				goto out;
			}
		}
	}
out:
	pthread_mutex_unlock(&ctx->pool_lock);
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
		qp_fail_locked(q, wc[i].status == IBV_WC_RETRY_EXC_ERR ||
				  wc[i].status == IBV_WC_RNR_RETRY_EXC_ERR ? -EOWNERDEAD : -EIO,
			       "RDMA WRITE on queue pair %u failed: %s (wc status %d)%s",
			       q->qp->qp_num, ibv_wc_status_str(wc[i].status), wc[i].status,
			       q->err ? "" : port_note(q->pool->ctx, note, sizeof(note)));
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
		return rdmaq_verbs_fail_err(q);
	/* Outstanding > depth - n implies a signaled WR is among them
	 * (n <= sig_every <= depth / 4), so reaping makes progress. */
	while (q->posted - q->completed + n > q->sq_depth) {
		ret = qp_reap_locked(q);
		if (ret < 0)
			return rdmaq_verbs_fail_err(q);
		if (ret > 0)
			continue;
		if (!deadline)
			deadline = rdmaq_now_ns() + RDMAQ_VERBS_SQ_WAIT_NS;
		else if (rdmaq_now_ns() > deadline)
			return rdmaq_set_err(-ETIMEDOUT, "send queue of QP %u stayed full for %lld s: "
					     "the peer stopped acknowledging", q->qp->qp_num,
					     RDMAQ_VERBS_SQ_WAIT_NS / 1000000000LL);
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
		return rdmaq_set_err(ret, "ibv_post_send on QP %u: %s", q->qp->qp_num, strerror(-ret));
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
			return rdmaq_verbs_fail_err(q);
		if (rdmaq_now_ns() > deadline)
			return rdmaq_set_err(-ETIMEDOUT, "QP %u: no completion within %lld ms",
					     q->qp->qp_num, (long long)(timeout_ns / 1000000));
		sched_yield();
	}
}

/* ---- pools -------------------------------------------------------------- */

static struct rdmaq_verbs_pool *pool_alloc(struct rdmaq_verbs_ctx *ctx, const uint8_t *peer,
					   uint64_t id, uint32_t n, bool self)
{
	struct rdmaq_verbs_pool *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->ctx = ctx;
	memcpy(p->peer, peer, 16);
	p->id = id;
	p->n = n;
	p->self = self;
	p->qps = calloc(self ? 2 * n : n, sizeof(*p->qps));
	if (!p->qps) {
		free(p);
		return NULL;
	}
	p->rqps = self ? p->qps + n : p->qps;
	return p;
}

static void pool_free(struct rdmaq_verbs_pool *p)
{
	uint32_t i;

	for (i = 0; i < (p->self ? 2 * p->n : p->n); i++)
		qp_destroy(&p->qps[i]);
	free(p->qps);
	free(p);
}

static int pool_create_qps(struct rdmaq_verbs_ctx *ctx, struct rdmaq_verbs_pool *p)
{
	uint32_t i, total = p->self ? 2 * p->n : p->n;
	int ret;

	for (i = 0; i < total; i++) {
		ret = qp_create(ctx, &p->qps[i], p);
		if (ret)
			return ret;
	}
	return 0;
}

static void qp_info(const struct rdmaq_verbs_qp *q, struct rdmaq_verbs_qp_info *out)
{
	out->qpn = q->qp->qp_num;
	out->psn = q->psn;
}

/* Caller holds pool_lock.  From here every later queue to this peer finds the pool. */
static void pool_link(struct rdmaq_verbs_ctx *ctx, struct rdmaq_verbs_pool *p,
		      enum rdmaq_verbs_pool_state state)
{
	__atomic_store_n(&p->state, state, __ATOMIC_RELEASE);
	p->next = ctx->pools;
	ctx->pools = p;
	if (state == RDMAQ_POOL_READY)
		RDMAQ_VSTAT_ADD(pools_created, 1);
}

static void pool_unlink(struct rdmaq_verbs_ctx *ctx, struct rdmaq_verbs_pool *p)
{
	struct rdmaq_verbs_pool **pp;

	for (pp = &ctx->pools; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			return;
		}
	}
}

static struct rdmaq_verbs_pool *pool_by_id(struct rdmaq_verbs_ctx *ctx, uint64_t id)
{
	struct rdmaq_verbs_pool *p;

	for (p = ctx->pools; p; p = p->next)
		if (p->id == id)
			return p;
	return NULL;
}

static uint64_t pool_new_id(void)
{
	uint64_t id;

	do
		id = rdmaq_random_u64() >> 11;	/* fits a double (JSON) exactly */
	while (!id);
	return id;
}

static int pool_self_create(struct rdmaq_verbs_ctx *ctx, const uint8_t *self_id,
			    struct rdmaq_verbs_pool **out)
{
	struct rdmaq_verbs_pool *p = pool_alloc(ctx, self_id, pool_new_id(), ctx->qps_per_peer, true);
	struct rdmaq_verbs_qp_info a, b;
	uint32_t i;
	int ret;

	if (!p)
		return rdmaq_set_err(-ENOMEM, "out of memory");
	ret = pool_create_qps(ctx, p);
	for (i = 0; !ret && i < p->n; i++) {
		qp_info(&p->qps[i], &a);
		qp_info(&p->rqps[i], &b);
		ret = qp_connect(ctx, &p->qps[i], &ctx->info, &b);
		if (!ret)
			ret = qp_connect(ctx, &p->rqps[i], &ctx->info, &a);
	}
	if (ret) {
		pool_free(p);
		return ret;
	}
	pool_link(ctx, p, RDMAQ_POOL_READY);
	*out = p;
	return 0;
}

int rdmaq_verbs_pool_find(struct rdmaq_verbs_ctx *ctx, const uint8_t *peer, uint64_t *pool_id)
{
	struct rdmaq_verbs_pool *p;
	uint8_t self[16];
	bool pending = false;
	int ret;

	ret = rdmaq_verbs_ctx_check(ctx);
	if (ret)
		return ret;
	rdmaq_verbs_process_id(self);
	pthread_mutex_lock(&ctx->pool_lock);
	for (p = ctx->pools; p; p = p->next) {
		if (memcmp(p->peer, peer, 16))
			continue;
		if (__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) == RDMAQ_POOL_READY) {
			*pool_id = p->id;
			ret = 0;
			goto out;
		}
		if (p->state == RDMAQ_POOL_PENDING)
			pending = true;
	}
	if (!memcmp(peer, self, 16)) {
		ret = pool_self_create(ctx, self, &p);
		if (!ret)
			*pool_id = p->id;
		goto out;
	}
	ret = pending ? rdmaq_set_err(-EINPROGRESS, "a pool to this peer is being set up")
		      : rdmaq_set_err(-ENOENT, "no pool to this peer yet");
out:
	pthread_mutex_unlock(&ctx->pool_lock);
	return ret;
}

int rdmaq_verbs_pool_ok(struct rdmaq_verbs_ctx *ctx, const uint8_t *peer, uint64_t pool_id)
{
	struct rdmaq_verbs_pool *p;
	int ok;

	pthread_mutex_lock(&ctx->pool_lock);
	p = pool_by_id(ctx, pool_id);
	/* A pool id names QPs to one process: nobody else may borrow it. */
	ok = p && !memcmp(p->peer, peer, sizeof(p->peer)) &&
	     __atomic_load_n(&p->state, __ATOMIC_ACQUIRE) == RDMAQ_POOL_READY;
	pthread_mutex_unlock(&ctx->pool_lock);
	return ok;
}

int rdmaq_verbs_pool_prepare(struct rdmaq_verbs_ctx *ctx, const uint8_t *peer, uint64_t *pool_id,
			     struct rdmaq_verbs_qp_info *out, uint32_t max, uint32_t *n)
{
	struct rdmaq_verbs_pool *p;
	uint32_t i, want = ctx->qps_per_peer < max ? ctx->qps_per_peer : max;
	int ret;

	ret = rdmaq_verbs_ctx_check(ctx);
	if (ret)
		return ret;
	if (want < 1)
		return rdmaq_set_err(-EINVAL, "pool of %u QPs", want);
	pthread_mutex_lock(&ctx->pool_lock);
	for (p = ctx->pools; p; p = p->next) {
		if (!memcmp(p->peer, peer, 16) && p->state != RDMAQ_POOL_BROKEN) {
			/* Lost a race with another thread: use theirs. */
			ret = rdmaq_set_err(-EINPROGRESS, "a pool to this peer exists or is being set up");
			goto out;
		}
	}
	p = pool_alloc(ctx, peer, pool_new_id(), want, false);
	if (!p) {
		ret = rdmaq_set_err(-ENOMEM, "out of memory");
		goto out;
	}
	ret = pool_create_qps(ctx, p);
	if (ret) {
		pool_free(p);
		goto out;
	}
	for (i = 0; i < want; i++)
		qp_info(&p->qps[i], &out[i]);
	pool_link(ctx, p, RDMAQ_POOL_PENDING);
	*pool_id = p->id;
	*n = want;
out:
	pthread_mutex_unlock(&ctx->pool_lock);
	return ret;
}

/*
 * What the peer sent about its port and QPs is checked before any of it
 * reaches ibv_modify_qp: -EPROTO naming the field.
 */
static int remote_check(struct rdmaq_verbs_ctx *ctx, const struct rdmaq_verbs_port *remote,
			const struct rdmaq_verbs_qp_info *rqps, uint32_t n)
{
	static const uint8_t zero[16];
	uint32_t i, j;

	if (remote->link_layer != ctx->info.link_layer)
		return rdmaq_set_err(-EPROTO, "link layers differ: peer %.63s is %s, %s is %s", remote->device,
				     remote->link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" :
				     remote->link_layer == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand" : "unknown",
				     ctx->info.device,
				     ctx->info.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand");
	if (remote->mtu < IBV_MTU_256 || remote->mtu > IBV_MTU_4096)
		return rdmaq_set_err(-EPROTO, "peer port: mtu %u is not an ibv_mtu (1..5)", remote->mtu);
	if (remote->lid > 0xffff)
		return rdmaq_set_err(-EPROTO, "peer port: lid %u is not 16 bits", remote->lid);
	if ((ctx->info.link_layer == IBV_LINK_LAYER_ETHERNET || remote->lid == 0) &&
	    !memcmp(remote->gid, zero, sizeof(zero)))
		return rdmaq_set_err(-EPROTO, "peer port: gid is all zeroes");
	for (i = 0; i < n; i++) {
		/* QP numbers and PSNs are 24 bits; QPs 0 and 1 are special. */
		if (rqps[i].qpn < 2 || rqps[i].qpn > 0xffffff)
			return rdmaq_set_err(-EPROTO, "peer QP %u: qpn %u is not a QP number (2..2^24-1)", i,
					     rqps[i].qpn);
		if (rqps[i].psn > 0xffffff)
			return rdmaq_set_err(-EPROTO, "peer QP %u: psn %u is not 24 bits", i, rqps[i].psn);
		for (j = 0; j < i; j++)
			if (rqps[j].qpn == rqps[i].qpn)
				return rdmaq_set_err(-EPROTO, "peer QPs %u and %u: the same qpn %u", j, i,
						     rqps[i].qpn);
	}
	return 0;
}

int rdmaq_verbs_pool_accept(struct rdmaq_verbs_ctx *ctx, const uint8_t *peer, uint64_t pool_id,
			    const struct rdmaq_verbs_port *remote,
			    const struct rdmaq_verbs_qp_info *rqps, uint32_t n,
			    struct rdmaq_verbs_qp_info *out)
{
	struct rdmaq_verbs_pool *p;
	uint32_t i;
	int ret;

	ret = rdmaq_verbs_ctx_check(ctx);
	if (ret)
		return ret;
	if (n < 1 || n > RDMAQ_VERBS_MAX_QPS)
		return rdmaq_set_err(-EPROTO, "peer offers a pool of %u QPs (1..%u)", n, RDMAQ_VERBS_MAX_QPS);
	if (!pool_id)
		return rdmaq_set_err(-EPROTO, "peer offers pool id 0");
	ret = remote_check(ctx, remote, rqps, n);
	if (ret)
		return ret;
	pthread_mutex_lock(&ctx->pool_lock);
	if (pool_by_id(ctx, pool_id)) {
		ret = rdmaq_set_err(-EEXIST, "pool %llu exists already", (unsigned long long)pool_id);
		goto out;
	}
	p = pool_alloc(ctx, peer, pool_id, n, false);
	if (!p) {
		ret = rdmaq_set_err(-ENOMEM, "out of memory");
		goto out;
	}
	ret = pool_create_qps(ctx, p);
	for (i = 0; !ret && i < n; i++) {
		ret = qp_connect(ctx, &p->qps[i], remote, &rqps[i]);
		qp_info(&p->qps[i], &out[i]);
	}
	if (ret) {
		pool_free(p);
		goto out;
	}
	pool_link(ctx, p, RDMAQ_POOL_READY);
out:
	pthread_mutex_unlock(&ctx->pool_lock);
	return ret;
}

int rdmaq_verbs_pool_complete(struct rdmaq_verbs_ctx *ctx, uint64_t pool_id,
			      const struct rdmaq_verbs_port *remote,
			      const struct rdmaq_verbs_qp_info *rqps, uint32_t n)
{
	struct rdmaq_verbs_pool *p;
	uint32_t i;
	int ret = 0;

	pthread_mutex_lock(&ctx->pool_lock);
	p = pool_by_id(ctx, pool_id);
	if (!p || p->state != RDMAQ_POOL_PENDING) {
		ret = rdmaq_set_err(-ENOENT, "no pending pool %llu", (unsigned long long)pool_id);
		goto out;
	}
	if (n != p->n)
		ret = rdmaq_set_err(-EPROTO, "peer answered with %u QPs for a pool of %u", n, p->n);
	else
		ret = remote_check(ctx, remote, rqps, n);
	for (i = 0; !ret && i < n; i++)
		ret = qp_connect(ctx, &p->qps[i], remote, &rqps[i]);
	if (ret) {
		pool_unlink(ctx, p);
		pool_free(p);
		goto out;
	}
	__atomic_store_n(&p->state, RDMAQ_POOL_READY, __ATOMIC_RELEASE);
	RDMAQ_VSTAT_ADD(pools_created, 1);
out:
	pthread_mutex_unlock(&ctx->pool_lock);
	return ret;
}

void rdmaq_verbs_pool_abort(struct rdmaq_verbs_ctx *ctx, uint64_t pool_id)
{
	struct rdmaq_verbs_pool *p;

	pthread_mutex_lock(&ctx->pool_lock);
	p = pool_by_id(ctx, pool_id);
	if (p && p->state == RDMAQ_POOL_PENDING && !p->refs) {
		pool_unlink(ctx, p);
		pool_free(p);
	} else if (p && p->state == RDMAQ_POOL_READY) {
		/* The peer does not know it: never hand it out again. */
		__atomic_store_n(&p->state, RDMAQ_POOL_BROKEN, __ATOMIC_RELEASE);
		if (!p->refs) {
			pool_unlink(ctx, p);
			pool_free(p);
		}
	}
	pthread_mutex_unlock(&ctx->pool_lock);
}

/* Take a reference for an endpoint; NULL (errmsg set) unless usable. */
struct rdmaq_verbs_pool *rdmaq_verbs_pool_get(struct rdmaq_verbs_ctx *ctx, uint64_t id)
{
	struct rdmaq_verbs_pool *p;

	pthread_mutex_lock(&ctx->pool_lock);
	p = pool_by_id(ctx, id);
	if (!p || __atomic_load_n(&p->state, __ATOMIC_ACQUIRE) != RDMAQ_POOL_READY) {
		rdmaq_set_err(-ENOENT, "no connected queue-pair pool %llu%s", (unsigned long long)id,
			      p ? " (it failed)" : "");
		p = NULL;
		goto out;
	}
	if (p->refs || p->uses) {
		RDMAQ_VSTAT_ADD(pools_reused, 1);
		RDMAQ_VSTAT_ADD(qps_reused, p->self ? 2 * p->n : p->n);
	}
	p->refs++;
	p->uses++;
out:
	pthread_mutex_unlock(&ctx->pool_lock);
	return p;
}

/* Drop an endpoint's reference; a failed pool goes once nobody uses it. */
void rdmaq_verbs_pool_put(struct rdmaq_verbs_pool *p)
{
	struct rdmaq_verbs_ctx *ctx = p->ctx;

	pthread_mutex_lock(&ctx->pool_lock);
	if (--p->refs == 0 && __atomic_load_n(&p->state, __ATOMIC_ACQUIRE) == RDMAQ_POOL_BROKEN) {
		pool_unlink(ctx, p);
		pool_free(p);
	}
	pthread_mutex_unlock(&ctx->pool_lock);
}

struct rdmaq_verbs_qp *rdmaq_verbs_pool_pick(struct rdmaq_verbs_pool *p, bool writer)
{
	int cpu = sched_getcpu();

	if (cpu < 0)
		cpu = 0;
	return &(writer ? p->qps : p->rqps)[(uint32_t)cpu % p->n];
}

struct rdmaq_verbs_qp *rdmaq_verbs_pool_broken(struct rdmaq_verbs_pool *p, bool writer)
{
	struct rdmaq_verbs_qp *qps = writer ? p->qps : p->rqps;
	uint32_t k;

	for (k = 0; k < p->n; k++)
		if (rdmaq_verbs_qp_broken(&qps[k]))
			return &qps[k];
	return NULL;
}

struct rdmaq_verbs_qp *rdmaq_verbs_pool_check(struct rdmaq_verbs_pool *p, bool writer)
{
	struct rdmaq_verbs_qp *qps = writer ? p->qps : p->rqps;
	uint32_t k;

	for (k = 0; k < p->n; k++)
		rdmaq_verbs_qp_reap(&qps[k]);
	return rdmaq_verbs_pool_broken(p, writer);
}

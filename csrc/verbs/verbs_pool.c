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
 * Pools are found by peer and by id in the context's registry, under its
 * pool_lock.  A QP that fails breaks its pool: no later queue gets it.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "ring.h"
#include "verbs_pool.h"
#include "verbs_stats.h"

/* A QP's on_fail: its pool is handed out no more. */
static void pool_qp_failed(void *owner)
{
	struct rdmaq_verbs_pool *p = owner;

	__atomic_store_n(&p->state, RDMAQ_POOL_BROKEN, __ATOMIC_RELEASE);
}

static uint32_t pool_nqps(const struct rdmaq_verbs_pool *p)
{
	return p->self ? 2 * p->n : p->n;
}

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
	p->qps = calloc(pool_nqps(p), sizeof(*p->qps));
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

	for (i = 0; i < pool_nqps(p); i++)
		rdmaq_verbs_qp_destroy(&p->qps[i]);
	free(p->qps);
	free(p);
}

static int pool_create_qps(struct rdmaq_verbs_ctx *ctx, struct rdmaq_verbs_pool *p)
{
	uint32_t i;
	int ret;

	for (i = 0; i < pool_nqps(p); i++) {
		ret = rdmaq_verbs_qp_create(ctx, &p->qps[i], pool_qp_failed, p);
		if (ret)
			return ret;
	}
	return 0;
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
		id = rdmaq_random_u64() >> 11; /* fits a double (JSON) exactly */
	while (!id);
	return id;
}

static int pool_self_create(struct rdmaq_verbs_ctx *ctx, const uint8_t *self_id,
			    struct rdmaq_verbs_pool **out)
{
	struct rdmaq_verbs_pool *p =
		pool_alloc(ctx, self_id, pool_new_id(), ctx->qps_per_peer, true);
	struct rdmaq_verbs_qp_info a, b;
	uint32_t i;
	int ret;

	if (!p)
		return rdmaq_set_err(-ENOMEM, "out of memory");
	ret = pool_create_qps(ctx, p);
	for (i = 0; !ret && i < p->n; i++) {
		rdmaq_verbs_qp_info(&p->qps[i], &a);
		rdmaq_verbs_qp_info(&p->rqps[i], &b);
		ret = rdmaq_verbs_qp_connect(&p->qps[i], &ctx->info, &b);
		if (!ret)
			ret = rdmaq_verbs_qp_connect(&p->rqps[i], &ctx->info, &a);
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
			ret = rdmaq_set_err(-EINPROGRESS,
					    "a pool to this peer exists or is being set up");
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
		rdmaq_verbs_qp_info(&p->qps[i], &out[i]);
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
		return rdmaq_set_err(-EPROTO, "link layers differ: peer %.63s is %s, %s is %s",
				     remote->device,
				     remote->link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet"
				     : remote->link_layer == IBV_LINK_LAYER_INFINIBAND
					     ? "InfiniBand"
					     : "unknown",
				     ctx->info.device,
				     ctx->info.link_layer == IBV_LINK_LAYER_ETHERNET
					     ? "Ethernet"
					     : "InfiniBand");
	if (remote->mtu < IBV_MTU_256 || remote->mtu > IBV_MTU_4096)
		return rdmaq_set_err(-EPROTO, "peer port: mtu %u is not an ibv_mtu (1..5)",
				     remote->mtu);
	if (remote->lid > 0xffff)
		return rdmaq_set_err(-EPROTO, "peer port: lid %u is not 16 bits", remote->lid);
	if ((ctx->info.link_layer == IBV_LINK_LAYER_ETHERNET || remote->lid == 0) &&
	    !memcmp(remote->gid, zero, sizeof(zero)))
		return rdmaq_set_err(-EPROTO, "peer port: gid is all zeroes");
	for (i = 0; i < n; i++) {
		/* QP numbers and PSNs are 24 bits; QPs 0 and 1 are special. */
		if (rqps[i].qpn < 2 || rqps[i].qpn > 0xffffff)
			return rdmaq_set_err(-EPROTO,
					     "peer QP %u: qpn %u is not a QP number (2..2^24-1)", i,
					     rqps[i].qpn);
		if (rqps[i].psn > 0xffffff)
			return rdmaq_set_err(-EPROTO, "peer QP %u: psn %u is not 24 bits", i,
					     rqps[i].psn);
		for (j = 0; j < i; j++)
			if (rqps[j].qpn == rqps[i].qpn)
				return rdmaq_set_err(-EPROTO, "peer QPs %u and %u: the same qpn %u",
						     j, i, rqps[i].qpn);
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
		return rdmaq_set_err(-EPROTO, "peer offers a pool of %u QPs (1..%u)", n,
				     RDMAQ_VERBS_MAX_QPS);
	if (!pool_id)
		return rdmaq_set_err(-EPROTO, "peer offers pool id 0");
	ret = remote_check(ctx, remote, rqps, n);
	if (ret)
		return ret;
	pthread_mutex_lock(&ctx->pool_lock);
	if (pool_by_id(ctx, pool_id)) {
		ret = rdmaq_set_err(-EEXIST, "pool %llu exists already",
				    (unsigned long long)pool_id);
		goto out;
	}
	p = pool_alloc(ctx, peer, pool_id, n, false);
	if (!p) {
		ret = rdmaq_set_err(-ENOMEM, "out of memory");
		goto out;
	}
	ret = pool_create_qps(ctx, p);
	for (i = 0; !ret && i < n; i++) {
		ret = rdmaq_verbs_qp_connect(&p->qps[i], remote, &rqps[i]);
		rdmaq_verbs_qp_info(&p->qps[i], &out[i]);
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
		ret = rdmaq_verbs_qp_connect(&p->qps[i], remote, &rqps[i]);
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
		rdmaq_set_err(-ENOENT, "no connected queue-pair pool %llu%s",
			      (unsigned long long)id, p ? " (it failed)" : "");
		p = NULL;
		goto out;
	}
	if (p->refs || p->uses) {
		RDMAQ_VSTAT_ADD(pools_reused, 1);
		RDMAQ_VSTAT_ADD(qps_reused, pool_nqps(p));
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

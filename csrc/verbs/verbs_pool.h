/* SPDX-License-Identifier: MIT */
/*
 * Per-CPU queue-pair pools, one per peer process, shared by every queue
 * between the two processes.  Above the QPs they own; below the writer and
 * reader that post on them.
 */
#ifndef RDMAQ_VERBS_POOL_H
#define RDMAQ_VERBS_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "verbs_ctx.h"
#include "verbs_qp.h"

enum rdmaq_verbs_pool_state {
	RDMAQ_POOL_PENDING,
	RDMAQ_POOL_READY,
	RDMAQ_POOL_BROKEN,
};

struct rdmaq_verbs_pool {
	struct rdmaq_verbs_pool *next; /* in ctx->pools */
	struct rdmaq_verbs_ctx *ctx;
	uint8_t peer[16];
	uint64_t id;
	enum rdmaq_verbs_pool_state state;
	uint32_t n;
	uint32_t refs; /* endpoints using it */
	uint32_t uses; /* endpoints that ever used it */
	bool self;     /* both ends in this process */
	/* Writers post on qps, readers on rqps: the same QPs, except in the
	 * loopback pool where qps[i] and rqps[i] are the two ends of a pair. */
	struct rdmaq_verbs_qp *qps;
	struct rdmaq_verbs_qp *rqps;
};

/* Take a reference for an endpoint; NULL (errmsg set) unless usable. */
struct rdmaq_verbs_pool *rdmaq_verbs_pool_get(struct rdmaq_verbs_ctx *ctx, uint64_t id);
/* Drop an endpoint's reference; a failed pool goes once nobody uses it. */
void rdmaq_verbs_pool_put(struct rdmaq_verbs_pool *pool);
/* The QP of the CPU the caller runs on, on the writer's or the reader's side. */
struct rdmaq_verbs_qp *rdmaq_verbs_pool_pick(struct rdmaq_verbs_pool *pool, bool writer);
/* The first failed QP of the writer's or the reader's side, or NULL. */
struct rdmaq_verbs_qp *rdmaq_verbs_pool_broken(struct rdmaq_verbs_pool *pool, bool writer);
/* The same after retiring every QP's completed sends (which finds failed ones). */
struct rdmaq_verbs_qp *rdmaq_verbs_pool_check(struct rdmaq_verbs_pool *pool, bool writer);

#endif

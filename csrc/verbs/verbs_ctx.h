/* SPDX-License-Identifier: MIT */
/*
 * The verbs device context, one per (device, port, GID) and process: the
 * bottom layer every other verbs file stands on.  It owns the device, the
 * PD, the hub and the graveyard, and holds the pool registry for
 * verbs_pool.c.
 */
#ifndef RDMAQ_VERBS_CTX_H
#define RDMAQ_VERBS_CTX_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

#include "rdmaq_verbs.h"
#include "verbs_grave.h"
#include "verbs_hub.h"

#define RDMAQ_VERBS_MAX_QPS 64 /* per-CPU pool size cap */

struct rdmaq_verbs_pool;

struct rdmaq_verbs_ctx {
	struct rdmaq_verbs_ctx *next;
	pid_t pid; /* the process that opened it */
	struct ibv_context *ibctx;
	struct ibv_pd *pd;
	struct ibv_device_attr dev_attr;
	struct ibv_port_attr port_attr;
	struct rdmaq_verbs_port info;
	union ibv_gid gid;
	uint32_t qps_per_peer;
	uint32_t max_inline; /* lowered by the first QP if the device wants less */
	struct rdmaq_verbs_hub hub;
	struct rdmaq_verbs_graveyard graveyard;
	/* verbs_pool.c's pools to peer processes, under pool_lock. */
	pthread_mutex_t pool_lock;
	struct rdmaq_verbs_pool *pools;
};

/* True in a forked child: the context's verbs objects are its parent's. */
bool rdmaq_verbs_ctx_stale(const struct rdmaq_verbs_ctx *ctx);
/* 0, or -ESTALE with the message when the context is stale. */
int rdmaq_verbs_ctx_check(const struct rdmaq_verbs_ctx *ctx);
/* ibv_reg_mr on the context's PD; `what` names the memory in the error. */
int rdmaq_verbs_reg(struct rdmaq_verbs_ctx *ctx, void *mem, size_t len, int access,
		    const char *what, struct ibv_mr **out);

#endif

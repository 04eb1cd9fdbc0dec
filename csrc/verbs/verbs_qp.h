/* SPDX-License-Identifier: MIT */
/*
 * One RC queue pair with its own send CQ, and the work requests posted on
 * it.  Above the context and the hub (it registers with the hub to be told
 * of its failures); below the pools, which own QPs.
 */
#ifndef RDMAQ_VERBS_QP_H
#define RDMAQ_VERBS_QP_H

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "barrier.h"
#include "verbs_ctx.h"
#include "verbs_hub.h"

#define RDMAQ_VERBS_SQ_DEPTH   256 /* send WRs per QP */
#define RDMAQ_VERBS_SQ_WAIT_NS (10LL * 1000000000LL)
#define RDMAQ_VERBS_FENCE_NS   (2LL * 1000000000LL)

/*
 * The lock covers posting and reaping; it is per QP (per CPU), so threads
 * on different CPUs never meet.
 */
struct rdmaq_verbs_qp {
	pthread_mutex_t lock;
	struct ibv_qp *qp;
	struct ibv_cq *scq;
	struct rdmaq_verbs_ctx *ctx;
	struct rdmaq_verbs_hub_client hub; /* qp_context: the hub fails us through it */
	/* Called once, under lock, when the QP fails: its owner stops handing it out. */
	void (*on_fail)(void *owner);
	void *owner;
	uint32_t psn;
	uint32_t sq_depth;
	uint32_t sig_every; /* every sig_every-th WR is signaled */
	uint32_t max_inline;
	uint64_t posted;    /* WRs posted so far; a WR's index is 1-based */
	uint64_t completed; /* every WR up to this index has completed */
	int err;	    /* sticky negative errno once the QP failed */
	char errmsg[160];
};

/* A send WR and its one scatter entry: what the posting functions take. */
struct rdmaq_verbs_wr {
	struct ibv_send_wr wr; /* first: a bad_wr maps back to its rdmaq_verbs_wr */
	struct ibv_sge sge;
};

/* Create a QP in INIT on ctx, registered with its hub. */
int rdmaq_verbs_qp_create(struct rdmaq_verbs_ctx *ctx, struct rdmaq_verbs_qp *q,
			  void (*on_fail)(void *owner), void *owner);
void rdmaq_verbs_qp_destroy(struct rdmaq_verbs_qp *q);
/* INIT -> RTR -> RTS towards the remote port's QP rq. */
int rdmaq_verbs_qp_connect(struct rdmaq_verbs_qp *q, const struct rdmaq_verbs_port *remote,
			   const struct rdmaq_verbs_qp_info *rq);
void rdmaq_verbs_qp_info(const struct rdmaq_verbs_qp *q, struct rdmaq_verbs_qp_info *out);

/* Post n chained-up WRs, in order (the caller fills them with rdmaq_verbs_wr_*). */
int rdmaq_verbs_qp_post(struct rdmaq_verbs_qp *q, struct rdmaq_verbs_wr *wrs, uint32_t n);
/* Post wr signaled; wait until it, and so all before it, completed. */
int rdmaq_verbs_qp_fence(struct rdmaq_verbs_qp *q, struct rdmaq_verbs_wr *wr, int64_t timeout_ns);
/* Retire completed sends; 0, or the QP's error. */
int rdmaq_verbs_qp_reap(struct rdmaq_verbs_qp *q);

/* The QP has failed (sticky). */
static inline bool rdmaq_verbs_qp_broken(const struct rdmaq_verbs_qp *q)
{
	return __atomic_load_n(&q->err, __ATOMIC_ACQUIRE) != 0;
}

/* Sends posted and not yet known to have completed. */
static inline bool rdmaq_verbs_qp_busy(const struct rdmaq_verbs_qp *q)
{
	return READ_ONCE(q->posted) != READ_ONCE(q->completed);
}

/* The QP's failure as the error of the peer it leads to, `who` ("reader 2 (pid 42)"). */
int rdmaq_verbs_qp_peer_err(const struct rdmaq_verbs_qp *q, const char *who);

/*
 * RDMA WRITE of [src, src+len) (in mr) to remote (addr, rkey), inline when
 * the QP takes that many bytes inline.
 */
static inline void rdmaq_verbs_wr_write(struct rdmaq_verbs_wr *w, const struct rdmaq_verbs_qp *q,
					const struct ibv_mr *mr, const void *src, size_t len,
					uint64_t addr, uint32_t rkey)
{
	*w = (struct rdmaq_verbs_wr){
		.wr = {
			.sg_list = &w->sge,
			.num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE,
			.send_flags = len <= q->max_inline ? IBV_SEND_INLINE : 0,
			.wr.rdma = { .remote_addr = addr, .rkey = rkey },
		},
		.sge = { .addr = (uintptr_t)src, .length = (uint32_t)len, .lkey = mr->lkey },
	};
}

/* Make a WRITE a doorbell: WRITE_WITH_IMM naming the peer's endpoint ep_id. */
static inline void rdmaq_verbs_wr_doorbell(struct rdmaq_verbs_wr *w, uint32_t ep_id)
{
	w->wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	w->wr.imm_data = htonl(ep_id);
}

/* RDMA READ of remote (addr, rkey) into [dst, dst+len) (in mr). */
static inline void rdmaq_verbs_wr_read(struct rdmaq_verbs_wr *w, const struct ibv_mr *mr, void *dst,
				       size_t len, uint64_t addr, uint32_t rkey)
{
	*w = (struct rdmaq_verbs_wr){
		.wr = {
			.sg_list = &w->sge,
			.num_sge = 1,
			.opcode = IBV_WR_RDMA_READ,
			.wr.rdma = { .remote_addr = addr, .rkey = rkey },
		},
		.sge = { .addr = (uintptr_t)dst, .length = (uint32_t)len, .lkey = mr->lkey },
	};
}

#endif

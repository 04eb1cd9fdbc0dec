/* SPDX-License-Identifier: MIT */
/*
 * Internals of the verbs transport, shared by its files:
 *
 *   verbs_ctx.c     device context, GID choice, the event hub (shared SRQ,
 *                   receive CQ and completion channel), memory graveyard
 *   verbs_pool.c    per-CPU RC queue-pair pools and posting on them
 *   verbs_ep.c      what writer and reader share: wake-ups, liveness
 *   verbs_writer.c  writer ops: staging ring, coalesced RDMA WRITEs
 *   verbs_reader.c  reader ops: ring, credit return
 */
#ifndef RDMAQ_VERBS_INTERNAL_H
#define RDMAQ_VERBS_INTERNAL_H

#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <sys/types.h>

#include "rdmaq_verbs.h"
#include "ring.h"

#define RDMAQ_VERBS_MAX_QPS		64	/* per-CPU pool size cap */
#define RDMAQ_VERBS_SQ_DEPTH		256	/* send WRs per QP */
#define RDMAQ_VERBS_SRQ_DEPTH		4096	/* receives shared by all QPs */
#define RDMAQ_VERBS_WANT_INLINE		256
#define RDMAQ_VERBS_BATCH		32	/* WRs per ibv_post_send */
#define RDMAQ_VERBS_SQ_WAIT_NS		(10LL * 1000000000LL)
#define RDMAQ_VERBS_FENCE_NS		(2LL * 1000000000LL)

enum rdmaq_verbs_pool_state {
	RDMAQ_POOL_PENDING,
	RDMAQ_POOL_READY,
	RDMAQ_POOL_BROKEN,
};

struct rdmaq_verbs_ctx;
struct rdmaq_verbs_pool;

/*
 * One RC queue pair and its own send CQ.  The lock covers posting and
 * reaping; it is per QP (per CPU), so threads on different CPUs never meet.
 */
struct rdmaq_verbs_qp {
	pthread_mutex_t lock;
	struct ibv_qp *qp;
	struct ibv_cq *scq;
	struct rdmaq_verbs_pool *pool;
	uint32_t psn;
	uint32_t sq_depth;
	uint32_t sig_every;	/* every sig_every-th WR is signaled */
	uint32_t max_inline;
	uint64_t posted;	/* WRs posted so far; a WR's index is 1-based */
	uint64_t completed;	/* every WR up to this index has completed */
	int err;		/* sticky negative errno once the QP failed */
	char errmsg[160];
};

struct rdmaq_verbs_pool {
	struct rdmaq_verbs_pool *next;
	struct rdmaq_verbs_ctx *ctx;
	uint8_t peer[16];
	uint64_t id;
	enum rdmaq_verbs_pool_state state;
	uint32_t n;
	uint32_t refs;		/* endpoints using it */
	uint32_t uses;		/* endpoints that ever used it */
	bool self;		/* both ends in this process */
	/* Writers post on qps, readers on rqps: the same QPs, except in the
	 * loopback pool where qps[i] and rqps[i] are the two ends of a pair. */
	struct rdmaq_verbs_qp *qps;
	struct rdmaq_verbs_qp *rqps;
};

/* A send WR and its one scatter entry: what the posting functions take. */
struct rdmaq_verbs_wr {
	struct ibv_send_wr wr;	/* first: a bad_wr maps back to its rdmaq_verbs_wr */
	struct ibv_sge sge;
};

/* Memory a closed endpoint exposed, kept until its peers let go. */
struct rdmaq_verbs_grave {
	struct rdmaq_verbs_grave *next;
	struct ibv_mr **mrs;	/* nmrs slots, NULL = unused */
	uint32_t nmrs;
	void *mem[2];		/* munmap()ed once the MRs are gone */
	size_t len[2];
	int *fds;		/* liveness sockets: EOF on all = safe to free */
	uint32_t nfds;		/* used so far, of the slots allocated */
};

/* What a writer or reader endpoint shares: wake-up and liveness plumbing. */
struct rdmaq_verbs_ep {
	struct rdmaq_verbs_ep *next;	/* the hub's dispatch list */
	struct rdmaq_verbs_ctx *ctx;
	uint32_t id;			/* immediate data addressed to us */
	int efd;			/* eventfd: doorbells and interrupts */
	uint32_t sleeping;
	uint64_t doorbells;
};

struct rdmaq_verbs_ctx {
	struct rdmaq_verbs_ctx *next;
	pid_t pid;
	struct ibv_context *ibctx;
	struct ibv_pd *pd;
	struct ibv_device_attr dev_attr;
	struct ibv_port_attr port_attr;
	struct rdmaq_verbs_port info;
	union ibv_gid gid;

	/* The hub: every QP's receives land in one SRQ and one CQ, whose
	 * completion channel is the only fd a blocked endpoint waits on. */
	pthread_mutex_t hub_lock;
	struct ibv_comp_channel *chan;
	struct ibv_cq *rcq;
	struct ibv_srq *srq;
	uint32_t srq_depth;
	bool armed;
	unsigned int unacked;
	struct rdmaq_verbs_ep *eps;
	uint32_t next_ep_id;

	/* Pools and graves. */
	pthread_mutex_t pool_lock;
	struct rdmaq_verbs_pool *pools;
	struct rdmaq_verbs_grave *graves;
	uint64_t next_pool_id;
	uint32_t qps_per_peer;
	uint32_t max_inline;
};

/*
 * A failed verbs call's return value as a negative errno.  rdma-core
 * documents a positive errno for most calls and -1 with errno for a few,
 * and providers may return a negative errno: whichever it was, the result
 * is negative, never 0, so a failure can never read as success.
 */
static inline int rdmaq_verbs_err(int ret)
{
	if (ret > 0)
		return -ret;
	if (ret == -1 && errno > 0)
		return -errno;
	return ret < 0 && ret > -4096 ? ret : -EIO;
}

/* A verbs constructor returned NULL: its errno, or `fallback` if it set none. */
static inline int rdmaq_verbs_null_err(int fallback)
{
	return errno > 0 ? -errno : fallback;
}

/* verbs_ctx.c */
extern struct rdmaq_verbs_stats rdmaq_verbs_counters;
#define RDMAQ_VSTAT_ADD(field, v) __atomic_add_fetch(&rdmaq_verbs_counters.field, (v), __ATOMIC_RELAXED)
void rdmaq_verbs_hub_add(struct rdmaq_verbs_ctx *ctx, struct rdmaq_verbs_ep *ep);
void rdmaq_verbs_hub_del(struct rdmaq_verbs_ctx *ctx, struct rdmaq_verbs_ep *ep);
int rdmaq_verbs_hub_service(struct rdmaq_verbs_ctx *ctx, bool arm, bool trylock);
int rdmaq_verbs_hub_event(struct rdmaq_verbs_ctx *ctx);
void rdmaq_verbs_hub_async(struct rdmaq_verbs_ctx *ctx);
struct rdmaq_verbs_grave *rdmaq_verbs_grave_new(uint32_t nmrs, uint32_t nfds);
void rdmaq_verbs_grave_add(struct rdmaq_verbs_ctx *ctx, struct rdmaq_verbs_grave *g);
void rdmaq_verbs_grave_reap(struct rdmaq_verbs_ctx *ctx);
bool rdmaq_verbs_ctx_stale(const struct rdmaq_verbs_ctx *ctx);
/* 0, or -ESTALE with the message when the context is stale. */
int rdmaq_verbs_ctx_check(const struct rdmaq_verbs_ctx *ctx);
int rdmaq_verbs_reg(struct rdmaq_verbs_ctx *ctx, void *mem, size_t len, int access,
		    const char *what, struct ibv_mr **out);

/* verbs_pool.c */
struct rdmaq_verbs_pool *rdmaq_verbs_pool_get(struct rdmaq_verbs_ctx *ctx, uint64_t id);
void rdmaq_verbs_pool_put(struct rdmaq_verbs_pool *pool);
struct rdmaq_verbs_qp *rdmaq_verbs_pool_pick(struct rdmaq_verbs_pool *pool, bool writer);
/* Post n chained-up WRs, in order (the caller fills them with rdmaq_verbs_wr_*). */
int rdmaq_verbs_qp_post(struct rdmaq_verbs_qp *q, struct rdmaq_verbs_wr *wrs, uint32_t n);
/* Post wr signaled; wait until it, and so all before it, completed. */
int rdmaq_verbs_qp_fence(struct rdmaq_verbs_qp *q, struct rdmaq_verbs_wr *wr, int64_t timeout_ns);
int rdmaq_verbs_qp_reap(struct rdmaq_verbs_qp *q);
void rdmaq_verbs_qp_fail(struct rdmaq_verbs_qp *q, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void rdmaq_verbs_qp_fail_by_num(struct rdmaq_verbs_ctx *ctx, uint32_t qp_num,
				enum ibv_wc_status status);
/* The QP's failure as the error of the peer it leads to, `who` ("reader 2 (pid 42)"). */
int rdmaq_verbs_qp_peer_err(const struct rdmaq_verbs_qp *q, const char *who);
/* The first failed QP of the writer's or the reader's side, or NULL. */
struct rdmaq_verbs_qp *rdmaq_verbs_pool_broken(struct rdmaq_verbs_pool *pool, bool writer);
/* The same after retiring every QP's completed sends (which finds failed ones). */
struct rdmaq_verbs_qp *rdmaq_verbs_pool_check(struct rdmaq_verbs_pool *pool, bool writer);

/* The QP has failed (sticky). */
static inline bool rdmaq_verbs_qp_broken(const struct rdmaq_verbs_qp *q)
{
	return __atomic_load_n(&q->err, __ATOMIC_ACQUIRE) != 0;
}

/* Sends posted and not yet known to have completed. */
static inline bool rdmaq_verbs_qp_busy(const struct rdmaq_verbs_qp *q)
{
	return __atomic_load_n(&q->posted, __ATOMIC_RELAXED) != __atomic_load_n(&q->completed, __ATOMIC_RELAXED);
}

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

/* verbs_ep.c: an endpoint polls these first, then its liveness sockets */
enum { RDMAQ_VERBS_EP_EFD, RDMAQ_VERBS_EP_CHAN, RDMAQ_VERBS_EP_ASYNC, RDMAQ_VERBS_EP_NFDS };
int rdmaq_verbs_ep_init(struct rdmaq_verbs_ep *ep, struct rdmaq_verbs_ctx *ctx);
void rdmaq_verbs_ep_fini(struct rdmaq_verbs_ep *ep);
int rdmaq_verbs_ep_prepare(struct rdmaq_verbs_ep *ep);
int rdmaq_verbs_ep_block(struct rdmaq_verbs_ep *ep, struct pollfd *live, uint32_t nlive,
			 int64_t timeout_ns);
void rdmaq_verbs_ep_finish(struct rdmaq_verbs_ep *ep);
void rdmaq_verbs_ep_wake(struct rdmaq_verbs_ep *ep);
/* 1 once the peer's end of liveness socket fd ended; *sock_err: its error (0 = EOF). */
int rdmaq_verbs_live_check(int fd, int *sock_err);
/* "died: ..." or "became unreachable: ..." for a socket that ended with sock_err. */
int rdmaq_verbs_live_why(char *buf, size_t len, int sock_err);
int rdmaq_verbs_fail_err(const struct rdmaq_verbs_qp *q);

/* An endpoint's liveness socket to one peer, and what became of it. */
struct rdmaq_verbs_live {
	int fd;			/* -1: none */
	bool gone;		/* the peer's end ended (sticky) */
	int err;		/* ... with this socket error (0: EOF) */
};

/* True once the socket has ended: known, or checked now. */
bool rdmaq_verbs_live_ended(struct rdmaq_verbs_live *l);
/* The ended socket as -EOWNERDEAD: "<who> died: ..." or "<who> became unreachable: ...". */
int rdmaq_verbs_live_err(const struct rdmaq_verbs_live *l, const char *who);

#endif

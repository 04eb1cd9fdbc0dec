/* SPDX-License-Identifier: MIT */
/*
 * Verbs device context, one per (device, port, GID) and process.
 *
 * Besides the PD it owns the "hub": every QP of every pool posts its
 * receives to one SRQ and completes them on one CQ with one completion
 * channel.  Immediate data names the local endpoint a WRITE_WITH_IMM is
 * for (a doorbell to a reader, a credit to a writer), so any thread that
 * drains the CQ can hand each completion to its endpoint, and a blocked
 * endpoint waits on just its eventfd plus the channel fd.
 *
 * Contexts are never torn down: pools of connected QPs are a process-wide
 * cache, like KRCore's, and the kernel reclaims everything at exit.  A
 * forked child must not touch its parent's verbs objects, so a context is
 * tagged with its pid and a child opens its own.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "barrier.h"
#include "verbs.h"

struct rdmaq_verbs_stats rdmaq_verbs_counters;

static pthread_mutex_t ctx_list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rdmaq_verbs_ctx *ctx_list;

static uint8_t proc_id[16];
static pid_t proc_id_pid;

void rdmaq_verbs_process_id(uint8_t *out)
{
	pthread_mutex_lock(&ctx_list_lock);
	if (proc_id_pid != getpid()) {
		if (getrandom(proc_id, sizeof(proc_id), 0) != sizeof(proc_id)) {
			uint64_t a = rdmaq_random_u64(), b = rdmaq_random_u64() ^ (uint64_t)getpid();

			memcpy(proc_id, &a, 8);
			memcpy(proc_id + 8, &b, 8);
		}
		proc_id_pid = getpid();
	}
	memcpy(out, proc_id, sizeof(proc_id));
	pthread_mutex_unlock(&ctx_list_lock);
}

/* True in a forked child: the context's verbs objects are its parent's. */
bool rdmaq_verbs_ctx_stale(const struct rdmaq_verbs_ctx *ctx)
{
	return ctx->pid != getpid();
}

int rdmaq_verbs_ctx_check(const struct rdmaq_verbs_ctx *ctx)
{
	if (rdmaq_verbs_ctx_stale(ctx))
		return rdmaq_set_err(-ESTALE, "verbs context belongs to the parent process (fork)");
	return 0;
}

void rdmaq_verbs_stats(struct rdmaq_verbs_stats *out)
{
	const uint64_t *src = (const uint64_t *)&rdmaq_verbs_counters;
	uint64_t *dst = (uint64_t *)out;
	size_t i;

	for (i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}

int rdmaq_verbs_reg(struct rdmaq_verbs_ctx *ctx, void *mem, size_t len, int access,
		    const char *what, struct ibv_mr **out)
{
	struct rlimit rl;
	int err;

	errno = 0;
	*out = ibv_reg_mr(ctx->pd, mem, len, access);
	if (*out)
		return 0;
	err = -rdmaq_verbs_null_err(-EIO);
	if ((err == ENOMEM || err == EPERM || err == EAGAIN) && getrlimit(RLIMIT_MEMLOCK, &rl) == 0 &&
	    rl.rlim_cur != RLIM_INFINITY)
		return rdmaq_set_err(-err, "ibv_reg_mr (%s, %zu bytes): %s; RLIMIT_MEMLOCK is %llu KiB: "
				     "raise it (ulimit -l unlimited, or --ulimit memlock=-1 in containers)",
				     what, len, strerror(err), (unsigned long long)rl.rlim_cur / 1024);
	return rdmaq_set_err(-err, "ibv_reg_mr (%s, %zu bytes): %s", what, len, strerror(err));
}

/* ---- device and GID choice --------------------------------------------- */

static bool gid_is_ipv4(const union ibv_gid *gid)
{
	static const uint8_t prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return memcmp(gid->raw, prefix, sizeof(prefix)) == 0;
}

/* Is the GID's IPv4 address configured in this network namespace? */
static bool gid_ipv4_local(const union ibv_gid *gid)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int fd, ok;

	memcpy(&sa.sin_addr, gid->raw + 12, 4);
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

/*
 * The default GID on Ethernet: RoCEv2 with an IPv4-mapped address (routable
 * over UDP/IP, and what rdma_cm would pick for an IPv4 peer).  Returns its
 * index, or -1.  *local says whether the address lives in our netns.
 */
static int port_pick_gid(struct ibv_context *ibctx, uint32_t port, int tbl_len, bool *local)
{
	int i, fallback = -1;

	*local = false;
	for (i = 0; i < tbl_len; i++) {
		struct ibv_gid_entry ent;

		if (ibv_query_gid_ex(ibctx, port, (uint32_t)i, &ent, 0))
			continue;
		if (ent.gid_type != IBV_GID_TYPE_ROCE_V2 || !gid_is_ipv4(&ent.gid))
			continue;
		if (gid_ipv4_local(&ent.gid)) {
			*local = true;
			return i;
		}
		if (fallback < 0)
			fallback = i;
	}
	return fallback;
}

struct rdmaq_verbs_choice {
	struct ibv_device *dev;
	uint32_t port;
	int gid_index;
	int score;		/* 2: RoCE address in our netns, 1: usable */
};

static int ctx_choose(struct ibv_device **list, int num, const char *device, uint32_t want_port,
		      int want_gid, struct rdmaq_verbs_choice *best)
{
	char seen[256] = "";
	int d, matched = 0;

	best->score = 0;
	for (d = 0; d < num; d++) {
		const char *name = ibv_get_device_name(list[d]);
		struct ibv_context *c;
		struct ibv_device_attr da;
		uint32_t p;

		if (device && *device && strcmp(device, name))
			continue;
		matched++;
		c = ibv_open_device(list[d]);
		if (!c)
			continue;
		if (ibv_query_device(c, &da)) {
			ibv_close_device(c);
			continue;
		}
		for (p = 1; p <= da.phys_port_cnt; p++) {
			struct ibv_port_attr pa;
			bool local = false;
			int gid = 0, score;

			if (want_port && p != want_port)
				continue;
			if (ibv_query_port(c, (uint8_t)p, &pa))
				continue;
			snprintf(seen + strlen(seen), sizeof(seen) - strlen(seen), "%s%s:%u %s",
				 *seen ? ", " : "", name, p, ibv_port_state_str(pa.state));
			if (pa.state != IBV_PORT_ACTIVE)
				continue;
			if (want_gid >= 0) {
				gid = want_gid;
				score = 1;
			} else if (pa.link_layer == IBV_LINK_LAYER_ETHERNET) {
				gid = port_pick_gid(c, p, pa.gid_tbl_len, &local);
				if (gid < 0)
					continue;	/* no RoCEv2 IPv4 GID (yet) */
				score = local ? 2 : 1;
			} else {
				score = 1;
			}
			if (score > best->score) {
				*best = (struct rdmaq_verbs_choice){
					.dev = list[d], .port = p, .gid_index = gid, .score = score,
				};
			}
		}
		ibv_close_device(c);
		if (best->score == 2)
			break;
	}
	if (best->score)
		return 0;
	if (device && *device && !matched)
		return rdmaq_set_err(-ENODEV, "no RDMA device named %s (see `rdmaq doctor`)", device);
	return rdmaq_set_err(-ENODEV, "no ACTIVE RDMA port with a usable GID%s%s%s (see `rdmaq doctor`)",
			     *seen ? " (ports: " : "", seen, *seen ? ")" : "");
}

/* ---- the hub ------------------------------------------------------------ */

static int hub_post_recvs(struct rdmaq_verbs_ctx *ctx, uint32_t n)
{
	struct ibv_recv_wr wrs[32], *bad;

	/* WRITE_WITH_IMM places its payload by address: receives carry no
	 * buffer, only the slot for the completion. */
	while (n) {
		uint32_t k = n < 32 ? n : 32, i;
		int ret;

		for (i = 0; i < k; i++)
			wrs[i] = (struct ibv_recv_wr){ .next = i + 1 < k ? &wrs[i + 1] : NULL };
		ret = ibv_post_srq_recv(ctx->srq, wrs, &bad);
		if (ret) {
			ret = rdmaq_verbs_err(ret);
			return rdmaq_set_err(ret, "ibv_post_srq_recv: %s", strerror(-ret));
		}
		n -= k;
	}
	return 0;
}

static void hub_dispatch(struct rdmaq_verbs_ctx *ctx, uint32_t id)
{
	struct rdmaq_verbs_ep *ep;

	for (ep = ctx->eps; ep; ep = ep->next) {
		if (ep->id != id)
			continue;
		__atomic_add_fetch(&ep->doorbells, 1, __ATOMIC_SEQ_CST);
		/* Pairs with the barrier between setting `sleeping` and the
		 * endpoint's re-check of its ring (Dekker, as on shm). */
		if (__atomic_load_n(&ep->sleeping, __ATOMIC_SEQ_CST))
			rdmaq_verbs_ep_wake(ep);
		return;
	}
	/* An endpoint destroyed since: nothing to wake. */
}

static int hub_drain(struct rdmaq_verbs_ctx *ctx)
{
	struct ibv_wc wc[32];
	uint32_t consumed = 0;
	int n, i;

	do {
		n = ibv_poll_cq(ctx->rcq, 32, wc);
		if (n < 0)
			return rdmaq_set_err(-EIO, "ibv_poll_cq (receive CQ of %s) failed: %s", ctx->info.device,
					     strerror(-rdmaq_verbs_err(n)));
		for (i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				/* A receive flushed or failed: its QP is broken. */
				rdmaq_verbs_qp_fail_by_num(ctx, wc[i].qp_num, wc[i].status);
				continue;
			}
			if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
				RDMAQ_VSTAT_ADD(imm_received, 1);
				hub_dispatch(ctx, ntohl(wc[i].imm_data));
			}
		}
		consumed += (uint32_t)n;
	} while (n == 32);
	return consumed ? hub_post_recvs(ctx, consumed) : 0;
}

int rdmaq_verbs_hub_service(struct rdmaq_verbs_ctx *ctx, bool arm, bool trylock)
{
	int ret;

	if (trylock) {
		if (pthread_mutex_trylock(&ctx->hub_lock))
			return 0;	/* somebody else is draining */
	} else {
		pthread_mutex_lock(&ctx->hub_lock);
	}
	ret = hub_drain(ctx);
	if (!ret && arm && !ctx->armed) {
		ret = ibv_req_notify_cq(ctx->rcq, 0);
		if (ret) {
			ret = rdmaq_verbs_err(ret);
			ret = rdmaq_set_err(ret, "ibv_req_notify_cq (receive CQ of %s): %s", ctx->info.device,
					    strerror(-ret));
		} else {
			ctx->armed = true;
			/* Completions that landed before the arm raise no event. */
			ret = hub_drain(ctx);
		}
	}
	pthread_mutex_unlock(&ctx->hub_lock);
	return ret;
}

/* Every QP of every pool fails: the device is gone. */
static void ctx_fail_all(struct rdmaq_verbs_ctx *ctx, const char *what)
{
	struct rdmaq_verbs_pool *p;
	uint32_t i;

	pthread_mutex_lock(&ctx->pool_lock);
	for (p = ctx->pools; p; p = p->next)
		for (i = 0; i < (p->self ? 2 * p->n : p->n); i++)
			if (p->qps[i].qp)
				rdmaq_verbs_qp_fail(&p->qps[i], -EIO, "RDMA device %s: %s",
						    ctx->info.device, what);
	pthread_mutex_unlock(&ctx->pool_lock);
}

/* The async fd was readable (O_NONBLOCK): take every pending event. */
void rdmaq_verbs_hub_async(struct rdmaq_verbs_ctx *ctx)
{
	struct ibv_async_event ev;

	while (ibv_get_async_event(ctx->ibctx, &ev) == 0) {
		switch (ev.event_type) {
		case IBV_EVENT_QP_FATAL:
		case IBV_EVENT_QP_REQ_ERR:
		case IBV_EVENT_QP_ACCESS_ERR:
		case IBV_EVENT_PATH_MIG_ERR:
			if (ev.element.qp && ev.element.qp->qp_context)
				rdmaq_verbs_qp_fail(ev.element.qp->qp_context, -EIO, "async event on QP %u: %s",
						    ev.element.qp->qp_num, ibv_event_type_str(ev.event_type));
			break;
		case IBV_EVENT_DEVICE_FATAL:
			ctx_fail_all(ctx, ibv_event_type_str(ev.event_type));
			break;
		default:
			break;
		}
		ibv_ack_async_event(&ev);
	}
}

/* The completion channel fd was readable: take the event, re-arm, drain. */
int rdmaq_verbs_hub_event(struct rdmaq_verbs_ctx *ctx)
{
	struct ibv_cq *cq;
	void *cq_ctx;
	int ret;

	pthread_mutex_lock(&ctx->hub_lock);
	/* O_NONBLOCK: another blocked thread may have taken the event. */
	while (ibv_get_cq_event(ctx->chan, &cq, &cq_ctx) == 0) {
		ctx->unacked++;
		ctx->armed = false;
		RDMAQ_VSTAT_ADD(cq_events, 1);
	}
	/* Acking takes a lock inside libibverbs: do it in batches. */
	if (ctx->unacked >= 64) {
		ibv_ack_cq_events(ctx->rcq, ctx->unacked);
		ctx->unacked = 0;
	}
	pthread_mutex_unlock(&ctx->hub_lock);
	ret = rdmaq_verbs_hub_service(ctx, true, false);
	rdmaq_verbs_hub_async(ctx);
	return ret;
}

void rdmaq_verbs_hub_add(struct rdmaq_verbs_ctx *ctx, struct rdmaq_verbs_ep *ep)
{
	pthread_mutex_lock(&ctx->hub_lock);
	ep->id = ++ctx->next_ep_id;
	ep->next = ctx->eps;
	ctx->eps = ep;
	pthread_mutex_unlock(&ctx->hub_lock);
}

void rdmaq_verbs_hub_del(struct rdmaq_verbs_ctx *ctx, struct rdmaq_verbs_ep *ep)
{
	struct rdmaq_verbs_ep **pp;

	pthread_mutex_lock(&ctx->hub_lock);
	for (pp = &ctx->eps; *pp; pp = &(*pp)->next) {
		if (*pp == ep) {
			*pp = ep->next;
			break;
		}
	}
	pthread_mutex_unlock(&ctx->hub_lock);
}

/* ---- graveyard ---------------------------------------------------------- */

/* One allocation: the grave, then nmrs MR slots, then nfds fd slots. */
struct rdmaq_verbs_grave *rdmaq_verbs_grave_new(uint32_t nmrs, uint32_t nfds)
{
	struct rdmaq_verbs_grave *g = calloc(1, sizeof(*g) + nmrs * sizeof(g->mrs[0]) +
					     nfds * sizeof(g->fds[0]));

	if (!g)
		return NULL;
	g->mrs = (struct ibv_mr **)(g + 1);
	g->nmrs = nmrs;
	g->fds = (int *)(g->mrs + nmrs);
	return g;
}

static void grave_free(struct rdmaq_verbs_grave *g)
{
	uint32_t i;

	for (i = 0; i < g->nmrs; i++)
		if (g->mrs[i])
			ibv_dereg_mr(g->mrs[i]);
	for (i = 0; i < 2; i++)
		if (g->mem[i])
			munmap(g->mem[i], g->len[i]);
	for (i = 0; i < g->nfds; i++)
		if (g->fds[i] >= 0)
			close(g->fds[i]);
	free(g);
	RDMAQ_VSTAT_ADD(graves, -1);
}

void rdmaq_verbs_grave_reap(struct rdmaq_verbs_ctx *ctx)
{
	struct rdmaq_verbs_grave **pp, *g;

	pthread_mutex_lock(&ctx->pool_lock);
	for (pp = &ctx->graves; (g = *pp);) {
		uint32_t i, live = 0;

		for (i = 0; i < g->nfds; i++)
			if (g->fds[i] >= 0 && !rdmaq_verbs_live_gone(g->fds[i]))
				live++;
		if (live) {
			pp = &g->next;
			continue;
		}
		*pp = g->next;
		grave_free(g);
	}
	pthread_mutex_unlock(&ctx->pool_lock);
}

/*
 * Memory a peer may still RDMA-write into stays registered until every
 * peer has shut its liveness socket (it promises not to write after that)
 * or died: a WRITE to a deregistered key would move the shared QP, and with
 * it every queue between the two processes, to the error state.
 */
void rdmaq_verbs_grave_add(struct rdmaq_verbs_ctx *ctx, struct rdmaq_verbs_grave *g)
{
	RDMAQ_VSTAT_ADD(graves, 1);
	pthread_mutex_lock(&ctx->pool_lock);
	g->next = ctx->graves;
	ctx->graves = g;
	pthread_mutex_unlock(&ctx->pool_lock);
	rdmaq_verbs_grave_reap(ctx);
}

/* ---- context ------------------------------------------------------------ */

static uint32_t env_u32(const char *name, uint32_t def, uint32_t lo, uint32_t hi)
{
	const char *s = getenv(name);
	char *end;
	unsigned long v;

	if (!s || !*s)
		return def;
	v = strtoul(s, &end, 10);
	if (*end || v < lo || v > hi)
		return def;
	return (uint32_t)v;
}

static int ctx_setup(struct rdmaq_verbs_ctx *ctx, struct ibv_device *dev, uint32_t port, int gid_index)
{
	struct ibv_gid_entry ent;
	long ncpu;
	int ret, flags;

	errno = 0;
	ctx->ibctx = ibv_open_device(dev);
	if (!ctx->ibctx) {
		ret = rdmaq_verbs_null_err(-ENODEV);
		return rdmaq_set_err(ret, "ibv_open_device(%s): %s", ibv_get_device_name(dev),
				     strerror(-ret));
	}
	snprintf(ctx->info.device, sizeof(ctx->info.device), "%s", ibv_get_device_name(dev));
	if ((ret = ibv_query_device(ctx->ibctx, &ctx->dev_attr))) {
		ret = rdmaq_verbs_err(ret);
		ret = rdmaq_set_err(ret, "ibv_query_device(%s): %s", ctx->info.device, strerror(-ret));
		goto clean_dev;
	}
	if ((ret = ibv_query_port(ctx->ibctx, (uint8_t)port, &ctx->port_attr))) {
		ret = rdmaq_verbs_err(ret);
		ret = rdmaq_set_err(ret, "ibv_query_port(%s, %u): %s", ctx->info.device, port,
				    strerror(-ret));
		goto clean_dev;
	}
	if ((ret = ibv_query_gid(ctx->ibctx, (uint8_t)port, gid_index, &ctx->gid))) {
		ret = rdmaq_verbs_err(ret);
		ret = rdmaq_set_err(ret == -EPERM || ret == -EIO ? -EINVAL : ret,
				    "ibv_query_gid(%s, port %u, index %d): %s", ctx->info.device,
				    port, gid_index, strerror(-ret));
		goto clean_dev;
	}
	if (ctx->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET &&
	    (ibv_query_gid_ex(ctx->ibctx, port, (uint32_t)gid_index, &ent, 0) ||
	     !memcmp(&ctx->gid, &(union ibv_gid){ 0 }, sizeof(ctx->gid)))) {
		ret = rdmaq_set_err(-EINVAL, "GID index %d of %s port %u is empty", gid_index,
				    ctx->info.device, port);
		goto clean_dev;
	}
	ctx->info.port = port;
	ctx->info.gid_index = (uint32_t)gid_index;
	memcpy(ctx->info.gid, ctx->gid.raw, 16);
	ctx->info.lid = ctx->port_attr.lid;
	ctx->info.link_layer = ctx->port_attr.link_layer;
	ctx->info.mtu = ctx->port_attr.active_mtu;

	errno = 0;
	ctx->pd = ibv_alloc_pd(ctx->ibctx);
	if (!ctx->pd) {
		ret = rdmaq_verbs_null_err(-ENOMEM);
		ret = rdmaq_set_err(ret, "ibv_alloc_pd(%s): %s", ctx->info.device, strerror(-ret));
		goto clean_dev;
	}
	errno = 0;
	ctx->chan = ibv_create_comp_channel(ctx->ibctx);
	if (!ctx->chan) {
		ret = rdmaq_verbs_null_err(-ENOMEM);
		ret = rdmaq_set_err(ret, "ibv_create_comp_channel(%s): %s", ctx->info.device,
				    strerror(-ret));
		goto clean_pd;
	}
	/* Non-blocking: several threads may wake for one event (pyverbs #1564). */
	flags = fcntl(ctx->chan->fd, F_GETFL);
	if (flags < 0 || fcntl(ctx->chan->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
		ret = rdmaq_set_err(-errno, "fcntl(O_NONBLOCK) on the completion channel: %s",
				    strerror(errno));
		goto clean_chan;
	}
	/* Non-blocking too: async events are drained until EAGAIN. */
	flags = fcntl(ctx->ibctx->async_fd, F_GETFL);
	if (flags < 0 || fcntl(ctx->ibctx->async_fd, F_SETFL, flags | O_NONBLOCK) < 0) {
		ret = rdmaq_set_err(-errno, "fcntl(O_NONBLOCK) on the async event fd: %s", strerror(errno));
		goto clean_chan;
	}

	ctx->srq_depth = env_u32("RDMAQ_SRQ_DEPTH", RDMAQ_VERBS_SRQ_DEPTH, 64, 1U << 20);
	if (ctx->dev_attr.max_srq_wr && ctx->srq_depth > (uint32_t)ctx->dev_attr.max_srq_wr)
		ctx->srq_depth = (uint32_t)ctx->dev_attr.max_srq_wr;
	errno = 0;
	ctx->rcq = ibv_create_cq(ctx->ibctx, (int)ctx->srq_depth + 64, ctx, ctx->chan, 0);
	if (!ctx->rcq) {
		ret = rdmaq_verbs_null_err(-ENOMEM);
		ret = rdmaq_set_err(ret, "ibv_create_cq (receive, %u entries): %s", ctx->srq_depth + 64,
				    strerror(-ret));
		goto clean_chan;
	}
	errno = 0;
	ctx->srq = ibv_create_srq(ctx->pd, &(struct ibv_srq_init_attr){
		.attr = { .max_wr = ctx->srq_depth, .max_sge = 1 },
	});
	if (!ctx->srq) {
		ret = rdmaq_verbs_null_err(-ENOMEM);
		ret = rdmaq_set_err(ret, "ibv_create_srq (%u WRs): %s", ctx->srq_depth, strerror(-ret));
		goto clean_rcq;
	}
	ret = hub_post_recvs(ctx, ctx->srq_depth);
	if (ret)
		goto clean_srq;

	ncpu = sysconf(_SC_NPROCESSORS_CONF);
	if (ncpu < 1)
		ncpu = 1;
	ctx->qps_per_peer = env_u32("RDMAQ_QPS_PER_PEER",
				    ncpu > RDMAQ_VERBS_MAX_QPS ? RDMAQ_VERBS_MAX_QPS : (uint32_t)ncpu,
				    1, RDMAQ_VERBS_MAX_QPS);
	ctx->info.qps_per_peer = ctx->qps_per_peer;
	ctx->max_inline = RDMAQ_VERBS_WANT_INLINE;	/* lowered at the first QP if need be */
	ctx->info.max_inline = ctx->max_inline;
	ctx->next_ep_id = (uint32_t)(rdmaq_random_u64() >> 40);
	pthread_mutex_init(&ctx->hub_lock, NULL);
	pthread_mutex_init(&ctx->pool_lock, NULL);
	ctx->pid = getpid();
	RDMAQ_VSTAT_ADD(contexts, 1);
	return 0;

clean_srq:
	ibv_destroy_srq(ctx->srq);
clean_rcq:
	ibv_destroy_cq(ctx->rcq);
clean_chan:
	ibv_destroy_comp_channel(ctx->chan);
clean_pd:
	ibv_dealloc_pd(ctx->pd);
clean_dev:
	ibv_close_device(ctx->ibctx);
	return ret;
}

int rdmaq_verbs_ctx_open(struct rdmaq_verbs_ctx **out, const char *device, uint32_t port,
			 int gid_index)
{
	struct ibv_device **list;
	struct rdmaq_verbs_choice pick;
	struct rdmaq_verbs_ctx *ctx;
	int num = 0, ret;

	pthread_mutex_lock(&ctx_list_lock);
	/* A forked child inherits its parent's contexts: forget, never free. */
	if (ctx_list && rdmaq_verbs_ctx_stale(ctx_list))
		ctx_list = NULL;
	errno = 0;
	list = ibv_get_device_list(&num);
	if (!list && errno == ENOSYS) {
		/* libibverbs finds no /sys/class/infiniband at all. */
		ret = rdmaq_set_err(-ENODEV, "this kernel has no RDMA support (no /sys/class/infiniband): "
				    "use transport='shm' here, or a host/VM with an RDMA NIC or rdma_rxe; "
				    "see `rdmaq doctor`");
		goto out;
	}
	if (!list) {
		ret = rdmaq_verbs_null_err(-ENODEV);
		ret = rdmaq_set_err(ret, "ibv_get_device_list: %s; see `rdmaq doctor`", strerror(-ret));
		goto out;
	}
	if (num == 0) {
		ret = rdmaq_set_err(-ENODEV, "no RDMA devices: load a NIC driver or create a SoftRoCE "
				    "device (`rdmaq softroce up --netdev IF`); see `rdmaq doctor`");
		goto free_list;
	}
	ret = ctx_choose(list, num, device, port, gid_index, &pick);
	if (ret)
		goto free_list;
	for (ctx = ctx_list; ctx; ctx = ctx->next) {
		if (!strcmp(ctx->info.device, ibv_get_device_name(pick.dev)) && ctx->info.port == pick.port &&
		    ctx->info.gid_index == (uint32_t)pick.gid_index) {
			*out = ctx;
			ret = 0;
			goto free_list;
		}
	}
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		ret = rdmaq_set_err(-ENOMEM, "out of memory");
		goto free_list;
	}
	ret = ctx_setup(ctx, pick.dev, pick.port, pick.gid_index);
	if (ret) {
		free(ctx);
		goto free_list;
	}
	ctx->next = ctx_list;
	ctx_list = ctx;
	*out = ctx;
free_list:
	ibv_free_device_list(list);
out:
	pthread_mutex_unlock(&ctx_list_lock);
	if (!ret)
		rdmaq_verbs_grave_reap(*out);
	return ret;
}

int rdmaq_verbs_ctx_port(struct rdmaq_verbs_ctx *ctx, struct rdmaq_verbs_port *out)
{
	int ret = rdmaq_verbs_ctx_check(ctx);

	if (ret)
		return ret;
	*out = ctx->info;
	out->max_inline = __atomic_load_n(&ctx->max_inline, __ATOMIC_RELAXED);
	return 0;
}

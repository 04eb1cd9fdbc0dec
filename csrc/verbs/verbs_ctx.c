/* SPDX-License-Identifier: MIT */
/*
 * Verbs device context, one per (device, port, GID) and process.
 *
 * Contexts are never torn down: pools of connected QPs are a process-wide
 * cache, like KRCore's, and the kernel reclaims everything at exit.  A
 * forked child must not touch its parent's verbs objects, so a context is
 * tagged with its pid and a child opens its own.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "ring.h"
#include "verbs_choice.h"
#include "verbs_ctx.h"
#include "verbs_errno.h"
#include "verbs_stats.h"

#define RDMAQ_VERBS_WANT_INLINE 256 /* inline bytes asked of the first QP */

static pthread_mutex_t ctx_list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rdmaq_verbs_ctx *ctx_list;

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
	if ((err == ENOMEM || err == EPERM || err == EAGAIN) &&
	    getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		return rdmaq_set_err(-err,
				     "ibv_reg_mr (%s, %zu bytes): %s; RLIMIT_MEMLOCK is %llu KiB: "
				     "raise it (ulimit -l unlimited, or --ulimit memlock=-1 in containers)",
				     what, len, strerror(err),
				     (unsigned long long)rl.rlim_cur / 1024);
	return rdmaq_set_err(-err, "ibv_reg_mr (%s, %zu bytes): %s", what, len, strerror(err));
}

static uint32_t env_u32(const char *name, uint32_t def, uint32_t lo, uint32_t hi)
{
	const char *s = getenv(name);
	char *end;
	unsigned long v;

	if (!s || !*s)
		return def;
	v = strtoul(s, &end, 10);
	/* Surrounding whitespace is no part of the value, as rdmaq/settings.py reads it. */
	while (isspace((unsigned char)*end))
		end++;
	if (*end || v < lo || v > hi)
		return def;
	return (uint32_t)v;
}

static int ctx_setup(struct rdmaq_verbs_ctx *ctx, struct ibv_device *dev, uint32_t port,
		     int gid_index)
{
	struct ibv_gid_entry ent;
	uint32_t srq_depth;
	long ncpu;
	int ret;

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
		ret = rdmaq_set_err(ret, "ibv_query_device(%s): %s", ctx->info.device,
				    strerror(-ret));
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
	srq_depth = env_u32("RDMAQ_SRQ_DEPTH", RDMAQ_VERBS_SRQ_DEPTH, 64, 1U << 20);
	if (ctx->dev_attr.max_srq_wr && srq_depth > (uint32_t)ctx->dev_attr.max_srq_wr)
		srq_depth = (uint32_t)ctx->dev_attr.max_srq_wr;
	ret = rdmaq_verbs_hub_init(&ctx->hub, ctx->ibctx, ctx->pd, ctx->info.device, srq_depth);
	if (ret)
		goto clean_pd;

	ncpu = sysconf(_SC_NPROCESSORS_CONF);
	if (ncpu < 1)
		ncpu = 1;
	ctx->qps_per_peer =
		env_u32("RDMAQ_QPS_PER_PEER",
			ncpu > RDMAQ_VERBS_MAX_QPS ? RDMAQ_VERBS_MAX_QPS : (uint32_t)ncpu, 1,
			RDMAQ_VERBS_MAX_QPS);
	ctx->info.qps_per_peer = ctx->qps_per_peer;
	ctx->max_inline = RDMAQ_VERBS_WANT_INLINE;
	ctx->info.max_inline = ctx->max_inline;
	rdmaq_verbs_graveyard_init(&ctx->graveyard);
	pthread_mutex_init(&ctx->pool_lock, NULL);
	ctx->pid = getpid();
	RDMAQ_VSTAT_ADD(contexts, 1);
	return 0;

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
		ret = rdmaq_set_err(-ENODEV,
				    "this kernel has no RDMA support (no /sys/class/infiniband): "
				    "use transport='shm' here, or a host/VM with an RDMA NIC or rdma_rxe; "
				    "see `rdmaq doctor`");
		goto out;
	}
	if (!list) {
		ret = rdmaq_verbs_null_err(-ENODEV);
		ret = rdmaq_set_err(ret, "ibv_get_device_list: %s; see `rdmaq doctor`",
				    strerror(-ret));
		goto out;
	}
	if (num == 0) {
		ret = rdmaq_set_err(-ENODEV,
				    "no RDMA devices: load a NIC driver or create a SoftRoCE "
				    "device (`rdmaq softroce up --netdev IF`); see `rdmaq doctor`");
		goto free_list;
	}
	ret = rdmaq_verbs_choose(list, num, device, port, gid_index, &pick);
	if (ret)
		goto free_list;
	for (ctx = ctx_list; ctx; ctx = ctx->next) {
		if (!strcmp(ctx->info.device, ibv_get_device_name(pick.dev)) &&
		    ctx->info.port == pick.port &&
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
		rdmaq_verbs_grave_reap(&(*out)->graveyard);
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

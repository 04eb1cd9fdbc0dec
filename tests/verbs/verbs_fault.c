/* SPDX-License-Identifier: MIT */
/*
 * LD_PRELOAD shim: makes chosen verbs calls fail the way some providers
 * do, to check that rdmaq never reads such a failure as success.
 *
 *   RDMAQ_VERBS_FAULT=modify_qp_rtr   ibv_modify_qp to RTR returns -EINVAL
 *                                     (a negative errno, not rdma-core's positive one)
 *   RDMAQ_VERBS_FAULT=reg_mr_noerrno  ibv_reg_mr* returns NULL and leaves errno 0
 *
 * Every other call goes to libibverbs.  Link it with -Wl,--no-as-needed
 * -libverbs: a Python extension's libibverbs is loaded RTLD_LOCAL, where
 * RTLD_NEXT cannot see it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *real_fn(const char *name)
{
	void *f = dlsym(RTLD_NEXT, name);

	if (!f) {
		fprintf(stderr, "verbs_fault: no %s after this library\n", name);
		abort();
	}
	return f;
}

static int fault(const char *name)
{
	const char *f = getenv("RDMAQ_VERBS_FAULT");

	return f && !strcmp(f, name);
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	int (*real)(struct ibv_qp *, struct ibv_qp_attr *, int) = real_fn("ibv_modify_qp");

	if (fault("modify_qp_rtr") && (attr_mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RTR)
		return -EINVAL;
	return real(qp, attr, attr_mask);
}

#undef ibv_reg_mr
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct ibv_mr *(*real)(struct ibv_pd *, void *, size_t, int) = real_fn("ibv_reg_mr");

	if (fault("reg_mr_noerrno")) {
		errno = 0;
		return NULL;
	}
	return real(pd, addr, length, access);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	struct ibv_mr *(*real)(struct ibv_pd *, void *, size_t, uint64_t, unsigned int) =
		real_fn("ibv_reg_mr_iova2");

	if (fault("reg_mr_noerrno")) {
		errno = 0;
		return NULL;
	}
	return real(pd, addr, length, iova, access);
}

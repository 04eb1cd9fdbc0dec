/* SPDX-License-Identifier: MIT */
/*
 * shm transport: the ring protocol over POSIX shared memory.
 *
 * The writer creates "<name>.w" holding its control block, one attach
 * record per reader and the credit array.  Each reader creates its own
 * ring "<name>.r<i>" (reader-owned memory, as on verbs) and claims its
 * attach record; once all have attached the writer maps every ring and
 * unlinks the names, so nothing is left in /dev/shm once traffic flows.
 *
 * Wake-ups are futexes on words inside the shared mappings.  A sleeper
 * sets its `sleeping` flag, issues a full barrier and re-checks; the waker
 * publishes, issues a full barrier and only then looks at the flag, so a
 * spinning peer costs no syscall and a sleeping one is never missed.
 * Peer death is noticed through pidfds, polled between sleeps.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "barrier.h"
#include "futex.h"
#include "ring.h"

#define RDMAQ_NAME_MAX	200

enum { ATTACH_FREE = 0, ATTACH_CLAIMED = 1, ATTACH_DONE = 2 };

struct rdmaq_shm_wctrl {
	uint32_t magic;
	uint32_t version;
	uint32_t n_readers;
	uint32_t slot_bytes;
	uint32_t slots;
	uint32_t spin_ns;
	uint64_t max_message;
	uint64_t key;
	int32_t writer_pid;
	uint8_t pad0[RDMAQ_CACHELINE - 44];
	/* the writer sleeps here, waiting for attach or credit */
	uint32_t doorbell;
	uint32_t sleeping;
	/* set by close: readers the writer has not connected yet see it here */
	uint32_t closed;
	uint8_t pad1[RDMAQ_CACHELINE - 12];
};

struct rdmaq_shm_attach {
	uint32_t state;
	int32_t pid;
	uint8_t pad[RDMAQ_CACHELINE - 8];
};

/* Segment layout: wctrl | attach[n] | credit[n]. */
static size_t wseg_bytes(uint32_t n)
{
	return sizeof(struct rdmaq_shm_wctrl) + n * (sizeof(struct rdmaq_shm_attach) +
						     sizeof(struct rdmaq_credit));
}

static struct rdmaq_shm_attach *wseg_attach(struct rdmaq_shm_wctrl *c)
{
	return (struct rdmaq_shm_attach *)(c + 1);
}

static struct rdmaq_credit *wseg_credits(struct rdmaq_shm_wctrl *c)
{
	return (struct rdmaq_credit *)(wseg_attach(c) + c->n_readers);
}

/* ---- peers -------------------------------------------------------------- */

struct rdmaq_shm_peer {
	pid_t pid;
	int pidfd;
};

static int peer_open(struct rdmaq_shm_peer *p, pid_t pid)
{
	p->pid = pid;
	p->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (p->pidfd < 0 && errno == ESRCH)
		return -ESRCH;
	return 0;	/* without pidfds (old kernel, seccomp) fall back to kill(0) */
}

/* 1 if the peer process has exited (zombies included), else 0. */
static int peer_dead(struct rdmaq_shm_peer *p)
{
	if (p->pidfd >= 0) {
		struct pollfd pfd = { .fd = p->pidfd, .events = POLLIN };

		return poll(&pfd, 1, 0) > 0;
	}
	return kill(p->pid, 0) < 0 && errno == ESRCH;
}

static void peer_close(struct rdmaq_shm_peer *p)
{
	if (p->pidfd >= 0)
		close(p->pidfd);
	p->pidfd = -1;
}

/* ---- mapping helpers ---------------------------------------------------- */

static int shm_map(const char *name, int oflag, size_t bytes, void **out)
{
	struct stat st;
	void *p;
	int fd, ret;

	fd = shm_open(name, oflag, 0600);
	if (fd < 0)
		return -errno;
	if (oflag & O_CREAT) {
		if (ftruncate(fd, (off_t)bytes) < 0) {
			ret = -errno;
			goto clean_fd;
		}
	} else {
		if (fstat(fd, &st) < 0) {
			ret = -errno;
			goto clean_fd;
		}
		if (bytes == 0)
			bytes = (size_t)st.st_size;
		if ((size_t)st.st_size < bytes) {
			ret = -EBADMSG;
			goto clean_fd;
		}
	}
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		ret = -errno;
		goto clean_fd;
	}
	close(fd);
	*out = p;
	return 0;

clean_fd:
	close(fd);
	return ret;
}

static int shm_name(char *buf, size_t len, const char *base, const char *suffix, int index)
{
	int n = index < 0 ? snprintf(buf, len, "/%s.%s", base, suffix)
			  : snprintf(buf, len, "/%s.%s%d", base, suffix, index);

	if (n < 0 || (size_t)n >= len)
		return rdmaq_set_err(-ENAMETOOLONG, "queue name too long: %s", base);
	return 0;
}

static int shm_check_name(const char *name)
{
	size_t i, n = strlen(name);

	if (n == 0 || n > RDMAQ_NAME_MAX)
		return rdmaq_set_err(-EINVAL, "queue name must have 1..%d characters", RDMAQ_NAME_MAX);
	for (i = 0; i < n; i++)
		if (name[i] == '/')
			return rdmaq_set_err(-EINVAL, "queue name must not contain '/': %s", name);
	return 0;
}

static void ring_ring_doorbell(struct rdmaq_ring_ctrl *ctrl, int n)
{
	__atomic_add_fetch(&ctrl->doorbell, 1, __ATOMIC_SEQ_CST);
	rdmaq_futex_wake(&ctrl->doorbell, n);
}

/* ---- writer ------------------------------------------------------------- */

struct rdmaq_shm_ring {
	uint8_t *base;
	struct rdmaq_shm_peer peer;
};

struct rdmaq_shm_writer {
	struct rdmaq_writer w;		/* first: the core casts back */
	char name[RDMAQ_NAME_MAX + 1];
	struct rdmaq_shm_wctrl *ctrl;
	size_t ctrl_bytes;
	size_t ring_bytes;
	bool unlinked;
	bool dirty;			/* records emitted since the last flush */
	uint32_t wait_val;
	struct rdmaq_shm_ring rings[];
};

#define to_shm_writer(wp) ((struct rdmaq_shm_writer *)(wp))

static int shm_writer_poll_ready(struct rdmaq_writer *wp)
{
	struct rdmaq_shm_writer *w = to_shm_writer(wp);
	struct rdmaq_shm_attach *att = wseg_attach(w->ctrl);
	uint32_t i;

	for (i = 0; i < w->ctrl->n_readers; i++)
		if (smp_load_acquire(&att[i].state) != ATTACH_DONE)
			return 0;
	return 1;
}

static int shm_writer_ready_timeout(struct rdmaq_writer *wp)
{
	struct rdmaq_shm_writer *w = to_shm_writer(wp);
	struct rdmaq_shm_attach *att = wseg_attach(w->ctrl);
	char missing[128] = "";
	size_t len = 0;
	uint32_t i, have = 0;
	bool cut = false;

	for (i = 0; i < w->ctrl->n_readers; i++) {
		if (smp_load_acquire(&att[i].state) == ATTACH_DONE)
			have++;
		else if (len + 16 > sizeof(missing))
			cut = true;
		else
			len += snprintf(missing + len, sizeof(missing) - len, "%s%u", len ? ", " : "", i);
	}
	return rdmaq_set_err(-ETIMEDOUT, "timed out with %u of %u readers attached (missing: [%s%s])",
			     have, w->ctrl->n_readers, missing, cut ? ", ..." : "");
}

static int shm_writer_connect(struct rdmaq_writer *wp)
{
	struct rdmaq_shm_writer *w = to_shm_writer(wp);
	struct rdmaq_shm_attach *att = wseg_attach(w->ctrl);
	char path[RDMAQ_NAME_MAX + 16];
	uint32_t i;
	int ret;

	for (i = 0; i < w->ctrl->n_readers; i++) {
		void *p;

		ret = shm_name(path, sizeof(path), w->name, "r", (int)i);
		if (ret)
			return ret;
		ret = shm_map(path, O_RDWR, w->ring_bytes, &p);
		if (ret)
			return rdmaq_set_err(ret, "cannot map ring of reader %u (%s): %s", i, path,
					     strerror(-ret));
		w->rings[i].base = p;
		shm_unlink(path);
		if (peer_open(&w->rings[i].peer, att[i].pid))
			return rdmaq_set_err(-EOWNERDEAD, "reader %u (pid %d) died before the queue was ready",
					     i, att[i].pid);
	}
	ret = shm_name(path, sizeof(path), w->name, "w", -1);
	if (!ret)
		shm_unlink(path);
	w->unlinked = true;
	for (i = 0; i < w->ctrl->n_readers; i++) {
		struct rdmaq_ring_ctrl *rc = (struct rdmaq_ring_ctrl *)w->rings[i].base;

		smp_store_release(&rc->ready, 1);
		ring_ring_doorbell(rc, INT_MAX);
	}
	return 0;
}

static int shm_writer_emit(struct rdmaq_writer *wp, uint64_t seq, const struct rdmaq_rec_hdr *hdr,
			   const struct rdmaq_iovec *iov, int iovcnt, size_t iov_off)
{
	struct rdmaq_shm_writer *w = to_shm_writer(wp);
	uint32_t i;

	for (i = 0; i < wp->cfg.n_readers; i++) {
		if (READ_ONCE(wp->credits[i].next_seq) == RDMAQ_CREDIT_CLOSED)
			continue;
		rdmaq_rec_frame(rdmaq_ring_slot(w->rings[i].base, &wp->cfg, seq), wp->key, hdr,
				iov, iovcnt, iov_off);
	}
	w->dirty = true;
	return 0;
}

static int shm_writer_flush(struct rdmaq_writer *wp, bool doorbell)
{
	struct rdmaq_shm_writer *w = to_shm_writer(wp);
	uint32_t i;

	if (!w->dirty || !doorbell)
		return 0;
	w->dirty = false;
	/* Order the records before reading `sleeping` (pairs with the
	 * reader's barrier between setting it and re-checking its ring). */
	smp_mb();
	for (i = 0; i < wp->cfg.n_readers; i++) {
		struct rdmaq_ring_ctrl *rc = (struct rdmaq_ring_ctrl *)w->rings[i].base;

		if (READ_ONCE(rc->sleeping)) {
			ring_ring_doorbell(rc, 1);
			wp->stats.wakeups++;
		}
	}
	return 0;
}

static int shm_writer_mark_closed(struct rdmaq_writer *wp, uint64_t closed_seq)
{
	struct rdmaq_shm_writer *w = to_shm_writer(wp);
	uint32_t i;

	/* Readers whose ring we never mapped (closed before ready) look here. */
	smp_store_release(&w->ctrl->closed, 1);
	for (i = 0; i < wp->cfg.n_readers; i++) {
		struct rdmaq_ring_ctrl *rc = (struct rdmaq_ring_ctrl *)w->rings[i].base;

		if (!rc)
			continue;
		smp_store_release(&rc->closed_seq, closed_seq);
		ring_ring_doorbell(rc, INT_MAX);
	}
	return 0;
}

static void shm_writer_interrupt(struct rdmaq_writer *wp)
{
	struct rdmaq_shm_writer *w = to_shm_writer(wp);

	__atomic_add_fetch(&w->ctrl->doorbell, 1, __ATOMIC_SEQ_CST);
	rdmaq_futex_wake(&w->ctrl->doorbell, INT_MAX);
}

static void shm_writer_destroy(struct rdmaq_writer *wp)
{
	struct rdmaq_shm_writer *w = to_shm_writer(wp);
	char path[RDMAQ_NAME_MAX + 16];
	uint32_t i;

	for (i = 0; i < wp->cfg.n_readers; i++) {
		if (w->rings[i].base)
			munmap(w->rings[i].base, w->ring_bytes);
		peer_close(&w->rings[i].peer);
	}
	if (!w->unlinked && !shm_name(path, sizeof(path), w->name, "w", -1))
		shm_unlink(path);
	if (w->ctrl)
		munmap(w->ctrl, w->ctrl_bytes);
	free(w);
}

static int shm_writer_prepare(void *ep)
{
	struct rdmaq_shm_writer *w = ep;

	w->wait_val = READ_ONCE(w->ctrl->doorbell);
	WRITE_ONCE(w->ctrl->sleeping, 1);
	smp_mb();
	return 0;
}

static int shm_writer_block(void *ep, int64_t timeout_ns)
{
	struct rdmaq_shm_writer *w = ep;
	int ret = rdmaq_futex_wait(&w->ctrl->doorbell, w->wait_val, timeout_ns);

	return ret < 0 ? rdmaq_set_err(ret, "futex wait: %s", strerror(-ret)) : ret;
}

static void shm_writer_finish(void *ep)
{
	struct rdmaq_shm_writer *w = ep;

	WRITE_ONCE(w->ctrl->sleeping, 0);
}

static int shm_writer_check_peer(void *ep)
{
	struct rdmaq_shm_writer *w = ep;
	struct rdmaq_shm_attach *att = wseg_attach(w->ctrl);
	uint32_t i;

	for (i = 0; i < w->ctrl->n_readers; i++) {
		struct rdmaq_shm_peer *p = &w->rings[i].peer;

		if (READ_ONCE(w->w.credits[i].next_seq) == RDMAQ_CREDIT_CLOSED)
			continue;
		if (p->pid == 0) {
			/* Not connected yet: watch readers that have attached. */
			if (smp_load_acquire(&att[i].state) != ATTACH_DONE)
				continue;
			if (peer_open(p, att[i].pid))
				goto dead;
		}
		if (peer_dead(p))
			goto dead;
		continue;
dead:
		return rdmaq_set_err(-EOWNERDEAD, "reader %u (pid %d) died", i, p->pid);
	}
	return 0;
}

static const struct rdmaq_writer_ops shm_writer_ops = {
	.poll_ready = shm_writer_poll_ready,
	.ready_timeout = shm_writer_ready_timeout,
	.connect = shm_writer_connect,
	.emit = shm_writer_emit,
	.flush = shm_writer_flush,
	.mark_closed = shm_writer_mark_closed,
	.interrupt = shm_writer_interrupt,
	.destroy = shm_writer_destroy,
};

static const struct rdmaq_wait_ops shm_writer_wait_ops = {
	.prepare = shm_writer_prepare,
	.block = shm_writer_block,
	.finish = shm_writer_finish,
	.check_peer = shm_writer_check_peer,
};

int rdmaq_shm_writer_create(struct rdmaq_writer **out, const char *name,
			    const struct rdmaq_config *cfg)
{
	struct rdmaq_shm_writer *w;
	struct rdmaq_shm_wctrl *c;
	char path[RDMAQ_NAME_MAX + 16];
	void *p;
	uint32_t i;
	int ret;

	ret = shm_check_name(name);
	if (ret)
		return ret;
	ret = rdmaq_config_check(cfg);
	if (ret)
		return ret;
	w = calloc(1, sizeof(*w) + cfg->n_readers * sizeof(w->rings[0]));
	if (!w)
		return rdmaq_set_err(-ENOMEM, "out of memory");
	for (i = 0; i < cfg->n_readers; i++)
		w->rings[i].peer.pidfd = -1;
	snprintf(w->name, sizeof(w->name), "%s", name);
	w->ctrl_bytes = wseg_bytes(cfg->n_readers);
	w->ring_bytes = rdmaq_ring_bytes(cfg->slot_bytes, cfg->slots);
	ret = shm_name(path, sizeof(path), name, "w", -1);
	if (ret)
		goto clean_w;
	ret = shm_map(path, O_RDWR | O_CREAT | O_EXCL, w->ctrl_bytes, &p);
	if (ret) {
		rdmaq_set_err(ret, "cannot create shared memory %s: %s", path, strerror(-ret));
		goto clean_w;
	}
	c = w->ctrl = p;
	*c = (struct rdmaq_shm_wctrl){
		.version = RDMAQ_VERSION,
		.n_readers = cfg->n_readers,
		.slot_bytes = cfg->slot_bytes,
		.slots = cfg->slots,
		.spin_ns = cfg->spin_ns,
		.max_message = cfg->max_message,
		.key = rdmaq_random_u64(),
		.writer_pid = getpid(),
	};
	for (i = 0; i < cfg->n_readers; i++)
		wseg_credits(c)[i].next_seq = 1;
	rdmaq_writer_init(&w->w, &shm_writer_ops, &shm_writer_wait_ops, cfg, c->key,
			  wseg_credits(c));
	/* Readers trust the segment once the magic is there. */
	smp_store_release(&c->magic, RDMAQ_MAGIC);
	*out = &w->w;
	return 0;

clean_w:
	free(w);
	return ret;
}

/* ---- reader ------------------------------------------------------------- */

struct rdmaq_shm_reader {
	struct rdmaq_reader r;		/* first: the core casts back */
	char ring_path[RDMAQ_NAME_MAX + 16];
	struct rdmaq_shm_wctrl *wctrl;
	size_t wctrl_bytes;
	size_t ring_bytes;
	struct rdmaq_shm_peer writer;
	uint32_t wait_val;
};

#define to_shm_reader(rp) ((struct rdmaq_shm_reader *)(rp))

static struct rdmaq_ring_ctrl *shm_reader_ctrl(struct rdmaq_shm_reader *r)
{
	return (struct rdmaq_ring_ctrl *)r->r.ring;
}

static int shm_reader_credit(struct rdmaq_reader *rp, uint64_t next_seq)
{
	struct rdmaq_shm_reader *r = to_shm_reader(rp);

	smp_store_release(&wseg_credits(r->wctrl)[rp->index].next_seq, next_seq);
	/* Pairs with the writer's barrier after it sets `sleeping`. */
	smp_mb();
	if (READ_ONCE(r->wctrl->sleeping)) {
		__atomic_add_fetch(&r->wctrl->doorbell, 1, __ATOMIC_SEQ_CST);
		rdmaq_futex_wake(&r->wctrl->doorbell, 1);
		rp->stats.wakeups++;
	}
	return 0;
}

static void shm_reader_interrupt(struct rdmaq_reader *rp)
{
	ring_ring_doorbell(shm_reader_ctrl(to_shm_reader(rp)), INT_MAX);
}

static void shm_reader_destroy(struct rdmaq_reader *rp)
{
	struct rdmaq_shm_reader *r = to_shm_reader(rp);

	/* The writer unlinks rings it has mapped; unlink ours if it never did. */
	if (rp->ring) {
		if (!smp_load_acquire(&shm_reader_ctrl(r)->ready))
			shm_unlink(r->ring_path);
		munmap(rp->ring, r->ring_bytes);
	}
	if (r->wctrl)
		munmap(r->wctrl, r->wctrl_bytes);
	peer_close(&r->writer);
	free(r);
}

static int shm_reader_prepare(void *ep)
{
	struct rdmaq_shm_reader *r = ep;
	struct rdmaq_ring_ctrl *rc = shm_reader_ctrl(r);

	r->wait_val = READ_ONCE(rc->doorbell);
	WRITE_ONCE(rc->sleeping, 1);
	smp_mb();
	return 0;
}

static int shm_reader_block(void *ep, int64_t timeout_ns)
{
	struct rdmaq_shm_reader *r = ep;
	int ret = rdmaq_futex_wait(&shm_reader_ctrl(r)->doorbell, r->wait_val, timeout_ns);

	return ret < 0 ? rdmaq_set_err(ret, "futex wait: %s", strerror(-ret)) : ret;
}

static void shm_reader_finish(void *ep)
{
	struct rdmaq_shm_reader *r = ep;

	WRITE_ONCE(shm_reader_ctrl(r)->sleeping, 0);
}

static int shm_reader_check_peer(void *ep)
{
	struct rdmaq_shm_reader *r = ep;

	if (peer_dead(&r->writer))
		return rdmaq_set_err(-EOWNERDEAD, "writer (pid %d) died", r->writer.pid);
	/* Not connected yet, so closed_seq never reaches our ring: see mark_closed. */
	if (!smp_load_acquire(&shm_reader_ctrl(r)->ready) && smp_load_acquire(&r->wctrl->closed))
		return rdmaq_set_err(-EPIPE, "writer closed the queue before it was ready");
	return 0;
}

static const struct rdmaq_reader_ops shm_reader_ops = {
	.credit = shm_reader_credit,
	.interrupt = shm_reader_interrupt,
	.destroy = shm_reader_destroy,
};

static const struct rdmaq_wait_ops shm_reader_wait_ops = {
	.prepare = shm_reader_prepare,
	.block = shm_reader_block,
	.finish = shm_reader_finish,
	.check_peer = shm_reader_check_peer,
};

int rdmaq_shm_reader_attach(struct rdmaq_reader **out, const char *name, uint32_t index,
			    uint32_t spin_ns)
{
	struct rdmaq_shm_reader *r;
	struct rdmaq_shm_wctrl *c;
	struct rdmaq_shm_attach *att;
	struct rdmaq_config cfg;
	char path[RDMAQ_NAME_MAX + 16];
	uint32_t expect = ATTACH_FREE;
	void *p;
	int ret;

	ret = shm_check_name(name);
	if (ret)
		return ret;
	r = calloc(1, sizeof(*r));
	if (!r)
		return rdmaq_set_err(-ENOMEM, "out of memory");
	r->writer.pidfd = -1;
	ret = shm_name(path, sizeof(path), name, "w", -1);
	if (ret)
		goto clean_r;
	ret = shm_map(path, O_RDWR, 0, &p);
	if (ret) {
		rdmaq_set_err(ret, ret == -ENOENT
				   ? "no rdmaq queue %s here: the writer is gone, already connected, or on another host"
				   : "cannot map %s: %s", path, strerror(-ret));
		goto clean_r;
	}
	c = r->wctrl = p;
	r->wctrl_bytes = sizeof(*c);
	if (smp_load_acquire(&c->magic) != RDMAQ_MAGIC || c->version != RDMAQ_VERSION) {
		ret = rdmaq_set_err(-EPROTO, "%s is not an rdmaq v%u queue", path, RDMAQ_VERSION);
		goto clean_ctrl;
	}
	/* Re-map at full size now that n_readers is known. */
	munmap(c, sizeof(*c));
	r->wctrl = NULL;
	ret = shm_map(path, O_RDWR, 0, &p);
	if (ret) {
		rdmaq_set_err(ret, "cannot map %s: %s", path, strerror(-ret));
		goto clean_r;
	}
	c = r->wctrl = p;
	r->wctrl_bytes = wseg_bytes(c->n_readers);
	if (index >= c->n_readers) {
		ret = rdmaq_set_err(-EINVAL, "reader index %u out of range: queue has %u readers",
				    index, c->n_readers);
		goto clean_ctrl;
	}
	cfg = (struct rdmaq_config){
		.n_readers = c->n_readers,
		.slot_bytes = c->slot_bytes,
		.slots = c->slots,
		.max_message = c->max_message,
		.spin_ns = spin_ns,
	};
	att = &wseg_attach(c)[index];
	if (!__atomic_compare_exchange_n(&att->state, &expect, ATTACH_CLAIMED, false,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		ret = rdmaq_set_err(-EBUSY, "reader index %u is already attached", index);
		goto clean_ctrl;
	}
	r->ring_bytes = rdmaq_ring_bytes(cfg.slot_bytes, cfg.slots);
	ret = shm_name(r->ring_path, sizeof(r->ring_path), name, "r", (int)index);
	if (ret)
		goto clean_claim;
	shm_unlink(r->ring_path);	/* a leftover of a crashed reader */
	ret = shm_map(r->ring_path, O_RDWR | O_CREAT | O_EXCL, r->ring_bytes, &p);
	if (ret) {
		rdmaq_set_err(ret, "cannot create ring %s: %s", r->ring_path, strerror(-ret));
		goto clean_claim;
	}
	rdmaq_reader_init(&r->r, &shm_reader_ops, &shm_reader_wait_ops, &cfg, index, c->key, p);
	((struct rdmaq_ring_ctrl *)p)->magic = RDMAQ_MAGIC;
	if (peer_open(&r->writer, c->writer_pid)) {
		ret = rdmaq_set_err(-EOWNERDEAD, "writer (pid %d) is gone", c->writer_pid);
		goto clean_ring;
	}
	att->pid = getpid();
	smp_store_release(&att->state, ATTACH_DONE);
	smp_mb();
	if (READ_ONCE(c->sleeping)) {
		__atomic_add_fetch(&c->doorbell, 1, __ATOMIC_SEQ_CST);
		rdmaq_futex_wake(&c->doorbell, INT_MAX);
	}
	*out = &r->r;
	return 0;

clean_ring:
	munmap(p, r->ring_bytes);
	shm_unlink(r->ring_path);
clean_claim:
	smp_store_release(&att->state, ATTACH_FREE);
clean_ctrl:
	munmap(r->wctrl, r->wctrl_bytes);
clean_r:
	peer_close(&r->writer);
	free(r);
	return ret;
}

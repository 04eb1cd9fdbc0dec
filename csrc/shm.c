/* SPDX-License-Identifier: MIT */
/*
 * shm transport: the ring protocol over POSIX shared memory.
 *
 * The writer creates one segment, under an unguessable name, holding its
 * control block, one attach record and one credit entry per reader, and a
 * single broadcast ring that every reader reads: the writer copies each
 * message once, whatever the number of readers (per-reader rings are for
 * RDMA, where each reader's memory is on its own host).  Each reader
 * keeps its own cursor and returns credit at every record.  The space is
 * reserved up front (posix_fallocate), so a full /dev/shm is an error at
 * creation, not a SIGBUS later.  Once every reader has attached the
 * writer unlinks the name: nothing is left in /dev/shm once traffic flows.
 *
 * The segment's layout is shm_format.h.  Readers trust nothing the
 * segment says beyond what they check: the geometry is validated against
 * the file's size on attach and kept in private memory, as the writer
 * keeps its own configuration.
 *
 * Wake-ups are futexes on words inside the segment.  A sleeper sets its
 * `sleeping` flag, issues a full barrier and re-checks; the waker
 * publishes, issues a full barrier and only then looks at the flags, so a
 * spinning peer costs no syscall and a sleeping one is never missed.  All
 * readers sleep on one doorbell word, so one FUTEX_WAKE wakes every
 * sleeping reader.  Peer death is noticed through pidfds (shm_proc.h),
 * polled between sleeps.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "barrier.h"
#include "futex.h"
#include "rdmaq_shm.h"
#include "ring.h"
#include "shm_format.h"
#include "shm_proc.h"

#define RDMAQ_NAME_PREFIX  "rdmaq-"
#define RDMAQ_CREATE_TRIES 16

static uint64_t shm_seg_bytes(const struct rdmaq_config *cfg)
{
	return rdmaq_shm_seg_bytes(cfg->n_readers, cfg->slot_bytes, cfg->slots);
}

/* ---- sleeping and waking -------------------------------------------------- */

static void shm_ring_doorbell(uint32_t *doorbell, int n)
{
	__atomic_add_fetch(doorbell, 1, __ATOMIC_SEQ_CST);
	rdmaq_futex_wake(doorbell, n);
}

/*
 * Where an endpoint sleeps: the doorbell word its peers bump, and its own
 * flag asking them to.  The writer's and every reader's wait ops run on
 * one of these (their waiter's ep points here).
 */
struct rdmaq_shm_sleep {
	uint32_t *doorbell;
	uint32_t *sleeping;
	uint32_t seen; /* the doorbell when the sleep was announced */
};

static int shm_sleep_prepare(void *ep)
{
	struct rdmaq_shm_sleep *s = ep;

	s->seen = READ_ONCE(*s->doorbell);
	WRITE_ONCE(*s->sleeping, 1);
	/* Pairs with the waker's barrier between publishing and reading the flag. */
	smp_mb();
	return 0;
}

static int shm_sleep_block(void *ep, int64_t timeout_ns)
{
	struct rdmaq_shm_sleep *s = ep;
	int ret = rdmaq_futex_wait(s->doorbell, s->seen, timeout_ns);

	if (ret == -EINTR)
		return rdmaq_set_err(ret, "interrupted by a signal");
	return ret < 0 ? rdmaq_set_err(ret, "futex wait: %s", strerror(-ret)) : ret;
}

static void shm_sleep_finish(void *ep)
{
	struct rdmaq_shm_sleep *s = ep;

	WRITE_ONCE(*s->sleeping, 0);
}

/* After publishing something the writer may wait for: wake it if it sleeps. */
static bool shm_wake_writer(struct rdmaq_shm_wwait *ww)
{
	/* Pairs with the barrier in shm_sleep_prepare. */
	smp_mb();
	if (!READ_ONCE(ww->sleeping))
		return false;
	shm_ring_doorbell(&ww->doorbell, 1);
	return true;
}

/* ---- names ---------------------------------------------------------------- */

static int shm_check_name(const char *name)
{
	size_t n = strnlen(name, RDMAQ_SHM_NAME_MAX + 1);

	if (n == 0 || n > RDMAQ_SHM_NAME_MAX)
		return rdmaq_set_err(-EINVAL, "queue name must have 1..%d characters",
				     RDMAQ_SHM_NAME_MAX);
	if (strchr(name, '/'))
		return rdmaq_set_err(-EINVAL, "queue name must not contain '/': %s", name);
	return 0;
}

static int shm_path(char *buf, size_t len, const char *name)
{
	int n = snprintf(buf, len, "/%s", name);

	if (n < 0 || (size_t)n >= len)
		return rdmaq_set_err(-ENAMETOOLONG, "queue name too long: %s", name);
	return 0;
}

/* Both figures in the unit of the first, and exact: a 4 MiB ring plus its header and
 * 4 MiB free both round to 4.0 MiB. */
static void fmt_bytes(char *buf, size_t len, uint64_t n, uint64_t unit_of)
{
	if (unit_of >= (1ULL << 30))
		snprintf(buf, len, "%.1f GiB (%" PRIu64 " bytes)", (double)n / (1ULL << 30), n);
	else
		snprintf(buf, len, "%.1f MiB (%" PRIu64 " bytes)", (double)n / (1ULL << 20), n);
}

/* Reserve the segment's memory now: tmpfs allocates lazily, and a write
 * into a page it cannot allocate is a SIGBUS. */
static int shm_reserve(int fd, uint64_t bytes)
{
	struct statvfs vfs;
	char need[64], have[64];
	int err;

	err = posix_fallocate(fd, 0, (off_t)bytes);
	if (err == EOPNOTSUPP || err == ENOSYS) {
		if (ftruncate(fd, (off_t)bytes) < 0)
			return rdmaq_set_err(-errno, "cannot size shared memory: %s",
					     strerror(errno));
		return 0;
	}
	if (err == ENOSPC) {
		fmt_bytes(need, sizeof(need), bytes, bytes);
		if (fstatvfs(fd, &vfs) == 0)
			fmt_bytes(have, sizeof(have), (uint64_t)vfs.f_bavail * vfs.f_frsize, bytes);
		else
			snprintf(have, sizeof(have), "less than that");
		return rdmaq_set_err(-ENOSPC,
				     "/dev/shm is too small: this queue needs %s, %s is free; give the "
				     "container more shared memory (docker run --shm-size=1g, or --ipc=host) "
				     "or use fewer/smaller slots",
				     need, have);
	}
	if (err)
		return rdmaq_set_err(-err, "cannot reserve %" PRIu64 " bytes of shared memory: %s",
				     bytes, strerror(err));
	return 0;
}

/* Create a fresh segment under an unguessable name; a squatter costs a retry. */
static int shm_create(char *name, size_t name_len, uint64_t bytes, void **out)
{
	char path[RDMAQ_SHM_NAME_MAX + 2];
	void *p;
	int fd = -1, ret, i;

	for (i = 0; i < RDMAQ_CREATE_TRIES; i++) {
		snprintf(name, name_len, RDMAQ_NAME_PREFIX "%d-%016" PRIx64, (int)getpid(),
			 rdmaq_random_u64());
		shm_path(path, sizeof(path), name);
		fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd >= 0 || errno != EEXIST)
			break;
	}
	if (fd < 0)
		return rdmaq_set_err(-errno, "cannot create shared memory %s: %s", path,
				     strerror(errno));
	ret = shm_reserve(fd, bytes);
	if (ret)
		goto clean_fd;
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		ret = rdmaq_set_err(-errno, "cannot map shared memory %s: %s", path,
				    strerror(errno));
		goto clean_fd;
	}
	close(fd);
	*out = p;
	return 0;

clean_fd:
	close(fd);
	shm_unlink(path);
	return ret;
}

/* ---- writer --------------------------------------------------------------- */

struct rdmaq_shm_writer {
	struct rdmaq_writer w;
	char name[RDMAQ_SHM_NAME_MAX + 1];
	void *base;
	uint64_t seg_bytes;
	struct rdmaq_shm_layout l;
	bool unlinked;
	bool dirty;		      /* records emitted since the last flush */
	struct rdmaq_shm_sleep sleep; /* on wwait */
	struct rdmaq_shm_peer peers[];
};

#define to_shm_writer(wp) container_of(wp, struct rdmaq_shm_writer, w)

static struct rdmaq_ring_ctrl *shm_writer_ring(struct rdmaq_shm_writer *w)
{
	return (struct rdmaq_ring_ctrl *)w->l.ring;
}

static bool shm_reader_closed(struct rdmaq_shm_writer *w, uint32_t i)
{
	return READ_ONCE(w->l.credits[i].next_seq) == RDMAQ_CREDIT_CLOSED;
}

static void shm_writer_unlink(struct rdmaq_shm_writer *w)
{
	char path[RDMAQ_SHM_NAME_MAX + 2];

	if (w->unlinked)
		return;
	w->unlinked = true;
	if (!shm_path(path, sizeof(path), w->name))
		shm_unlink(path);
}

static int shm_writer_poll_ready(struct rdmaq_writer *wp)
{
	struct rdmaq_shm_writer *w = to_shm_writer(wp);
	uint32_t i;

	for (i = 0; i < wp->cfg.n_readers; i++)
		if (smp_load_acquire(&w->l.attach[i].state) != RDMAQ_SHM_ATTACH_DONE)
			return 0;
	return 1;
}

static int shm_writer_ready_timeout(struct rdmaq_writer *wp)
{
	struct rdmaq_shm_writer *w = to_shm_writer(wp);
	char missing[128] = "";
	size_t len = 0;
	uint32_t i, have = 0;
	bool cut = false;

	for (i = 0; i < wp->cfg.n_readers; i++) {
		if (smp_load_acquire(&w->l.attach[i].state) == RDMAQ_SHM_ATTACH_DONE)
			have++;
		else if (len + 16 > sizeof(missing))
			cut = true;
		else
			len += snprintf(missing + len, sizeof(missing) - len, "%s%u",
					len ? ", " : "", i);
	}
	return rdmaq_set_err(-ETIMEDOUT,
			     "timed out with %u of %u readers attached (missing: [%s%s])", have,
			     wp->cfg.n_readers, missing, cut ? ", ..." : "");
}

static int shm_writer_connect(struct rdmaq_writer *wp)
{
	struct rdmaq_shm_writer *w = to_shm_writer(wp);
	struct rdmaq_ring_ctrl *rc = shm_writer_ring(w);
	uint32_t i;

	for (i = 0; i < wp->cfg.n_readers; i++) {
		pid_t pid = READ_ONCE(w->l.attach[i].pid);

		if (shm_reader_closed(w, i) || w->peers[i].pid)
			continue;
		if (rdmaq_shm_peer_watch(&w->peers[i], pid))
			return rdmaq_set_err(-EOWNERDEAD,
					     "reader %u (pid %d) died before the queue was ready",
					     i, pid);
	}
	/* Everyone is in: nobody needs the name any more. */
	shm_writer_unlink(w);
	smp_store_release(&rc->ready, 1);
	shm_ring_doorbell(&rc->doorbell, INT_MAX);
	return 0;
}

static int shm_writer_emit(struct rdmaq_writer *wp, uint64_t seq, const struct rdmaq_rec_hdr *hdr,
			   const struct rdmaq_iovec *iov, int iovcnt, size_t iov_off)
{
	struct rdmaq_shm_writer *w = to_shm_writer(wp);

	rdmaq_rec_frame(rdmaq_ring_slot(w->l.ring, &wp->cfg, seq), wp->key, hdr, iov, iovcnt,
			iov_off);
	w->dirty = true;
	return 0;
}

static int shm_writer_flush(struct rdmaq_writer *wp, bool doorbell)
{
	struct rdmaq_shm_writer *w = to_shm_writer(wp);
	uint32_t i, sleepers = 0;

	if (!w->dirty || !doorbell)
		return 0;
	w->dirty = false;
	/* Order the records before reading `sleeping` (pairs with the
	 * reader's barrier between setting it and re-checking the ring). */
	smp_mb();
	for (i = 0; i < wp->cfg.n_readers; i++)
		if (READ_ONCE(w->l.credits[i].sleeping) && !shm_reader_closed(w, i))
			sleepers++;
	if (sleepers) {
		/* One syscall wakes them all: they sleep on one word. */
		shm_ring_doorbell(&shm_writer_ring(w)->doorbell, INT_MAX);
		wp->stats.wakeups += sleepers;
	}
	return 0;
}

static int shm_writer_mark_closed(struct rdmaq_writer *wp, uint64_t closed_seq)
{
	struct rdmaq_shm_writer *w = to_shm_writer(wp);
	struct rdmaq_ring_ctrl *rc = shm_writer_ring(w);

	/* Every reader reads this ring, connected or not. */
	smp_store_release(&rc->closed_seq, closed_seq);
	shm_ring_doorbell(&rc->doorbell, INT_MAX);
	return 0;
}

static void shm_writer_interrupt(struct rdmaq_writer *wp)
{
	shm_ring_doorbell(&to_shm_writer(wp)->l.wwait->doorbell, INT_MAX);
}

static void shm_writer_destroy(struct rdmaq_writer *wp)
{
	struct rdmaq_shm_writer *w = to_shm_writer(wp);
	uint32_t i;

	for (i = 0; i < wp->cfg.n_readers; i++)
		rdmaq_shm_peer_unwatch(&w->peers[i]);
	if (!rdmaq_forked(wp->forks)) /* a forked child's copy: the name is the parent's */
		shm_writer_unlink(w);
	if (w->base)
		munmap(w->base, w->seg_bytes);
	free(w);
}

static int shm_writer_check_peer(void *ep)
{
	struct rdmaq_shm_writer *w = container_of(ep, struct rdmaq_shm_writer, sleep);
	uint32_t i;

	for (i = 0; i < w->w.cfg.n_readers; i++) {
		struct rdmaq_shm_peer *p = &w->peers[i];

		if (shm_reader_closed(w, i))
			continue;
		if (p->pid == 0) {
			/* Not connected yet: watch readers that have attached. */
			if (smp_load_acquire(&w->l.attach[i].state) != RDMAQ_SHM_ATTACH_DONE)
				continue;
			if (rdmaq_shm_peer_watch(p, READ_ONCE(w->l.attach[i].pid)))
				goto dead;
		}
		if (rdmaq_shm_peer_exited(p))
			goto dead;
		continue;
dead:
		/* A reader that closed and then exited is not dead to us. */
		if (shm_reader_closed(w, i))
			continue;
		return rdmaq_set_err(-EOWNERDEAD, "reader %u (pid %d) died", i, p->pid);
	}
	return 0;
}

static int shm_writer_reader_dead(struct rdmaq_writer *wp, uint32_t i)
{
	struct rdmaq_shm_peer *p = &to_shm_writer(wp)->peers[i];

	return p->pid && rdmaq_shm_peer_exited(p);
}

static const struct rdmaq_writer_ops shm_writer_ops = {
	.poll_ready = shm_writer_poll_ready,
	.ready_timeout = shm_writer_ready_timeout,
	.connect = shm_writer_connect,
	.emit = shm_writer_emit,
	.flush = shm_writer_flush,
	.mark_closed = shm_writer_mark_closed,
	.interrupt = shm_writer_interrupt,
	.reader_dead = shm_writer_reader_dead,
	.destroy = shm_writer_destroy,
};

static const struct rdmaq_wait_ops shm_writer_wait_ops = {
	.prepare = shm_sleep_prepare,
	.block = shm_sleep_block,
	.finish = shm_sleep_finish,
	.check_peer = shm_writer_check_peer,
};

int rdmaq_shm_writer_create(struct rdmaq_writer **out, const struct rdmaq_config *cfg)
{
	struct rdmaq_shm_writer *w;
	struct rdmaq_shm_hdr *h;
	uint32_t i;
	int ret;

	ret = rdmaq_config_check(cfg);
	if (ret)
		return ret;
	w = calloc(1, sizeof(*w) + cfg->n_readers * sizeof(w->peers[0]));
	if (!w)
		return rdmaq_set_err(-ENOMEM, "out of memory");
	for (i = 0; i < cfg->n_readers; i++)
		w->peers[i] = RDMAQ_SHM_PEER_INIT;
	w->seg_bytes = shm_seg_bytes(cfg);
	ret = shm_create(w->name, sizeof(w->name), w->seg_bytes, &w->base);
	if (ret)
		goto clean_w;
	w->l = rdmaq_shm_layout(w->base, cfg->n_readers);
	h = w->l.hdr;
	*h = (struct rdmaq_shm_hdr){
		.version = RDMAQ_SHM_VERSION,
		.n_readers = cfg->n_readers,
		.slot_bytes = cfg->slot_bytes,
		.slots = cfg->slots,
		.writer_pid = getpid(),
		.max_message = cfg->max_message,
		.key = rdmaq_random_u64(),
		.seg_bytes = w->seg_bytes,
		.writer_start = rdmaq_proc_start_time(getpid()),
	};
	for (i = 0; i < cfg->n_readers; i++)
		w->l.credits[i].next_seq = 1;
	rdmaq_writer_init(&w->w, &shm_writer_ops, &shm_writer_wait_ops, cfg, h->key, w->l.credits);
	w->sleep = (struct rdmaq_shm_sleep){
		.doorbell = &w->l.wwait->doorbell,
		.sleeping = &w->l.wwait->sleeping,
	};
	w->w.waiter.ep = &w->sleep;
	/* Readers trust the segment once the magic is there (pairs with the
	 * acquire load in shm_open_segment). */
	smp_store_release(&h->magic, RDMAQ_MAGIC);
	*out = &w->w;
	return 0;

clean_w:
	free(w);
	return ret;
}

const char *rdmaq_shm_writer_name(const struct rdmaq_writer *wp)
{
	return container_of(wp, const struct rdmaq_shm_writer, w)->name;
}

/* ---- reader --------------------------------------------------------------- */

struct rdmaq_shm_reader {
	struct rdmaq_reader r;
	void *base;
	uint64_t seg_bytes;
	struct rdmaq_shm_layout l;
	struct rdmaq_shm_peer writer;
	struct rdmaq_shm_sleep sleep; /* on the ring's doorbell */
};

#define to_shm_reader(rp) container_of(rp, struct rdmaq_shm_reader, r)

static struct rdmaq_ring_ctrl *shm_reader_ring(struct rdmaq_shm_reader *r)
{
	return (struct rdmaq_ring_ctrl *)r->l.ring;
}

static int shm_reader_credit(struct rdmaq_reader *rp, uint64_t next_seq)
{
	struct rdmaq_shm_reader *r = to_shm_reader(rp);

	smp_store_release(&r->l.credits[rp->index].next_seq, next_seq);
	if (shm_wake_writer(r->l.wwait))
		rp->stats.wakeups++;
	return 0;
}

static void shm_reader_interrupt(struct rdmaq_reader *rp)
{
	/* Other sleeping readers wake too, re-check and sleep again. */
	shm_ring_doorbell(&shm_reader_ring(to_shm_reader(rp))->doorbell, INT_MAX);
}

static void shm_reader_destroy(struct rdmaq_reader *rp)
{
	struct rdmaq_shm_reader *r = to_shm_reader(rp);

	if (r->base)
		munmap(r->base, r->seg_bytes);
	rdmaq_shm_peer_unwatch(&r->writer);
	free(r);
}

static int shm_reader_check_peer(void *ep)
{
	struct rdmaq_shm_reader *r = container_of(ep, struct rdmaq_shm_reader, sleep);

	if (rdmaq_shm_peer_exited(&r->writer))
		return rdmaq_set_err(-EOWNERDEAD, "writer (pid %d) died", r->writer.pid);
	return 0;
}

static const struct rdmaq_reader_ops shm_reader_ops = {
	.credit = shm_reader_credit,
	.interrupt = shm_reader_interrupt,
	.destroy = shm_reader_destroy,
};

static const struct rdmaq_wait_ops shm_reader_wait_ops = {
	.prepare = shm_sleep_prepare,
	.block = shm_sleep_block,
	.finish = shm_sleep_finish,
	.check_peer = shm_reader_check_peer,
};

/* Map a segment by name and check it is a whole rdmaq queue; fills *cfg from it. */
static int shm_open_segment(const char *name, struct rdmaq_shm_reader *r, struct rdmaq_config *cfg)
{
	char path[RDMAQ_SHM_NAME_MAX + 2];
	struct rdmaq_shm_hdr h;
	struct stat st;
	void *p;
	int fd, ret;

	ret = shm_path(path, sizeof(path), name);
	if (ret)
		return ret;
	fd = shm_open(path, O_RDWR | O_CLOEXEC, 0);
	if (fd < 0) {
		if (errno == ENOENT)
			return rdmaq_set_err(-ENOENT,
					     "no rdmaq queue %s here: its writer is gone or closed, "
					     "it is already connected, or it is on another host",
					     name);
		return rdmaq_set_err(-errno, "cannot open %s: %s", path, strerror(errno));
	}
	if (fstat(fd, &st) < 0) {
		ret = rdmaq_set_err(-errno, "cannot stat %s: %s", path, strerror(errno));
		goto clean_fd;
	}
	if ((uint64_t)st.st_size < sizeof(h)) {
		ret = rdmaq_set_err(-EPROTO, "%s is not an rdmaq queue (%lld bytes)", path,
				    (long long)st.st_size);
		goto clean_fd;
	}
	p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		ret = rdmaq_set_err(-errno, "cannot map %s: %s", path, strerror(errno));
		goto clean_fd;
	}
	close(fd);
	r->base = p;
	r->seg_bytes = (uint64_t)st.st_size;
	/* The magic first, with acquire: it pairs with the writer's release
	 * store in rdmaq_shm_writer_create, so the copy below sees the fields
	 * stored before it.  One private copy; nothing below reads the header again. */
	if (smp_load_acquire(&((struct rdmaq_shm_hdr *)p)->magic) != RDMAQ_MAGIC)
		return rdmaq_set_err(-EPROTO, "%s is not an rdmaq queue", path);
	memcpy(&h, p, sizeof(h));
	if (h.version != RDMAQ_SHM_VERSION)
		return rdmaq_set_err(-EPROTO,
				     "%s has shm segment format v%u, this rdmaq reads v%u: writer "
				     "and reader run different rdmaq releases",
				     path, h.version, RDMAQ_SHM_VERSION);
	*cfg = (struct rdmaq_config){
		.n_readers = h.n_readers,
		.slot_bytes = h.slot_bytes,
		.slots = h.slots,
		.max_message = h.max_message,
	};
	ret = rdmaq_config_check(cfg);
	if (ret) {
		char why[256];

		/* Copied out first: rdmaq_set_err formats into the buffer it quotes. */
		snprintf(why, sizeof(why), "%s", rdmaq_errmsg());
		return rdmaq_set_err(-EPROTO, "%s has a corrupt header: %s", path, why);
	}
	if (h.seg_bytes != shm_seg_bytes(cfg) || h.seg_bytes != r->seg_bytes)
		return rdmaq_set_err(-EPROTO,
				     "%s is %" PRIu64 " bytes, its header describes %" PRIu64
				     " (layout %" PRIu64 ")",
				     path, r->seg_bytes, h.seg_bytes, shm_seg_bytes(cfg));
	r->l = rdmaq_shm_layout(p, cfg->n_readers);
	r->writer.pid = h.writer_pid;
	r->r.key = h.key;
	return 0;

clean_fd:
	close(fd);
	return ret;
}

int rdmaq_shm_reader_attach(struct rdmaq_reader **out, const char *name, uint32_t index,
			    uint32_t spin_ns)
{
	struct rdmaq_shm_reader *r;
	struct rdmaq_shm_attach *att;
	struct rdmaq_config cfg;
	uint32_t expect = RDMAQ_SHM_ATTACH_FREE;
	uint64_t key;
	pid_t writer_pid;
	int ret;

	ret = shm_check_name(name);
	if (ret)
		return ret;
	r = calloc(1, sizeof(*r));
	if (!r)
		return rdmaq_set_err(-ENOMEM, "out of memory");
	r->writer = RDMAQ_SHM_PEER_INIT;
	ret = shm_open_segment(name, r, &cfg);
	if (ret)
		goto clean_r;
	if (index >= cfg.n_readers) {
		ret = rdmaq_set_err(-EINVAL, "reader index %u out of range: queue has %u readers",
				    index, cfg.n_readers);
		goto clean_r;
	}
	cfg.spin_ns = spin_ns;
	key = r->r.key;
	writer_pid = r->writer.pid;
	if (rdmaq_shm_peer_watch(&r->writer, writer_pid) || rdmaq_shm_peer_exited(&r->writer)) {
		ret = rdmaq_set_err(-EOWNERDEAD, "writer (pid %d) is gone", writer_pid);
		goto clean_r;
	}
	att = &r->l.attach[index];
	if (!__atomic_compare_exchange_n(&att->state, &expect, RDMAQ_SHM_ATTACH_CLAIMED, false,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		ret = rdmaq_set_err(-EBUSY, "reader index %u is already attached (pid %d)", index,
				    READ_ONCE(att->pid));
		goto clean_r;
	}
	rdmaq_reader_init(&r->r, &shm_reader_ops, &shm_reader_wait_ops, &cfg, index, key, r->l.ring);
	r->sleep = (struct rdmaq_shm_sleep){
		.doorbell = &shm_reader_ring(r)->doorbell,
		.sleeping = &r->l.credits[index].sleeping,
	};
	r->r.waiter.ep = &r->sleep;
	/* Credit costs a store and a barrier here: return it at every record,
	 * so a writer short of room never waits for a reader that is busy
	 * elsewhere. */
	r->r.credit_batch = 1;
	WRITE_ONCE(att->pid, getpid());
	smp_store_release(&att->state, RDMAQ_SHM_ATTACH_DONE);
	shm_wake_writer(r->l.wwait);
	*out = &r->r;
	return 0;

clean_r:
	if (r->base)
		munmap(r->base, r->seg_bytes);
	rdmaq_shm_peer_unwatch(&r->writer);
	free(r);
	return ret;
}

/* ---- leftovers ------------------------------------------------------------ */

int rdmaq_shm_segment_stale(const char *name)
{
	char path[RDMAQ_SHM_NAME_MAX + 2];
	struct rdmaq_shm_hdr h;
	uint64_t start;
	ssize_t n;
	int fd, ret;

	ret = shm_check_name(name);
	if (ret)
		return ret;
	if (strncmp(name, RDMAQ_NAME_PREFIX, strlen(RDMAQ_NAME_PREFIX)))
		return 0;
	shm_path(path, sizeof(path), name);
	fd = shm_open(path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return errno == ENOENT
			       ? 0
			       : rdmaq_set_err(-errno, "cannot open %s: %s", path, strerror(errno));
	n = pread(fd, &h, sizeof(h), 0);
	close(fd);
	if (n != (ssize_t)sizeof(h) || h.magic != RDMAQ_MAGIC || h.writer_pid <= 0)
		return 0; /* not ours, or still being created */
	if (kill(h.writer_pid, 0) < 0 && errno == ESRCH)
		return 1;
	start = rdmaq_proc_start_time(h.writer_pid);
	return h.writer_start && start && start != h.writer_start;
}

/* SPDX-License-Identifier: MIT */
/*
 * Edges of the ring and the shm transport that no Python test reaches: the
 * fork counter in a child, a segment that cannot be mapped or statted,
 * watching pid 1, the reader bitmap of drop_reader past the first 64-bit word,
 * a transport that fetches credit on demand, a try_put while an ABORT record
 * is owed and after it went out, an ABORT where a message would start, credit
 * returned in batches, a reader dropped twice, a sleeper other than reader 0,
 * a writer created while errno says EEXIST, a segment made under the name of
 * a writer after it unlinked it; the try calls at every edge of their checks
 * (room, ring size, max_message, a put or recv left mid-message, the caller's buffer).
 * One thread, the shm transport; a writer's ops are swapped for a copy where
 * a transport behaviour (a dead reader, a credit fetch) must be made up.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "rdmaq_shm.h"
#include "ring.h"
#include "schedstat.h"
#include "shm_pair.h"
#include "shm_proc.h"

#define SEC 1000000000LL

/* shm.c's mmap() and fstat() (linked with --wrap): the real ones, or while
 * mmap_err or fstat_err is set, a failure. */
static int mmap_err, fstat_err;

void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);

void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (mmap_err) {
		errno = mmap_err;
		return MAP_FAILED;
	}
	return __real_mmap(addr, len, prot, flags, fd, off);
}

int __real_fstat(int fd, struct stat *st);
int __wrap_fstat(int fd, struct stat *st);

int __wrap_fstat(int fd, struct stat *st)
{
	if (fstat_err) {
		errno = fstat_err;
		return -1;
	}
	return __real_fstat(fd, st);
}

static const struct rdmaq_config base = {
	.n_readers = 1,
	.slot_bytes = 1024,
	.slots = 4,
	.max_message = 1 << 20,
	.spin_ns = 0,
};

static bool says(const char *what)
{
	return strstr(rdmaq_errmsg(), what) != NULL;
}

/* A child of fork() counts exactly one fork more than its parent: the count
 * is what tells an endpoint it belongs to the parent. */
static void test_a_fork_child_counts_one_fork(void)
{
	uint32_t before = rdmaq_fork_count();
	int status = -1;
	pid_t pid = fork();

	if (pid == 0)
		exit(rdmaq_fork_count() == before + 1 ? 0 : 3); /* exit(): coverage is written */
	CHECK(pid > 0);
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(rdmaq_fork_count() == before);
}

/* A reader whose attach meets `err` where *fault is read fails with it and says `what`. */
static void check_attach_fails(int *fault, int err, const char *what)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r = NULL;
	int ret;

	if (rdmaq_shm_writer_create(&w, &base)) {
		CHECK(!"writer");
		return;
	}
	*fault = err;
	ret = rdmaq_shm_reader_attach(&r, rdmaq_shm_writer_name(w), 0, 0);
	*fault = 0;
	CHECK(ret == -err);
	CHECK(says(what));
	if (!ret)
		rdmaq_reader_destroy(r);
	rdmaq_writer_close(w);
	rdmaq_writer_destroy(w);
}

/* A reader that cannot map the segment fails with the map's error and says so. */
static void test_a_segment_that_cannot_be_mapped_fails_the_attach(void)
{
	check_attach_fails(&mmap_err, ENOMEM, "cannot map");
}

/* A reader that cannot stat the segment fails with the stat's error and says so. */
static void test_a_segment_that_cannot_be_statted_fails_the_attach(void)
{
	check_attach_fails(&fstat_err, EIO, "cannot stat");
}

/* Only pids <= 0 are no process: pid 1 (init) is one, and can be watched. */
static void test_pid_1_can_be_watched(void)
{
	struct rdmaq_shm_peer p = RDMAQ_SHM_PEER_INIT;

	CHECK(rdmaq_shm_peer_watch(&p, 1) == 0);
	CHECK(!rdmaq_shm_peer_exited(&p));
	rdmaq_shm_peer_unwatch(&p);
	p = RDMAQ_SHM_PEER_INIT;
	CHECK(rdmaq_shm_peer_watch(&p, 0) == -ESRCH);
}

/* drop_reader with a made-up transport: only reader `dead_index` has ended. */
static uint32_t dead_index;

static int fake_reader_dead(struct rdmaq_writer *w, uint32_t i)
{
	(void)w;
	return i == dead_index;
}

/* Each reader's dropped bit is its own, in every 64-bit word of the bitmap:
 * dropping reader 1, 63 or 64 drops that reader and no other. */
static void test_drop_reader_marks_only_that_reader(void)
{
	static const uint32_t dead[] = { 1, 63, 64 };
	struct rdmaq_reader *r[65];
	struct rdmaq_config cfg = base;
	struct rdmaq_writer_ops ops;
	struct rdmaq_writer *w;
	uint32_t k, i;

	cfg.n_readers = 65;
	for (k = 0; k < sizeof(dead) / sizeof(dead[0]); k++) {
		if (rdmaq_shm_writer_create(&w, &cfg)) {
			CHECK(!"writer");
			return;
		}
		for (i = 0; i < cfg.n_readers; i++)
			CHECK(rdmaq_shm_reader_attach(&r[i], rdmaq_shm_writer_name(w), i, 0) == 0);
		CHECK(rdmaq_writer_wait_ready(w, SEC) == 0);
		ops = *w->ops;
		ops.reader_dead = fake_reader_dead;
		w->ops = &ops;
		dead_index = dead[k];
		CHECK(rdmaq_writer_drop_reader(w, dead[k]) == 0);
		for (i = 0; i < cfg.n_readers; i++)
			CHECK(rdmaq_writer_dropped(w, i) == (i == dead[k]));
		/* reader 0 is alive: it cannot be dropped */
		CHECK(rdmaq_writer_drop_reader(w, 0) == -EINVAL);
		for (i = 0; i < cfg.n_readers; i++) {
			rdmaq_reader_close(r[i]);
			rdmaq_reader_destroy(r[i]);
		}
		rdmaq_writer_close(w);
		rdmaq_writer_destroy(w);
	}
}

/* A reader dropped already is nothing more to do: dropping it again returns 0. */
static void test_dropping_a_dropped_reader_again_returns_0(void)
{
	struct rdmaq_reader *r[2];
	struct rdmaq_config cfg = base;
	struct rdmaq_writer_ops ops;
	struct rdmaq_writer *w;
	uint32_t i;

	cfg.n_readers = 2;
	if (rdmaq_shm_writer_create(&w, &cfg)) {
		CHECK(!"writer");
		return;
	}
	for (i = 0; i < cfg.n_readers; i++)
		CHECK(rdmaq_shm_reader_attach(&r[i], rdmaq_shm_writer_name(w), i, 0) == 0);
	CHECK(rdmaq_writer_wait_ready(w, SEC) == 0);
	ops = *w->ops;
	ops.reader_dead = fake_reader_dead;
	w->ops = &ops;
	dead_index = 1;
	CHECK(rdmaq_writer_drop_reader(w, 1) == 0);
	CHECK(rdmaq_writer_drop_reader(w, 1) == 0);
	CHECK(rdmaq_writer_dropped(w, 1));
	for (i = 0; i < cfg.n_readers; i++) {
		rdmaq_reader_close(r[i]);
		rdmaq_reader_destroy(r[i]);
	}
	rdmaq_writer_close(w);
	rdmaq_writer_destroy(w);
}

/* A transport whose readers hold their credit lazily (verbs): refresh_credit
 * fetches it.  Here the fetch finds the reader has read everything. */
static int refreshes;

static int fake_refresh_credit(struct rdmaq_writer *w)
{
	refreshes++;
	__atomic_store_n(&w->credits[0].next_seq, w->next_seq, __ATOMIC_RELEASE);
	return 0;
}

/* A full ring whose credit the transport can fetch: the put fetches it and
 * goes through without waiting, and reports success. */
static void test_a_full_ring_fetches_credit_before_waiting(void)
{
	struct rdmaq_writer_ops ops;
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	struct rdmaq_iovec iov = { .base = "x", .len = 1 };
	uint32_t i;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	for (i = 0; i < base.slots; i++)
		CHECK(rdmaq_writer_put(w, &iov, 1, SEC) == 0);
	ops = *w->ops;
	ops.refresh_credit = fake_refresh_credit;
	w->ops = &ops;
	refreshes = 0;
	/* no time to wait: only the fetched credit makes room */
	CHECK(rdmaq_writer_put(w, &iov, 1, 0) == 0);
	CHECK(refreshes == 1);
	shm_unpair(w, r);
}

/* A streamed message cut off by a timeout owes its ABORT record: try_put,
 * which never emits it, declines until a put has sent it. */
static void test_try_put_declines_while_an_abort_is_owed(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	static char big[8 * 1024], buf[8 * 1024];
	struct rdmaq_iovec iov = { .base = big, .len = sizeof(big) };
	struct rdmaq_iovec small = { .base = "y", .len = 1 };
	uint64_t len;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	/* longer than the ring: part of it is sent, then the put times out */
	CHECK(rdmaq_writer_put(w, &iov, 1, 1000000) == -ETIMEDOUT);
	/* the reader takes what was sent (its credit frees the ring) and waits for the rest */
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, 1000000) == -ETIMEDOUT);
	CHECK(rdmaq_writer_try_put(w, &small, 1) == -EAGAIN);
	CHECK(rdmaq_writer_put(w, &small, 1, SEC) == 0);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == -ECONNABORTED);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0 && len == 1 && buf[0] == 'y');
	shm_unpair(w, r);
}

/* The ABORT record owed goes out once: after the put that sent it, try_put
 * sends again. */
static void test_try_put_sends_again_once_the_owed_abort_went_out(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	static char big[8 * 1024], buf[8 * 1024];
	struct rdmaq_iovec iov = { .base = big, .len = sizeof(big) };
	struct rdmaq_iovec small = { .base = "y", .len = 1 };
	uint64_t len;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	CHECK(rdmaq_writer_put(w, &iov, 1, 1000000) == -ETIMEDOUT); /* cut short: ABORT owed */
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, 1000000) == -ETIMEDOUT);
	CHECK(rdmaq_writer_put(w, &small, 1, SEC) == 0); /* the ABORT, then the message */
	CHECK(rdmaq_writer_try_put(w, &small, 1) == 0);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == -ECONNABORTED);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0 && len == 1);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0 && len == 1);
	shm_unpair(w, r);
}

/* An ABORT record where a message would start (the end of a message the reader
 * never started): recv skips it and returns the message after it. */
static void test_recv_skips_an_abort_before_a_message(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	struct rdmaq_iovec iov = { .base = "z", .len = 1 };
	char buf[16];
	uint64_t len = 0;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	w->abort_pending = true; /* the next put sends the ABORT first */
	CHECK(rdmaq_writer_put(w, &iov, 1, SEC) == 0);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0 && len == 1 && buf[0] == 'z');
	shm_unpair(w, r);
}

/* A reader that returns credit every few records (the verbs reader's way) reads
 * each message, and what it read frees the ring for the writer. */
static void test_a_reader_crediting_in_batches_reads_every_message(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	char msg, buf[16];
	struct rdmaq_iovec iov = { .base = &msg, .len = 1 };
	uint64_t len;
	uint32_t i;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	r->credit_batch = 2;
	for (i = 0; i < base.slots; i++) {
		msg = (char)('a' + i);
		CHECK(rdmaq_writer_put(w, &iov, 1, SEC) == 0);
	}
	for (i = 0; i < base.slots; i++) {
		len = 0;
		CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0);
		CHECK(len == 1 && buf[0] == (char)('a' + i));
	}
	/* no time to wait: the ring is free again */
	for (i = 0; i < base.slots; i++)
		CHECK(rdmaq_writer_put(w, &iov, 1, 0) == 0);
	shm_unpair(w, r);
}

/* The ring's own credit batch (the verbs reader keeps it; shm returns credit at every
 * record): once every quarter of the ring, at least every record.  A reader given it
 * and a full 16-slot ring that is already there publishes 4 times, not 16. */
static void test_credit_goes_back_once_every_quarter_of_the_ring(void)
{
	struct rdmaq_config cfg = base;
	struct rdmaq_reader plain;
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	char msg = 'q', buf[16];
	struct rdmaq_iovec iov = { .base = &msg, .len = 1 };
	uint64_t len, before;
	uint32_t i;

	cfg.slots = 3;
	rdmaq_reader_init(&plain, NULL, NULL, &cfg, 0, 0, NULL);
	CHECK(plain.credit_batch == 1);
	cfg.slots = 16;
	rdmaq_reader_init(&plain, NULL, NULL, &cfg, 0, 0, NULL);
	if (shm_pair(&cfg, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	r->credit_batch = plain.credit_batch;
	for (i = 0; i < cfg.slots; i++)
		CHECK(rdmaq_writer_put(w, &iov, 1, SEC) == 0);
	before = r->stats.credits;
	for (i = 0; i < cfg.slots; i++)
		CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0 && len == 1);
	CHECK(r->stats.credits - before == 4);
	shm_unpair(w, r);
}

/* A reader that holds credit (fewer records read than its batch) returns it before it
 * blocks: a writer short of room would otherwise wait for a reader that waits for it. */
static void test_a_reader_returns_its_credit_before_it_blocks(void)
{
	struct rdmaq_config cfg = base;
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	char msg = 'b', buf[16];
	struct rdmaq_iovec iov = { .base = &msg, .len = 1 };
	uint64_t len, before;

	cfg.slots = 16;
	if (shm_pair(&cfg, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	r->credit_batch = 4;
	CHECK(rdmaq_writer_put(w, &iov, 1, SEC) == 0);
	before = r->stats.credits;
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0 && len == 1);
	CHECK(r->stats.credits == before); /* one record of a batch of 4: kept */
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, 1000000LL) == -ETIMEDOUT);
	CHECK(r->stats.credits == before + 1);
	shm_unpair(w, r);
}

/* A reader index is checked in C too (callers other than the Python layer): the last
 * index is valid, the count of readers is not. */
static void test_a_reader_index_equal_to_the_count_is_refused(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	CHECK(rdmaq_writer_reader_dead(w, base.n_readers - 1) == 0); /* alive */
	CHECK(rdmaq_writer_reader_dead(w, base.n_readers) == -EINVAL);
	CHECK(rdmaq_writer_drop_reader(w, base.n_readers) == -EINVAL);
	shm_unpair(w, r);
}

/* A forked child's close of its parent's writer is a success (0) that leaves the
 * queue open: the parent's reader still gets the parent's messages. */
static void test_a_fork_child_closes_the_parents_writer_with_0(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	struct rdmaq_iovec iov = { .base = "p", .len = 1 };
	char buf[16];
	uint64_t len = 0;
	int status = -1;
	pid_t pid;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	pid = fork();
	if (pid == 0) {
		int ret = rdmaq_writer_close(w);

		rdmaq_reader_destroy(r);
		rdmaq_writer_destroy(w);
		exit(ret == 0 ? 0 : 3); /* exit(): coverage is written */
	}
	CHECK(pid > 0);
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(rdmaq_writer_put(w, &iov, 1, SEC) == 0);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0 && len == 1 && buf[0] == 'p');
	shm_unpair(w, r);
}

/* A forked child's close of its parent's reader is a success (0) that leaves the
 * parent's reader reading: the child tells the writer nothing. */
static void test_a_fork_child_closes_the_parents_reader_with_0(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	int status = -1;
	pid_t pid;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	pid = fork();
	if (pid == 0) {
		int ret = rdmaq_reader_close(r);

		rdmaq_reader_destroy(r);
		rdmaq_writer_destroy(w);
		exit(ret == 0 ? 0 : 3); /* exit(): coverage is written */
	}
	CHECK(pid > 0);
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	shm_unpair(w, r);
}

/* A segment that cannot be opened for another reason than its absence (here no
 * descriptor left) is an error, not "not stale". */
static void test_segment_stale_reports_an_open_failure(void)
{
	struct rlimit old, low;
	int ret;

	CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0);
	low = old;
	low.rlim_cur = 3; /* 0, 1 and 2 are taken */
	CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
	ret = rdmaq_shm_segment_stale("rdmaq-no-such-segment");
	CHECK(setrlimit(RLIMIT_NOFILE, &old) == 0);
	CHECK(ret == -EMFILE);
	CHECK(says("cannot open"));
	CHECK(rdmaq_shm_segment_stale("rdmaq-no-such-segment") == 0);
}

/* A put wakes every reader that sleeps, not only reader 0: with reader 1 alone
 * asleep, the put wakes one peer. */
static void test_a_put_wakes_a_sleeping_reader_other_than_reader_0(void)
{
	struct rdmaq_reader *r[2];
	struct rdmaq_config cfg = base;
	struct rdmaq_iovec iov = { .base = "s", .len = 1 };
	struct rdmaq_writer *w;
	uint32_t i;

	cfg.n_readers = 2;
	if (rdmaq_shm_writer_create(&w, &cfg)) {
		CHECK(!"writer");
		return;
	}
	for (i = 0; i < cfg.n_readers; i++)
		CHECK(rdmaq_shm_reader_attach(&r[i], rdmaq_shm_writer_name(w), i, 0) == 0);
	CHECK(rdmaq_writer_wait_ready(w, SEC) == 0);
	/* reader 1 about to block on the doorbell, as its wait marks itself */
	__atomic_store_n(&w->credits[1].sleeping, 1, __ATOMIC_RELEASE);
	CHECK(rdmaq_writer_put(w, &iov, 1, SEC) == 0);
	CHECK(w->stats.wakeups == 1);
	__atomic_store_n(&w->credits[1].sleeping, 0, __ATOMIC_RELEASE);
	for (i = 0; i < cfg.n_readers; i++) {
		rdmaq_reader_close(r[i]);
		rdmaq_reader_destroy(r[i]);
	}
	rdmaq_writer_close(w);
	rdmaq_writer_destroy(w);
}

/* Segments in /dev/shm named as this process's writers name theirs. */
static int own_segments(void)
{
	char prefix[32];
	struct dirent *e;
	DIR *d = opendir("/dev/shm");
	int n = 0;

	if (!d)
		return -1;
	snprintf(prefix, sizeof(prefix), "rdmaq-%d-", (int)getpid());
	while ((e = readdir(d)))
		n += !strncmp(e->d_name, prefix, strlen(prefix));
	closedir(d);
	return n;
}

/* A writer created while errno happens to say EEXIST makes one segment: only a
 * create that found its name taken tries another. */
static void test_a_stale_eexist_in_errno_makes_no_extra_segment(void)
{
	struct rdmaq_writer *w;
	int before = own_segments();

	CHECK(before >= 0);
	errno = EEXIST;
	if (rdmaq_shm_writer_create(&w, &base)) {
		CHECK(!"writer");
		return;
	}
	CHECK(own_segments() == before + 1);
	rdmaq_writer_close(w);
	rdmaq_writer_destroy(w);
	CHECK(own_segments() == before);
}

/* The writer unlinks its name once, when the queue is ready: a segment made
 * under that name afterwards is not the writer's, and outlives it. */
static void test_a_segment_made_under_the_name_after_ready_outlives_the_writer(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	char path[RDMAQ_SHM_NAME_MAX + 16];
	int fd;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	snprintf(path, sizeof(path), "/dev/shm/%s", rdmaq_shm_writer_name(w));
	CHECK(access(path, F_OK) != 0); /* unlinked at ready */
	fd = open(path, O_CREAT | O_EXCL | O_RDWR, 0600);
	CHECK(fd >= 0);
	if (fd >= 0)
		close(fd);
	shm_unpair(w, r);
	CHECK(access(path, F_OK) == 0);
	unlink(path);
}

/* The thread's schedstat is read even when its file opens as descriptor 0. */
static void test_schedstat_reads_through_descriptor_0(void)
{
	uint64_t ran = 0, delayed = 0, slices = 0;
	int saved = dup(0);
	bool ok;

	CHECK(saved > 0);
	close(0);
	ok = rdmaq_thread_schedstat(&ran, &delayed, &slices);
	CHECK(dup2(saved, 0) == 0);
	close(saved);
	CHECK(ok);
	CHECK(ran > 0);
}

/* The schedstat is the file's, from its first character: the on-CPU time read
 * after a look at the file is no less than that look found. */
static void test_schedstat_reads_the_whole_first_field(void)
{
	uint64_t before = 0, ran = 0, delayed = 0, slices = 0;
	FILE *f = fopen("/proc/thread-self/schedstat", "r");

	CHECK(f != NULL);
	if (!f)
		return;
	CHECK(fscanf(f, "%" SCNu64, &before) == 1);
	fclose(f);
	CHECK(rdmaq_thread_schedstat(&ran, &delayed, &slices));
	CHECK(before > 0 && ran >= before);
}

/* A reader that attached, closed and exited before the queue was ready is no dead
 * peer: it said goodbye, and the writer's wait_ready succeeds without it. */
static void test_a_reader_closed_and_gone_before_ready_does_not_fail_the_writer(void)
{
	struct rdmaq_writer *w;
	int status = -1;
	pid_t pid;

	if (rdmaq_shm_writer_create(&w, &base)) {
		CHECK(!"writer");
		return;
	}
	pid = fork();
	if (pid == 0) {
		struct rdmaq_reader *r;
		int ok = rdmaq_shm_reader_attach(&r, rdmaq_shm_writer_name(w), 0, 0) == 0;

		if (ok) {
			ok = rdmaq_reader_close(r) == 0;
			rdmaq_reader_destroy(r);
		}
		rdmaq_writer_destroy(w);
		exit(ok ? 0 : 3); /* exit(): coverage is written */
	}
	CHECK(pid > 0);
	CHECK(waitpid(pid, &status, 0) == pid); /* reaped: its pid is no process now */
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(rdmaq_writer_wait_ready(w, SEC) == 0);
	rdmaq_writer_close(w);
	rdmaq_writer_destroy(w);
}

/*
 * ring.c's try calls never wait: each answers -EAGAIN at once where the call that may
 * wait would have to, at every edge of its checks (the room left, the ring's size, a
 * put or a recv left mid-message, a message longer than the caller's buffer), and
 * counts `immediate` only when it did the work.  An alarm ends the test binary if one
 * waits (a try call waits with no deadline: for ever).
 */
static struct rdmaq_iovec bytes_iov(uint64_t len)
{
	static char payload[8 * 1024];

	return (struct rdmaq_iovec){ .base = payload, .len = len };
}

static uint64_t immediate(struct rdmaq_writer *w, struct rdmaq_reader *r)
{
	struct rdmaq_stats s;

	if (w)
		rdmaq_writer_stats(w, &s);
	else
		rdmaq_reader_stats(r, &s);
	return s.immediate;
}

static void test_try_put_takes_exactly_the_room_left_and_not_a_record_more(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	static char buf[8 * 1024];
	struct rdmaq_iovec iov;
	uint64_t len, payload;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	payload = w->payload;
	iov = bytes_iov(1);
	CHECK(rdmaq_writer_try_put(w, &iov, 1) == 0); /* one slot taken, three free */
	iov = bytes_iov(3 * payload + 1);	      /* four records */
	CHECK(rdmaq_writer_try_put(w, &iov, 1) == -EAGAIN);
	iov = bytes_iov(3 * payload); /* three: exactly the room left */
	CHECK(rdmaq_writer_try_put(w, &iov, 1) == 0);
	iov = bytes_iov(0); /* even an empty message needs a slot */
	CHECK(rdmaq_writer_try_put(w, &iov, 1) == -EAGAIN);
	CHECK(immediate(w, NULL) == 2);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0 && len == 1);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0 && len == 3 * payload);
	shm_unpair(w, r);
}

/* try_put2's message is its head, then its body, as one message; an empty body adds nothing. */
static void test_try_put2_sends_head_then_body_as_one_message(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	static char buf[8 * 1024];
	uint64_t len;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	CHECK(rdmaq_writer_try_put2(w, "head|", 5, "body", 4) == 0);
	CHECK(rdmaq_writer_try_put2(w, "alone", 5, "", 0) == 0);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0 && len == 9);
	CHECK(memcmp(buf, "head|body", 9) == 0);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0 && len == 5);
	CHECK(memcmp(buf, "alone", 5) == 0);
	CHECK(immediate(w, NULL) == 2);
	shm_unpair(w, r);
}

/* A message of the whole ring is a try_put's; one byte more streams, so it is not. */
static void test_try_put_takes_a_message_of_the_whole_ring_and_not_a_byte_more(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	static char buf[8 * 1024];
	struct rdmaq_iovec iov;
	uint64_t len;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	iov = bytes_iov(4 * (uint64_t)w->payload + 1);
	CHECK(rdmaq_writer_try_put(w, &iov, 1) == -EAGAIN);
	iov = bytes_iov(4 * (uint64_t)w->payload);
	CHECK(rdmaq_writer_try_put(w, &iov, 1) == 0 && immediate(w, NULL) == 1);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0 && len == 4 * w->payload);
	shm_unpair(w, r);
}

/*
 * A message over max_message that one slot would hold: try_put declines it (-EAGAIN,
 * nothing sent, no error of its own), and the put its caller falls back to refuses it.
 */
static void test_try_put_leaves_a_message_over_max_message_to_put(void)
{
	struct rdmaq_config cfg = base;
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	static char buf[8 * 1024];
	struct rdmaq_iovec iov;
	uint64_t len;

	cfg.max_message = 100;
	if (shm_pair(&cfg, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	iov = bytes_iov(101);
	rdmaq_set_err(0, "none");
	CHECK(rdmaq_writer_try_put(w, &iov, 1) == -EAGAIN && says("none"));
	CHECK(rdmaq_writer_put(w, &iov, 1, SEC) == -EMSGSIZE &&
	      says("exceeds max_message_bytes=100"));
	iov = bytes_iov(100);
	CHECK(rdmaq_writer_try_put(w, &iov, 1) == 0 && immediate(w, NULL) == 1);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0 && len == 100);
	shm_unpair(w, r);
}

/*
 * A put left mid-message (interrupted, resumable): try_put declines, whatever the room,
 * as it does while an ABORT is owed; the put that may wait abandons it, and the reader
 * drops what it has of it and reads the next message.
 */
static void test_try_put_declines_while_a_put_is_left_mid_message(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	static char buf[8 * 1024];
	struct rdmaq_iovec big = bytes_iov(2 * (uint64_t)base.slot_bytes), small = bytes_iov(1);
	uint64_t len;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	/* a put of 3 records interrupted before its first went out (-EINTR keeps it) */
	w->put = (struct rdmaq_put_state){ .active = true, .total = big.len, .nrec = 3 };
	CHECK(rdmaq_writer_try_put(w, &small, 1) == -EAGAIN);
	CHECK(rdmaq_writer_resume(w, &big, 1, SEC) == 0); /* still resumable */
	CHECK(rdmaq_writer_try_put(w, &small, 1) == 0);	  /* and once done, try_put works */
	CHECK(immediate(w, NULL) == 1);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0 && len == big.len);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0 && len == 1);
	shm_unpair(w, r);
}

/* try_recv takes a one-record message of up to its buffer's size; one byte longer is
 * left where it is for recv, which says how long it is. */
static void test_try_recv_takes_a_message_of_exactly_its_buffer_and_not_a_byte_more(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	static char buf[1024];
	struct rdmaq_iovec iov = bytes_iov(100);
	uint64_t len = 0;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	CHECK(rdmaq_writer_put(w, &iov, 1, SEC) == 0);
	CHECK(rdmaq_writer_put(w, &iov, 1, SEC) == 0);
	CHECK(rdmaq_reader_try_recv(r, buf, 99, &len) == -EAGAIN);
	CHECK(immediate(NULL, r) == 0);
	CHECK(rdmaq_reader_try_recv(r, buf, 100, &len) == 0 && len == 100);
	CHECK(rdmaq_reader_try_recv(r, buf, 101, &len) == 0 && len == 100);
	CHECK(immediate(NULL, r) == 2);
	CHECK(rdmaq_reader_try_recv(r, buf, sizeof(buf), &len) == -EAGAIN); /* none left */
	shm_unpair(w, r);
}

/*
 * A recv left mid-message by its timeout, then the writer gives that message up and
 * sends a short one: try_recv declines (the message in progress is recv's to finish),
 * and recv drops the abandoned one and returns the short one.  Were try_recv to skip
 * the ABORT itself, recv would find a new message mid-message (-EBADMSG).
 */
static void test_try_recv_declines_while_a_recv_is_left_mid_message(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	static char buf[8 * 1024];
	struct rdmaq_iovec big = bytes_iov(8 * 1024), small = bytes_iov(1);
	uint64_t len = 0;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	CHECK(rdmaq_writer_put(w, &big, 1, 1000000) == -ETIMEDOUT); /* four records sent */
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, 1000000) == -ETIMEDOUT);
	CHECK(rdmaq_writer_put(w, &small, 1, SEC) == 0); /* the ABORT, then the message */
	CHECK(rdmaq_reader_try_recv(r, buf, sizeof(buf), &len) == -EAGAIN);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == -ECONNABORTED);
	CHECK(rdmaq_reader_try_recv(r, buf, sizeof(buf), &len) == 0 && len == 1);
	CHECK(immediate(NULL, r) == 1);
	shm_unpair(w, r);
}

/* An ABORT before a message the reader never started: try_recv steps over it and
 * takes the message after it. */
static void test_try_recv_steps_over_an_abort_to_the_message_after_it(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	struct rdmaq_iovec iov = { .base = "z", .len = 1 };
	char buf[16];
	uint64_t len = 0;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	w->abort_pending = true;
	CHECK(rdmaq_writer_put(w, &iov, 1, SEC) == 0);
	CHECK(rdmaq_reader_try_recv(r, buf, sizeof(buf), &len) == 0 && len == 1 && buf[0] == 'z');
	CHECK(rdmaq_reader_try_recv(r, buf, sizeof(buf), &len) == -EAGAIN);
	shm_unpair(w, r);
}

/* A message of several records, all there, is recv's: try_recv takes one-record ones. */
static void test_try_recv_leaves_a_message_of_several_records_to_recv(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	static char buf[8 * 1024];
	struct rdmaq_iovec iov;
	uint64_t len = 0;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	iov = bytes_iov((uint64_t)w->payload + 1);
	CHECK(rdmaq_writer_put(w, &iov, 1, SEC) == 0);
	CHECK(rdmaq_reader_try_recv(r, buf, sizeof(buf), &len) == -EAGAIN);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0 && len == w->payload + 1);
	iov = bytes_iov(w->payload);
	CHECK(rdmaq_writer_put(w, &iov, 1, SEC) == 0);
	CHECK(rdmaq_reader_try_recv(r, buf, sizeof(buf), &len) == 0 && len == w->payload);
	shm_unpair(w, r);
}

int main(void)
{
	alarm(60); /* a try call that waits would wait for ever */
	test_a_fork_child_counts_one_fork();
	test_a_segment_that_cannot_be_mapped_fails_the_attach();
	test_a_segment_that_cannot_be_statted_fails_the_attach();
	test_pid_1_can_be_watched();
	test_drop_reader_marks_only_that_reader();
	test_dropping_a_dropped_reader_again_returns_0();
	test_a_full_ring_fetches_credit_before_waiting();
	test_try_put_declines_while_an_abort_is_owed();
	test_try_put_sends_again_once_the_owed_abort_went_out();
	test_recv_skips_an_abort_before_a_message();
	test_a_reader_crediting_in_batches_reads_every_message();
	test_credit_goes_back_once_every_quarter_of_the_ring();
	test_a_reader_returns_its_credit_before_it_blocks();
	test_a_reader_index_equal_to_the_count_is_refused();
	test_a_fork_child_closes_the_parents_writer_with_0();
	test_a_fork_child_closes_the_parents_reader_with_0();
	test_segment_stale_reports_an_open_failure();
	test_a_put_wakes_a_sleeping_reader_other_than_reader_0();
	test_a_stale_eexist_in_errno_makes_no_extra_segment();
	test_a_segment_made_under_the_name_after_ready_outlives_the_writer();
	test_schedstat_reads_through_descriptor_0();
	test_schedstat_reads_the_whole_first_field();
	test_a_reader_closed_and_gone_before_ready_does_not_fail_the_writer();
	test_try_put_takes_exactly_the_room_left_and_not_a_record_more();
	test_try_put_takes_a_message_of_the_whole_ring_and_not_a_byte_more();
	test_try_put2_sends_head_then_body_as_one_message();
	test_try_put_leaves_a_message_over_max_message_to_put();
	test_try_put_declines_while_a_put_is_left_mid_message();
	test_try_recv_takes_a_message_of_exactly_its_buffer_and_not_a_byte_more();
	test_try_recv_declines_while_a_recv_is_left_mid_message();
	test_try_recv_steps_over_an_abort_to_the_message_after_it();
	test_try_recv_leaves_a_message_of_several_records_to_recv();
	return check_report("ring_edges");
}

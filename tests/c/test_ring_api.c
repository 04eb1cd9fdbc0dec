/* SPDX-License-Identifier: MIT */
/*
 * The public C API's contract where the Python layer never goes: calls in
 * the wrong order or on a closed endpoint, a buffer too small or of the
 * wrong size, each configuration limit at its boundary, the counters, a put
 * of no iovecs, a message cut off by close, cancel's wake-up, a wake-up rung
 * before its sleeper blocks, a message longer than the ring filling all of
 * it, segment names already taken.
 * One thread, the shm transport, a writer and its reader in one process.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "check.h"
#include "rdmaq_shm.h"
#include "ring.h"
#include "shm_pair.h"

#define SEC 1000000000LL

static const struct rdmaq_config base = {
	.n_readers = 1,
	.slot_bytes = 1024,
	.slots = 8,
	.max_message = 1 << 20,
	.spin_ns = 0,
};

static int put(struct rdmaq_writer *w, const void *data, size_t len)
{
	struct rdmaq_iovec iov = { .base = data, .len = len };

	return rdmaq_writer_put(w, &iov, 1, SEC);
}

static bool says(const char *what)
{
	return strstr(rdmaq_errmsg(), what) != NULL;
}

/*
 * The segment's file system, as shm.c's posix_fallocate() and ftruncate() meet
 * it (linked with --wrap): the real calls, or while fallocate_err is set, one
 * without fallocate (EOPNOTSUPP, ENOSYS) or failing it otherwise, and while
 * ftruncate_err is set, one that cannot size the file.
 */
static int fallocate_err, ftruncate_err, ftruncate_calls;

int __real_posix_fallocate(int fd, off_t offset, off_t len);
int __real_ftruncate(int fd, off_t len);

int __wrap_posix_fallocate(int fd, off_t offset, off_t len)
{
	return fallocate_err ? fallocate_err : __real_posix_fallocate(fd, offset, len);
}

int __wrap_ftruncate(int fd, off_t len)
{
	ftruncate_calls++;
	if (ftruncate_err) {
		errno = ftruncate_err;
		return -1;
	}
	return __real_ftruncate(fd, len);
}

/*
 * shm_open as shm.c meets it (linked with --wrap): while names_taken is set,
 * that many creates find their name taken (a squatter's), as O_EXCL reports it.
 */
static int names_taken;

int __real_shm_open(const char *name, int oflag, mode_t mode);

int __wrap_shm_open(const char *name, int oflag, mode_t mode)
{
	if (names_taken && (oflag & O_CREAT)) {
		names_taken--;
		errno = EEXIST;
		return -1;
	}
	return __real_shm_open(name, oflag, mode);
}

/* This process's segments in /dev/shm. */
static int my_segments(void)
{
	char prefix[32];
	struct dirent *e;
	DIR *d = opendir("/dev/shm");
	int n = 0;

	snprintf(prefix, sizeof(prefix), "rdmaq-%d-", (int)getpid());
	while (d && (e = readdir(d)))
		n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
	if (d)
		closedir(d);
	return n;
}

/* Open file descriptors of this process. */
static int my_fds(void)
{
	struct dirent *e;
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	while (d && (e = readdir(d)))
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

static void test_calls_on_closed_endpoints(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	uint64_t len;
	char buf[8];

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	CHECK(rdmaq_reader_close(r) == 0);
	CHECK(rdmaq_reader_close(r) == 0); /* twice: nothing more */
	CHECK(rdmaq_reader_peek(r, &len, 0) == -EBADF && says("reader is closed"));
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, 0) == -EBADF);
	CHECK(rdmaq_reader_wait_ready(r, 0) == -EBADF);
	CHECK(rdmaq_reader_nap(r, 0) == -EBADF);
	CHECK(rdmaq_writer_close(w) == 0);
	CHECK(rdmaq_writer_close(w) == 0);
	CHECK(put(w, "x", 1) == -EBADF && says("writer is closed"));
	rdmaq_reader_destroy(r);
	rdmaq_writer_destroy(w);
	rdmaq_reader_destroy(NULL);
	rdmaq_writer_destroy(NULL);
}

static void test_calls_out_of_order(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	struct rdmaq_iovec iov = { .base = "abc", .len = 3 };
	uint64_t len = 0;
	char buf[16];

	CHECK(rdmaq_shm_writer_create(&w, &base) == 0);
	CHECK(put(w, "x", 1) == -ENOTCONN && says("call wait_ready() first"));
	CHECK(rdmaq_shm_reader_attach(&r, rdmaq_shm_writer_name(w), 0, 0) == 0);
	CHECK(rdmaq_writer_wait_ready(w, SEC) == 0);
	CHECK(rdmaq_writer_wait_ready(w, 0) == 0); /* ready already */
	CHECK(rdmaq_writer_put(w, &iov, -1, SEC) == -EINVAL && says("negative iovcnt"));
	CHECK(rdmaq_writer_resume(w, &iov, 1, SEC) == -EINVAL && says("nothing to resume"));
	CHECK(rdmaq_reader_read(r, buf, 3, 0) == -EINVAL && says("call peek first"));
	CHECK(rdmaq_writer_put(w, &iov, 1, SEC) == 0);
	CHECK(rdmaq_reader_peek(r, &len, SEC) == 0 && len == 3);
	CHECK(rdmaq_reader_peek(r, &len, SEC) == 0 && len == 3); /* the same message */
	CHECK(rdmaq_reader_read(r, buf, 4, 0) == -EINVAL &&
	      says("buffer of 4 bytes for a 3-byte message"));
	CHECK(rdmaq_reader_read(r, buf, 3, 0) == 0 && memcmp(buf, "abc", 3) == 0);
	shm_unpair(w, r);
}

static void test_recv_into_a_buffer_too_small(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	char buf[64];
	uint64_t len = 0;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	CHECK(put(w, "0123456789", 10) == 0);
	CHECK(rdmaq_reader_recv(r, buf, 9, &len, SEC) == -ENOBUFS && len == 10);
	CHECK(rdmaq_reader_recv(r, buf, 10, &len, SEC) == 0 && len == 10);
	CHECK(memcmp(buf, "0123456789", 10) == 0);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, 0) == -ETIMEDOUT);
	shm_unpair(w, r);
}

static void test_the_counters(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	struct rdmaq_stats ws, rs;
	char buf[3000];
	uint64_t len;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	memset(buf, 7, sizeof(buf));
	CHECK(put(w, buf, 10) == 0);
	CHECK(put(w, buf, 3000) == 0); /* four records */
	CHECK(put(w, buf, 0) == 0);    /* an empty message is one record */
	for (int i = 0; i < 3; i++)
		CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0);
	rdmaq_writer_stats(w, &ws);
	rdmaq_reader_stats(r, &rs);
	CHECK(ws.messages == 3 && ws.bytes == 3010);
	CHECK(rs.messages == 3 && rs.bytes == 3010);
	CHECK(rs.credits == 6); /* one per record */
	CHECK(ws.credits == 0); /* never short of room */
	shm_unpair(w, r);
}

/* A writer with one field of the base configuration changed: 0 or -EINVAL. */
static int create_with(struct rdmaq_config cfg)
{
	struct rdmaq_writer *w;
	int ret = rdmaq_shm_writer_create(&w, &cfg);

	if (!ret)
		rdmaq_writer_destroy(w);
	return ret;
}

static void test_each_limit_at_its_boundary(void)
{
	struct rdmaq_config c;

	c = base, c.n_readers = 256;
	CHECK(create_with(c) == 0);
	c = base, c.n_readers = 257;
	CHECK(create_with(c) == -EINVAL && says("n_readers must be in 1..256, got 257"));
	c = base, c.n_readers = 0;
	CHECK(create_with(c) == -EINVAL);
	c = base, c.slot_bytes = 128;
	CHECK(create_with(c) == 0);
	c = base, c.slot_bytes = 64;
	CHECK(create_with(c) == -EINVAL && says("a multiple of 64 in 128..1073741824, got 64"));
	c = base, c.slot_bytes = 1088;
	CHECK(create_with(c) == 0);
	c = base, c.slot_bytes = 1087;
	CHECK(create_with(c) == -EINVAL && says("a multiple of 64"));
	c = base, c.slots = 2;
	CHECK(create_with(c) == 0);
	c = base, c.slots = 1;
	CHECK(create_with(c) == -EINVAL && says("slots must be in 2..16777216, got 1"));
	c = base, c.slot_bytes = 128, c.slots = RDMAQ_MAX_SLOTS + 1;
	CHECK(create_with(c) == -EINVAL && says("slots must be in 2..16777216, got 16777217"));
	c = base, c.slot_bytes = RDMAQ_MAX_SLOT_BYTES + 64;
	CHECK(create_with(c) == -EINVAL && says("got 1073741888"));
	c = base, c.max_message = 1;
	CHECK(create_with(c) == 0);
	c = base, c.max_message = 0;
	CHECK(create_with(c) == -EINVAL && says("max_message must be at least 1"));
	c = base, c.slot_bytes = 1 << 20, c.slots = (1 << 14) + 1;
	CHECK(create_with(c) == -EINVAL && says("larger than 16 GiB"));
}

/*
 * Without fallocate (EOPNOTSUPP, ENOSYS) the segment is sized by ftruncate and
 * the queue works; a file system that cannot size it, or fails fallocate
 * otherwise, fails the writer with the reason, and leaves no segment behind.
 */
static void test_a_file_system_without_fallocate_sizes_the_segment(void)
{
	const int unsupported[] = { EOPNOTSUPP, ENOSYS };
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	char buf[16];
	uint64_t len;
	int before = my_segments();

	for (int i = 0; i < 2; i++) {
		fallocate_err = unsupported[i];
		ftruncate_calls = 0;
		if (shm_pair(&base, &w, &r)) {
			CHECK(!"pair");
			break;
		}
		CHECK(ftruncate_calls == 1);
		CHECK(put(w, "sized", 5) == 0);
		CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0 && len == 5);
		CHECK(memcmp(buf, "sized", 5) == 0);
		shm_unpair(w, r);
	}
	ftruncate_err = EFBIG;
	CHECK(create_with(base) == -EFBIG && says("cannot size shared memory: File too large"));
	ftruncate_err = 0;
	fallocate_err = EIO;
	ftruncate_calls = 0;
	CHECK(create_with(base) == -EIO && says("cannot reserve ") &&
	      says(" bytes of shared memory: Input/output error") && ftruncate_calls == 0);
	fallocate_err = 0;
	CHECK(my_segments() == before);
}

/*
 * The process watches (pidfds) of a writer and its reader, and of an attach
 * refused after watching the writer (the index taken), are all let go.
 */
static void test_endpoints_leave_no_file_descriptor_open(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r, *again;
	int before = my_fds();

	for (int i = 0; i < 3; i++) {
		if (rdmaq_shm_writer_create(&w, &base) ||
		    rdmaq_shm_reader_attach(&r, rdmaq_shm_writer_name(w), 0, 0)) {
			CHECK(!"pair");
			return;
		}
		CHECK(rdmaq_shm_reader_attach(&again, rdmaq_shm_writer_name(w), 0, 0) == -EBUSY);
		CHECK(says("reader index 0 is already attached"));
		CHECK(rdmaq_writer_wait_ready(w, SEC) == 0);
		CHECK(rdmaq_reader_wait_ready(r, SEC) == 0);
		shm_unpair(w, r);
	}
	CHECK(my_fds() == before);
}

static void test_a_message_of_exactly_max_message_and_one_more(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	struct rdmaq_config cfg = base;
	char buf[100] = { 0 };
	uint64_t len;

	cfg.max_message = 100;
	CHECK(rdmaq_shm_writer_create(&w, &cfg) == 0);
	CHECK(rdmaq_shm_reader_attach(&r, rdmaq_shm_writer_name(w), 0, 0) == 0);
	CHECK(rdmaq_writer_wait_ready(w, SEC) == 0);
	CHECK(put(w, buf, 100) == 0);
	CHECK(put(w, buf, 101) == -EMSGSIZE &&
	      says("message of 101 bytes exceeds max_message_bytes=100"));
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0 && len == 100);
	shm_unpair(w, r);
}

static void test_only_an_interrupted_put_resumes(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	static char big[8 * 1024];
	struct rdmaq_iovec iov = { .base = big, .len = sizeof(big) };

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	/* longer than the ring: streams, and times out with part of it sent */
	CHECK(rdmaq_writer_put(w, &iov, 1, 1000000) == -ETIMEDOUT);
	CHECK(rdmaq_writer_resume(w, &iov, 1, 0) == -EINVAL && says("nothing to resume"));
	shm_unpair(w, r);
}

static void test_a_put_of_no_iovecs_sends_an_empty_message(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	char buf[8];
	uint64_t len = 1;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	CHECK(rdmaq_writer_put(w, NULL, 0, SEC) == 0);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0 && len == 0);
	shm_unpair(w, r);
}

static void test_a_reader_that_consumed_nothing_sends_no_credit(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	struct rdmaq_stats rs;
	char buf[8];
	uint64_t len;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	/* The wait blocks (no spin configured), and a reader publishes its
	 * credit before it blocks: there is none to publish yet. */
	CHECK(rdmaq_reader_peek(r, &len, 0) == -ETIMEDOUT);
	rdmaq_reader_stats(r, &rs);
	CHECK(rs.credits == 0);
	CHECK(put(w, "x", 1) == 0);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, SEC) == 0);
	rdmaq_reader_stats(r, &rs);
	CHECK(rs.credits == 1);
	shm_unpair(w, r);
}

static void test_a_message_cut_off_by_close_is_not_peeked_again(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	static char big[8 * 1024];
	struct rdmaq_iovec iov = { .base = big, .len = sizeof(big) };
	uint64_t len = 0;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	/* Longer than the ring: the writer sends what fits, times out, closes. */
	CHECK(rdmaq_writer_put(w, &iov, 1, 1000000) == -ETIMEDOUT);
	CHECK(rdmaq_writer_close(w) == 0);
	CHECK(rdmaq_reader_peek(r, &len, SEC) == 0 && len == sizeof(big));
	CHECK(rdmaq_reader_read(r, big, sizeof(big), SEC) == -EPIPE);
	/* The message never completes: the reader is between messages again. */
	CHECK(rdmaq_reader_peek(r, &len, 0) == -EPIPE && says("writer closed the queue"));
	rdmaq_reader_close(r);
	rdmaq_reader_destroy(r);
	rdmaq_writer_destroy(w);
}

/*
 * A message longer than the ring streams through it: before it waits for the
 * reader, the put fills every slot.  The reader that comes later finds all of
 * that there, without waiting.
 */
static void test_a_message_longer_than_the_ring_fills_it_before_waiting(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	static char big[8 * 1024], got[sizeof(big)];
	struct rdmaq_iovec iov = { .base = big, .len = sizeof(big) };
	uint64_t len = 0;
	size_t landed = 0;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	memset(big, 0xa5, sizeof(big));
	memset(got, 0, sizeof(got));
	CHECK(rdmaq_writer_put(w, &iov, 1, 1000000) == -ETIMEDOUT);
	CHECK(rdmaq_reader_peek(r, &len, 0) == 0 && len == sizeof(big));
	CHECK(rdmaq_reader_read(r, got, sizeof(got), 0) == -ETIMEDOUT);
	for (size_t i = 0; i < sizeof(got); i++)
		landed += got[i] == big[i];
	CHECK(landed == (size_t)base.slots * w->payload);
	shm_unpair(w, r);
}

/*
 * A segment name already taken costs a fresh name: 15 taken, the 16th is
 * free, and the writer is made; after 16 taken the create gives up, with the
 * reason, and leaves nothing behind.
 */
static void test_names_taken_cost_a_retry_each_up_to_16(void)
{
	struct rdmaq_writer *w;
	int before = my_segments(), ret;

	names_taken = 15;
	ret = rdmaq_shm_writer_create(&w, &base);
	CHECK(ret == 0 && names_taken == 0);
	if (!ret)
		rdmaq_writer_destroy(w);
	names_taken = 16;
	CHECK(create_with(base) == -EEXIST && says("cannot create shared memory /rdmaq-") &&
	      says("File exists"));
	CHECK(names_taken == 0);
	names_taken = 0;
	CHECK(my_segments() == before);
}

static const struct rdmaq_reader_ops *transport_ops;
static int interrupts;

static void counting_interrupt(struct rdmaq_reader *r)
{
	interrupts++;
	transport_ops->interrupt(r);
}

static void test_cancel_wakes_the_transport(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	struct rdmaq_reader_ops counting;
	uint64_t len;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	/* The transport's own wake-up, counted: without it a wait blocked in
	 * another thread sees the cancel only at its next peer check. */
	transport_ops = r->ops;
	counting = *r->ops;
	counting.interrupt = counting_interrupt;
	r->ops = &counting;
	rdmaq_reader_cancel(r);
	CHECK(interrupts == 1);
	CHECK(rdmaq_reader_peek(r, &len, SEC) == -ECANCELED);
	r->ops = transport_ops;
	shm_unpair(w, r);
}

/*
 * A wake-up rung between a sleeper's announcement (prepare) and its block is
 * not lost: the doorbell moved since the sleeper read it, so the block
 * returns at once as woken (0), not at the end of its timeout (1).  Driven
 * step by step on one thread through the reader's own wait ops.
 */
static void test_a_wake_before_the_block_is_not_lost(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	struct rdmaq_stats ws;
	const struct rdmaq_wait_ops *ops;
	char buf[8];
	uint64_t len;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	ops = r->waiter.ops;
	CHECK(ops->prepare(r->waiter.ep) == 0);
	CHECK(put(w, "x", 1) == 0); /* sees the reader sleeping: rings its doorbell */
	rdmaq_writer_stats(w, &ws);
	CHECK(ws.wakeups == 1);
	CHECK(ops->block(r->waiter.ep, SEC) == 0);
	ops->finish(r->waiter.ep);
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, 0) == 0 && len == 1);
	shm_unpair(w, r);
}

int main(void)
{
	test_calls_on_closed_endpoints();
	test_calls_out_of_order();
	test_recv_into_a_buffer_too_small();
	test_the_counters();
	test_each_limit_at_its_boundary();
	test_a_file_system_without_fallocate_sizes_the_segment();
	test_endpoints_leave_no_file_descriptor_open();
	test_a_message_of_exactly_max_message_and_one_more();
	test_only_an_interrupted_put_resumes();
	test_a_put_of_no_iovecs_sends_an_empty_message();
	test_a_reader_that_consumed_nothing_sends_no_credit();
	test_a_message_cut_off_by_close_is_not_peeked_again();
	test_cancel_wakes_the_transport();
	test_a_wake_before_the_block_is_not_lost();
	test_a_message_longer_than_the_ring_fills_it_before_waiting();
	test_names_taken_cost_a_retry_each_up_to_16();
	return check_report("ring_api");
}

/* SPDX-License-Identifier: MIT */
/*
 * rdmaq's own latency without Python: two threads ping-pong over two verbs
 * queues through the loopback QP pool, both busy-polling, RTT/2 per
 * round trip, as ib_write_lat measures.  Built by tests/c/Makefile (`make
 * verbs`), run by tests/verbs/test_latency.py:
 *
 *   lat_pingpong ITERS SIZE   -> one JSON line of RTT/2 statistics (us)
 *
 * Every message carries a pattern that depends on its number; the ponger
 * echoes what it got and the pinger compares the echo with what it sent
 * (outside the timed section), so the sanitizer builds see a torn, stale
 * or misplaced record as a failure, not only as a bad access.
 *
 * Exit status 77 (skip) when no RDMA device is usable, 2 on a corrupt echo.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rdmaq_verbs.h"

static int iters, size;
static struct rdmaq_writer *wa, *wb;
static struct rdmaq_reader *ra, *rb;

#define CHECK(call)                                                         \
	do {                                                                \
		int _r = (call);                                            \
		if (_r < 0) {                                               \
			fprintf(stderr, "%s: %s\n", #call, rdmaq_errmsg()); \
			exit(1);                                            \
		}                                                           \
	} while (0)

static void link_pair(struct rdmaq_verbs_ctx *ctx, struct rdmaq_writer *w, struct rdmaq_reader *r)
{
	struct rdmaq_verbs_ep_info wi, ri;
	uint8_t self[16];
	uint64_t pool;
	int sv[2];

	rdmaq_verbs_process_id(self);
	CHECK(rdmaq_verbs_pool_find(ctx, self, &pool));
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
		perror("socketpair");
		exit(1);
	}
	CHECK(rdmaq_verbs_writer_info(w, 0, &wi));
	rdmaq_verbs_reader_info(r, &ri);
	CHECK(rdmaq_verbs_reader_connect(r, pool, &wi, sv[1], "self"));
	CHECK(rdmaq_verbs_writer_attach(w, 0, pool, &ri, sv[0], "self"));
}

static void get(struct rdmaq_reader *r, void *buf)
{
	uint64_t n;

	CHECK(rdmaq_reader_peek(r, &n, 10LL * 1000000000LL));
	if (n != (uint64_t)size) {
		fprintf(stderr, "message of %llu bytes, expected %d\n", (unsigned long long)n, size);
		exit(2);
	}
	CHECK(rdmaq_reader_read(r, buf, n, 10LL * 1000000000LL));
}

/* Message i: every byte depends on i and its offset. */
static void fill(unsigned char *buf, int i)
{
	int j;

	for (j = 0; j < size; j++)
		buf[j] = (unsigned char)(i * 131 + j * 7 + (j >> 8));
}

static void *ponger(void *arg)
{
	char *buf = malloc((size_t)size + 1);
	struct rdmaq_iovec iov = { .base = buf, .len = (size_t)size };
	int i;

	CHECK(rdmaq_reader_wait_ready(ra, -1));
	CHECK(rdmaq_writer_wait_ready(wb, -1));
	for (i = 0; i < iters; i++) {
		get(ra, buf);
		CHECK(rdmaq_writer_put(wb, &iov, 1, -1));
	}
	free(buf);
	return arg;
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	struct rdmaq_config cfg = {
		.n_readers = 1,
		.slot_bytes = 4096,
		.slots = 64,
		.max_message = 1 << 20,
		.spin_ns = 1000000000U, /* busy-poll, like ib_write_lat */
	};
	struct rdmaq_verbs_ctx *ctx;
	struct rdmaq_iovec iov;
	pthread_t t;
	double *lat;
	unsigned char *buf, *back;
	int i, warm = 100, ret;

	iters = argc > 1 ? atoi(argv[1]) : 1000;
	size = argc > 2 ? atoi(argv[2]) : 64;
	ret = rdmaq_verbs_ctx_open(&ctx, getenv("RDMAQ_DEVICE"), 0, -1);
	if (ret == -ENODEV) {
		fprintf(stderr, "skip: %s\n", rdmaq_errmsg());
		return 77;
	}
	CHECK(ret);
	CHECK(rdmaq_verbs_writer_create(&wa, ctx, &cfg));
	CHECK(rdmaq_verbs_writer_create(&wb, ctx, &cfg));
	CHECK(rdmaq_verbs_reader_create(&ra, ctx, &cfg, 0));
	CHECK(rdmaq_verbs_reader_create(&rb, ctx, &cfg, 0));
	link_pair(ctx, wa, ra);
	link_pair(ctx, wb, rb);
	iters += warm;
	if (pthread_create(&t, NULL, ponger, NULL)) {
		perror("pthread_create");
		return 1;
	}
	CHECK(rdmaq_writer_wait_ready(wa, -1));
	CHECK(rdmaq_reader_wait_ready(rb, -1));
	buf = calloc(1, (size_t)size + 1);
	back = calloc(1, (size_t)size + 1);
	lat = calloc((size_t)iters, sizeof(*lat));
	iov = (struct rdmaq_iovec){ .base = buf, .len = (size_t)size };
	for (i = 0; i < iters; i++) {
		int64_t t0;

		fill(buf, i);
		t0 = now_ns();
		CHECK(rdmaq_writer_put(wa, &iov, 1, -1));
		get(rb, back);
		lat[i] = (double)(now_ns() - t0) / 2000.0;
		if (memcmp(buf, back, (size_t)size)) {
			fprintf(stderr, "message %d: the echo differs from what was sent\n", i);
			return 2;
		}
	}
	pthread_join(t, NULL);
	qsort(lat + warm, (size_t)(iters - warm), sizeof(*lat), cmp);
	printf("{\"n\": %d, \"bytes\": %d, \"min_us\": %.2f, \"p50_us\": %.2f, \"p99_us\": %.2f, "
	       "\"max_us\": %.2f}\n",
	       iters - warm, size, lat[warm], lat[warm + (iters - warm) / 2],
	       lat[warm + (iters - warm) * 99 / 100], lat[iters - 1]);
	rdmaq_writer_close(wa);
	rdmaq_writer_close(wb);
	rdmaq_reader_destroy(ra);
	rdmaq_reader_destroy(rb);
	rdmaq_writer_destroy(wa);
	rdmaq_writer_destroy(wb);
	free(buf);
	free(back);
	free(lat);
	return 0;
}

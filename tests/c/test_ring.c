/* SPDX-License-Identifier: MIT */
/*
 * The C core without Python, built under AddressSanitizer + UBSan and
 * under ThreadSanitizer (tests/c/Makefile); tests/core/test_c_core.py runs it.
 *
 * One writer thread broadcasts to N reader threads over the shm transport;
 * each reader checks order and content.  Threads, not processes, and the
 * segment mapped at one address for all of them (one_mapping.c), so TSan
 * sees both sides of every access.  Exit 0 pass, 1 fail (liburing style).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdmaq_shm.h"

#define N_READERS  3
#define N_MESSAGES 20000
#define MAX_SIZE   9000

static struct rdmaq_writer *writer;
static char name[64];

static size_t msg_size(uint64_t i)
{
	return (i * 7919) % MAX_SIZE + 8;
}

static void fill(uint8_t *buf, uint64_t i, size_t n)
{
	memcpy(buf, &i, sizeof(i));
	for (size_t k = sizeof(i); k < n; k++)
		buf[k] = (uint8_t)(i + k);
}

static void *reader_main(void *arg)
{
	uint32_t index = (uint32_t)(uintptr_t)arg;
	struct rdmaq_reader *r;
	uint8_t *buf = malloc(MAX_SIZE + 8), *want = malloc(MAX_SIZE + 8);
	uintptr_t fail = 1;
	int ret;

	ret = rdmaq_shm_reader_attach(&r, name, index, 20000);
	if (ret) {
		fprintf(stderr, "attach %u: %s\n", index, rdmaq_errmsg());
		goto out;
	}
	if (rdmaq_reader_wait_ready(r, 30000000000LL))
		goto out_r;
	for (uint64_t i = 0; i < N_MESSAGES; i++) {
		uint64_t len;

		if (rdmaq_reader_peek(r, &len, 30000000000LL) ||
		    rdmaq_reader_read(r, buf, len, 30000000000LL)) {
			fprintf(stderr, "reader %u message %llu: %s\n", index,
				(unsigned long long)i, rdmaq_errmsg());
			goto out_r;
		}
		fill(want, i, msg_size(i));
		if (len != msg_size(i) || memcmp(buf, want, len)) {
			fprintf(stderr, "reader %u: message %llu corrupt\n", index,
				(unsigned long long)i);
			goto out_r;
		}
	}
	fail = 0;
out_r:
	rdmaq_reader_close(r);
	rdmaq_reader_destroy(r);
out:
	free(buf);
	free(want);
	return (void *)fail;
}

int main(void)
{
	struct rdmaq_config cfg = {
		.n_readers = N_READERS,
		.slot_bytes = 1024,
		.slots = 8,
		.max_message = MAX_SIZE + 8,
		.spin_ns = 20000,
	};
	pthread_t th[N_READERS];
	uint8_t *buf = malloc(MAX_SIZE + 8);
	int ret, failed = 0;

	if (rdmaq_shm_writer_create(&writer, &cfg)) {
		fprintf(stderr, "create: %s\n", rdmaq_errmsg());
		return 1;
	}
	snprintf(name, sizeof(name), "%s", rdmaq_shm_writer_name(writer));
	for (uintptr_t i = 0; i < N_READERS; i++)
		pthread_create(&th[i], NULL, reader_main, (void *)i);
	if (rdmaq_writer_wait_ready(writer, 30000000000LL)) {
		fprintf(stderr, "wait_ready: %s\n", rdmaq_errmsg());
		return 1;
	}
	for (uint64_t i = 0; i < N_MESSAGES; i++) {
		struct rdmaq_iovec iov = { .base = buf, .len = msg_size(i) };

		fill(buf, i, iov.len);
		ret = rdmaq_writer_put(writer, &iov, 1, 30000000000LL);
		if (ret) {
			fprintf(stderr, "put %llu: %s\n", (unsigned long long)i, rdmaq_errmsg());
			return 1;
		}
	}
	for (int i = 0; i < N_READERS; i++) {
		void *res;

		pthread_join(th[i], &res);
		failed |= res != NULL;
	}
	/* Errors come back as negative errno with a message. */
	{
		struct rdmaq_iovec big = { .base = buf, .len = MAX_SIZE + 9 };

		if (rdmaq_writer_put(writer, &big, 1, 0) != -EMSGSIZE ||
		    !strstr(rdmaq_errmsg(), "exceeds")) {
			fprintf(stderr, "oversized put not refused\n");
			failed = 1;
		}
	}
	rdmaq_writer_close(writer);
	rdmaq_writer_destroy(writer);
	free(buf);
	printf("%s: %d readers x %d messages\n", failed ? "FAIL" : "PASS", N_READERS, N_MESSAGES);
	return failed;
}

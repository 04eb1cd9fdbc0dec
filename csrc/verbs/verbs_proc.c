/* SPDX-License-Identifier: MIT */
/*
 * This process's identity: 16 random bytes that name it to its peers (a
 * pool of QPs leads to one process).  A forked child is another process
 * and draws its own.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "rdmaq_verbs.h"
#include "ring.h"

static pthread_mutex_t proc_id_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t proc_id[16];
static pid_t proc_id_pid;

void rdmaq_verbs_process_id(uint8_t *out)
{
	pthread_mutex_lock(&proc_id_lock);
	if (proc_id_pid != getpid()) {
		if (getrandom(proc_id, sizeof(proc_id), 0) != sizeof(proc_id)) {
			uint64_t a = rdmaq_random_u64(),
				 b = rdmaq_random_u64() ^ (uint64_t)getpid();

			memcpy(proc_id, &a, 8);
			memcpy(proc_id + 8, &b, 8);
		}
		proc_id_pid = getpid();
	}
	memcpy(out, proc_id, sizeof(proc_id));
	pthread_mutex_unlock(&proc_id_lock);
}

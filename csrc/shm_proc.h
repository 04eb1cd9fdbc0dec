/* SPDX-License-Identifier: MIT */
/*
 * The shm transport's peers are processes on this host: each end watches
 * the other's through a pidfd (kill(pid, 0) where pidfds are unavailable:
 * an old kernel, seccomp), and a leftover segment's writer is told from a
 * later process with its pid by its start time.
 */
#ifndef RDMAQ_SHM_PROC_H
#define RDMAQ_SHM_PROC_H

#include <stdint.h>
#include <sys/types.h>

struct rdmaq_shm_peer {
	pid_t pid; /* 0: not watched yet */
	int pidfd; /* -1 without one */
};

#define RDMAQ_SHM_PEER_INIT ((struct rdmaq_shm_peer){ .pid = 0, .pidfd = -1 })

/* Watch process `pid`: 0, or -ESRCH when it is gone already. */
int rdmaq_shm_peer_watch(struct rdmaq_shm_peer *p, pid_t pid);
/* 1 if the watched process has exited (zombies included), else 0. */
int rdmaq_shm_peer_exited(const struct rdmaq_shm_peer *p);
void rdmaq_shm_peer_unwatch(struct rdmaq_shm_peer *p);
/* Start time of a process in clock ticks after boot (/proc/PID/stat field 22); 0 if unknown. */
uint64_t rdmaq_proc_start_time(pid_t pid);

#endif

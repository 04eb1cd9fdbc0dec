/* SPDX-License-Identifier: MIT */
/*
 * Watching a peer process (shm_proc.h): pidfds, their fallback, and a
 * process's start time.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shm_proc.h"

int rdmaq_shm_peer_watch(struct rdmaq_shm_peer *p, pid_t pid)
{
	p->pid = pid;
	if (pid <= 0)
		return -ESRCH;
	p->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (p->pidfd < 0 && errno == ESRCH)
		return -ESRCH;
	return 0; /* without a pidfd, rdmaq_shm_peer_exited falls back to kill(0) */
}

int rdmaq_shm_peer_exited(const struct rdmaq_shm_peer *p)
{
	if (p->pidfd >= 0) {
		struct pollfd pfd = { .fd = p->pidfd, .events = POLLIN };

		return poll(&pfd, 1, 0) > 0;
	}
	return kill(p->pid, 0) < 0 && errno == ESRCH;
}

void rdmaq_shm_peer_unwatch(struct rdmaq_shm_peer *p)
{
	if (p->pidfd >= 0)
		close(p->pidfd);
	p->pidfd = -1;
}

uint64_t rdmaq_proc_start_time(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long start = 0;
	ssize_t n;
	int fd, field;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* The command name may hold spaces and parentheses: count from the last ')'. */
	p = strrchr(buf, ')');
	if (!p)
		return 0;
	for (field = 2; field < 22 && p; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p + 1, "%llu", &start) != 1)
		return 0;
	return start;
}

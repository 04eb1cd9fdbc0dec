/* SPDX-License-Identifier: MIT */
/*
 * One address per shared-memory segment, for the race check.
 *
 * Each shm endpoint maps the segment itself, so in one process the writer
 * and a reader see the same bytes at two addresses.  ThreadSanitizer
 * tracks memory by address: it would never pair the writer's store with a
 * reader's load, and an ordering bug in the ring would pass.  Linked with
 * -Wl,--wrap=mmap,--wrap=munmap (tests/c/Makefile), the csrc/ objects'
 * calls come here: a second shared mapping of a file already mapped whole
 * gets the first one's address, and the mapping goes when its last user
 * unmaps it.
 */
#include <pthread.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>

void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __real_munmap(void *addr, size_t len);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __wrap_munmap(void *addr, size_t len);

#define MAX_SHARED 16

static struct shared_map {
	dev_t dev;
	ino_t ino;
	void *addr;
	size_t len;
	int users;
} maps[MAX_SHARED];
static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER;

void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	struct shared_map *free_slot = NULL;
	struct stat st;
	void *p;
	int i;

	if (addr || off || !(flags & MAP_SHARED) || fd < 0 || fstat(fd, &st))
		return __real_mmap(addr, len, prot, flags, fd, off);
	pthread_mutex_lock(&maps_lock);
	for (i = 0; i < MAX_SHARED; i++) {
		struct shared_map *m = &maps[i];

		if (!m->users) {
			if (!free_slot)
				free_slot = m;
		} else if (m->dev == st.st_dev && m->ino == st.st_ino && m->len == len) {
			m->users++;
			pthread_mutex_unlock(&maps_lock);
			return m->addr;
		}
	}
	p = __real_mmap(addr, len, prot, flags, fd, off);
	if (p != MAP_FAILED && free_slot)
		*free_slot = (struct shared_map){ st.st_dev, st.st_ino, p, len, 1 };
	pthread_mutex_unlock(&maps_lock);
	return p;
}

int __wrap_munmap(void *addr, size_t len)
{
	int i;

	pthread_mutex_lock(&maps_lock);
	for (i = 0; i < MAX_SHARED; i++) {
		struct shared_map *m = &maps[i];

		if (m->users && m->addr == addr && m->len == len && --m->users) {
			pthread_mutex_unlock(&maps_lock);
			return 0;
		}
	}
	pthread_mutex_unlock(&maps_lock);
	return __real_munmap(addr, len);
}

/* SPDX-License-Identifier: MIT */
/*
 * The short slice against a made-up kernel: this file's syscall() answers
 * sched_getattr and sched_setattr from a thread record the tests set up, so
 * a kernel that honours sched_runtime, one that ignores it and one that
 * refuses the calls are each tried on any machine.  The process settles its
 * answer once, so each kernel is met by a child forked before any probe.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "rdmaq.h"
#include "slice.h"

#define RESET_ON_FORK 0x01ULL
#define OWN_SLICE_NS  2800000ULL /* the thread's slice before any wait */

static struct {
	struct rdmaq_sched_attr thread; /* what the kernel holds for the thread */
	bool ignores_runtime;		/* a kernel before 6.12 */
	int refuse_set;			/* errno of every sched_setattr, 0: none */
	int refuse_get;			/* errno of sched_getattr ... */
	int gets_before_refusal;	/* ... after this many succeeded */
	int gets, sets;
	struct rdmaq_sched_attr first_set, last_set;
} kern;

long syscall(long nr, ...)
{
	va_list ap;
	long pid, size = sizeof(kern.thread), flags;
	void *attr;

	va_start(ap, nr);
	pid = va_arg(ap, long);
	attr = va_arg(ap, void *);
	if (nr == SYS_sched_getattr)
		size = va_arg(ap, long);
	flags = va_arg(ap, long);
	va_end(ap);
	if (pid != 0) { /* another process's thread: none here */
		errno = ESRCH;
		return -1;
	}
	if (flags != 0 || size != sizeof(kern.thread)) {
		errno = EINVAL;
		return -1;
	}
	if (nr == SYS_sched_getattr) {
		if (kern.refuse_get && kern.gets >= kern.gets_before_refusal) {
			errno = kern.refuse_get;
			return -1;
		}
		kern.gets++;
		memcpy(attr, &kern.thread, sizeof(kern.thread));
		return 0;
	}
	if (nr == SYS_sched_setattr) {
		const struct rdmaq_sched_attr *a = attr;

		if (a->size != sizeof(kern.thread)) {
			errno = EINVAL;
			return -1;
		}
		if (!kern.sets++)
			kern.first_set = *a;
		kern.last_set = *a;
		if (kern.refuse_set) {
			errno = kern.refuse_set;
			return -1;
		}
		kern.thread.sched_policy = a->sched_policy;
		kern.thread.sched_flags = a->sched_flags;
		kern.thread.sched_nice = a->sched_nice;
		if (!kern.ignores_runtime)
			kern.thread.sched_runtime = a->sched_runtime;
		return 0;
	}
	CHECK(!"a syscall the slice does not make");
	errno = ENOSYS;
	return -1;
}

static void kernel_thread(uint32_t policy, uint64_t runtime_ns)
{
	memset(&kern.thread, 0, sizeof(kern.thread));
	kern.thread.size = sizeof(kern.thread);
	kern.thread.sched_policy = policy;
	kern.thread.sched_nice = 7;
	kern.thread.sched_runtime = runtime_ns;
	errno = EAGAIN; /* left by some earlier call: a call that succeeds does not clear it */
}

static int syscalls(void)
{
	return kern.gets + kern.sets;
}

/* The thread's attributes are its own again: its slice, its nice value, no reset-on-fork. */
static bool thread_is_its_own(uint64_t runtime_ns)
{
	return kern.thread.sched_runtime == runtime_ns && kern.thread.sched_flags == 0 &&
	       kern.thread.sched_nice == 7 && kern.thread.sched_policy == SCHED_OTHER;
}

/* Out of range, a slice is refused before the kernel is asked; the limits are in range. */
static void kernel_honours_the_slice_probe(void)
{
	kernel_thread(SCHED_OTHER, OWN_SLICE_NS);
	CHECK(rdmaq_sched_slice_probe(RDMAQ_MIN_SLICE_NS - 1) == -EINVAL);
	CHECK(strcmp(rdmaq_errmsg(), "slice must be in 100000..100000000 ns, got 99999") == 0);
	CHECK(rdmaq_sched_slice_probe(RDMAQ_MAX_SLICE_NS + 1) == -EINVAL);
	CHECK(strcmp(rdmaq_errmsg(), "slice must be in 100000..100000000 ns, got 100000001") == 0);
	CHECK(syscalls() == 0);
	CHECK(rdmaq_sched_slice_probe(RDMAQ_MAX_SLICE_NS) == 1);
	/* tried as a wait asks for it, with reset-on-fork; then the thread's own back */
	CHECK(kern.first_set.sched_runtime == RDMAQ_MAX_SLICE_NS &&
	      kern.first_set.sched_flags == RESET_ON_FORK && kern.first_set.sched_nice == 7);
	CHECK(kern.sets == 2 && thread_is_its_own(OWN_SLICE_NS));
	CHECK(rdmaq_sched_slice_probe(RDMAQ_MIN_SLICE_NS) == 1);
	CHECK(thread_is_its_own(OWN_SLICE_NS));
}

/* A wait takes the slice with reset-on-fork and keeps it; restore gives the thread's own back. */
static void kernel_honours_the_slice_waits(void)
{
	struct rdmaq_slice s = { .want_ns = 300000 };
	int n;

	kernel_thread(SCHED_OTHER, OWN_SLICE_NS);
	CHECK(rdmaq_slice_effective(&s) == 300000);
	n = kern.gets;
	CHECK(rdmaq_slice_enter(&s) == 1 && s.applied);
	CHECK(kern.gets == n + 1); /* the probe's answer stands: no second probe */
	CHECK(kern.thread.sched_runtime == 300000 && kern.thread.sched_flags == RESET_ON_FORK &&
	      kern.thread.sched_nice == 7);
	rdmaq_slice_leave(&s);
	CHECK(!s.applied && kern.thread.sched_runtime == 300000);
	n = syscalls();
	CHECK(rdmaq_slice_enter(&s) == 1 && s.applied && syscalls() == n); /* kept: nothing to ask */
	s.restore = true;
	rdmaq_slice_leave(&s);
	CHECK(!s.applied && thread_is_its_own(OWN_SLICE_NS));
	CHECK(rdmaq_slice_enter(&s) == 1 && s.applied && kern.thread.sched_runtime == 300000);
	rdmaq_slice_leave(&s);
	CHECK(thread_is_its_own(OWN_SLICE_NS));

	/* a thread that chose this slice itself: neither asked for nor given back */
	kernel_thread(SCHED_OTHER, 300000);
	n = kern.sets;
	CHECK(rdmaq_slice_enter(&s) == 1 && s.applied);
	rdmaq_slice_leave(&s);
	CHECK(kern.sets == n && thread_is_its_own(300000));

	/* SCHED_BATCH is fair too */
	kernel_thread(SCHED_BATCH, OWN_SLICE_NS);
	CHECK(rdmaq_slice_enter(&s) == 1 && s.applied && kern.thread.sched_runtime == 300000);
	rdmaq_slice_leave(&s);
	CHECK(kern.thread.sched_runtime == OWN_SLICE_NS && kern.thread.sched_policy == SCHED_BATCH);

	/* no slice wanted: the kernel is not asked */
	n = syscalls();
	s = (struct rdmaq_slice){ .want_ns = 0 };
	CHECK(rdmaq_slice_enter(&s) == 0 && !s.applied && syscalls() == n);
	rdmaq_slice_leave(&s);
	CHECK(syscalls() == n);
}

/* Threads of another policy are left alone; a refused call leaves the wait as it was. */
static void kernel_honours_the_slice_other_threads(void)
{
	struct rdmaq_slice s = { .want_ns = 300000, .restore = true };

	kernel_thread(SCHED_IDLE, OWN_SLICE_NS);
	kern.sets = 0;
	CHECK(rdmaq_slice_enter(&s) == 0 && !s.applied && kern.sets == 0);
	CHECK(rdmaq_sched_slice_probe(RDMAQ_MIN_SLICE_NS) == 0 && kern.sets == 0);
	CHECK(strcmp(rdmaq_errmsg(), "this thread's policy is 5, not SCHED_OTHER") == 0);

	kernel_thread(SCHED_OTHER, OWN_SLICE_NS);
	kern.refuse_set = EPERM;
	CHECK(rdmaq_slice_enter(&s) == 0 && !s.applied);
	rdmaq_slice_leave(&s);
	CHECK(kern.sets == 1 && thread_is_its_own(OWN_SLICE_NS));
	kern.refuse_set = 0;
	kern.refuse_get = EPERM;
	CHECK(rdmaq_slice_enter(&s) == 0 && !s.applied && kern.sets == 1);
	CHECK(rdmaq_sched_slice_probe(RDMAQ_MIN_SLICE_NS) == -EPERM);
	CHECK(strcmp(rdmaq_errmsg(), "sched_getattr: Operation not permitted") == 0);
	CHECK(rdmaq_slice_effective(&s) == 300000); /* the process's answer stands */
	kern.refuse_get = 0;
}

static void kernel_honours_the_slice(void)
{
	kernel_honours_the_slice_probe();
	kernel_honours_the_slice_waits();
	kernel_honours_the_slice_other_threads();
}

/* A first wait finds out, and keeps the slice it tried; later waits do not ask again. */
static void kernel_honours_the_slice_first_seen_by_a_wait(void)
{
	struct rdmaq_slice s = { .want_ns = 300000, .restore = true };
	int gets;

	kernel_thread(SCHED_OTHER, OWN_SLICE_NS);
	CHECK(rdmaq_slice_enter(&s) == 1 && s.applied);
	CHECK(kern.gets == 2 && kern.sets == 1);
	CHECK(kern.thread.sched_runtime == 300000 && kern.thread.sched_flags == RESET_ON_FORK);
	rdmaq_slice_leave(&s);
	CHECK(!s.applied && thread_is_its_own(OWN_SLICE_NS));
	gets = kern.gets;
	CHECK(rdmaq_slice_enter(&s) == 1 && s.applied && kern.gets == gets + 1 && kern.sets == 3);
	rdmaq_slice_leave(&s);
	CHECK(thread_is_its_own(OWN_SLICE_NS) && rdmaq_slice_effective(&s) == 300000);
}

/* A first wait finds out: the thread gets its own back, and no later wait asks again. */
static void kernel_ignores_the_slice_first_seen_by_a_wait(void)
{
	struct rdmaq_slice s = { .want_ns = 300000 };
	int n;

	kernel_thread(SCHED_OTHER, OWN_SLICE_NS);
	kern.ignores_runtime = true;
	CHECK(rdmaq_slice_effective(&s) == 300000); /* not known yet */
	CHECK(rdmaq_slice_enter(&s) == 0 && !s.applied);
	CHECK(kern.first_set.sched_runtime == 300000 && kern.first_set.sched_flags == RESET_ON_FORK);
	CHECK(kern.sets == 2 && thread_is_its_own(OWN_SLICE_NS));
	CHECK(rdmaq_slice_effective(&s) == 0);
	n = syscalls();
	CHECK(rdmaq_slice_enter(&s) == 0 && !s.applied && syscalls() == n);
	CHECK(rdmaq_sched_slice_probe(RDMAQ_MIN_SLICE_NS) == 0 && syscalls() == n);
	CHECK(strcmp(rdmaq_errmsg(), "the kernel ignores sched_runtime for SCHED_OTHER threads "
				     "(custom slices need Linux 6.12 or later)") == 0);
}

/* A probe finds out: the thread gets its own back, and waits never ask. */
static void kernel_ignores_the_slice_first_seen_by_a_probe(void)
{
	struct rdmaq_slice s = { .want_ns = 300000 };
	int n;

	kernel_thread(SCHED_OTHER, OWN_SLICE_NS);
	kern.ignores_runtime = true;
	CHECK(rdmaq_sched_slice_probe(RDMAQ_MIN_SLICE_NS) == 0);
	CHECK(strcmp(rdmaq_errmsg(), "the kernel ignores sched_runtime for SCHED_OTHER threads "
				     "(custom slices need Linux 6.12 or later)") == 0);
	CHECK(kern.sets == 2 && thread_is_its_own(OWN_SLICE_NS));
	n = syscalls();
	CHECK(rdmaq_slice_enter(&s) == 0 && !s.applied && syscalls() == n);
	CHECK(rdmaq_slice_effective(&s) == 0);
}

/* A kernel that refuses the slice: the probe says why, and so does every later one. */
static void kernel_refuses_the_slice(void)
{
	struct rdmaq_slice s = { .want_ns = 300000 };
	const char *why = "sched_setattr(sched_runtime=250000 ns) refused: Invalid argument";

	kernel_thread(SCHED_OTHER, OWN_SLICE_NS);
	kern.refuse_set = EINVAL;
	CHECK(rdmaq_sched_slice_probe(250000) == 0);
	CHECK(strcmp(rdmaq_errmsg(), why) == 0);
	CHECK(rdmaq_slice_effective(&s) == 0);
	kern.refuse_set = 0;
	CHECK(rdmaq_sched_slice_probe(RDMAQ_MIN_SLICE_NS) == 0 && strcmp(rdmaq_errmsg(), why) == 0);
	CHECK(rdmaq_slice_enter(&s) == 0 && !s.applied);
}

/* A kernel that answers the first sched_getattr, not the probe's own. */
static void kernel_fails_the_probe_s_getattr(void)
{
	struct rdmaq_slice s = { .want_ns = 300000 };

	kernel_thread(SCHED_OTHER, OWN_SLICE_NS);
	kern.refuse_get = EACCES;
	kern.gets_before_refusal = 1;
	CHECK(rdmaq_sched_slice_probe(RDMAQ_MIN_SLICE_NS) == 0);
	CHECK(strcmp(rdmaq_errmsg(), "sched_getattr: Permission denied") == 0);
	CHECK(rdmaq_slice_effective(&s) == 0);
	CHECK(thread_is_its_own(OWN_SLICE_NS));
}

/* Each kernel in a child of its own: the process's answer starts unknown in each. */
static void in_a_child(void (*kernel)(void))
{
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		kernel();
		exit(check_failures != 0);
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void)
{
	in_a_child(kernel_honours_the_slice);
	in_a_child(kernel_honours_the_slice_first_seen_by_a_wait);
	in_a_child(kernel_ignores_the_slice_first_seen_by_a_wait);
	in_a_child(kernel_ignores_the_slice_first_seen_by_a_probe);
	in_a_child(kernel_refuses_the_slice);
	in_a_child(kernel_fails_the_probe_s_getattr);
	return check_report("slice");
}

/* SPDX-License-Identifier: MIT */
/*
 * The readers of /proc files, on files they cannot use: schedstat.c's (the
 * thread's schedstat, the running count of /proc/loadavg, the idle time of /proc/uptime) and shm_proc.c's (a process's start time).  Linked with
 * --wrap=open: while `stand_in` is set, the /proc file opens as that file of
 * the test's instead, so each test chooses what the reader finds.  Also with
 * --wrap=pread (a look at the descriptor read, a buffer left dirty before the
 * read), --wrap=sched_getaffinity and --wrap=getrusage (a call that fails).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "check.h"
#include "schedstat.h"
#include "shm_proc.h"

static const char *stand_in;

int __real_open(const char *path, int flags, ...);
int __wrap_open(const char *path, int flags, ...);

/* The mode too: the coverage build's gcov writes its files through it. */
int __wrap_open(const char *path, int flags, ...)
{
	mode_t mode = 0;
	va_list ap;

	if (flags & O_CREAT) {
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	return __real_open(stand_in ? stand_in : path, flags, mode);
}

/*
 * While `dirty_buffer` is set, the buffer a read is handed holds " 9 9 9 ..." before the
 * read (as a stack left by earlier calls may): the bytes past those read are numbers
 * to a reader that parses them.  Each read notes its descriptor's FD_ flags.
 */
static bool dirty_buffer;
static int read_fd_flags = -1;

ssize_t __real_pread(int fd, void *buf, size_t count, off_t offset);
ssize_t __wrap_pread(int fd, void *buf, size_t count, off_t offset);

ssize_t __wrap_pread(int fd, void *buf, size_t count, off_t offset)
{
	read_fd_flags = fcntl(fd, F_GETFD);
	for (size_t i = 0; dirty_buffer && i < count; i++)
		((char *)buf)[i] = " 9"[i % 2];
	return __real_pread(fd, buf, count, offset);
}

/* While set, sched_getaffinity and getrusage fail (EINVAL). */
static bool affinity_fails, rusage_fails;

int __real_sched_getaffinity(pid_t pid, size_t size, cpu_set_t *set);
int __wrap_sched_getaffinity(pid_t pid, size_t size, cpu_set_t *set);
int __real_getrusage(int who, struct rusage *usage);
int __wrap_getrusage(int who, struct rusage *usage);

int __wrap_sched_getaffinity(pid_t pid, size_t size, cpu_set_t *set)
{
	if (affinity_fails) {
		errno = EINVAL;
		return -1;
	}
	return __real_sched_getaffinity(pid, size, set);
}

int __wrap_getrusage(int who, struct rusage *usage)
{
	if (rusage_fails) {
		errno = EINVAL;
		return -1;
	}
	return __real_getrusage(who, usage);
}

static char file[] = "/tmp/rdmaq-proc-files-XXXXXX";

/* The stand-in holds `text`. */
static void stand_in_holds(const char *text)
{
	FILE *f = fopen(file, "w");

	CHECK(f != NULL);
	if (!f)
		return;
	fputs(text, f);
	fclose(f);
	stand_in = file;
}

/* A line as the kernel writes it: a name with ") " in it, start time 4242 (field 22). */
#define STAT_LINE "77 (a) b) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242 0 0\n"

static void test_a_start_time_is_field_22_after_the_name(void)
{
	stand_in_holds(STAT_LINE);
	CHECK(rdmaq_proc_start_time(77) == 4242);
	stand_in = NULL;
	CHECK(rdmaq_proc_start_time(getpid()) > 0);
}

/* 0 is "unknown": no file, nothing in it, no name's end, too few fields. */
static void test_a_start_time_that_cannot_be_read_is_0(void)
{
	stand_in = "/nonexistent/rdmaq-stat";
	CHECK(rdmaq_proc_start_time(77) == 0);
	stand_in_holds("");
	CHECK(rdmaq_proc_start_time(77) == 0);
	stand_in_holds("77 (cat");
	CHECK(rdmaq_proc_start_time(77) == 0);
	stand_in_holds("77 (cat) S 1 2 3\n");
	CHECK(rdmaq_proc_start_time(77) == 0);
	stand_in = NULL;
}

/* The stand-in holds `text`: does the thread's schedstat read as 1, 2 and 3? */
static bool schedstat_reads_1_2_3(const char *text)
{
	uint64_t ran = 0, delayed = 0, slices = 0;

	stand_in_holds(text);
	return rdmaq_thread_schedstat(&ran, &delayed, &slices) && ran == 1 && delayed == 2 &&
	       slices == 3;
}

/* No schedstat (no file, or nothing in it) is no schedstat, not made-up counters. */
static void test_a_schedstat_that_cannot_be_read_is_none(void)
{
	uint64_t ran, delayed, slices;

	stand_in = "/nonexistent/rdmaq-schedstat";
	CHECK(!rdmaq_thread_schedstat(&ran, &delayed, &slices));
	stand_in_holds("");
	CHECK(!rdmaq_thread_schedstat(&ran, &delayed, &slices));
	CHECK(schedstat_reads_1_2_3("1 2 3\n"));
	stand_in = NULL;
}

/*
 * Only the bytes read are parsed, whatever the buffer held before: on a buffer full of
 * numbers an empty file and a file of one digit are no schedstat, and "1 2 3" with no
 * newline ends at its 3.
 */
static void test_only_the_bytes_read_are_parsed(void)
{
	uint64_t ran, delayed, slices;

	dirty_buffer = true;
	stand_in_holds("");
	CHECK(!rdmaq_thread_schedstat(&ran, &delayed, &slices));
	stand_in_holds("7");
	CHECK(!rdmaq_thread_schedstat(&ran, &delayed, &slices));
	CHECK(schedstat_reads_1_2_3("1 2 3"));
	dirty_buffer = false;
	stand_in = NULL;
}

/* "1 2 3" padded with spaces to `len` - 1 bytes, at the start or at the end, as the
 * stand-in schedstat: read as exactly those three counters? */
static bool padded_schedstat_reads_1_2_3(size_t len, bool at_end)
{
	char line[512];
	bool ok;

	memset(line, ' ', len);
	memcpy(at_end ? line + len - 6 : line, "1 2 3", 5);
	line[len - 1] = '\0';
	ok = schedstat_reads_1_2_3(line);
	stand_in = NULL;
	return ok;
}

/* A file longer than the reader's buffer is read up to the buffer's end, which stays
 * a string: its start is what counts. */
static void test_a_file_longer_than_the_buffer_is_cut_at_it(void)
{
	CHECK(padded_schedstat_reads_1_2_3(512, false));
}

/* A file of exactly the buffer's room (95 bytes for schedstat's 96) is read whole. */
static void test_a_file_that_fills_the_buffer_is_read_whole(void)
{
	CHECK(padded_schedstat_reads_1_2_3(96, true));
}

/* Each look opens and closes its file: a thousand looks under a limit of 32 open
 * descriptors all succeed. */
static void test_each_look_closes_its_file(void)
{
	uint64_t ran, delayed, slices;
	struct rlimit old, low;
	int ok = 0;

	CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0);
	low = (struct rlimit){ .rlim_cur = 32, .rlim_max = old.rlim_max };
	CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
	for (int i = 0; i < 1000; i++) {
		ok += rdmaq_thread_schedstat(&ran, &delayed, &slices);
		ok += rdmaq_cpus_crowded() >= 0;
	}
	CHECK(setrlimit(RLIMIT_NOFILE, &old) == 0);
	CHECK(ok == 2000);
}

/* The /proc files are opened close-on-exec: a child that execs while one is open does
 * not inherit it. */
static void test_each_file_is_opened_close_on_exec(void)
{
	uint64_t ran, delayed, slices;

	read_fd_flags = -1;
	CHECK(rdmaq_thread_schedstat(&ran, &delayed, &slices));
	CHECK(read_fd_flags >= 0 && (read_fd_flags & FD_CLOEXEC));
	read_fd_flags = -1;
	CHECK(rdmaq_cpus_crowded() >= 0);
	CHECK(read_fd_flags >= 0 && (read_fd_flags & FD_CLOEXEC));
	read_fd_flags = -1;
	rdmaq_cpus_idle_ns();
	CHECK(read_fd_flags >= 0 && (read_fd_flags & FD_CLOEXEC));
}

/*
 * The running count is /proc/loadavg's fourth field, against the CPUs this thread
 * may use (at least one): one task (this thread) is never crowded, more than any
 * machine's CPUs always are; a file that does not say is "unknown".
 */
static void test_crowded_is_more_running_tasks_than_cpus_this_thread_may_use(void)
{
	stand_in_holds("0.00 0.01 0.05 1/345 6789\n");
	CHECK(rdmaq_cpus_crowded() == 0);
	stand_in_holds("9.00 8.01 7.05 100000/100345 6789\n");
	CHECK(rdmaq_cpus_crowded() == 1);
	stand_in = "/nonexistent/rdmaq-loadavg";
	CHECK(rdmaq_cpus_crowded() == -1);
	stand_in_holds("");
	CHECK(rdmaq_cpus_crowded() == -1);
	stand_in_holds("0.00 0.01 0.05\n");
	CHECK(rdmaq_cpus_crowded() == -1);
	stand_in_holds("0.00 0.01 0.05 x/345 6789\n");
	CHECK(rdmaq_cpus_crowded() == -1);
	stand_in = NULL;
	CHECK(rdmaq_cpus_crowded() >= 0); /* the real file is read */
}

/*
 * At the edge: as many running tasks as CPUs this thread may use is not crowded, one
 * more is; the CPUs counted are this thread's (its affinity), not the machine's.
 */
static void test_crowded_starts_at_one_task_more_than_this_thread_s_cpus(void)
{
	cpu_set_t all, one;
	char line[64];
	int cpus, first = 0;

	CHECK(sched_getaffinity(0, sizeof(all), &all) == 0);
	cpus = CPU_COUNT(&all);
	snprintf(line, sizeof(line), "1.00 1.00 1.00 %d/345 6789\n", cpus);
	stand_in_holds(line);
	CHECK(rdmaq_cpus_crowded() == 0);
	snprintf(line, sizeof(line), "1.00 1.00 1.00 %d/345 6789\n", cpus + 1);
	stand_in_holds(line);
	CHECK(rdmaq_cpus_crowded() == 1);
	/* pinned to one CPU: two running tasks are a crowd, whatever the machine has */
	while (!CPU_ISSET(first, &all))
		first++;
	CPU_ZERO(&one);
	CPU_SET(first, &one);
	CHECK(sched_setaffinity(0, sizeof(one), &one) == 0);
	stand_in_holds("1.00 1.00 1.00 2/345 6789\n");
	CHECK(rdmaq_cpus_crowded() == 1);
	stand_in_holds("1.00 1.00 1.00 1/345 6789\n");
	CHECK(rdmaq_cpus_crowded() == 0);
	CHECK(sched_setaffinity(0, sizeof(all), &all) == 0);
	stand_in = NULL;
}

/* CPUs that cannot be counted (sched_getaffinity fails) make crowding and the CPUs'
 * idle time "unknown" (-1), not "not crowded" or a time, from files that say both. */
static void test_cpus_that_cannot_be_counted_are_unknown(void)
{
	affinity_fails = true;
	stand_in_holds("0.00 0.01 0.05 1/345 6789\n");
	CHECK(rdmaq_cpus_crowded() == -1);
	stand_in_holds("50014.68 80092.05\n");
	CHECK(rdmaq_cpus_idle_ns() == -1);
	affinity_fails = false;
	stand_in = NULL;
}

/*
 * The CPUs' idle time is /proc/uptime's second field, seconds and hundredths, in ns;
 * a file that does not say is "unknown" (-1), and so is the sum of every online CPU's
 * idle time for a thread that may use only some of them.
 */
static void test_idle_time_is_uptime_s_second_field_for_a_thread_on_every_cpu(void)
{
	cpu_set_t set, one;
	bool every_cpu = !sched_getaffinity(0, sizeof(set), &set) &&
			 CPU_COUNT(&set) >= sysconf(_SC_NPROCESSORS_ONLN);

	stand_in_holds("50014.68 80092.05\n");
	CHECK(rdmaq_cpus_idle_ns() == (every_cpu ? 80092050000000LL : -1));
	stand_in_holds("50014.68 80092.99\n"); /* the last hundredth */
	CHECK(rdmaq_cpus_idle_ns() == (every_cpu ? 80092990000000LL : -1));
	stand_in = "/nonexistent/rdmaq-uptime";
	CHECK(rdmaq_cpus_idle_ns() == -1);
	stand_in_holds("");
	CHECK(rdmaq_cpus_idle_ns() == -1);
	stand_in_holds("50014.68\n");
	CHECK(rdmaq_cpus_idle_ns() == -1);
	stand_in_holds("50014.68 x.05\n");
	CHECK(rdmaq_cpus_idle_ns() == -1);
	stand_in = NULL;
	CHECK(rdmaq_cpus_idle_ns() >= (every_cpu ? 0 : -1)); /* the real file is read */
	if (!every_cpu || CPU_COUNT(&set) < 2)
		return;
	/* On one CPU of several, the machine's idle time says nothing of this thread's. */
	CPU_ZERO(&one);
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
		if (CPU_ISSET(cpu, &set)) {
			CPU_SET(cpu, &one);
			break;
		}
	CHECK(sched_setaffinity(0, sizeof(one), &one) == 0);
	CHECK(rdmaq_cpus_idle_ns() == -1);
	CHECK(sched_setaffinity(0, sizeof(set), &set) == 0);
}

/* The thread's involuntary switches: a count, never negative, on Linux. */
static void test_preemptions_are_counted(void)
{
	CHECK(rdmaq_thread_preemptions() >= 0);
}

/* A count getrusage cannot give is "unknown" (-1), not 0 switches. */
static void test_preemptions_that_cannot_be_counted_are_unknown(void)
{
	rusage_fails = true;
	CHECK(rdmaq_thread_preemptions() == -1);
	rusage_fails = false;
}

int main(void)
{
	int fd = mkstemp(file);

	CHECK(fd >= 0);
	if (fd < 0)
		return check_report("proc_files");
	close(fd);
	test_a_start_time_is_field_22_after_the_name();
	test_a_start_time_that_cannot_be_read_is_0();
	test_a_schedstat_that_cannot_be_read_is_none();
	test_only_the_bytes_read_are_parsed();
	test_a_file_longer_than_the_buffer_is_cut_at_it();
	test_a_file_that_fills_the_buffer_is_read_whole();
	test_each_look_closes_its_file();
	test_each_file_is_opened_close_on_exec();
	test_crowded_is_more_running_tasks_than_cpus_this_thread_may_use();
	test_crowded_starts_at_one_task_more_than_this_thread_s_cpus();
	test_cpus_that_cannot_be_counted_are_unknown();
	test_idle_time_is_uptime_s_second_field_for_a_thread_on_every_cpu();
	test_preemptions_are_counted();
	test_preemptions_that_cannot_be_counted_are_unknown();
	unlink(file);
	return check_report("proc_files");
}

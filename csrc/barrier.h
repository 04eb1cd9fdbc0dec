/* SPDX-License-Identifier: MIT */
/*
 * Memory-ordering helpers, in the vocabulary of the kernel and liburing.
 *
 * The ring is shared with another process (shm) or written by a NIC
 * (verbs), so every access it shares goes through one of these.  They
 * map onto the GCC/Clang __atomic builtins, which are the C11 memory model.
 */
#ifndef RDMAQ_BARRIER_H
#define RDMAQ_BARRIER_H

#define READ_ONCE(var)	     __atomic_load_n(&(var), __ATOMIC_RELAXED)
#define WRITE_ONCE(var, val) __atomic_store_n(&(var), (val), __ATOMIC_RELAXED)

/* RELEASE: every earlier load/store is visible before this store. */
#define smp_store_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
/* ACQUIRE: no later load/store is satisfied before this load. */
#define smp_load_acquire(p)	__atomic_load_n((p), __ATOMIC_ACQUIRE)
/* Full barrier: orders an earlier store against a later load (Dekker). */
#ifdef __SANITIZE_THREAD__
/* TSan does not model fences; a seq_cst RMW is a full barrier it accepts. */
static int rdmaq_tsan_fence_word __attribute__((unused));
#define smp_mb() ((void)__atomic_fetch_add(&rdmaq_tsan_fence_word, 0, __ATOMIC_SEQ_CST))
#else
#define smp_mb() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#endif

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

#endif

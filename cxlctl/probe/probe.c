/* cxlctl's memory probe: the inner loops of `cxlctl probe` (docs/probe.md).
 *
 * Compiled on first use with the host's cc into cxlctl's cache directory
 * (cxlctl/probe/native.py).  One measurement per run:
 *
 *   probe read|write|latency|loaded NODE BYTES SECONDS CPU[,CPU...]
 *
 * The buffer is an anonymous mapping aligned to 2 MiB, bound to NODE with
 * mbind(MPOL_BIND) and advised before any page is touched: MADV_HUGEPAGE for
 * the chase, MADV_NOHUGEPAGE for the streams (so the figures do not depend on
 * the host's THP mode where THP is available; the share of huge pages
 * obtained is reported from /proc/self/smaps), first
 * touched by threads pinned to the CPUs (sched_setaffinity), checked page by
 * page with move_pages(2) (a sample of up to 4096 pages must all be on NODE),
 * measured, and unmapped.  It prints one line of key=value pairs; on failure a
 * line "error=WHY" and exit 1.
 *
 *   read     every CPU streams through its share of the buffer (loads only)
 *   write    every CPU writes its share with non-temporal stores (x86: AVX or
 *            SSE2 streaming stores, no read-for-ownership, as STREAM and Intel
 *            MLC write); elsewhere plain vector stores ("store=plain")
 *   latency  one CPU follows a pointer chain through a random cyclic
 *            permutation of the buffer's cache lines (each load depends on the
 *            one before, so no prefetcher or out-of-order engine hides it)
 *   loaded   the chase of "latency" on the first CPU while every other CPU
 *            streams reads through its share of the same buffer
 *
 * Bandwidths are bytes moved by the program over wall time, in MB/s
 * (10^6 B/s); each figure is printed as its WINDOWS timed windows' samples and
 * their median, after one untimed pass.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#define MPOL_BIND_ 2
#define LINE 64
#define CHUNK (256u * 1024u)
#define WINDOWS 5
#define HUGE (2u * 1024u * 1024u)
#define MAXCPU 1024

typedef uint64_t vec __attribute__((vector_size(32)));

static volatile uint64_t sink;
static volatile int stop_flag;
static pthread_barrier_t start_barrier, end_barrier;

struct worker {
	pthread_t tid;
	int cpu;
	int mode; /* 0 read, 1 write */
	char *base;
	size_t len;
	uint64_t bytes;
	int ok;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fail(const char *why)
{
	printf("\nerror=%s\n", why); /* on a line of its own, after a partial one */
	fflush(stdout);
	exit(1);
}

static int pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set);
}

static uint64_t read_chunk(const char *p, size_t len)
{
	const vec *v = (const vec *)p;
	size_t n = len / sizeof(vec), i;
	vec a = {0}, b = {0}, c = {0}, d = {0};
	for (i = 0; i + 4 <= n; i += 4) {
		a ^= v[i];
		b ^= v[i + 1];
		c ^= v[i + 2];
		d ^= v[i + 3];
	}
	a ^= b ^ c ^ d;
	return a[0] ^ a[1] ^ a[2] ^ a[3];
}

/* Non-temporal stores of the widest vector the build has (x86), plain stores elsewhere. */
#if defined(__AVX__)
#define STORE_KIND "nt-avx"
typedef __m256i ntvec;
#define NT_SET(v) _mm256_set1_epi64x((long long)(v))
#define NT_STORE(p, x) _mm256_stream_si256((__m256i *)(p), (x))
#elif defined(__SSE2__)
#define STORE_KIND "nt-sse2"
typedef __m128i ntvec;
#define NT_SET(v) _mm_set1_epi64x((long long)(v))
#define NT_STORE(p, x) _mm_stream_si128((__m128i *)(p), (x))
#endif

#ifdef NT_STORE
static void write_chunk(char *dst, size_t len, uint64_t v)
{
	ntvec x = NT_SET(v);
	size_t i, w = sizeof(ntvec);
	for (i = 0; i + 4 * w <= len; i += 4 * w) {
		NT_STORE(dst + i, x);
		NT_STORE(dst + i + w, x);
		NT_STORE(dst + i + 2 * w, x);
		NT_STORE(dst + i + 3 * w, x);
	}
	_mm_sfence(); /* the streaming stores reach memory before the window's end is taken */
}
#else
#define STORE_KIND "plain"
static void write_chunk(char *dst, size_t len, uint64_t v)
{
	vec *d = (vec *)dst, x = {v, v, v, v};
	size_t n = len / sizeof(vec), i;
	for (i = 0; i < n; i++)
		d[i] = x;
}
#endif

/* One pass over [off, off+len) of the worker's share; returns bytes moved. */
static uint64_t step(struct worker *w, size_t off, size_t len)
{
	if (w->mode == 0) {
		sink ^= read_chunk(w->base + off, len);
		return len;
	}
	write_chunk(w->base + off, len, (uint64_t)off);
	return len;
}

static size_t span(const struct worker *w)
{
	return w->len / sizeof(vec) * sizeof(vec);
}

/* A worker of the bandwidth windows (mode 0/1), or a background reader of "loaded" (mode 2). */
static void *work(void *arg)
{
	struct worker *w = arg;
	size_t total = span(w), off;
	int round;
	w->ok = pin(w->cpu) == 0;
	if (w->ok)
		memset(w->base, 1, w->len); /* first touch, on this CPU, under the bind policy */
	for (off = 0; w->ok && off < total; off += CHUNK) /* one untimed pass */
		step(w, off, total - off < CHUNK ? total - off : CHUNK);
	if (w->mode == 2) { /* loaded: read until the chase is done */
		uint64_t bytes = 0;
		pthread_barrier_wait(&start_barrier);
		off = 0;
		while (w->ok && !stop_flag) {
			size_t len = total - off < CHUNK ? total - off : CHUNK;
			sink ^= read_chunk(w->base + off, len);
			bytes += len;
			off = off + len >= total ? 0 : off + len;
		}
		w->bytes = bytes;
		return NULL;
	}
	for (round = 0; round < WINDOWS; round++) {
		pthread_barrier_wait(&start_barrier);
		uint64_t bytes = 0;
		off = 0;
		while (w->ok && !stop_flag) {
			size_t len = total - off < CHUNK ? total - off : CHUNK;
			bytes += step(w, off, len);
			off += len;
			if (off >= total)
				off = 0;
		}
		w->bytes = bytes;
		pthread_barrier_wait(&end_barrier);
		pthread_barrier_wait(&end_barrier); /* main has read w->bytes */
	}
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void bind_to(char *buf, size_t len, int node)
{
	unsigned long mask[MAXCPU / (8 * sizeof(unsigned long))];
	memset(mask, 0, sizeof(mask));
	if (node < 0 || node >= MAXCPU)
		fail("node out of range");
	mask[node / (8 * sizeof(unsigned long))] |= 1UL << (node % (8 * sizeof(unsigned long)));
	/* maxnode is one more than the bits given: the kernel's get_nodes() drops the last */
	if (syscall(SYS_mbind, buf, len, MPOL_BIND_, mask, (unsigned long)MAXCPU + 1, 0UL) != 0) {
		char why[160];
		snprintf(why, sizeof(why), "mbind to node %d failed: %s", node, strerror(errno));
		fail(why);
	}
}

/* Where a sample of the buffer's pages are: "on=N checked=M". */
static void placement(char *buf, size_t len, int node, int *on, int *checked)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t pages = len / (size_t)page, stride, i;
	int n = 0;
	void *addr[4096];
	int status[4096];
	stride = pages > 4096 ? pages / 4096 : 1;
	for (i = 0; i < pages && n < 4096; i += stride)
		addr[n++] = buf + i * (size_t)page;
	*on = 0;
	*checked = n;
	if (syscall(SYS_move_pages, 0, (unsigned long)n, addr, NULL, status, 0) != 0)
		fail("move_pages (page query) failed");
	for (i = 0; i < (size_t)n; i++)
		if (status[i] == node)
			(*on)++;
}

/* kB of [buf, buf+len) that are transparent huge pages: AnonHugePages of every
 * /proc/self/smaps mapping overlapping it (-1 when smaps cannot be read). */
static long huge_kb(const char *buf, size_t len)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	uintptr_t lo = 0, hi = 0, a = (uintptr_t)buf, b = (uintptr_t)buf + len;
	long total = 0, kb;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		uintptr_t x, y;
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &x, &y) == 2 && strchr(line, '-') < strchr(line, ' ')) {
			lo = x;
			hi = y;
		} else if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1 && lo < b && hi > a) {
			total += kb;
		}
	}
	fclose(f);
	return total;
}

/* madvise [p, p+len) to huge pages (huge) or away from them; 1 when the kernel took the advice. */
static int advise(char *p, size_t len, int huge)
{
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
	return madvise(p, len, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) == 0;
#else
	(void)p;
	(void)len;
	(void)huge;
	return 0;
#endif
}

static int parse_cpus(const char *s, int *cpus)
{
	int n = 0;
	char *end;
	while (*s && n < MAXCPU) {
		long v = strtol(s, &end, 10);
		if (end == s || v < 0 || v >= 65536)
			return -1;
		cpus[n++] = (int)v;
		s = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return -1;
	}
	return n;
}

static void print_samples(const double *samples, const char *fmt)
{
	double sorted[WINDOWS];
	int i;
	printf("samples=");
	for (i = 0; i < WINDOWS; i++) {
		printf(fmt, samples[i]);
		if (i + 1 < WINDOWS)
			printf(",");
	}
	memcpy(sorted, samples, sizeof(sorted));
	qsort(sorted, WINDOWS, sizeof(double), cmp_double);
	printf(" median=");
	printf(fmt, sorted[WINDOWS / 2]);
}

/* Start one thread per CPU of cpus over equal shares of [buf, buf+len). */
static struct worker *start_workers(int mode, char *buf, size_t len, const int *cpus, int ncpu, unsigned parties)
{
	struct worker *w = calloc((size_t)ncpu, sizeof(*w));
	size_t share = len / (size_t)ncpu / CHUNK * CHUNK;
	int i;
	if (!w)
		fail("out of memory");
	if (share < 3 * CHUNK) {
		char why[160];
		snprintf(why, sizeof(why), "buffer too small for %d CPUs: each needs 768 KiB (raise --buffer-mib)", ncpu);
		fail(why);
	}
	pthread_barrier_init(&start_barrier, NULL, parties);
	pthread_barrier_init(&end_barrier, NULL, parties);
	for (i = 0; i < ncpu; i++) {
		w[i].cpu = cpus[i];
		w[i].mode = mode;
		w[i].base = buf + (size_t)i * share;
		w[i].len = share;
		if (pthread_create(&w[i].tid, NULL, work, &w[i]) != 0)
			fail("cannot start a thread");
	}
	return w;
}

static void bandwidth(int mode, char *buf, size_t len, double seconds, const int *cpus, int ncpu)
{
	struct worker *w = start_workers(mode, buf, len, cpus, ncpu, (unsigned)ncpu + 1);
	double samples[WINDOWS];
	int i, round;
	for (round = 0; round < WINDOWS; round++) {
		stop_flag = 0;
		pthread_barrier_wait(&start_barrier);
		double t0 = now();
		struct timespec ts = {(time_t)(seconds / WINDOWS), (long)((seconds / WINDOWS - (double)(time_t)(seconds / WINDOWS)) * 1e9)};
		nanosleep(&ts, NULL);
		stop_flag = 1;
		pthread_barrier_wait(&end_barrier);
		double t1 = now();
		uint64_t bytes = 0;
		for (i = 0; i < ncpu; i++) {
			if (!w[i].ok)
				fail("cannot pin a thread to its CPU");
			bytes += w[i].bytes;
		}
		samples[round] = (double)bytes / (t1 - t0) / 1e6;
		pthread_barrier_wait(&end_barrier);
	}
	for (i = 0; i < ncpu; i++)
		pthread_join(w[i].tid, NULL);
	print_samples(samples, "%.0f");
	if (mode == 1)
		printf(" store=%s", STORE_KIND);
	free(w);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void latency(char *buf, size_t len, double seconds, int cpu)
{
	size_t lines = len / LINE, i;
	size_t *order;
	double samples[WINDOWS];
	int round;
	if (pin(cpu) != 0)
		fail("cannot pin to the CPU");
	if (lines < 2)
		fail("buffer too small");
	order = malloc(lines * sizeof(size_t));
	if (!order)
		fail("out of memory for the permutation");
	for (i = 0; i < lines; i++)
		order[i] = i;
	/* Sattolo's algorithm: a random permutation that is one single cycle */
	for (i = lines - 1; i > 0; i--) {
		size_t j = (size_t)(rnd() % i), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	for (i = 0; i < lines; i++)
		*(char **)(buf + order[i] * LINE) = buf + order[(i + 1) % lines] * LINE;
	free(order);
	char **p = (char **)buf;
	for (i = 0; i < lines; i++) /* one untimed lap */
		p = (char **)*p;
	for (round = 0; round < WINDOWS; round++) {
		uint64_t steps = 0;
		double t0 = now(), t1 = t0, until = t0 + seconds / WINDOWS;
		while (t1 < until) {
			for (i = 0; i < 4096; i += 8) {
				p = (char **)*p; p = (char **)*p; p = (char **)*p; p = (char **)*p;
				p = (char **)*p; p = (char **)*p; p = (char **)*p; p = (char **)*p;
			}
			steps += 4096;
			t1 = now();
		}
		samples[round] = (t1 - t0) * 1e9 / (double)steps;
	}
	sink ^= (uint64_t)(uintptr_t)p;
	print_samples(samples, "%.1f");
}

/* The chase over the first half of the buffer on cpus[0] while cpus[1..] read the second half. */
static void loaded(char *buf, size_t len, double seconds, const int *cpus, int ncpu)
{
	size_t half = len / 2 / HUGE * HUGE;
	struct worker *w;
	uint64_t bytes = 0;
	double t0, t1;
	int i;
	if (ncpu < 2)
		fail("loaded latency needs two or more CPUs");
	if (half < HUGE)
		fail("buffer too small");
	w = start_workers(2, buf + half, len - half, cpus + 1, ncpu - 1, (unsigned)ncpu);
	stop_flag = 0;
	pthread_barrier_wait(&start_barrier); /* every reader has touched its share and streams */
	t0 = now();
	latency(buf, half, seconds, cpus[0]);
	stop_flag = 1;
	for (i = 0; i < ncpu - 1; i++) {
		pthread_join(w[i].tid, NULL);
		if (!w[i].ok)
			fail("cannot pin a thread to its CPU");
		bytes += w[i].bytes;
	}
	t1 = now();
	printf(" load_mbps=%.0f load_cpus=%d", (double)bytes / (t1 - t0) / 1e6, ncpu - 1);
	free(w);
}

int main(int argc, char **argv)
{
	int cpus[MAXCPU], ncpu, node, on = 0, checked = 0, mode;
	char *end;
	unsigned long long bytes;
	double seconds;
	if (argc != 6)
		fail("usage: probe read|write|latency|loaded NODE BYTES SECONDS CPU[,CPU...]");
	if (!strcmp(argv[1], "read"))
		mode = 0;
	else if (!strcmp(argv[1], "write"))
		mode = 1;
	else if (!strcmp(argv[1], "latency"))
		mode = 2;
	else if (!strcmp(argv[1], "loaded"))
		mode = 3;
	else
		fail("unknown mode");
	node = (int)strtol(argv[2], &end, 10);
	if (*end)
		fail("bad node");
	bytes = strtoull(argv[3], &end, 10);
	if (*end || bytes < 4096)
		fail("bad size");
	seconds = strtod(argv[4], &end);
	if (*end || !(seconds > 0) || seconds > 3600)
		fail("bad duration");
	ncpu = parse_cpus(argv[5], cpus);
	if (ncpu <= 0)
		fail("bad CPU list");
	size_t len = (size_t)bytes;
	/* 2 MiB alignment, so a huge page can back every part of the buffer */
	char *map = mmap(NULL, len + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (map == MAP_FAILED)
		fail("mmap failed");
	char *buf = (char *)(((uintptr_t)map + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
	bind_to(buf, len, node);
	/* the chase on huge pages (no TLB misses in an idle latency, as Intel MLC measures it), the
	 * streams on base pages (as STREAM, likwid-bench and ordinary allocations run); "loaded"
	 * chases its first half and streams its second.  Advice refused (THP not built in) is said. */
	size_t half = len / 2 / HUGE * HUGE;
	int advised = 1;
	const char *advice = mode == 2 ? "huge" : mode == 3 ? "huge+base" : "base";
	if (mode == 2)
		advised = advise(buf, len, 1);
	else if (mode == 3)
		advised = advise(buf, half, 1) & advise(buf + half, len - half, 0);
	else
		advised = advise(buf, len, 0);
	printf("mode=%s node=%d bytes=%llu cpus=%d ", argv[1], node, bytes, ncpu);
	if (mode == 2)
		latency(buf, len, seconds, cpus[0]);
	else if (mode == 3)
		loaded(buf, len, seconds, cpus, ncpu);
	else
		bandwidth(mode, buf, len, seconds, cpus, ncpu);
	placement(buf, len, node, &on, &checked);
	printf(" pages_on_node=%d pages_checked=%d advice=%s advised=%d huge_kb=%ld\n", on, checked, advice, advised,
	       huge_kb(buf, len));
	munmap(map, len + HUGE);
	return 0;
}

/* mlxd's cblas_sgemm, in front of OpenBLAS's: products of a few rows by a large matrix stream the matrix once.
 *
 * A decode step multiplies one row per sequence by every weight matrix. OpenBLAS's sgemm packs the whole matrix
 * into its buffers first whatever the row count, so a few rows cost it two to three passes over the weights;
 * this kernel reads each matrix row once for all of them (mlxd/engine/cpu/gemv_shim.py says where it applies and
 * docs/benchmarks.md, section 9, what it gains).
 *
 * Every output element is summed in one order whatever the number of rows, the columns a thread takes and the
 * tile it falls in: LANES interleaved partial sums over k, folded in halves, then the tail of k. So a row's result
 * does not depend on the other rows of its batch. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                         float *, int);
typedef void (*sgemv_fn)(int, int, int, int, float, const float *, int, const float *, int, float, float *, int);

/* MAX_ROWS: the most rows the kernel's partial sums have room for (gemv_shim.MAX_ROWS asks for no more). */
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112, ROWS = 4, MAX_ROWS = 32, MAX_THREADS = 64 };

/* Accumulator tiles of ROWS x COLS vectors, sized to the vector registers: 32 with AVX-512 (16 accumulators, 4
 * matrix chunks, one chunk of A), 16 with AVX2, 32 of half the width with NEON. */
#if defined(__AVX512F__)
#define LANES 16
#define COLS 4
#else
#define LANES 8
#define COLS 2
#endif
typedef float vf __attribute__((vector_size(LANES * sizeof(float))));
typedef float vf8 __attribute__((vector_size(8 * sizeof(float))));
typedef float vf4 __attribute__((vector_size(4 * sizeof(float))));

static sgemm_fn real_sgemm;
static sgemv_fn real_sgemv;
static long min_elements;
static int max_rows;
static atomic_long to_rows, to_sgemv; /* products sent to the row kernel, to sgemv */

struct product {
    int m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const float *a, *b;
    float *c;
};

/* ---- the row kernel: C[i, j] = alpha * sum_k A[i, k] B[j, k] + beta * C[i, j] ---- */

static inline vf load(const float *p) {
    vf v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}

/* Lane l plus lane l + h, for h = LANES / 2, ..., 1. No accumulator's address is taken anywhere: compilers then
 * keep them all in registers. */
static inline float fold(vf v) {
#if defined(__clang__) || __GNUC__ >= 12
#if LANES == 16
    vf8 e = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
            __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
#else
    vf8 e = v;
#endif
    vf4 q = __builtin_shufflevector(e, e, 0, 1, 2, 3) + __builtin_shufflevector(e, e, 4, 5, 6, 7);
    float s0 = q[0] + q[2], s1 = q[1] + q[3];
    return s0 + s1;
#else
    float s[LANES];
    for (int l = 0; l < LANES; l++) s[l] = v[l];
    for (int h = LANES / 2; h > 0; h /= 2)
        for (int l = 0; l < h; l++) s[l] += s[l + h];
    return s[0];
#endif
}

static inline void store(float *out, float sum, float alpha, float beta) {
    *out = beta == 0.0f ? alpha * sum : alpha * sum + beta * *out; /* beta 0: *out may be garbage, as BLAS allows */
}

/* Rows i < m of A by matrix rows [j, j + cols) over k in [k0, k1), the partial sums carried in `acc`: each chunk
 * of A loaded serves `cols` products, each chunk of the matrix `m` of them. */
static inline __attribute__((always_inline)) void part(const int m, const int cols, const struct product *p,
                                                      const float *a, vf *acc, int j, int k0, int k1) {
    const float *w = p->b + (size_t)j * p->ldb;
    vf s[COLS][ROWS];
    for (int q = 0; q < cols; q++)
        for (int i = 0; i < m; i++) s[q][i] = acc[q * ROWS + i];
    for (int kk = k0; kk < k1; kk += LANES) {
        vf y[COLS];
        /* The next matrix rows, as far into them as these: memory keeps streaming while the passes over these
         * rows run from cache (a fifth to a quarter off every row count, docs/benchmarks.md, section 9). Into
         * the outer caches: they are read a block from now. A prefetch never faults, past the matrix included. */
        for (int q = 0; q < cols; q++) __builtin_prefetch(w + (size_t)(q + cols) * p->ldb + kk, 0, 1);
        for (int q = 0; q < cols; q++) y[q] = load(w + (size_t)q * p->ldb + kk);
        for (int i = 0; i < m; i++) {
            vf x = load(a + (size_t)i * p->lda + kk);
            for (int q = 0; q < cols; q++) s[q][i] += x * y[q];
        }
    }
    for (int q = 0; q < cols; q++)
        for (int i = 0; i < m; i++) acc[q * ROWS + i] = s[q][i];
}

/* Matrix rows [j, j + cols) by all of A: for each block of k, ROWS rows of A at a time, so that the passes after
 * the first find the block of those matrix rows in the nearest cache and the matrix streams from memory once.
 * Blocking changes when a lane adds a term, never the order of its terms. */
enum { BLOCK = 256, GROUPS = (MAX_ROWS + ROWS - 1) / ROWS };

static inline __attribute__((always_inline)) void passes(const int cols, const struct product *p, int j) {
    const int k = p->k, kv = k - k % LANES, groups = (p->m + ROWS - 1) / ROWS;
    vf acc[GROUPS][COLS * ROWS];
    for (int g = 0; g < groups; g++)
        for (int t = 0; t < COLS * ROWS; t++) acc[g][t] = (vf){0};
    for (int k0 = 0; k0 < kv; k0 += BLOCK) {
        int k1 = k0 + BLOCK < kv ? k0 + BLOCK : kv;
        for (int g = 0; g < groups; g++) {
            const float *a = p->a + (size_t)g * ROWS * p->lda;
            switch (p->m - g * ROWS) {
            case 1: part(1, cols, p, a, acc[g], j, k0, k1); break;
            case 2: part(2, cols, p, a, acc[g], j, k0, k1); break;
            case 3: part(3, cols, p, a, acc[g], j, k0, k1); break;
            default: part(ROWS, cols, p, a, acc[g], j, k0, k1); break;
            }
        }
    }
    const float *w = p->b + (size_t)j * p->ldb;
    for (int q = 0; q < cols; q++)
        for (int i = 0; i < p->m; i++) {
            const float *x = p->a + (size_t)i * p->lda, *wq = w + (size_t)q * p->ldb;
            float t = fold(acc[i / ROWS][q * ROWS + i % ROWS]);
            for (int kk = kv; kk < k; kk++) t += x[kk] * wq[kk];
            store(p->c + (size_t)i * p->ldc + j + q, t, p->alpha, p->beta);
        }
}

/* Columns [j0, j1) of every row. */
static void columns(const struct product *p, int j0, int j1) {
    int j = j0;
    for (; j + COLS <= j1; j += COLS) passes(COLS, p, j);
    for (; j < j1; j++) passes(1, p, j);
}

/* ---- the pool: the caller and `helpers` threads take chunks of columns until none is left ----
 * One core cannot stream memory as fast as two. Chunks rather than equal shares: on a small machine the daemon's
 * other threads preempt a helper now and then, and equal shares had the caller wait for it (a tenth of a decode
 * step's samples at 8 rows on 2 vCPUs); now the others take its part. A chunk is computed by one thread whole, so
 * the results do not depend on who took it. Helpers spin between products (a decode step's come microseconds
 * apart), then sleep, as OpenBLAS's own threads do. One caller at a time; another computes alone. */

enum { CHUNKS_PER_THREAD = 8 };

/* A job's ticket: its generation, its chunk count and the next chunk to take, in one word, so that a thread learns
 * from one atomic operation whether it holds a chunk of the job posted, and no other state. */
#define NEXT_BITS 20
#define FIELD ((1ULL << NEXT_BITS) - 1)

static struct product job;
static int helpers, chunk_cols;
static long spin_ns;
static _Atomic uint64_t ticket;
static atomic_int done_chunks, sleepers;
static uint64_t posted; /* generations posted; written under `busy` */
static pthread_mutex_t sleep_lock = PTHREAD_MUTEX_INITIALIZER, busy = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static inline uint64_t generation_of(uint64_t t) { return t >> (2 * NEXT_BITS); }

/* Chunks of the posted job until none is left; returns the generation of the last ticket. The job is read only
 * with a chunk of it in hand: the caller writes the job before it posts the ticket (all sequentially consistent)
 * and posts no other while a chunk is not done. A thread late by a whole job gets a spent ticket and reads
 * nothing. */
static uint64_t take(void) {
    for (;;) {
        uint64_t t = atomic_fetch_add(&ticket, 1);
        uint64_t chunk = t & FIELD, count = (t >> NEXT_BITS) & FIELD;
        if (chunk >= count) return generation_of(t);
        int j0 = (int)chunk * chunk_cols, j1 = j0 + chunk_cols < job.n ? j0 + chunk_cols : job.n;
        columns(&job, j0, j1);
        atomic_fetch_add(&done_chunks, 1);
    }
}

static void *helper(void *unused) {
    (void)unused;
    uint64_t seen = 0;
    for (;;) {
        long since = now_ns();
        unsigned spins = 0;
        while (generation_of(atomic_load(&ticket)) == seen) {
            relax();
            if ((++spins & 255) == 0 && now_ns() - since > spin_ns) {
                /* sleepers is raised before the ticket is read again under the lock, and the caller posts the
                 * ticket before it reads sleepers: one of the two sees the other (all sequentially consistent),
                 * so no wake-up is lost. */
                pthread_mutex_lock(&sleep_lock);
                atomic_fetch_add(&sleepers, 1);
                while (generation_of(atomic_load(&ticket)) == seen) pthread_cond_wait(&wake, &sleep_lock);
                atomic_fetch_sub(&sleepers, 1);
                pthread_mutex_unlock(&sleep_lock);
            }
        }
        seen = take();
    }
    return NULL;
}

static void run(const struct product *p) {
    if (helpers == 0 || pthread_mutex_trylock(&busy) != 0) {
        columns(p, 0, p->n);
        return;
    }
    int per = p->n / ((helpers + 1) * CHUNKS_PER_THREAD);
    per = per < 4 * COLS ? 4 * COLS : per - per % COLS; /* whole tiles */
    int count = (p->n + per - 1) / per;
    if ((uint64_t)count > FIELD / 2) { /* no room in the ticket (millions of columns): computed alone */
        columns(p, 0, p->n);
        pthread_mutex_unlock(&busy);
        return;
    }
    job = *p;
    chunk_cols = per;
    atomic_store(&done_chunks, 0);
    posted++;
    atomic_store(&ticket, (posted << (2 * NEXT_BITS)) | ((uint64_t)count << NEXT_BITS));
    if (atomic_load(&sleepers) > 0) {
        pthread_mutex_lock(&sleep_lock);
        pthread_cond_broadcast(&wake);
        pthread_mutex_unlock(&sleep_lock);
    }
    take();
    for (unsigned spins = 0; atomic_load(&done_chunks) < count;)
        if (++spins & 1023)
            relax();
        else
            sched_yield(); /* a helper preempted on a busy machine needs this CPU to finish its chunk */
    pthread_mutex_unlock(&busy);
}

static void forget_helpers(void) { helpers = 0; } /* a forked child has none of the parent's threads */

/* ---- the entry points ---- */

void mlxd_front_init(sgemm_fn sgemm, sgemv_fn sgemv, long min_matrix, int rows, int threads, long spin) {
    real_sgemm = sgemm;
    real_sgemv = sgemv;
    min_elements = min_matrix;
    max_rows = rows < MAX_ROWS ? rows : MAX_ROWS;
    spin_ns = spin;
    pthread_atfork(NULL, NULL, forget_helpers);
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    for (int part = 1; part < threads; part++) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, helper, NULL) == 0) helpers++;
        pthread_attr_destroy(&attr);
    }
}

long mlxd_front_rows(void) { return atomic_load(&to_rows); }
long mlxd_front_sgemv(void) { return atomic_load(&to_sgemv); }
int mlxd_front_threads(void) { return helpers + 1; }

void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc) {
    int large = k > 0 && n > 0 && (long)n * k >= min_elements;
    if (order == ROW_MAJOR && large && m >= 1 && m <= max_rows && trans_a == NO_TRANS && trans_b == TRANS) {
        struct product p = {m, n, k, lda, ldb, ldc, alpha, beta, a, b, c};
        atomic_fetch_add(&to_rows, 1);
        run(&p);
        return;
    }
    if (order == ROW_MAJOR && large && m == 1) { /* C[1, N] = alpha * op(A) op(B) + beta * C as op(B)^T x */
        int inc_x = trans_a == NO_TRANS ? 1 : lda;
        atomic_fetch_add(&to_sgemv, 1);
        if (trans_b == NO_TRANS)
            real_sgemv(ROW_MAJOR, TRANS, k, n, alpha, b, ldb, a, inc_x, beta, c, 1);
        else
            real_sgemv(ROW_MAJOR, NO_TRANS, n, k, alpha, b, ldb, a, inc_x, beta, c, 1);
        return;
    }
    real_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

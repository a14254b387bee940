// One pool of threads for NumPy's BLAS and course_lib's CPU kernels (issue 25).
//
// OpenBLAS's own workers spin for a while after every call; a second pool beside them (OpenMP,
// Python threads) fights them for the cores. OpenBLAS lets a program run its jobs instead
// (openblas_set_threads_callback_function): registered as that callback, this pool runs the
// matrix products' jobs and the kernels' row ranges on the same threads, one run at a time.
//
// Rules:
// * job j of a run always runs on thread j (the caller is thread 0): OpenBLAS's jobs wait for
//   each other's packed panels, so every job of a run needs a thread of its own;
// * one run at a time (run_lock); a run started from inside a job runs its jobs one after the
//   other on that thread, so a job must never call BLAS (none of the kernels does);
// * OpenBLAS's own threads still exist and still run LAPACK's LU: the pool's jobs use other
//   per-thread slots of OpenBLAS's (slot_of); once OpenBLAS has more threads than leave room
//   for them (a BLAS limit above half its slots: its thread count never shrinks), the pool
//   steps aside for good and OpenBLAS runs its products on its own threads (step_aside);
// * a thread that worked spins 50 µs for the next run, then sleeps on a condition variable of
//   its own: an idle pool costs nothing on a shared machine (OpenBLAS's own threads spin
//   ~0.1 s), and a run wakes only the threads it needs;
// * after fork() the child starts a fresh pool (its threads are created when first needed);
// * the pool is never destroyed: at exit its threads are blocked and the process ends them.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace pool {

typedef void (*Job)(void* context, int job);
typedef void (*BlasDojob)(int thread, void* job_data, int dojob_data);
typedef int (*ThreadCount)(void);
typedef void (*SetCallback)(void* callback);
typedef int (*ExecBlas)(long jobs, void* queue);

// The run the workers take part in. Written by run() under `lock` as a sequence lock: the
// generation is odd while the fields change, and one more (even) for each new run; a worker
// reads the fields without the lock (read_run), so that fifteen spinning workers do not queue
// on one mutex, and the spinners' generation, the finishers' pending count and the fields lie
// on cache lines of their own.
struct Team {
    std::mutex lock;                     // taken to sleep, to wake and to publish a run
    std::condition_variable done;        // the caller sleeps here for the last job
    std::vector<std::thread> workers;    // worker w is thread w + 1
    std::vector<std::unique_ptr<std::condition_variable>> wake;  // worker w sleeps on wake[w]
    alignas(64) std::atomic<long> generation{0};
    alignas(64) std::atomic<int> pending{0};  // jobs of this run not finished on the workers
    alignas(64) std::atomic<int> jobs{0};
    std::atomic<Job> job{nullptr};
    std::atomic<void*> context{nullptr};
};

static Team* team = new Team;          // never deleted (see above)
static std::mutex run_lock;            // one run at a time
static thread_local bool inside_job = false;
static ThreadCount blas_thread_count = nullptr;  // OpenBLAS's thread count: the one knob
static int blas_slots = 0;                       // OpenBLAS's per-thread slots (MAX_THREADS)
static const int* blas_own_threads = nullptr;    // OpenBLAS's blas_num_threads
static SetCallback blas_set_callback = nullptr;  // openblas_set_threads_callback_function
static ExecBlas blas_exec = nullptr;             // OpenBLAS's exec_blas (its jobs' runner)
static std::atomic<bool> stepped_aside{false};   // the products went back to OpenBLAS
static std::atomic<long> runs_split{0};          // runs handed to the workers (for tests)
static std::atomic<long> idle_wakeups{0};        // sleeping workers woken for no job (tests)

// A spinning thread's hint to the core (x86's pause, Arm's yield; nothing elsewhere).
static inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    asm volatile("yield");
#endif
}

// Spin this long for the next run before sleeping: back-to-back calls (an op's matmul, then
// its kernel) find the threads awake, and an idle pool sleeps after 50 µs.
static bool spin_until(const std::function<bool()>& ready) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    for (int i = 1;; ++i) {
        if (ready()) return true;
        spin_pause();
        if (i % 64 == 0 && std::chrono::steady_clock::now() > until) return false;
    }
}

struct Run {
    long generation;
    int jobs;
    Job job;
    void* context;
};

// The run published last, read without the lock (see Team): retried while run() writes it.
static Run read_run(Team* t) {
    for (;;) {
        const long before = t->generation.load(std::memory_order_acquire);
        if (before & 1) {
            spin_pause();
            continue;
        }
        Run r{before, t->jobs.load(std::memory_order_relaxed),
              t->job.load(std::memory_order_relaxed), t->context.load(std::memory_order_relaxed)};
        std::atomic_thread_fence(std::memory_order_acquire);
        if (t->generation.load(std::memory_order_relaxed) == before) return r;
    }
}

static void work(Team* t, int index, std::condition_variable* wake) {
    long seen = 0;
    bool took_part = true;  // only a thread that worked spins for the next run
    for (;;) {
        const auto changed = [&] { return t->generation.load(std::memory_order_acquire) != seen; };
        const bool slept = !took_part || !spin_until(changed);
        if (slept) {
            std::unique_lock<std::mutex> hold(t->lock);
            wake->wait(hold, changed);
        }
        const Run r = read_run(t);
        seen = r.generation;
        took_part = index < r.jobs;  // a run of fewer jobs leaves this thread asleep
        if (!took_part) {
            if (slept) ++idle_wakeups;
            continue;
        }
        inside_job = true;
        r.job(r.context, index);
        inside_job = false;
        if (t->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            std::lock_guard<std::mutex> last(t->lock);
            t->done.notify_one();
        }
    }
}

// Start workers until there are `count` (t->lock held); false if the system refuses a thread.
static bool add_workers(Team* t, int count) {
    try {
        while ((int)t->workers.size() < count) {
            std::unique_ptr<std::condition_variable> wake(new std::condition_variable);
            std::thread worker(work, t, (int)t->workers.size() + 1, wake.get());
            t->wake.push_back(std::move(wake));
            t->workers.push_back(std::move(worker));
        }
    } catch (const std::system_error&) {
        return false;
    }
    return true;
}

// Run job(context, j) for j = 0 .. jobs-1, job j on thread j, and return when all are done.
// `together`: the jobs wait for each other (OpenBLAS's), so each needs a thread; other runs
// (the kernels' parts) go one after another on this thread when no more threads can start.
static void run(int jobs, Job job, void* context, bool together) {
    if (jobs <= 1 || inside_job) {
        for (int j = 0; j < jobs; ++j) job(context, j);
        return;
    }
    std::unique_lock<std::mutex> one_run(run_lock);
    Team* t = team;
    {
        std::unique_lock<std::mutex> hold(t->lock);
        if (!add_workers(t, jobs - 1)) {
            hold.unlock();
            one_run.unlock();
            if (together) {
                fprintf(stderr, "course_lib: the system refused a thread for OpenBLAS's %d jobs; "
                        "set COURSE_LIB_SHARED_POOL=0 or fewer BLAS threads\n", jobs);
                abort();  // its jobs would wait for each other forever
            }
            for (int j = 0; j < jobs; ++j) job(context, j);
            return;
        }
        ++runs_split;
        t->generation.fetch_add(1, std::memory_order_relaxed);  // odd: the fields change
        std::atomic_thread_fence(std::memory_order_release);
        t->jobs.store(jobs, std::memory_order_relaxed);
        t->job.store(job, std::memory_order_relaxed);
        t->context.store(context, std::memory_order_relaxed);
        t->pending.store(jobs - 1, std::memory_order_relaxed);
        t->generation.fetch_add(1, std::memory_order_release);  // even: a new run
    }
    for (int w = 0; w < jobs - 1; ++w) t->wake[w]->notify_one();  // only the run's threads
    inside_job = true;
    job(context, 0);
    inside_job = false;
    if (spin_until([&] { return t->pending.load(std::memory_order_acquire) == 0; })) return;
    std::unique_lock<std::mutex> hold(t->lock);
    t->done.wait(hold, [&] { return t->pending.load() == 0; });
}

// The threads a kernel may use now: OpenBLAS's count once connected (threadpoolctl and
// perf.limit_threads set it), else 1.
static int threads() {
    if (!blas_thread_count || inside_job) return 1;
    const int n = blas_thread_count();
    return n > 1 ? n : 1;
}

// Split [0, count) into at most `parts` equal parts, each a multiple of `align` items except
// the last, with at least `grain` items each, and run body(lo, hi) for each on its own thread.
template <class Body>
static void parallel_for(long long parts, long long count, long long grain, long long align,
                         const Body& body) {
    if (grain > 0 && count / grain < parts) parts = count / grain;
    if (parts <= 1) {
        body(0LL, count);
        return;
    }
    struct Split {
        const Body* body;
        long long count, step;
    };
    const long long step = ((count + parts - 1) / parts + align - 1) / align * align;
    Split split{&body, count, step};
    const int jobs = (int)((count + step - 1) / step);
    run(jobs, [](void* context, int j) {
        const Split* s = (const Split*)context;
        const long long lo = j * s->step;
        const long long hi = lo + s->step < s->count ? lo + s->step : s->count;
        (*s->body)(lo, hi);
    }, &split, false);
}

// The same on as many threads as BLAS may use now.
template <class Body>
static void parallel_for(long long count, long long grain, long long align, const Body& body) {
    parallel_for(threads(), count, grain, align, body);
}

struct BlasRun {
    BlasDojob dojob;
    char* data;
    size_t size;
    int argument;
};

// OpenBLAS's per-thread slot (buffer, status) for job j. Its own threads keep slots
// 0 .. blas_num_threads-2 and still run LAPACK's LU (getrf hands them its jobs directly, not
// through the callback): a job in a slot one of them is using would share its buffer and its
// status word, and both hang or compute garbage. The pool's jobs take the top slots, which
// are free while OpenBLAS's threads fit below them (slots_free).
static int slot_of(int j) { return blas_slots - 1 - j; }

static bool slots_free(int jobs) { return blas_slots - jobs >= *blas_own_threads - 1; }

static void blas_job(void* context, int j) {
    const BlasRun* r = (const BlasRun*)context;
    r->dojob(slot_of(j), r->data + j * r->size, r->argument);
}

// OpenBLAS's thread count grew past slots_free (it never shrinks): unregister the callback
// and run this product as OpenBLAS runs it without one, on its own threads. The kernels stay
// on the pool (they use no slots).
static void step_aside(int jobs, void* data) {
    if (!stepped_aside.exchange(true)) blas_set_callback(nullptr);
    blas_exec(jobs, data);
}

// OpenBLAS's threads callback: its `jobs` jobs of `size` bytes each, job j on thread j.
static void blas_callback(int sync, BlasDojob dojob, int jobs, size_t size, void* data,
                          int argument) {
    (void)sync;  // OpenBLAS waits for its jobs in any case: so does run()
    if (!slots_free(jobs)) return step_aside(jobs, data);
    BlasRun r{dojob, (char*)data, size, argument};
    run(jobs, blas_job, &r, true);
}

static void before_fork() { run_lock.lock(); }
static void after_fork_parent() { run_lock.unlock(); }
static void after_fork_child() {
    team = new Team;  // the parent's threads do not exist here; the old team is abandoned
    run_lock.unlock();
}

}  // namespace pool

extern "C" __attribute__((visibility("default")))
void* pool_blas_callback() { return (void*)&pool::blas_callback; }

// Connect the kernels to OpenBLAS: its slot count and own-thread count (see slot_of),
// `workers` threads started now, and its functions: the thread count, the callback setter
// and exec_blas (see step_aside). 0 on success, -1 if the system refused a thread (then
// nothing is connected).
extern "C" __attribute__((visibility("default")))
int pool_follow(int slots, const int* own_threads, int workers, void* thread_count,
                void* set_callback, void* exec_blas) {
    static std::once_flag fork_handlers;
    std::call_once(fork_handlers, [] {
        pthread_atfork(pool::before_fork, pool::after_fork_parent, pool::after_fork_child);
    });
    std::lock_guard<std::mutex> one_run(pool::run_lock);
    {
        std::lock_guard<std::mutex> hold(pool::team->lock);
        if (!pool::add_workers(pool::team, workers)) return -1;
    }
    pool::blas_thread_count = (pool::ThreadCount)thread_count;
    pool::blas_slots = slots;
    pool::blas_own_threads = own_threads;
    pool::blas_set_callback = (pool::SetCallback)set_callback;
    pool::blas_exec = (pool::ExecBlas)exec_blas;
    return 0;
}

// Whether the products went back to OpenBLAS's own threads (step_aside).
extern "C" __attribute__((visibility("default")))
int pool_stepped_aside() { return pool::stepped_aside.load(); }

// The threads a kernel called now would use.
extern "C" __attribute__((visibility("default")))
int pool_threads() { return pool::threads(); }

// parallel_for for loops built in other libraries (the fusion pass's generated loops):
// body(context, lo, hi) for parts of [0, count), as pool::parallel_for splits them.
typedef void (*Range)(void* context, long long lo, long long hi);
extern "C" __attribute__((visibility("default")))
void pool_parallel_for(long long count, long long grain, long long align, Range body,
                       void* context) {
    pool::parallel_for(count, grain, align,
                       [=](long long lo, long long hi) { body(context, lo, hi); });
}

// How many runs went to the workers so far (for tests).
extern "C" __attribute__((visibility("default")))
long pool_runs() { return pool::runs_split.load(); }

// How many times a sleeping worker was woken for a run without a job for it (for tests).
extern "C" __attribute__((visibility("default")))
long pool_idle_wakeups() { return pool::idle_wakeups.load(); }

// How many threads the pool has started (for tests): the caller's thread not counted.
extern "C" __attribute__((visibility("default")))
int pool_workers() {
    std::lock_guard<std::mutex> hold(pool::team->lock);
    return (int)pool::team->workers.size();
}

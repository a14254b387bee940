// Prelude of course_lib's CPU emulator of CUDA C (compiled with g++ -std=c++20).
//
// It gives a .cu file what it expects from the CUDA toolkit: the built-in variables
// threadIdx/blockIdx/blockDim/gridDim, the __global__/__device__/__shared__ qualifiers,
// __syncthreads(), warp shuffles, atomics, vector types and the math intrinsics our kernels use.
//
// Execution model. The blocks of a launch run one after another on one OS thread. Inside a
// block, kernels that never synchronise run thread after thread; kernels with barriers or
// warp-level calls run each CUDA thread as a fiber (ucontext): a thread runs until its next
// __syncthreads() or __shfl_*_sync(), then the next thread runs. When the lanes of a warp all
// wait at warp-level calls they exchange their values and continue; when every thread of the
// block waits at the same barrier they all continue. __shared__ variables become function
// statics (one copy, shared by the block's threads; blocks run in turn, so one copy is
// enough) in their own section, clemu_shared, each on a 128-byte boundary (bank 0); dynamic
// `extern __shared__` arrays become pointers into a per-launch buffer
// (course_lib.kernels.emulator rewrites them). Before each block runs, both are filled with
// 0xFF bytes (poison_shared): a word nobody wrote reads as NaN (a float) or -1 (an int), as
// a GPU's stale shared memory would give garbage, instead of a zero that hides the bug.
//
// With -DCLEMU_COUNT (the library profile() uses) emulator_counting.hpp counts every access to
// global and shared memory; without it, no counting code is compiled in.
#pragma once
#undef _FORTIFY_SOURCE  // its longjmp check rejects jumps between fiber stacks
#include <cmath>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <setjmp.h>
#include <sys/mman.h>
#include <type_traits>
#include <ucontext.h>
#include <utility>
// NVRTC compiles without the C library's headers: a kernel that writes INFINITY, NAN or
// FLT_MAX does not compile on a GPU, so it must not compile here either
#undef INFINITY
#undef NAN
#undef HUGE_VAL
#undef HUGE_VALF
#undef FLT_MAX
#undef FLT_MIN

// ---- qualifiers -------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __shared__ static __attribute__((aligned(128), section("clemu_shared")))
#define __constant__ static __attribute__((section("clemu_constant")))
// course_lib.kernels.emulator puts this after the __device__ of a file-scope variable (global
// memory, which the counting build must tell apart from the __shared__ statics)
#define CLEMU_DEVICE_VARIABLE __attribute__((section("clemu_device")))
#define __align__(n) alignas(n)
#define __launch_bounds__(...)

// ---- built-in vector types ------------------------------------------------------------
struct dim3 {
    unsigned int x = 1, y = 1, z = 1;
};
using uint3 = dim3;
#define CLEMU_VEC2(T, N, A) \
    struct alignas(A) N { T x, y; }; \
    inline N make_##N(T x, T y) { return N{x, y}; }
#define CLEMU_VEC3(T, N) \
    struct N { T x, y, z; }; \
    inline N make_##N(T x, T y, T z) { return N{x, y, z}; }
#define CLEMU_VEC4(T, N, A) \
    struct alignas(A) N { T x, y, z, w; }; \
    inline N make_##N(T x, T y, T z, T w) { return N{x, y, z, w}; }
CLEMU_VEC2(float, float2, 8)
CLEMU_VEC3(float, float3)
CLEMU_VEC4(float, float4, 16)
CLEMU_VEC2(int, int2, 8)
CLEMU_VEC3(int, int3)
CLEMU_VEC4(int, int4, 16)
CLEMU_VEC2(double, double2, 16)

// ---- math intrinsics ------------------------------------------------------------------
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __fmul_rn(float x, float y) { return x * y; }  // a product never fused into an add
// the rest of CUDA's correctly rounded single-precision intrinsics (NVRTC compiles them all;
// g++ builds with -std=c++20, so nothing is contracted into an FMA unless asked)
inline float __fmaf_rn(float x, float y, float z) { return std::fma(x, y, z); }  // one rounding
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fsub_rn(float x, float y) { return x - y; }
inline float __fdiv_rn(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __frsqrt_rn(float x) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(x))); }
inline int __float2int_rn(float x) { return static_cast<int>(std::nearbyint(x)); }  // ties to even
inline int __float2int_rz(float x) { return static_cast<int>(x); }  // towards zero
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
// the fast approximate ones, computed exactly here (glibc declares these names but does not
// export them, so a kernel calling them compiled and then failed to load)
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __log2f(float x) { return std::log2(x); }
inline float __log10f(float x) { return std::log10(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
template <class T> inline T __ldg(const T* p) { return *p; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }

// ---- atomics: fibers never interleave inside one call, so plain read-modify-write is atomic
#define CLEMU_ATOMIC(NAME, EXPR) \
    template <class T> inline T NAME(T* address, T value) { T old = *address; *address = EXPR; return old; }
CLEMU_ATOMIC(atomicAdd, old + value)
CLEMU_ATOMIC(atomicSub, old - value)
CLEMU_ATOMIC(atomicMax, old < value ? value : old)
CLEMU_ATOMIC(atomicMin, value < old ? value : old)
CLEMU_ATOMIC(atomicExch, value)
template <class T> inline T atomicCAS(T* address, T compare, T value) {
    T old = *address;
    if (old == compare) *address = value;
    return old;
}
inline void __threadfence() {}
inline void __threadfence_block() {}

// ---- launch state ----------------------------------------------------------------------
// The emulator's own functions are not instrumented in the counting build: only the kernel's
// code (and the small helpers it inlines: math, atomics, vector types) is counted.
#define CLEMU_PLAIN __attribute__((no_sanitize_thread))

namespace clemu {

// What kernel code reads (threadIdx, ..., dynamic shared memory), in one object, which the
// counting build knows is neither global nor shared memory.
struct Builtins {
    dim3 thread_idx, block_idx, block_dim, grid_dim;
    unsigned char* dynamic_shared;
};
inline Builtins builtin;
inline char* error_text = nullptr;
inline std::size_t error_size = 0;

CLEMU_PLAIN inline void fail(const char* text) { std::snprintf(error_text, error_size, "%s", text); }

// The thread's index in its block, counted as CUDA numbers lanes and warps: x fastest.
CLEMU_PLAIN inline std::uint32_t linear(const dim3& t) { return t.x + builtin.block_dim.x * (t.y + builtin.block_dim.y * t.z); }

}  // namespace clemu

#ifdef CLEMU_COUNT
// course_lib.kernels.emulator expands this include (the unit is compiled from a pipe)
#include "emulator_counting.hpp"
#else
namespace clemu::count {  // counting is off: nothing to do, and nothing is compiled in
inline void flush() {}
inline void barrier_passed() {}
inline void warp_synced() {}
inline const char* failure() { return nullptr; }
}  // namespace clemu::count
#endif

// ---- the fiber scheduler ----------------------------------------------------------------
namespace clemu {

enum class State { ready, at_barrier, at_warp_sync, done };
struct Fiber {
    ucontext_t context;  // used once, to start the fiber on its own stack
    jmp_buf resume;      // where it continues after a barrier
    dim3 index;
    State state;
    bool started;
    int line;                    // of the barrier or warp-level call it waits at
    int site;                    // which __syncthreads() of the source (two may share a line)
    bool shuffle;                // the warp-level call is a shuffle, not __syncwarp()
    unsigned mask;               // the lanes a warp-level call waits for
    std::uint64_t value, result; // what a lane offers to a shuffle, and what it receives
    int source;                  // the lane whose value it reads
};

// Switching: ucontext starts a fiber; after that, _setjmp/_longjmp switch between the
// scheduler and the fibers, because they skip the signal-mask system call of swapcontext.
inline jmp_buf scheduler;
inline Fiber* fibers = nullptr;
inline Fiber* current = nullptr;
inline unsigned char* stacks = nullptr;
inline std::size_t stack_bytes = 256 * 1024;
inline std::size_t fiber_capacity = 0;
inline void (*body)(void*) = nullptr;
inline void* body_arg = nullptr;

// Park this fiber and return to the scheduler. Only kernels that synchronise reach here, and
// those always run as fibers (the Python side checks). The memory clobbers stop g++ from
// keeping shared values in registers across the switch.
CLEMU_PLAIN inline void park(State state, int line, int site = 0) {
    asm volatile("" ::: "memory");
    current->state = state;
    current->line = line;
    current->site = site;
    if (_setjmp(current->resume) == 0) _longjmp(scheduler, 1);
    asm volatile("" ::: "memory");
}

CLEMU_PLAIN inline void barrier(int line, int site) { park(State::at_barrier, line, site); }

// A warp-level call (__shfl_*_sync, __syncwarp): wait until every lane of `mask` has made
// one, then receive the value offered by lane `source` (the scheduler hands it over).
CLEMU_PLAIN inline std::uint64_t warp_sync(int line, unsigned mask, std::uint64_t value, int source,
                                           bool shuffle = true) {
    count::warp_synced();
    current->shuffle = shuffle;
    current->mask = mask;
    current->value = value;
    current->source = source;
    park(State::at_warp_sync, line);
    return current->result;
}

CLEMU_PLAIN inline void fiber_main() {
    body(body_arg);
    current->state = State::done;
    _longjmp(scheduler, 1);
}

CLEMU_PLAIN inline bool reserve(std::size_t n) {
    if (n <= fiber_capacity) return true;
    if (stacks != nullptr) munmap(stacks, fiber_capacity * stack_bytes);
    std::free(fibers);
    fibers = static_cast<Fiber*>(std::calloc(n, sizeof(Fiber)));
    void* memory = mmap(nullptr, n * stack_bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (fibers == nullptr || memory == MAP_FAILED) {
        fiber_capacity = 0;
        stacks = nullptr;
        return false;
    }
    stacks = static_cast<unsigned char*>(memory);
    for (std::size_t i = 0; i < n; ++i) mprotect(stacks + i * stack_bytes, 4096, PROT_NONE);
    fiber_capacity = n;
    return true;
}

CLEMU_PLAIN inline const char* describe(const dim3& d, char* out) {
    std::snprintf(out, 48, "(%u, %u, %u)", d.x, d.y, d.z);
    return out;
}

// Runs every ready fiber until it parks at a barrier or a warp-level call, or finishes.
CLEMU_PLAIN inline void sweep(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
        if (fibers[i].state != State::ready) continue;
        current = &fibers[i];
        builtin.thread_idx = current->index;
        if (_setjmp(scheduler) != 0) continue;  // the fiber parked or finished
        if (current->started) _longjmp(current->resume, 1);
        current->started = true;
        getcontext(&current->context);
        current->context.uc_stack.ss_sp = stacks + i * stack_bytes + 4096;
        current->context.uc_stack.ss_size = stack_bytes - 4096;
        current->context.uc_link = nullptr;
        makecontext(&current->context, fiber_main, 0);
        setcontext(&current->context);
    }
    count::flush();  // every thread has run up to its next synchronisation
}

// Lets a warp continue once every lane its mask names waits at a warp-level call with that
// mask; each lane receives its source lane's value. False (error_text set) on a misuse.
CLEMU_PLAIN inline bool release_warp(std::size_t first, std::size_t last, bool& released) {
    const Fiber* lead = nullptr;
    for (std::size_t i = first; i < last && lead == nullptr; ++i)
        if (fibers[i].state == State::at_warp_sync) lead = &fibers[i];
    if (lead == nullptr) return true;
    const unsigned mask = lead->mask;
    char a[48], b[48], text[512];
    const char* problem = nullptr;
    int lane = static_cast<int>(lead - fibers - first), other = -1;
    if (!(mask >> lane & 1u)) problem = "its own lane is not in the mask";
    for (int l = 0; l < 32 && problem == nullptr; ++l) {
        if (!(mask >> l & 1u)) continue;
        other = l;
        if (first + l >= last) problem = "the mask names a lane the block does not have";
        else if (fibers[first + l].state != State::at_warp_sync) return true;  // not yet
        else if (fibers[first + l].mask != mask) problem = "lanes wait with different masks";
        else if (fibers[first + l].shuffle != lead->shuffle) problem = "one lane waits at __syncwarp(), another at a shuffle";
        else if (!(mask >> fibers[first + l].source & 1u)) problem = "a lane reads a lane outside the mask";
    }
    if (problem != nullptr) {
        std::snprintf(text, sizeof text,
                      "warp-level call in block %s: thread %s (lane %d) waits at line %d with mask "
                      "0x%08x, lane %d: %s",
                      describe(builtin.block_idx, a), describe(lead->index, b), lane, lead->line, mask,
                      other, problem);
        fail(text);
        return false;
    }
    for (int l = 0; l < 32; ++l) {
        if (!(mask >> l & 1u)) continue;
        Fiber& f = fibers[first + l];
        f.result = fibers[first + f.source].value;
        f.state = State::ready;
    }
    released = true;
    return true;
}

// When no thread can run: every live thread must wait at the same __syncthreads(), which then
// lets them all continue. Returns 1 to go on, 0 when the block is finished, -1 on an error.
CLEMU_PLAIN inline int release_block(std::size_t n) {
    const Fiber* waiting = nullptr;
    const Fiber* finished = nullptr;
    char a[48], b[48], c[48], text[512];
    for (std::size_t i = 0; i < n; ++i) {
        const Fiber& f = fibers[i];
        if (f.state == State::done) {
            finished = finished ? finished : &f;
        } else if (f.state == State::at_warp_sync) {
            std::snprintf(text, sizeof text,
                          "in block %s thread %s waits at a warp-level call (line %d) for lanes "
                          "0x%08x of its warp that never get there (returned, or wait at "
                          "__syncthreads())",
                          describe(builtin.block_idx, a), describe(f.index, b), f.line, f.mask);
            fail(text);
            return -1;
        } else if (waiting == nullptr) {
            waiting = &f;
        } else if (f.site != waiting->site) {
            std::snprintf(text, sizeof text,
                          "divergent __syncthreads() in block %s: thread %s waits at line %d, "
                          "thread %s at line %d%s; every thread of a block must reach the same "
                          "barrier",
                          describe(builtin.block_idx, a), describe(waiting->index, b), waiting->line,
                          describe(f.index, c), f.line,
                          f.line == waiting->line ? " (another __syncthreads() of that line number)" : "");
            fail(text);
            return -1;
        }
    }
    if (waiting == nullptr) return 0;
    if (finished != nullptr) {
        std::snprintf(text, sizeof text,
                      "in block %s thread %s returned while thread %s waits at "
                      "__syncthreads() (line %d): a barrier must be reached by every thread "
                      "of the block, so do not return early from a kernel that synchronises",
                      describe(builtin.block_idx, a), describe(finished->index, b),
                      describe(waiting->index, c), waiting->line);
        fail(text);
        return -1;
    }
    for (std::size_t i = 0; i < n; ++i) fibers[i].state = State::ready;
    count::barrier_passed();
    return 1;
}

// Runs one block with one fiber per thread; false (with error_text set) on a misuse.
CLEMU_PLAIN inline bool run_block_fibers(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
        Fiber& f = fibers[i];
        f.index = dim3{static_cast<unsigned>(i % builtin.block_dim.x),
                       static_cast<unsigned>((i / builtin.block_dim.x) % builtin.block_dim.y),
                       static_cast<unsigned>(i / (builtin.block_dim.x * builtin.block_dim.y))};
        f.state = State::ready;
        f.started = false;
    }
    for (;;) {
        sweep(n);
        bool released = false;
        for (std::size_t first = 0; first < n; first += 32)
            if (!release_warp(first, first + 32 < n ? first + 32 : n, released)) return false;
        if (released) continue;
        const int next = release_block(n);
        if (next <= 0) return next == 0;
    }
}

template <class T> struct type_name {
    static_assert(sizeof(T) == 0, "unsupported kernel parameter type in the emulator");
};
#define CLEMU_TYPE(T, NAME) template <> struct type_name<T> { static constexpr const char* value = NAME; };
CLEMU_TYPE(float, "float32")
CLEMU_TYPE(double, "float64")
CLEMU_TYPE(int, "int32")
CLEMU_TYPE(unsigned int, "uint32")
CLEMU_TYPE(long, "int64")
CLEMU_TYPE(long long, "int64")
CLEMU_TYPE(unsigned long, "uint64")
CLEMU_TYPE(unsigned long long, "uint64")
CLEMU_TYPE(float4, "float32x4")
CLEMU_TYPE(float2, "float32x2")
CLEMU_TYPE(int4, "int32x4")
CLEMU_TYPE(int2, "int32x2")
template <class T> struct type_name<T*> {
    static constexpr const char* value = type_name<std::remove_cv_t<T>>::value;
};

// "const float32*,float32*,int32": one entry per parameter, '*' marking pointers, "const "
// pointers to const (the kernel only reads them).
template <class A> inline constexpr bool points_to_const =
    std::is_pointer_v<A> && std::is_const_v<std::remove_pointer_t<A>>;
template <class... A> inline const char* signature(void (*)(A...)) {
    static char text[512];
    text[0] = '\0';
    ((std::strcat(text, points_to_const<std::remove_cv_t<A>> ? "const " : ""),
      std::strcat(text, type_name<std::remove_cv_t<A>>::value),
      std::strcat(text, std::is_pointer_v<A> ? "*," : ",")), ...);
    std::size_t n = std::strlen(text);
    if (n > 0) text[n - 1] = '\0';
    return text;
}

template <class... A, std::size_t... I>
CLEMU_PLAIN inline void call(void (*kernel)(A...), void** args, std::index_sequence<I...>) {
    kernel(*static_cast<std::remove_cv_t<A>*>(args[I])...);
}

// A memory fault inside a kernel becomes an error, like CUDA's "illegal memory access",
// instead of killing the Python process: the handler jumps back to the launch.
inline sigjmp_buf fault_jump;
CLEMU_PLAIN inline void on_fault(int) { siglongjmp(fault_jump, 1); }

struct FaultGuard {
    struct sigaction old_segv {}, old_bus {};
    stack_t old_stack {};
    CLEMU_PLAIN FaultGuard() {
        static char alternate[64 * 1024];  // the handler must run even if a fiber stack overflowed
        stack_t stack{};
        stack.ss_sp = alternate;
        stack.ss_size = sizeof alternate;
        sigaltstack(&stack, &old_stack);
        struct sigaction action {};
        action.sa_handler = on_fault;
        action.sa_flags = SA_ONSTACK;
        sigemptyset(&action.sa_mask);
        sigaction(SIGSEGV, &action, &old_segv);
        sigaction(SIGBUS, &action, &old_bus);
    }
    CLEMU_PLAIN ~FaultGuard() {
        sigaction(SIGSEGV, &old_segv, nullptr);
        sigaction(SIGBUS, &old_bus, nullptr);
        sigaltstack(&old_stack, nullptr);
    }
};

// Runs one block thread after thread (kernels that never synchronise); the accesses of each
// warp are counted once its 32 threads have run.
template <class Run> CLEMU_PLAIN inline bool run_block_threads(std::size_t n, Run& run) {
    for (std::size_t i = 0; i < n; ++i) {
        builtin.thread_idx = dim3{static_cast<unsigned>(i % builtin.block_dim.x),
                          static_cast<unsigned>((i / builtin.block_dim.x) % builtin.block_dim.y),
                          static_cast<unsigned>(i / (builtin.block_dim.x * builtin.block_dim.y))};
        run();
        if (i % 32 == 31 || i + 1 == n) count::flush();
    }
    return true;
}

}  // namespace clemu

// The __shared__ variables' section (see the __shared__ macro); weak: a unit may have none.
extern "C" char __start_clemu_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_clemu_shared[] __attribute__((weak, visibility("hidden")));

namespace clemu {

// A block's shared memory is not cleared on a GPU: it holds whatever the previous block (or
// kernel) left there. Each block here starts with every byte 0xFF instead (float NaN, int
// -1), the static __shared__ variables and the launch's `dynamic_bytes` of dynamic shared
// memory alike, so reading a word before any thread wrote it shows in the result.
CLEMU_PLAIN inline void poison_shared(std::size_t dynamic_bytes) {
    const std::size_t bytes = static_cast<std::size_t>(__stop_clemu_shared - __start_clemu_shared);
    if (bytes > 0) std::memset(__start_clemu_shared, 0xFF, bytes);
    if (dynamic_bytes > 0) std::memset(builtin.dynamic_shared, 0xFF, dynamic_bytes);
}

template <class... A>
CLEMU_PLAIN inline int launch(void (*kernel)(A...), const unsigned* grid, const unsigned* block,
                  void* shared, std::size_t shared_bytes, void** args, int use_fibers,
                  char* error, std::size_t size) {
    error_text = error;
    error_size = size;
    builtin.grid_dim = dim3{grid[0], grid[1], grid[2]};
    builtin.block_dim = dim3{block[0], block[1], block[2]};
    builtin.dynamic_shared = static_cast<unsigned char*>(shared);
    auto run = [&] { call(kernel, args, std::index_sequence_for<A...>{}); };
    body = [](void* f) { (*static_cast<decltype(run)*>(f))(); };
    body_arg = &run;
    const std::size_t n = std::size_t{builtin.block_dim.x} * builtin.block_dim.y * builtin.block_dim.z;
    if (use_fibers && !reserve(n)) {
        fail("could not allocate fiber stacks for the block");
        return 1;
    }
    FaultGuard guard;
    if (sigsetjmp(fault_jump, 1) != 0) {
        char a[48], b[48], text[256];
        std::snprintf(text, sizeof text,
                      "illegal memory access (segmentation fault) in block %s, thread %s: an "
                      "index out of bounds, or a misaligned vector load?",
                      describe(builtin.block_idx, a), describe(builtin.thread_idx, b));
        fail(text);
        return 1;
    }
    for (unsigned bz = 0; bz < builtin.grid_dim.z; ++bz)
        for (unsigned by = 0; by < builtin.grid_dim.y; ++by)
            for (unsigned bx = 0; bx < builtin.grid_dim.x; ++bx) {
                builtin.block_idx = dim3{bx, by, bz};
                poison_shared(shared_bytes);
                if (use_fibers ? !run_block_fibers(n) : !run_block_threads(n, run)) return 1;
            }
    if (count::failure() != nullptr) {
        fail(count::failure());
        return 1;
    }
    return 0;
}

// ---- warp-level primitives (kernels that use them run as fibers) -------------------------
CLEMU_PLAIN inline int lane_id() { return static_cast<int>(linear(builtin.thread_idx) % 32); }

template <class T> CLEMU_PLAIN inline T exchange(int line, unsigned mask, T value, int source) {
    static_assert(sizeof(T) <= 8, "warp shuffles move values of at most 8 bytes");
    std::uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof(T));
    bits = warp_sync(line, mask, bits, source);
    std::memcpy(&value, &bits, sizeof(T));
    return value;
}

// CUDA's rules: the warp is cut into segments of `width` lanes (a power of two); a lane whose
// source falls outside its segment gets its own value back.
template <class T> CLEMU_PLAIN inline T shfl(int line, unsigned mask, T value, int source, int width = 32) {
    const int segment = lane_id() & -width;
    return exchange(line, mask, value, segment + (source & (width - 1)));
}
template <class T> CLEMU_PLAIN inline T shfl_up(int line, unsigned mask, T value, unsigned delta, int width = 32) {
    const int lane = lane_id();
    return exchange(line, mask, value, (lane & (width - 1)) >= static_cast<int>(delta) ? lane - static_cast<int>(delta) : lane);
}
template <class T> CLEMU_PLAIN inline T shfl_down(int line, unsigned mask, T value, unsigned delta, int width = 32) {
    const int lane = lane_id();
    return exchange(line, mask, value, (lane & (width - 1)) + static_cast<int>(delta) < width ? lane + static_cast<int>(delta) : lane);
}
template <class T> CLEMU_PLAIN inline T shfl_xor(int line, unsigned mask, T value, int lane_mask, int width = 32) {
    const int lane = lane_id(), source = lane ^ lane_mask;
    return exchange(line, mask, value, (source & -width) > (lane & -width) ? lane : source);
}
CLEMU_PLAIN inline void syncwarp(int line, unsigned mask = 0xffffffffu) { warp_sync(line, mask, 0, lane_id(), false); }

}  // namespace clemu

#define threadIdx (::clemu::builtin.thread_idx)
#define blockIdx (::clemu::builtin.block_idx)
#define blockDim (::clemu::builtin.block_dim)
#define gridDim (::clemu::builtin.grid_dim)
#define warpSize 32
#define __syncthreads() ::clemu::barrier(__LINE__, __COUNTER__)
#define __shfl_sync(...) ::clemu::shfl(__LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) ::clemu::shfl_up(__LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) ::clemu::shfl_down(__LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) ::clemu::shfl_xor(__LINE__, __VA_ARGS__)
#define __syncwarp(...) ::clemu::syncwarp(__LINE__ __VA_OPT__(,) __VA_ARGS__)

// Appended after the kernel source, once per __global__ function.
#define CLEMU_EXPORT(name) \
    extern "C" __attribute__((visibility("default"))) int clemu_launch_##name(const unsigned* grid, const unsigned* block, \
                                       void* shared, std::size_t shared_bytes, void** args, \
                                       int use_fibers, char* error, std::size_t size) { \
        return ::clemu::launch(&name, grid, block, shared, shared_bytes, args, use_fibers, error, \
                               size); \
    } \
    extern "C" __attribute__((visibility("default"))) const char* clemu_signature_##name() { return ::clemu::signature(&name); }

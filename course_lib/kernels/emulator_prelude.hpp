// Prelude of course_lib's CPU emulator of CUDA C (compiled with g++ -std=c++20).
//
// It gives a .cu file what it expects from the CUDA toolkit: the built-in variables
// threadIdx/blockIdx/blockDim/gridDim, the __global__/__device__/__shared__ qualifiers,
// __syncthreads(), atomics, vector types and the math intrinsics our kernels use.
//
// Execution model. The blocks of a launch run one after another on one OS thread. Inside a
// block, kernels without __syncthreads() run thread after thread; kernels with barriers run
// each CUDA thread as a fiber (ucontext): a thread runs until its next __syncthreads(), then
// the next thread runs, and when every thread of the block waits at the same barrier they all
// continue. __shared__ variables become function statics (one copy, shared by the block's
// threads; blocks run in turn, so one copy is enough); dynamic `extern __shared__` arrays
// become pointers into a per-launch buffer (course_lib.kernels.emulator rewrites them).
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

// ---- qualifiers -------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __shared__ static
#define __constant__ static
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

// ---- launch state and the fiber scheduler ---------------------------------------------
namespace clemu {

inline dim3 thread_idx, block_idx, block_dim, grid_dim;
inline unsigned char* dynamic_shared = nullptr;

enum class State { ready, waiting, done };
struct Fiber {
    ucontext_t context;  // used once, to start the fiber on its own stack
    jmp_buf resume;      // where it continues after a barrier
    dim3 index;
    State state;
    bool started;
    int barrier_line;
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
inline char* error_text = nullptr;
inline std::size_t error_size = 0;

inline void fail(const char* text) { std::snprintf(error_text, error_size, "%s", text); }

// __syncthreads(): park this fiber and return to the scheduler. Only kernels whose source
// calls __syncthreads() reach here, and those always run as fibers (the Python side checks).
// The memory clobbers stop g++ from keeping shared values in registers across the barrier.
inline void barrier(int line) {
    asm volatile("" ::: "memory");
    current->state = State::waiting;
    current->barrier_line = line;
    if (_setjmp(current->resume) == 0) _longjmp(scheduler, 1);
    asm volatile("" ::: "memory");
}

inline void fiber_main() {
    body(body_arg);
    current->state = State::done;
    _longjmp(scheduler, 1);
}

inline bool reserve(std::size_t n) {
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

inline const char* describe(const dim3& d, char* out) {
    std::snprintf(out, 48, "(%u, %u, %u)", d.x, d.y, d.z);
    return out;
}

// Runs one block with one fiber per thread; false (with error_text set) on a barrier misuse.
inline bool run_block_fibers(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
        Fiber& f = fibers[i];
        f.index = dim3{static_cast<unsigned>(i % block_dim.x),
                       static_cast<unsigned>((i / block_dim.x) % block_dim.y),
                       static_cast<unsigned>(i / (block_dim.x * block_dim.y))};
        f.state = State::ready;
        f.started = false;
    }
    char a[48], b[48], c[48], text[512];
    for (;;) {
        for (std::size_t i = 0; i < n; ++i) {
            if (fibers[i].state == State::done) continue;
            current = &fibers[i];
            thread_idx = current->index;
            if (_setjmp(scheduler) != 0) continue;  // the fiber reached a barrier or finished
            if (current->started) _longjmp(current->resume, 1);
            current->started = true;
            getcontext(&current->context);
            current->context.uc_stack.ss_sp = stacks + i * stack_bytes + 4096;
            current->context.uc_stack.ss_size = stack_bytes - 4096;
            current->context.uc_link = nullptr;
            makecontext(&current->context, fiber_main, 0);
            setcontext(&current->context);
        }
        const Fiber* waiting = nullptr;
        const Fiber* finished = nullptr;
        for (std::size_t i = 0; i < n; ++i) {
            const Fiber& f = fibers[i];
            if (f.state == State::done) {
                finished = finished ? finished : &f;
            } else if (waiting == nullptr) {
                waiting = &f;
            } else if (f.barrier_line != waiting->barrier_line) {
                std::snprintf(text, sizeof text,
                              "divergent __syncthreads() in block %s: thread %s waits at line %d, "
                              "thread %s at line %d; every thread of a block must reach the same "
                              "barrier",
                              describe(block_idx, a), describe(waiting->index, b),
                              waiting->barrier_line, describe(f.index, c), f.barrier_line);
                fail(text);
                return false;
            }
        }
        if (waiting == nullptr) return true;
        if (finished != nullptr) {
            std::snprintf(text, sizeof text,
                          "in block %s thread %s returned while thread %s waits at "
                          "__syncthreads() (line %d): a barrier must be reached by every thread "
                          "of the block, so do not return early from a kernel that synchronises",
                          describe(block_idx, a), describe(finished->index, b),
                          describe(waiting->index, c), waiting->barrier_line);
            fail(text);
            return false;
        }
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

// "float32*,float32,int32": one entry per parameter, '*' marking pointers.
template <class... A> inline const char* signature(void (*)(A...)) {
    static char text[512];
    text[0] = '\0';
    ((std::strcat(text, type_name<std::remove_cv_t<A>>::value),
      std::strcat(text, std::is_pointer_v<A> ? "*," : ",")), ...);
    std::size_t n = std::strlen(text);
    if (n > 0) text[n - 1] = '\0';
    return text;
}

template <class... A, std::size_t... I>
inline void call(void (*kernel)(A...), void** args, std::index_sequence<I...>) {
    kernel(*static_cast<std::remove_cv_t<A>*>(args[I])...);
}

// A memory fault inside a kernel becomes an error, like CUDA's "illegal memory access",
// instead of killing the Python process: the handler jumps back to the launch.
inline sigjmp_buf fault_jump;
inline void on_fault(int) { siglongjmp(fault_jump, 1); }

struct FaultGuard {
    struct sigaction old_segv {}, old_bus {};
    stack_t old_stack {};
    FaultGuard() {
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
    ~FaultGuard() {
        sigaction(SIGSEGV, &old_segv, nullptr);
        sigaction(SIGBUS, &old_bus, nullptr);
        sigaltstack(&old_stack, nullptr);
    }
};

template <class... A>
inline int launch(void (*kernel)(A...), const unsigned* grid, const unsigned* block,
                  void* shared, void** args, int use_fibers, char* error, std::size_t size) {
    error_text = error;
    error_size = size;
    grid_dim = dim3{grid[0], grid[1], grid[2]};
    block_dim = dim3{block[0], block[1], block[2]};
    dynamic_shared = static_cast<unsigned char*>(shared);
    auto run = [&] { call(kernel, args, std::index_sequence_for<A...>{}); };
    body = [](void* f) { (*static_cast<decltype(run)*>(f))(); };
    body_arg = &run;
    const std::size_t n = std::size_t{block_dim.x} * block_dim.y * block_dim.z;
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
                      describe(block_idx, a), describe(thread_idx, b));
        fail(text);
        return 1;
    }
    for (unsigned bz = 0; bz < grid_dim.z; ++bz)
        for (unsigned by = 0; by < grid_dim.y; ++by)
            for (unsigned bx = 0; bx < grid_dim.x; ++bx) {
                block_idx = dim3{bx, by, bz};
                if (use_fibers) {
                    if (!run_block_fibers(n)) return 1;
                    continue;
                }
                for (unsigned tz = 0; tz < block_dim.z; ++tz)
                    for (unsigned ty = 0; ty < block_dim.y; ++ty)
                        for (unsigned tx = 0; tx < block_dim.x; ++tx) {
                            thread_idx = dim3{tx, ty, tz};
                            run();
                        }
            }
    return 0;
}

}  // namespace clemu

#define threadIdx (::clemu::thread_idx)
#define blockIdx (::clemu::block_idx)
#define blockDim (::clemu::block_dim)
#define gridDim (::clemu::grid_dim)
#define warpSize 32
#define __syncthreads() ::clemu::barrier(__LINE__)

// Appended after the kernel source, once per __global__ function.
#define CLEMU_EXPORT(name) \
    extern "C" __attribute__((visibility("default"))) int clemu_launch_##name(const unsigned* grid, const unsigned* block, \
                                       void* shared, void** args, int use_fibers, char* error, \
                                       std::size_t size) { \
        return ::clemu::launch(&name, grid, block, shared, args, use_fibers, error, size); \
    } \
    extern "C" __attribute__((visibility("default"))) const char* clemu_signature_##name() { return ::clemu::signature(&name); }

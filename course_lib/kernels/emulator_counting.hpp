// Counting the memory traffic of an emulated launch (built only for course_lib's profile()).
//
// How accesses are seen: the counting library is compiled with g++ -fsanitize=thread, which
// puts a call __tsan_readN(address) / __tsan_writeN(address) before every load and store that
// is left in the optimised kernel. No ThreadSanitizer runtime is linked: the functions are
// defined below. Each call records the access if it falls in one of the launch's ranges (the
// kernel's array arguments and its __device__ variables, in the clemu_device section, =
// global memory; the dynamic shared buffer and the library's other writable data = shared
// memory, since __shared__ variables are statics there, except the emulator's built-in
// variables and __constant__ data); the call's return address identifies the instruction.
// The emulator's own code is not instrumented (CLEMU_PLAIN).
//
// How requests are formed, as on a GPU: the accesses of the 32 lanes of a warp (threads
// 32w .. 32w + 31 of the block, x fastest) to the same instruction in the same dynamic
// occurrence (the lane's k-th execution of it since the last synchronisation) form one
// warp-level request. A global request touches 32-byte sectors (and 128-byte lines, one L1
// wavefront each); a shared request is served in wavefronts: the distinct 4-byte words that
// fall in one of the 32 banks are served one per wavefront (the same word is broadcast), a
// phase of 32 lanes for 4-byte accesses, 16 for 8-byte, 8 for 16-byte ones.
#pragma once
#include <link.h>

namespace clemu::count {

#define CLEMU_COUNTERS(X)                                                                      \
    X(global_loads) X(global_load_bytes) X(global_stores) X(global_store_bytes)                \
    X(global_load_requests) X(global_store_requests) X(load_sectors) X(store_sectors)          \
    X(global_wavefronts) X(unique_sectors) X(shared_loads) X(shared_load_bytes)                \
    X(shared_stores) X(shared_store_bytes) X(shared_requests) X(shared_wavefronts)             \
    X(bank_conflicts) X(barriers) X(warp_syncs)
#define CLEMU_ENUM(name) name,
#define CLEMU_NAME(name) #name ","
enum Counter { CLEMU_COUNTERS(CLEMU_ENUM) counter_count };
inline constexpr char names[] = CLEMU_COUNTERS(CLEMU_NAME);
inline unsigned long long totals[counter_count];
inline const char* problem = nullptr;

enum Space { global, shared, ignored };
struct Range {
    std::uintptr_t begin, bytes;
    Space space;
    std::uint64_t* seen;  // one bit per 32-byte sector of a global range: touched yet?
};
inline constexpr int max_ranges = 64;
inline Range ranges[max_ranges];
inline int range_count = 0;

struct Access {
    std::uintptr_t address;
    std::uint32_t site, thread;  // the instruction (a slot of `sites`), the thread in the block
    std::uint32_t bytes;
    std::uint16_t range;
    bool store;
};

// Growable scratch arrays (plain realloc: this code runs between kernel instructions).
template <class T> struct Buffer {
    T* data = nullptr;
    std::size_t capacity = 0;
    CLEMU_PLAIN bool fit(std::size_t n) {
        if (n <= capacity) return true;
        std::size_t wanted = capacity ? capacity : 1024;
        while (wanted < n) wanted *= 2;
        T* grown = static_cast<T*>(std::realloc(data, wanted * sizeof(T)));
        if (grown == nullptr) {
            problem = "out of memory while counting accesses";
            return false;
        }
        data = grown;
        capacity = wanted;
        return true;
    }
};
inline Buffer<Access> log;
inline std::size_t log_size = 0;
inline Buffer<std::uint32_t> occurrence, group, order, start;
inline Buffer<std::uint64_t> keys;

// Instructions: an open-addressing table of return addresses; the slot is the instruction's id.
inline constexpr std::uint32_t site_slots = 1u << 13;
inline std::uintptr_t sites[site_slots];
inline std::uint32_t seen_count[site_slots], groups_of[site_slots], base[site_slots];
inline std::uint32_t used[site_slots];
inline std::uint32_t used_count = 0;

CLEMU_PLAIN inline std::uint32_t site_of(std::uintptr_t address) {
    std::uint32_t slot = static_cast<std::uint32_t>((address * 0x9E3779B97F4A7C15ull) >> 51);
    for (std::uint32_t tries = 0; tries < site_slots; ++tries, slot = (slot + 1) % site_slots) {
        if (sites[slot] == address) return slot;
        if (sites[slot] == 0) {
            sites[slot] = address;
            return slot;
        }
    }
    problem = "the kernel has more memory instructions than the counter can tell apart (8192)";
    return 0;
}

CLEMU_PLAIN inline void record(void* pointer, std::uint32_t bytes, bool store, void* site) {
    const auto address = reinterpret_cast<std::uintptr_t>(pointer);
    for (int r = 0; r < range_count; ++r) {
        if (address - ranges[r].begin >= ranges[r].bytes) continue;
        if (ranges[r].space == ignored || !log.fit(log_size + 1)) return;
        log.data[log_size++] = Access{address, site_of(reinterpret_cast<std::uintptr_t>(site)),
                                      linear(builtin.thread_idx), bytes, static_cast<std::uint16_t>(r),
                                      store};
        return;
    }
}

CLEMU_PLAIN inline void sort(std::uint64_t* values, std::size_t n) {  // insertion sort: n <= 64
    for (std::size_t i = 1; i < n; ++i) {
        const std::uint64_t v = values[i];
        std::size_t j = i;
        for (; j > 0 && values[j - 1] > v; --j) values[j] = values[j - 1];
        values[j] = v;
    }
}

CLEMU_PLAIN inline std::size_t unique(std::uint64_t* values, std::size_t n) {
    sort(values, n);
    std::size_t kept = 0;
    for (std::size_t i = 0; i < n; ++i)
        if (kept == 0 || values[kept - 1] != values[i]) values[kept++] = values[i];
    return kept;
}

// One warp-level request to global memory: its sectors, lines and first-time sectors.
CLEMU_PLAIN inline void global_request(const Access* const* members, std::size_t n) {
    std::size_t count = 0;
    for (std::size_t m = 0; m < n; ++m) {
        const Access& a = *members[m];
        const std::uintptr_t offset = a.address - ranges[a.range].begin;
        for (std::uintptr_t s = offset / 32; s <= (offset + a.bytes - 1) / 32; ++s)
            if (keys.fit(count + 1)) keys.data[count++] = std::uint64_t{a.range} << 48 | s;
        totals[a.store ? global_stores : global_loads] += 1;
        totals[a.store ? global_store_bytes : global_load_bytes] += a.bytes;
    }
    const std::size_t sectors = unique(keys.data, count);
    std::size_t lines = 0;
    for (std::size_t i = 0; i < sectors; ++i) {
        const std::uint64_t range = keys.data[i] >> 48, sector = keys.data[i] & 0xFFFFFFFFFFFFull;
        if (i == 0 || keys.data[i - 1] >> 2 != keys.data[i] >> 2) ++lines;
        std::uint64_t& word = ranges[range].seen[sector / 64];
        if (!(word >> (sector % 64) & 1u)) ++totals[unique_sectors];
        word |= std::uint64_t{1} << (sector % 64);
    }
    const bool store = members[0]->store;
    totals[store ? global_store_requests : global_load_requests] += 1;
    totals[store ? store_sectors : load_sectors] += sectors;
    totals[global_wavefronts] += lines;
}

// One warp-level request to shared memory: wavefronts phase by phase, bank by bank.
CLEMU_PLAIN inline void shared_request(const Access* const* members, std::size_t n) {
    const std::uint32_t bytes = members[0]->bytes;
    const std::uint32_t lanes_per_phase = bytes >= 16 ? 8 : (bytes == 8 ? 16 : 32);
    for (std::uint32_t phase = 0; phase < 32 / lanes_per_phase; ++phase) {
        std::size_t count = 0;
        for (std::size_t m = 0; m < n; ++m) {
            const Access& a = *members[m];
            if (a.thread % 32 / lanes_per_phase != phase) continue;
            for (std::uintptr_t w = a.address / 4; w <= (a.address + a.bytes - 1) / 4; ++w)
                if (keys.fit(count + 1)) keys.data[count++] = w;
        }
        if (count == 0) continue;
        const std::size_t words = unique(keys.data, count);
        std::uint32_t per_bank[32] = {}, wavefronts = 0;
        for (std::size_t i = 0; i < words; ++i) {
            const std::uint32_t k = ++per_bank[keys.data[i] % 32];
            wavefronts = k > wavefronts ? k : wavefronts;
        }
        totals[shared_wavefronts] += wavefronts;
        totals[bank_conflicts] += wavefronts - 1;
    }
    for (std::size_t m = 0; m < n; ++m) {
        const bool store = members[m]->store;
        totals[store ? shared_stores : shared_loads] += 1;
        totals[store ? shared_store_bytes : shared_load_bytes] += members[m]->bytes;
    }
    totals[shared_requests] += 1;
}

// The members of one group (same instruction, same occurrence), split by memory space.
CLEMU_PLAIN inline void request(const Access* const* members, std::size_t n) {
    const Access* split[2][32];
    std::size_t count[2] = {0, 0};
    for (std::size_t m = 0; m < n && m < 32; ++m) {
        const int space = ranges[members[m]->range].space == shared ? 1 : 0;
        split[space][count[space]++] = members[m];
    }
    if (count[0]) global_request(split[0], count[0]);
    if (count[1]) shared_request(split[1], count[1]);
}

// The accesses log[first, last) of one warp, thread after thread in program order: number
// each access by its occurrence, group equal (instruction, occurrence), count each group.
CLEMU_PLAIN inline void flush_warp(std::size_t first, std::size_t last) {
    const std::size_t n = last - first;
    if (!occurrence.fit(n) || !group.fit(n) || !order.fit(n) || !start.fit(n + 1)) return;
    const Access* records = log.data + first;
    std::uint32_t thread = records[0].thread;
    for (std::size_t i = 0; i < n; ++i) {
        if (records[i].thread != thread) {  // the next lane counts from zero again
            for (std::uint32_t u = 0; u < used_count; ++u) seen_count[used[u]] = 0;
            thread = records[i].thread;
        }
        const std::uint32_t s = records[i].site;
        if (groups_of[s] == 0) used[used_count++] = s;
        occurrence.data[i] = seen_count[s]++;
        groups_of[s] = seen_count[s] > groups_of[s] ? seen_count[s] : groups_of[s];
    }
    std::uint32_t groups = 0;
    for (std::uint32_t u = 0; u < used_count; ++u) {
        base[used[u]] = groups;
        groups += groups_of[used[u]];
    }
    // Counting sort by group, so each group's members lie together, in lane order.
    for (std::uint32_t g = 0; g <= groups; ++g) start.data[g] = 0;
    for (std::size_t i = 0; i < n; ++i) {
        group.data[i] = base[records[i].site] + occurrence.data[i];
        ++start.data[group.data[i] + 1];
    }
    for (std::uint32_t g = 0; g < groups; ++g) start.data[g + 1] += start.data[g];
    for (std::size_t i = 0; i < n; ++i) order.data[start.data[group.data[i]]++] = static_cast<std::uint32_t>(i);
    const Access* members[32];
    std::size_t i = 0;
    while (i < n) {
        const std::uint32_t g = group.data[order.data[i]];
        std::size_t m = 0;
        for (; i < n && group.data[order.data[i]] == g; ++i)
            if (m < 32) members[m++] = records + order.data[i];
        request(members, m);
    }
    for (std::uint32_t u = 0; u < used_count; ++u) seen_count[used[u]] = groups_of[used[u]] = 0;
    used_count = 0;
}

// Counts the recorded accesses warp by warp (the log holds whole threads, in thread order).
CLEMU_PLAIN inline void flush() {
    std::size_t first = 0;
    while (first < log_size) {
        std::size_t last = first;
        while (last < log_size && log.data[last].thread / 32 == log.data[first].thread / 32) ++last;
        flush_warp(first, last);
        first = last;
    }
    log_size = 0;
}

CLEMU_PLAIN inline void barrier_passed() { ++totals[barriers]; }
CLEMU_PLAIN inline void warp_synced() { ++totals[warp_syncs]; }
inline const char* failure() { return problem; }

CLEMU_PLAIN inline bool add_range(std::uintptr_t begin, std::uintptr_t bytes, Space space) {
    if (bytes == 0) return true;
    if (range_count == max_ranges) return false;
    std::uint64_t* seen = nullptr;
    if (space == global && (seen = static_cast<std::uint64_t*>(std::calloc(bytes / 2048 + 1, 8))) == nullptr)
        return false;
    ranges[range_count++] = Range{begin, bytes, space, seen};
    return true;
}

// The writable segments of this library hold its static variables: __shared__ ones (those of
// templates too, which g++ leaves out of the clemu_shared section).
CLEMU_PLAIN inline int add_own_segments(dl_phdr_info* info, std::size_t, void* ok) {
    const auto self = reinterpret_cast<std::uintptr_t>(&builtin);
    bool mine = false;
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr)& h = info->dlpi_phdr[i];
        const std::uintptr_t begin = info->dlpi_addr + h.p_vaddr;
        mine = mine || (h.p_type == PT_LOAD && self - begin < h.p_memsz);
    }
    for (int i = 0; mine && i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr)& h = info->dlpi_phdr[i];
        if (h.p_type == PT_LOAD && (h.p_flags & PF_W))
            *static_cast<bool*>(ok) &= add_range(info->dlpi_addr + h.p_vaddr, h.p_memsz, shared);
    }
    return mine ? 1 : 0;
}

}  // namespace clemu::count

// __constant__ variables live in this section (see the __constant__ macro): not counted.
extern "C" char __start_clemu_constant[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_clemu_constant[] __attribute__((weak, visibility("hidden")));
// __device__ variables live in this section (course_lib.kernels.emulator marks them): global.
extern "C" char __start_clemu_device[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_clemu_device[] __attribute__((weak, visibility("hidden")));

// Called by Python before a counted launch: the global (shared == 0) and shared ranges.
extern "C" __attribute__((visibility("default"))) CLEMU_PLAIN int clemu_count_begin(
    const std::uintptr_t* begins, const std::uintptr_t* sizes, const int* shared, int n) {
    using namespace clemu::count;
    for (int r = 0; r < range_count; ++r) std::free(ranges[r].seen);
    range_count = 0;
    log_size = 0;
    problem = nullptr;
    for (auto& total : totals) total = 0;
    // The first matching range decides: ignored ones first, the library's segments last.
    const auto constants = reinterpret_cast<std::uintptr_t>(__start_clemu_constant);
    bool ok = add_range(reinterpret_cast<std::uintptr_t>(&clemu::builtin), sizeof clemu::builtin, ignored) &&
              add_range(constants, reinterpret_cast<std::uintptr_t>(__stop_clemu_constant) - constants, ignored);
    for (int r = 0; r < n; ++r) ok = ok && add_range(begins[r], sizes[r], shared[r] ? Space::shared : global);
    const auto device = reinterpret_cast<std::uintptr_t>(__start_clemu_device);
    ok = ok && add_range(device, reinterpret_cast<std::uintptr_t>(__stop_clemu_device) - device, global);
    dl_iterate_phdr(add_own_segments, &ok);
    return ok ? 0 : 1;
}

extern "C" __attribute__((visibility("default"))) CLEMU_PLAIN void clemu_count_read(unsigned long long* out) {
    for (int c = 0; c < clemu::count::counter_count; ++c) out[c] = clemu::count::totals[c];
}

extern "C" __attribute__((visibility("default"))) const char* clemu_count_names() { return clemu::count::names; }

// The hooks g++'s -fsanitize=thread instrumentation calls.
#define CLEMU_HOOK(N)                                                                          \
    extern "C" CLEMU_PLAIN void __tsan_read##N(void* p) {                                      \
        ::clemu::count::record(p, N, false, __builtin_return_address(0));                      \
    }                                                                                          \
    extern "C" CLEMU_PLAIN void __tsan_write##N(void* p) {                                     \
        ::clemu::count::record(p, N, true, __builtin_return_address(0));                       \
    }                                                                                          \
    extern "C" CLEMU_PLAIN void __tsan_unaligned_read##N(void* p) {                            \
        ::clemu::count::record(p, N, false, __builtin_return_address(0));                      \
    }                                                                                          \
    extern "C" CLEMU_PLAIN void __tsan_unaligned_write##N(void* p) {                           \
        ::clemu::count::record(p, N, true, __builtin_return_address(0));                       \
    }
CLEMU_HOOK(1)
CLEMU_HOOK(2)
CLEMU_HOOK(4)
CLEMU_HOOK(8)
CLEMU_HOOK(16)
extern "C" CLEMU_PLAIN void __tsan_read_range(void* p, std::size_t n) {
    ::clemu::count::record(p, static_cast<std::uint32_t>(n), false, __builtin_return_address(0));
}
extern "C" CLEMU_PLAIN void __tsan_write_range(void* p, std::size_t n) {
    ::clemu::count::record(p, static_cast<std::uint32_t>(n), true, __builtin_return_address(0));
}
extern "C" void __tsan_init() {}

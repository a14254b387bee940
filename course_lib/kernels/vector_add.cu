// Vector addition c = a + b: the lecture's C loop `for (i = 0; i < n; i++) c[i] = a[i] + b[i];`
// turned inside out. The loop disappears; each CUDA thread computes the one index it owns.

// One thread per element. Neighbouring threads of a warp read neighbouring floats, so each
// warp's 32 loads of 4 bytes coalesce into one request: four 32-byte sectors, one 128-byte line.
extern "C" __global__ void vector_add(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {  // the grid is rounded up to whole blocks: the last threads have no element
        c[i] = a[i] + b[i];
    }
}

// Four elements per thread with 16-byte float4 loads and stores: a quarter of the threads and
// of the memory instructions. The arrays must start 16-byte aligned (CuPy allocations are).
// A last group of fewer than four elements falls back to scalar code.
extern "C" __global__ void vector_add_float4(const float* __restrict__ a,
                                             const float* __restrict__ b,
                                             float* __restrict__ c, int n) {
    int group = blockIdx.x * blockDim.x + threadIdx.x;
    int i = 4 * group;
    if (i + 3 < n) {
        float4 x = reinterpret_cast<const float4*>(a)[group];
        float4 y = reinterpret_cast<const float4*>(b)[group];
        reinterpret_cast<float4*>(c)[group] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z,
                                                          x.w + y.w);
    } else {
        for (; i < n; ++i) {
            c[i] = a[i] + b[i];
        }
    }
}

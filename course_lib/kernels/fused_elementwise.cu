// Template of a fused elementwise kernel, filled in by course_lib.kernels.fused_template
// (the fusion pass uses it). As shipped it holds the lecture's example E = D + (A + B) * C, so the file
// compiles as it is; the fill-in points are the lines marked "template:".
//
// One kernel reads every input once and writes every output once, instead of one kernel (and
// one round trip through memory) per operation: for E = D + (A + B) * C that is 4 loads and 1
// store for 3 flops (intensity 3/5) instead of 9 accesses for 3 flops (1/3) over three kernels.
// A grid-stride loop lets any grid size cover any n.
// NumPy's maximum: a NaN in either input wins (fmaxf would return the other input).
__device__ __forceinline__ float maximumf(float a, float b) { return (a > b || a != a) ? a : b; }

extern "C" __global__ void fused_add_mul_add(  // template: name
    const float* __restrict__ in_a, const float* __restrict__ in_b,  // template: inputs
    const float* __restrict__ in_c, const float* __restrict__ in_d,  // template: inputs
    float* __restrict__ out_e,  // template: outputs
    int n) {
    int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float a = in_a[i], b = in_b[i], c = in_c[i], d = in_d[i];  // template: loads
        out_e[i] = d + (a + b) * c;  // template: body
    }
}

// Naive matrix multiplication C = A @ B with A (M, K), B (K, N), C (M, N), row-major float32.
// One thread per output element, on a 2-D grid: x walks the columns of C, y its rows.
// Each thread reads a whole row of A and a whole column of B from global memory: 2K load
// instructions (8K bytes) for 2K flops, 0.25 flop per byte *loaded by instructions*. That is not
// DRAM traffic: neighbouring threads load the same values of A and B, and the caches serve most
// of those loads (kernels.profile() counts the instructions and the distinct sectors).
extern "C" __global__ void matmul_naive(const float* __restrict__ A, const float* __restrict__ B,
                                        float* __restrict__ C, int M, int N, int K) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += A[row * K + k] * B[k * N + col];
        }
        C[row * N + col] = acc;
    }
}

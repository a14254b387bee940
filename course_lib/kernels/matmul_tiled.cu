// Shared-memory tiled matrix multiplication C = A @ B, A (M, K), B (K, N), row-major float32.
// Launch with blocks of TILE x TILE threads, one per element of a TILE x TILE tile of C.
//
// The block walks along K one tile at a time: its threads copy a TILE x TILE tile of A and of
// B into shared memory (one element each), wait at a barrier, and then every thread reads
// TILE values of each tile from fast shared memory. Each float loaded from global memory is
// used TILE times instead of once, which raises the arithmetic intensity by a factor TILE.
#define TILE 16

extern "C" __global__ void matmul_tiled(const float* __restrict__ A, const float* __restrict__ B,
                                        float* __restrict__ C, int M, int N, int K) {
    __shared__ float A_tile[TILE][TILE];
    __shared__ float B_tile[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty;
    int col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        // Out-of-range elements load as zero, so ragged edges need no special case below.
        A_tile[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
        B_tile[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;
        __syncthreads();  // the tiles are complete before anyone reads them
        for (int k = 0; k < TILE; ++k) {
            acc += A_tile[ty][k] * B_tile[k][tx];
        }
        __syncthreads();  // everyone is done reading before the next tiles overwrite them
    }
    if (row < M && col < N) {
        C[row * N + col] = acc;
    }
}

// Register-tiled ("2-D block-tiled") matrix multiplication C = A @ B, A (M, K), B (K, N),
// row-major float32: the rung after matmul_tiled.cu.
//
// A block computes a BM x BN = 64 x 64 tile of C with 16 x 16 = 256 threads, so each thread
// computes TM x TN = 4 x 4 outputs (a 64 x 64 block of threads would be 4096 threads: CUDA
// allows 1024). Per step of BK = 8 along K the block stages a 64 x 8 tile of A and an 8 x 64
// tile of B in shared memory; then, for each k, a thread reads TM values of A and TN of B
// into registers and does TM * TN multiply-adds with them: 8 shared loads for 16 multiply-adds,
// where matmul_tiled needs 2 for 1. Each global float is reused 64 times (BM), not 16.
//
// Thread (tx, ty) owns rows ty + 16 i and columns tx + 16 j of the tile: neighbouring lanes
// read neighbouring words of B_tile (no bank conflicts) and write neighbouring floats of C.
// Launch: block (16, 16), grid (ceil(N / 64), ceil(M / 64)).
#define BM 64
#define BN 64
#define BK 8
#define TM 4
#define TN 4
#define STEP_M (BM / TM)  // 16 = blockDim.y
#define STEP_N (BN / TN)  // 16 = blockDim.x

extern "C" __global__ void matmul_register_tiled(const float* __restrict__ A,
                                                 const float* __restrict__ B,
                                                 float* __restrict__ C, int M, int N, int K) {
    __shared__ float A_tile[BM][BK];
    __shared__ float B_tile[BK][BN];
    int tx = threadIdx.x, ty = threadIdx.y;
    int thread = ty * blockDim.x + tx, threads = blockDim.x * blockDim.y;
    int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        // Neighbouring threads load neighbouring floats; out-of-range elements load as zero.
        for (int e = thread; e < BM * BK; e += threads) {
            int r = e / BK, c = e % BK;
            A_tile[r][c] = (row0 + r < M && k0 + c < K) ? A[(row0 + r) * K + k0 + c] : 0.0f;
        }
        for (int e = thread; e < BK * BN; e += threads) {
            int r = e / BN, c = e % BN;
            B_tile[r][c] = (k0 + r < K && col0 + c < N) ? B[(k0 + r) * N + col0 + c] : 0.0f;
        }
        __syncthreads();  // the tiles are complete before anyone reads them
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];  // registers: each value is used TN (or TM) times below
            for (int i = 0; i < TM; ++i) a[i] = A_tile[ty + STEP_M * i][k];
            for (int j = 0; j < TN; ++j) b[j] = B_tile[k][tx + STEP_N * j];
            for (int i = 0; i < TM; ++i) {
                for (int j = 0; j < TN; ++j) {
                    acc[i][j] += a[i] * b[j];
                }
            }
        }
        __syncthreads();  // everyone is done reading before the next tiles overwrite them
    }
    for (int i = 0; i < TM; ++i) {
        for (int j = 0; j < TN; ++j) {
            int row = row0 + ty + STEP_M * i, col = col0 + tx + STEP_N * j;
            if (row < M && col < N) {
                C[row * N + col] = acc[i][j];
            }
        }
    }
}

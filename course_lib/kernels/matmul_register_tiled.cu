// Register-tiled ("2-D block-tiled", vectorised) matrix multiplication C = A @ B, A (M, K),
// B (K, N), row-major float32: the rung after matmul_tiled.cu, after Simon Boehm's ladder.
//
// A block computes a BM x BN = 128 x 128 tile of C with 16 x 16 = 256 threads, so each thread
// computes TM x TN = 8 x 8 outputs held in registers. Per step of BK = 8 along K the block
// stages a 128 x 8 tile of A (stored transposed, so a thread's 8 values of A for one k are
// contiguous) and an 8 x 128 tile of B in shared memory: each thread loads one float4 of
// each. Then, for each k, a thread reads 8 values of A and 8 of B (four float4 loads from
// shared memory) and does 64 multiply-adds with them: 4 shared loads for 64 multiply-adds,
// where matmul_tiled needs 2 for 1. Each global float is reused 128 times, not 16.
//
// Thread (tx, ty) owns rows ty*4 + {0..3} and 64 + ty*4 + {0..3} of the tile, and likewise
// columns: neighbouring lanes read neighbouring float4s of shared memory (no bank conflicts)
// and write neighbouring float4s of C. Ragged edges (M, N, K not multiples of the tiles, rows
// not on 16 bytes) fall back to guarded scalar accesses.
// Launch: block (16, 16), grid (ceil(N / 128), ceil(M / 128)); arrays 16-byte aligned.
#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8
#define HALF 64      // a thread's rows (columns) come in two groups of 4, 64 apart
#define PAD 4        // A_tile rows padded: the transposed stores hit distinct banks

// Four consecutive floats of row `row` of a (rows, cols) matrix from column `col` (zeros
// outside it): one float4 load when they are all inside and rows start on 16 bytes.
__device__ float4 load4(const float* m, int rows, int cols, int row, int col) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (row >= rows) {
        return v;
    }
    const float* p = m + (long long)row * cols + col;
    if (cols % 4 == 0 && col + 4 <= cols) {
        return *reinterpret_cast<const float4*>(p);
    }
    v.x = col < cols ? p[0] : 0.0f;
    v.y = col + 1 < cols ? p[1] : 0.0f;
    v.z = col + 2 < cols ? p[2] : 0.0f;
    v.w = col + 3 < cols ? p[3] : 0.0f;
    return v;
}

// Store four consecutive floats at (row, col) of a (rows, cols) matrix, those inside it.
__device__ void store4(float* m, int rows, int cols, int row, int col, const float* v) {
    if (row >= rows) {
        return;
    }
    float* p = m + (long long)row * cols + col;
    if (cols % 4 == 0 && col + 4 <= cols) {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
        return;
    }
    for (int j = 0; j < 4 && col + j < cols; ++j) {
        p[j] = v[j];
    }
}

extern "C" __global__ void matmul_register_tiled(const float* __restrict__ A,
                                                 const float* __restrict__ B,
                                                 float* __restrict__ C, int M, int N, int K) {
    __align__(16) __shared__ float A_tile[BK][BM + PAD];  // A_tile[k][r] = A[row0 + r][k0 + k]
    __align__(16) __shared__ float B_tile[BK][BN];
    int tx = threadIdx.x, ty = threadIdx.y;
    int thread = ty * blockDim.x + tx;
    int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    int a_row = thread / 2, a_col = (thread % 2) * 4;  // 256 float4s cover 128 x 8 of A
    int b_row = thread / 32, b_col = (thread % 32) * 4;  // and 8 x 128 of B
    float acc[TM][TN] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        float4 a = load4(A, M, K, row0 + a_row, k0 + a_col);
        A_tile[a_col + 0][a_row] = a.x;
        A_tile[a_col + 1][a_row] = a.y;
        A_tile[a_col + 2][a_row] = a.z;
        A_tile[a_col + 3][a_row] = a.w;
        *reinterpret_cast<float4*>(&B_tile[b_row][b_col]) =
            load4(B, K, N, k0 + b_row, col0 + b_col);
        __syncthreads();  // the tiles are complete before anyone reads them
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a_reg[TM], b_reg[TN];  // registers: each value is used 8 times below
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float4 av = *reinterpret_cast<const float4*>(&A_tile[k][h * HALF + ty * 4]);
                float4 bv = *reinterpret_cast<const float4*>(&B_tile[k][h * HALF + tx * 4]);
                a_reg[4 * h] = av.x, a_reg[4 * h + 1] = av.y, a_reg[4 * h + 2] = av.z;
                a_reg[4 * h + 3] = av.w;
                b_reg[4 * h] = bv.x, b_reg[4 * h + 1] = bv.y, b_reg[4 * h + 2] = bv.z;
                b_reg[4 * h + 3] = bv.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    acc[i][j] += a_reg[i] * b_reg[j];
                }
            }
        }
        __syncthreads();  // everyone is done reading before the next tiles overwrite them
    }
    for (int i = 0; i < TM; ++i) {
        int row = row0 + (i / 4) * HALF + ty * 4 + i % 4;
        for (int h = 0; h < 2; ++h) {
            store4(C, M, N, row, col0 + h * HALF + tx * 4, &acc[i][4 * h]);
        }
    }
}

// Matrix transpose y = x^T of a (rows, cols) row-major float32 matrix, three ways.
// Launch with blocks of TILE x ROWS threads over a grid of TILE x TILE tiles of x:
// grid (ceil(cols / TILE), ceil(rows / TILE)); each thread moves TILE / ROWS elements.
#define TILE 32
#define ROWS 8

// Naive: a warp reads a row of the tile (32 neighbouring floats, coalesced) and writes it as a
// column of y: 32 addresses `rows` floats apart, 32 sectors for 128 useful bytes.
extern "C" __global__ void transpose_naive(const float* __restrict__ x, float* __restrict__ y,
                                           int rows, int cols) {
    int col = blockIdx.x * TILE + threadIdx.x;
    for (int r = threadIdx.y; r < TILE; r += ROWS) {
        int row = blockIdx.y * TILE + r;
        if (row < rows && col < cols) {
            y[(long long)col * rows + row] = x[(long long)row * cols + col];
        }
    }
}

// Through shared memory: the block reads a tile by rows (coalesced), waits, and writes it by
// rows of y (coalesced) reading the tile by columns. Column reads of tile[TILE][TILE] hit
// one bank 32 times (addresses 32 words apart): a 32-way bank conflict. One padding column,
// tile[TILE][TILE + 1], puts the 32 words of a column in 32 different banks.
template <int PAD>
__device__ void transpose_tiled(const float* __restrict__ x, float* __restrict__ y, int rows,
                                int cols) {
    __shared__ float tile[TILE][TILE + PAD];
    int col = blockIdx.x * TILE + threadIdx.x;
    for (int r = threadIdx.y; r < TILE; r += ROWS) {
        int row = blockIdx.y * TILE + r;
        if (row < rows && col < cols) {
            tile[r][threadIdx.x] = x[(long long)row * cols + col];
        }
    }
    __syncthreads();  // the whole tile is in shared memory before anyone reads a column
    int y_col = blockIdx.y * TILE + threadIdx.x;  // a row of x is a column of y
    for (int r = threadIdx.y; r < TILE; r += ROWS) {
        int y_row = blockIdx.x * TILE + r;
        if (y_row < cols && y_col < rows) {
            y[(long long)y_row * rows + y_col] = tile[threadIdx.x][r];
        }
    }
}

extern "C" __global__ void transpose_shared(const float* __restrict__ x, float* __restrict__ y,
                                            int rows, int cols) {
    transpose_tiled<0>(x, y, rows, cols);
}

extern "C" __global__ void transpose_padded(const float* __restrict__ x, float* __restrict__ y,
                                            int rows, int cols) {
    transpose_tiled<1>(x, y, rows, cols);
}

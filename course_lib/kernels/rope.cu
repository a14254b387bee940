// Rotary position embedding (RoPE), half-split as in LLaMA / Hugging Face's rotate_half.
// x is (rows, head_dim) row-major float32 whose rows are laid out (outer, seq_len, inner): row r
// sits at position (r / inner) % seq_len. inner = 1 is any (..., seq_len, head_dim) array such as
// (batch, heads, seq_len, head_dim); inner = heads is the projections' own (batch, seq_len,
// heads, head_dim). cos and sin are (seq_len, head_dim / 2) tables: angle[t][i] = t *
// theta^(-2i / head_dim). One thread per pair (x[i], x[i + half]), rotated by angle[t][i]:
//   y[i]        = x[i] * cos - x[i + half] * sin
//   y[i + half] = x[i + half] * cos + x[i] * sin
extern "C" __global__ void rope(const float* __restrict__ x, const float* __restrict__ cos_table,
                                const float* __restrict__ sin_table, float* __restrict__ y,
                                int rows, int seq_len, int inner, int head_dim) {
    int half = head_dim / 2;
    long long pair = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (pair >= (long long)rows * half) {
        return;
    }
    int row = (int)(pair / half);
    int i = (int)(pair % half);
    int t = (row / inner) % seq_len;
    float c = cos_table[t * half + i];
    float s = sin_table[t * half + i];
    const float* x_row = x + (long long)row * head_dim;
    float* y_row = y + (long long)row * head_dim;
    float first = x_row[i];
    float second = x_row[i + half];
    y_row[i] = first * c - second * s;
    y_row[i + half] = second * c + first * s;
}

// AdamW's update (course_lib/models/optim.py) as two elementwise kernels: one for each new
// moment, one for the new parameter. NumPy or CuPy code runs each line of the update as its
// own pass over the parameter (3 passes for a moment, 6 for the update, with temporaries);
// here each new array costs one read of its inputs and one write. Grid-stride loops, so any
// grid covers any size.
//
// The scalar factors come from 0-d device arrays (lr as float64, step as int64): reading them
// on the host would make the CPU wait for the GPU once per parameter. Every thread computes
// them, in double precision, as optim.py does before casting to float32.

// m' = beta * m + (1 - beta) * g^power (power 1: the first moment, 2: the second).
extern "C" __global__ void adam_moment(const float* __restrict__ m, const float* __restrict__ g,
                                       float* __restrict__ out, float beta, float one_minus_beta,
                                       int power, long long n) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        float step = power == 2 ? g[i] * g[i] : g[i];
        out[i] = m[i] * beta + one_minus_beta * step;
    }
}

// theta' = theta * (1 - lr * weight_decay) - lr / (1 - beta1^t) * m' / (sqrt(v' / (1 - beta2^t)) + eps)
// with the bias corrections folded into two factors, as the array code computes them.
extern "C" __global__ void adamw_update(const float* __restrict__ param,
                                        const float* __restrict__ m, const float* __restrict__ v,
                                        const double* __restrict__ lr,
                                        const long long* __restrict__ step,
                                        float* __restrict__ out, double beta1, double beta2,
                                        float eps, double weight_decay, long long n) {
    double t = (double)step[0];
    float decay = (float)(1.0 - lr[0] * weight_decay);
    float inv_correction2 = (float)(1.0 / sqrt(1.0 - pow(beta2, t)));
    float step_size = (float)(lr[0] / (1.0 - pow(beta1, t)));
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        float theta = weight_decay != 0.0 ? param[i] * decay : param[i];
        float denom = sqrtf(v[i]) * inv_correction2 + eps;
        out[i] = theta - (m[i] / denom) * step_size;
    }
}

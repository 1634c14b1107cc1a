## kernels: cpu/ (C, OpenMP, SIMD), cuda/ (.cu), common/ (shared inline math)

// The math of every elementwise op on the GPU, in one place: the precompiled kernels
// (elementwise*.cu) include this file, and the fusion compiler pastes its text in front of the
// kernels it generates for NVRTC, so an op gives the same bits whether it ran alone or fused.
//
// Because NVRTC compiles it without headers, this file includes nothing, defines no globals and
// uses only what NVRTC knows built in: CUDA's math functions (expf, erff, log1pf, ...) and
// rounding intrinsics (__fadd_rn, __fmul_rn, ...). Every function is __device__
// __forceinline__ (__host__ __device__ where the code is plain C++, Philox and cast, so that a
// host program can check them bit for bit against core/random.c and core/dtype.c).
//
// Why the _rn intrinsics: nvcc and NVRTC contract a * b + c into one fused multiply-add by
// default, also across inlined calls (eg_math_add(eg_math_mul(a, b), c) in a fused kernel);
// the CPU rounds the product and the sum separately (it is built without contraction). The
// intrinsics are never contracted, and stay correctly rounded under -prec-div=false and
// -prec-sqrt=false. The fusion compiler must not pass --use_fast_math (or -ftz=true): it
// flushes subnormals, intrinsics included, and swaps expf and friends for approximations.
//
// ---- THE CONTRACT (the fusion generator depends on these names and parameter orders) ----
// Value types: f32 float, f64 double, i32 int, i64 long long, u8 unsigned char, bool unsigned
// char in memory (0 or 1 as written by Eagle; any non-zero byte reads as true where a bool is
// a condition or a cast's source). Integer overloads take exactly int / long long: a value of
// type long (what int64_t is on Linux) is ambiguous, so generated code must spell long long.
// For an op with dtype T (the member's value dtype):
//   unary, T in {float, double}:
//     eg_math_neg abs exp log sqrt rsqrt sin cos tanh sigmoid relu gelu softplus sign square
//             reciprocal erf (x)                                              -> T
//     eg_math_clip(x, lo, hi): lo = attrs->scalars[0], hi = attrs->scalars[1], passed as
//             double (the function rounds them to T, as the CPU does)          -> T
//   binary, a and b of one T:
//     eg_math_add sub mul div maximum minimum (a, b)   T in {float, double, int, long long}
//     eg_math_pow(a, b), eg_math_relu_backward(x, g)    T in {float, double}     -> T
//   compare, T in {float, double, int, long long, unsigned char} (u8 and bool both compare
//   their raw bytes as unsigned char, like the CPU):
//     eg_math_equal not_equal less less_equal greater greater_equal (a, b)    -> bool
//   eg_math_where(cond, a, b): cond anything convertible to bool (a bool value or the
//     unsigned char byte of a bool tensor), a and b of one type T               -> T
//   eg_math_mul_add(x, scale, shift), T in {float, double}: x * scale + shift  -> T
//   eg_math_cast<To, From>(x): To and From each one of float, double, int, long long,
//     unsigned char (u8) and bool (bool tensors: From = bool with the stored byte as the
//     argument; To = bool returns a bool, stored as the byte 0 or 1)           -> To
// Attributes that come as doubles may be written as any finite C++ literal; an infinite bound
// (a clip open on one side) must be an expression such as (1.0 / 0.0) or -(1.0 / 0.0).
// Not fusable (no fusion compiler call): eg_math_dropout(x, word, threshold, scale), used by
// the dropout kernel with eg_math_philox4x32.
//
// Each formula is the CPU's (src/backend/cpu/elementwise.c, norm.c, dropout.c, vecmath_kernels.h
// for the f32 forms of sigmoid, gelu and softplus, core/dtype.c for cast); where a comment says
// "as the CPU", the special values (NaN, -0, infinities) were checked against that source.

#ifndef EAGLE_SRC_BACKEND_CUDA_OPS_MATH_CUH
#define EAGLE_SRC_BACKEND_CUDA_OPS_MATH_CUH

// ---- unary (float dtypes only: the schema's unary_float) ----

__device__ __forceinline__ float eg_math_neg(float x) {
    return -x;
}
__device__ __forceinline__ double eg_math_neg(double x) {
    return -x;
}

__device__ __forceinline__ float eg_math_abs(float x) {
    return fabsf(x);
}
__device__ __forceinline__ double eg_math_abs(double x) {
    return fabs(x);
}

__device__ __forceinline__ float eg_math_exp(float x) {
    return expf(x);
}
__device__ __forceinline__ double eg_math_exp(double x) {
    return exp(x);
}

__device__ __forceinline__ float eg_math_log(float x) {
    return logf(x);
}
__device__ __forceinline__ double eg_math_log(double x) {
    return log(x);
}

__device__ __forceinline__ float eg_math_sqrt(float x) {
    return __fsqrt_rn(x);
}
__device__ __forceinline__ double eg_math_sqrt(double x) {
    return __dsqrt_rn(x);
}

// 1 / sqrt(x) with two roundings, as the CPU (rsqrtf is a 2-ulp approximation).
__device__ __forceinline__ float eg_math_rsqrt(float x) {
    return __fdiv_rn(1.0f, __fsqrt_rn(x));
}
__device__ __forceinline__ double eg_math_rsqrt(double x) {
    return __ddiv_rn(1.0, __dsqrt_rn(x));
}

__device__ __forceinline__ float eg_math_sin(float x) {
    return sinf(x);
}
__device__ __forceinline__ double eg_math_sin(double x) {
    return sin(x);
}

__device__ __forceinline__ float eg_math_cos(float x) {
    return cosf(x);
}
__device__ __forceinline__ double eg_math_cos(double x) {
    return cos(x);
}

__device__ __forceinline__ float eg_math_tanh(float x) {
    return tanhf(x);
}
__device__ __forceinline__ double eg_math_tanh(double x) {
    return tanh(x);
}

// f32: the CPU's vector form, e = exp(-|x|), 1 / (1 + e) for x >= 0 and e / (1 + e) below, so
// the negative tail keeps its relative precision down to subnormals; NaN gives NaN.
__device__ __forceinline__ float eg_math_sigmoid(float x) {
    float e = expf(-fabsf(x));
    return __fdiv_rn(x >= 0.0f ? 1.0f : e, __fadd_rn(1.0f, e));
}
// f64: the CPU's plain 1 / (1 + exp(-x)) (0 below x = -709, where exp(-x) overflows).
__device__ __forceinline__ double eg_math_sigmoid(double x) {
    return __ddiv_rn(1.0, __dadd_rn(1.0, exp(-x)));
}

// x if x > 0 or x is NaN, else +0 (kernels.h EG__RELU: NaN propagates, relu(-0) = +0).
__device__ __forceinline__ float eg_math_relu(float x) {
    return !(x <= 0.0f) ? x : 0.0f;
}
__device__ __forceinline__ double eg_math_relu(double x) {
    return !(x <= 0.0) ? x : 0.0;
}

// f32, exact gelu as the CPU's vector form computes it: 0.5 x (1 + erf(x / sqrt 2)) for
// |x| < 1/sqrt 2; beyond, through T = 0.5 |x| erfc(|x| / sqrt 2) (x - T for x > 0, -T below),
// which keeps the negative tail's relative precision (1 + erf loses it all below x = -4).
// erfc(y) = exp(-y^2) erfcx(y) with y^2 = x^2 / 2 carried exactly (x^2 = p + e, e from an FMA;
// exp(-(p + e) / 2) = exp(-p / 2) (1 - e / 2)): erfcf of a rounded x / sqrt 2 would be off by
// up to 2 y^2 ulp (~170 ulp near x = -13), as the CPU explains for its own split.
// |x| is clamped at 15, where the tail has underflowed to 0, so gelu(-inf) = -0 as on the
// CPU; gelu(-0) = -0; NaN gives NaN.
__device__ __forceinline__ float eg_math_gelu(float x) {
    const float k = 0.707106781186547524f; // 1 / sqrt 2
    float a = fabsf(x);
    if (a < k) {
        float h = __fmul_rn(0.5f, x);
        float small = __fadd_rn(h, __fmul_rn(h, erff(__fmul_rn(x, k))));
        return copysignf(fabsf(small), x);
    }
    float c = a > 15.0f ? 15.0f : a; // NaN stays NaN
    float p = __fmul_rn(c, c);
    float e = fmaf(c, c, -p);
    float m = __fmul_rn(__fmul_rn(__fmul_rn(0.5f, c), erfcxf(__fmul_rn(c, k))),
                        __fsub_rn(1.0f, __fmul_rn(0.5f, e)));
    float tail = __fmul_rn(m, expf(__fmul_rn(-0.5f, p)));
    return x > 0.0f ? __fsub_rn(x, tail) : -tail;
}
// f64: the CPU's formula as written, 0.5 x (1 + erf(x / sqrt 2)) (so gelu(-inf) is NaN there
// too, and the far negative tail rounds to -0 below x = -8 or so, as on the CPU).
__device__ __forceinline__ double eg_math_gelu(double x) {
    return __dmul_rn(__dmul_rn(0.5, x), __dadd_rn(1.0, erf(__dmul_rn(x, 0.70710678118654752440))));
}

// max(x, 0) + log1p(exp(-|x|)): never overflows; softplus(inf) = inf, softplus(-inf) = 0.
__device__ __forceinline__ float eg_math_softplus(float x) {
    return __fadd_rn(x > 0.0f ? x : 0.0f, log1pf(expf(-fabsf(x))));
}
__device__ __forceinline__ double eg_math_softplus(double x) {
    return __dadd_rn(x > 0.0 ? x : 0.0, log1p(exp(-fabs(x))));
}

// -1, 0 or 1; sign(-0) = +0 and sign(NaN) = +0, as the CPU's (x > 0) - (x < 0).
__device__ __forceinline__ float eg_math_sign(float x) {
    return (float)((x > 0.0f) - (x < 0.0f));
}
__device__ __forceinline__ double eg_math_sign(double x) {
    return (double)((x > 0.0) - (x < 0.0));
}

__device__ __forceinline__ float eg_math_square(float x) {
    return __fmul_rn(x, x);
}
__device__ __forceinline__ double eg_math_square(double x) {
    return __dmul_rn(x, x);
}

__device__ __forceinline__ float eg_math_reciprocal(float x) {
    return __fdiv_rn(1.0f, x);
}
__device__ __forceinline__ double eg_math_reciprocal(double x) {
    return __ddiv_rn(1.0, x);
}

__device__ __forceinline__ float eg_math_erf(float x) {
    return erff(x);
}
__device__ __forceinline__ double eg_math_erf(double x) {
    return erf(x);
}

// x < lo ? lo : (x > hi ? hi : x) with the bounds rounded to x's type: NaN stays NaN.
__device__ __forceinline__ float eg_math_clip(float x, double lo, double hi) {
    float low = (float)lo, high = (float)hi;
    return x < low ? low : (x > high ? high : x);
}
__device__ __forceinline__ double eg_math_clip(double x, double lo, double hi) {
    return x < lo ? lo : (x > hi ? hi : x);
}

// ---- binary arithmetic (f32, f64, i32, i64; pow and relu_backward f32, f64) ----
// Integers wrap (two's complement, through the unsigned type, as the CPU avoids signed
// overflow); integer division truncates, and x / 0 and MIN / -1 give 0.

__device__ __forceinline__ float eg_math_add(float a, float b) {
    return __fadd_rn(a, b);
}
__device__ __forceinline__ double eg_math_add(double a, double b) {
    return __dadd_rn(a, b);
}
__device__ __forceinline__ int eg_math_add(int a, int b) {
    return (int)((unsigned int)a + (unsigned int)b);
}
__device__ __forceinline__ long long eg_math_add(long long a, long long b) {
    return (long long)((unsigned long long)a + (unsigned long long)b);
}

__device__ __forceinline__ float eg_math_sub(float a, float b) {
    return __fsub_rn(a, b);
}
__device__ __forceinline__ double eg_math_sub(double a, double b) {
    return __dsub_rn(a, b);
}
__device__ __forceinline__ int eg_math_sub(int a, int b) {
    return (int)((unsigned int)a - (unsigned int)b);
}
__device__ __forceinline__ long long eg_math_sub(long long a, long long b) {
    return (long long)((unsigned long long)a - (unsigned long long)b);
}

__device__ __forceinline__ float eg_math_mul(float a, float b) {
    return __fmul_rn(a, b);
}
__device__ __forceinline__ double eg_math_mul(double a, double b) {
    return __dmul_rn(a, b);
}
__device__ __forceinline__ int eg_math_mul(int a, int b) {
    return (int)((unsigned int)a * (unsigned int)b);
}
__device__ __forceinline__ long long eg_math_mul(long long a, long long b) {
    return (long long)((unsigned long long)a * (unsigned long long)b);
}

__device__ __forceinline__ float eg_math_div(float a, float b) {
    return __fdiv_rn(a, b);
}
__device__ __forceinline__ double eg_math_div(double a, double b) {
    return __ddiv_rn(a, b);
}
__device__ __forceinline__ int eg_math_div(int a, int b) {
    return b == 0 || (a == -2147483647 - 1 && b == -1) ? 0 : a / b;
}
__device__ __forceinline__ long long eg_math_div(long long a, long long b) {
    return b == 0 || (a == -9223372036854775807LL - 1 && b == -1) ? 0 : a / b;
}

__device__ __forceinline__ float eg_math_pow(float a, float b) {
    return powf(a, b);
}
__device__ __forceinline__ double eg_math_pow(double a, double b) {
    return pow(a, b);
}

// a >= b || a is NaN ? a : b: NaN in either operand gives NaN; maximum(+0, -0) = +0 and
// maximum(-0, +0) = -0 (the first operand wins ties), as the CPU (not fmaxf).
__device__ __forceinline__ float eg_math_maximum(float a, float b) {
    return a >= b || a != a ? a : b;
}
__device__ __forceinline__ double eg_math_maximum(double a, double b) {
    return a >= b || a != a ? a : b;
}
__device__ __forceinline__ int eg_math_maximum(int a, int b) {
    return a >= b ? a : b;
}
__device__ __forceinline__ long long eg_math_maximum(long long a, long long b) {
    return a >= b ? a : b;
}

__device__ __forceinline__ float eg_math_minimum(float a, float b) {
    return a <= b || a != a ? a : b;
}
__device__ __forceinline__ double eg_math_minimum(double a, double b) {
    return a <= b || a != a ? a : b;
}
__device__ __forceinline__ int eg_math_minimum(int a, int b) {
    return a <= b ? a : b;
}
__device__ __forceinline__ long long eg_math_minimum(long long a, long long b) {
    return a <= b ? a : b;
}

// relu's gradient: g where x > 0, else +0 (NaN x gives 0; NaN g where x > 0 stays NaN).
__device__ __forceinline__ float eg_math_relu_backward(float x, float g) {
    return x > 0.0f ? g : 0.0f;
}
__device__ __forceinline__ double eg_math_relu_backward(double x, double g) {
    return x > 0.0 ? g : 0.0;
}

// ---- comparisons (bool result; any value type, NaN compares unequal to everything) ----

template <typename T> __device__ __forceinline__ bool eg_math_equal(T a, T b) {
    return a == b;
}
template <typename T> __device__ __forceinline__ bool eg_math_not_equal(T a, T b) {
    return a != b;
}
template <typename T> __device__ __forceinline__ bool eg_math_less(T a, T b) {
    return a < b;
}
template <typename T> __device__ __forceinline__ bool eg_math_less_equal(T a, T b) {
    return a <= b;
}
template <typename T> __device__ __forceinline__ bool eg_math_greater(T a, T b) {
    return a > b;
}
template <typename T> __device__ __forceinline__ bool eg_math_greater_equal(T a, T b) {
    return a >= b;
}

// ---- selection and the three-operand affine step ----

template <typename T> __device__ __forceinline__ T eg_math_where(bool cond, T a, T b) {
    return cond ? a : b;
}

// Two roundings (product, then sum), as the CPU's x * scale + shift.
__device__ __forceinline__ float eg_math_mul_add(float x, float scale, float shift) {
    return __fadd_rn(__fmul_rn(x, scale), shift);
}
__device__ __forceinline__ double eg_math_mul_add(double x, double scale, double shift) {
    return __dadd_rn(__dmul_rn(x, scale), shift);
}

// ---- cast: through double, exactly as the CPU's eg__load_as_double / eg__store_from_double
// (core/dtype.c): an i64 source rounds to double first (so i64 -> i64 of a value above 2^53
// rounds, and i64 -> f32 rounds twice, as there); float -> integer truncates toward zero and
// saturates at the target's range (i64: at the largest double below 2^63), NaN gives 0;
// -> bool is value != 0 (NaN gives true); a bool source is 0 or 1 whatever its byte. ----

__host__ __device__ __forceinline__ double eg_math_cast_load(float x) {
    return (double)x;
}
__host__ __device__ __forceinline__ double eg_math_cast_load(double x) {
    return x;
}
__host__ __device__ __forceinline__ double eg_math_cast_load(int x) {
    return (double)x;
}
__host__ __device__ __forceinline__ double eg_math_cast_load(long long x) {
    return (double)x;
}
__host__ __device__ __forceinline__ double eg_math_cast_load(unsigned char x) {
    return (double)x;
}
__host__ __device__ __forceinline__ double eg_math_cast_load(bool x) {
    return x ? 1.0 : 0.0;
}

__host__ __device__ __forceinline__ long long eg_math_cast_saturate(double value, double low,
                                                                    double high) {
    if (value != value) return 0;
    if (value <= low) return (long long)low;
    if (value >= high) return (long long)high;
    return (long long)value;
}

template <typename To> struct eg_math_cast_store;
template <> struct eg_math_cast_store<float> {
    __host__ __device__ static float from(double value) { return (float)value; }
};
template <> struct eg_math_cast_store<double> {
    __host__ __device__ static double from(double value) { return value; }
};
template <> struct eg_math_cast_store<int> {
    __host__ __device__ static int from(double value) {
        return (int)eg_math_cast_saturate(value, -2147483648.0, 2147483647.0);
    }
};
template <> struct eg_math_cast_store<long long> {
    __host__ __device__ static long long from(double value) {
        return eg_math_cast_saturate(value, -9223372036854775808.0, 9223372036854774784.0);
    }
};
template <> struct eg_math_cast_store<unsigned char> {
    __host__ __device__ static unsigned char from(double value) {
        return (unsigned char)eg_math_cast_saturate(value, 0.0, 255.0);
    }
};
template <> struct eg_math_cast_store<bool> {
    __host__ __device__ static bool from(double value) { return value != 0.0; }
};

template <typename To, typename From> __host__ __device__ __forceinline__ To eg_math_cast(From x) {
    return eg_math_cast_store<To>::from(eg_math_cast_load(x));
}

// ---- dropout (not fusable): Philox-4x32-10 as core/random.c's eg__philox4x32, bit for bit:
// the dropout of element i reads word i % 4 of block i / 4 under key = the op's seed, with
// counter_high = 2 (core/random.c's streams: 0 random fills, 1 seeds, 2 dropout). ----

__host__ __device__ __forceinline__ void eg_math_philox4x32(unsigned long long key,
                                                            unsigned long long counter_high,
                                                            unsigned long long counter,
                                                            unsigned int out[4]) {
    unsigned int c0 = (unsigned int)counter, c1 = (unsigned int)(counter >> 32);
    unsigned int c2 = (unsigned int)counter_high, c3 = (unsigned int)(counter_high >> 32);
    unsigned int k0 = (unsigned int)key, k1 = (unsigned int)(key >> 32);
    for (int round = 0; round < 10; round++) {
        unsigned long long p0 = 0xD2511F53ull * c0; // a 32 x 32 -> 64 product (mul.wide)
        unsigned long long p1 = 0xCD9E8D57ull * c2;
        unsigned int n0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0;
        unsigned int n2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = (unsigned int)p1;
        c2 = n2;
        c3 = (unsigned int)p0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

// Kept when the word's uniform (word >> 8) 2^-24 is >= rate, i.e. (word >> 8) >= threshold =
// ceil(rate 2^24) (computed on the host as the CPU does); kept values are x * scale with scale
// = 1 / (1 - rate) rounded to T, dropped ones +0.
__device__ __forceinline__ float eg_math_dropout(float x, unsigned int word, unsigned int threshold,
                                                 float scale) {
    float value = __fmul_rn(x, scale);
    return (word >> 8) >= threshold ? value : 0.0f;
}
__device__ __forceinline__ double eg_math_dropout(double x, unsigned int word,
                                                  unsigned int threshold, double scale) {
    double value = __dmul_rn(x, scale);
    return (word >> 8) >= threshold ? value : 0.0;
}

#endif

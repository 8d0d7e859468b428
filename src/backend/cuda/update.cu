// Optimizer updates on the GPU: SGD (momentum, Nesterov, weight decay), Adam/AdamW and RMSprop
// with Keras' formulas, in the variable's dtype, in place — the CPU's loops (cpu/update.c)
// operation for operation, so every element gets the CPU's bits.
//
// Multi-tensor apply: one kernel updates up to EG__CUDA_UPDATE_PIECES_PER_LAUNCH variables. Their
// table travels in the kernel's parameters (no upload, nothing for the host to keep alive), each
// variable cut into tiles of TILE elements; a block walks the tiles of all of them in order, so
// every tile lies in one variable and the variable's pointers are the same for the whole block.
//
// Why the arithmetic goes through f32_math / f64_math instead of + - * /:
// - nvcc contracts a * b + c into one fused multiply-add; the CPU rounds the product and the sum
//   separately. Explicitly rounded operations (PTX .rn, __dadd_rn ...) are never contracted.
// - The CPU runs its updates with subnormals flushed to zero (x86 FTZ and DAZ: a subnormal input
//   reads as 0, a subnormal result is written as 0, for f32 and f64 alike; cpu/update.c says
//   why). The GPU keeps subnormals by default, so the same inputs would give other moments (a
//   moment that decays towards 0 stays subnormal here and becomes 0 there). f32 uses the PTX
//   .ftz forms, which flush inputs and results exactly so; f64 has no .ftz on the GPU, so every
//   f64 operation flushes its operands and its result itself. (A result is flushed when its
//   rounded magnitude is below the smallest normal: x86 detects tininess after rounding.)
// Division and square root are the correctly rounded ones (.rn), like the CPU's divss/sqrtss.
#include <stdint.h>
#include <string.h>

#include "backend/cuda/update_launch.h"

namespace {

constexpr int THREADS = 256;
constexpr int PER_THREAD = 4;
constexpr int64_t TILE = (int64_t)THREADS * PER_THREAD;
constexpr int PIECES = EG__CUDA_UPDATE_PIECES_PER_LAUNCH;

struct f32_math {
    static __device__ __forceinline__ float add(float a, float b) {
        float r;
        asm("add.rn.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
        return r;
    }
    static __device__ __forceinline__ float sub(float a, float b) {
        float r;
        asm("sub.rn.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
        return r;
    }
    static __device__ __forceinline__ float mul(float a, float b) {
        float r;
        asm("mul.rn.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
        return r;
    }
    static __device__ __forceinline__ float div(float a, float b) {
        float r;
        asm("div.rn.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
        return r;
    }
    static __device__ __forceinline__ float sqrt(float a) {
        float r;
        asm("sqrt.rn.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
        return r;
    }
};

struct f64_math {
    // A subnormal as a signed zero (NaN and the normal numbers unchanged).
    static __device__ __forceinline__ double flush(double x) {
        return fabs(x) < 2.2250738585072014e-308 ? copysign(0.0, x) : x;
    }
    static __device__ __forceinline__ double add(double a, double b) {
        return flush(__dadd_rn(flush(a), flush(b)));
    }
    static __device__ __forceinline__ double sub(double a, double b) {
        return flush(__dsub_rn(flush(a), flush(b)));
    }
    static __device__ __forceinline__ double mul(double a, double b) {
        return flush(__dmul_rn(flush(a), flush(b)));
    }
    static __device__ __forceinline__ double div(double a, double b) {
        return flush(__ddiv_rn(flush(a), flush(b)));
    }
    static __device__ __forceinline__ double sqrt(double a) { return flush(__dsqrt_rn(flush(a))); }
};

// The step's scalars rounded to T, as the CPU's loops round them.
template <typename T> struct scalars {
    T lr, wd, mom, b1c, b2c, eps, alpha, rho, rhoc;
    bool nesterov;
};

// tile_end: the tiles of this piece and those before it in the launch.
template <typename T> struct piece {
    T *v;
    const T *g;
    T *s0, *s1, *s2;
    int64_t count, tile_end;
};

template <typename T> struct table {
    int n;
    piece<T> pieces[PIECES];
};

// Element i of one variable: v the variable, g the gradient, s0..s2 the slots (cpu/update.c).
template <typename M, typename T>
__device__ __forceinline__ void sgd(const scalars<T> &s, const piece<T> &q, int64_t i) {
    T x = q.v[i];
    if (s.wd != T(0)) x = M::sub(x, M::mul(M::mul(x, s.wd), s.lr));
    T g = q.g[i];
    if (q.s0) {
        T mi = M::add(M::mul(-g, s.lr), M::mul(q.s0[i], s.mom));
        q.s0[i] = mi;
        x = s.nesterov ? M::add(x, M::add(M::mul(-g, s.lr), M::mul(mi, s.mom))) : M::add(x, mi);
    } else {
        x = M::sub(x, M::mul(g, s.lr));
    }
    q.v[i] = x;
}

template <typename M, typename T>
__device__ __forceinline__ void adam(const scalars<T> &s, const piece<T> &q, int64_t i) {
    T x = q.v[i];
    if (s.wd != T(0)) x = M::sub(x, M::mul(M::mul(x, s.wd), s.lr));
    T g = q.g[i], m = q.s0[i], u = q.s1[i];
    T mi = M::add(m, M::mul(M::sub(g, m), s.b1c));
    T ui = M::add(u, M::mul(M::sub(M::mul(g, g), u), s.b2c));
    q.s0[i] = mi;
    q.s1[i] = ui;
    q.v[i] = M::sub(x, M::div(M::mul(mi, s.alpha), M::add(M::sqrt(ui), s.eps)));
}

template <typename M, typename T>
__device__ __forceinline__ void rmsprop(const scalars<T> &s, const piece<T> &q, int64_t i) {
    T x = q.v[i];
    if (s.wd != T(0)) x = M::sub(x, M::mul(M::mul(x, s.wd), s.lr));
    T g = q.g[i];
    T ui = M::add(M::mul(s.rho, q.s0[i]), M::mul(s.rhoc, M::mul(g, g)));
    q.s0[i] = ui;
    T denominator = M::add(ui, s.eps);
    if (q.s2) {
        T ai = M::add(M::mul(s.rho, q.s2[i]), M::mul(s.rhoc, g));
        q.s2[i] = ai;
        denominator = M::add(M::sub(ui, M::mul(ai, ai)), s.eps);
    }
    T increment = M::div(M::mul(s.lr, g), M::sqrt(denominator));
    if (q.s1) {
        T mi = M::add(M::mul(s.mom, q.s1[i]), increment);
        q.s1[i] = mi;
        x = M::sub(x, mi);
    } else {
        x = M::sub(x, increment);
    }
    q.v[i] = x;
}

// live: where a captured graph's launch reads this call's scalars (written by the host before
// each launch, see graphs.c), NULL when they are the parameter s.
template <typename M, typename T, int RULE>
__global__ void __launch_bounds__(THREADS)
    update_pieces(scalars<T> s, const scalars<T> *live, const __grid_constant__ table<T> t) {
    if (live) s = *live;
    const int64_t tiles = t.pieces[t.n - 1].tile_end;
    int p = 0; // the tiles of a block only go up: the piece search never goes back
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        while (tile >= t.pieces[p].tile_end) p++;
        const piece<T> &q = t.pieces[p];
        int64_t first = (tile - (p ? t.pieces[p - 1].tile_end : 0)) * TILE;
        for (int r = 0; r < PER_THREAD; r++) {
            int64_t i = first + r * THREADS + threadIdx.x;
            if (i >= q.count) break;
            if (RULE == EG__CUDA_UPDATE_SGD)
                sgd<M>(s, q, i);
            else if (RULE == EG__CUDA_UPDATE_ADAM)
                adam<M>(s, q, i);
            else
                rmsprop<M>(s, q, i);
        }
    }
}

template <typename T> scalars<T> pack(const eg__cuda_update_scalars *h) {
    scalars<T> s;
    s.lr = (T)h->lr;
    s.wd = (T)h->weight_decay;
    s.mom = (T)h->momentum;
    s.b1c = (T)h->beta_1_complement;
    s.b2c = (T)h->beta_2_complement;
    s.eps = (T)h->epsilon;
    s.alpha = (T)h->alpha;
    s.rho = (T)h->rho;
    s.rhoc = (T)h->rho_complement;
    s.nesterov = h->nesterov != 0;
    return s;
}

template <typename M, typename T>
void launch(const eg__cuda_update_scalars *h, const eg__cuda_update_piece *pieces, int n_pieces,
            int max_blocks, const void *live_scalars, cudaStream_t stream) {
    const scalars<T> s = pack<T>(h);
    const scalars<T> *live = static_cast<const scalars<T> *>(live_scalars);
    for (int first = 0; first < n_pieces; first += PIECES) {
        table<T> t = {};
        int64_t tiles = 0;
        for (int j = first; j < n_pieces && j < first + PIECES; j++) {
            if (pieces[j].count <= 0) continue;
            piece<T> &q = t.pieces[t.n++];
            q.v = static_cast<T *>(pieces[j].variable);
            q.g = static_cast<const T *>(pieces[j].grad);
            q.s0 = static_cast<T *>(pieces[j].slots[0]);
            q.s1 = static_cast<T *>(pieces[j].slots[1]);
            q.s2 = static_cast<T *>(pieces[j].slots[2]);
            q.count = pieces[j].count;
            tiles += (q.count + TILE - 1) / TILE;
            q.tile_end = tiles;
        }
        if (!t.n) continue;
        int64_t blocks = tiles;
        if (max_blocks > 0 && blocks > max_blocks) blocks = max_blocks;
        if (blocks > 65535) blocks = 65535;
        switch (h->rule) {
        case EG__CUDA_UPDATE_SGD:
            update_pieces<M, T, EG__CUDA_UPDATE_SGD>
                <<<(unsigned)blocks, THREADS, 0, stream>>>(s, live, t);
            break;
        case EG__CUDA_UPDATE_ADAM:
            update_pieces<M, T, EG__CUDA_UPDATE_ADAM>
                <<<(unsigned)blocks, THREADS, 0, stream>>>(s, live, t);
            break;
        default:
            update_pieces<M, T, EG__CUDA_UPDATE_RMSPROP>
                <<<(unsigned)blocks, THREADS, 0, stream>>>(s, live, t);
            break;
        }
    }
}

} // namespace

static_assert(sizeof(scalars<double>) <= EG__CUDA_UPDATE_PACKED_BYTES, "packed scalars fit");

extern "C" void eg__cuda_update(const eg__cuda_update_scalars *h, int is_f64,
                                const eg__cuda_update_piece *pieces, int n_pieces, int max_blocks,
                                const void *live_scalars, cudaStream_t stream) {
    if (is_f64)
        launch<f64_math, double>(h, pieces, n_pieces, max_blocks, live_scalars, stream);
    else
        launch<f32_math, float>(h, pieces, n_pieces, max_blocks, live_scalars, stream);
}

extern "C" size_t eg__cuda_update_pack(const eg__cuda_update_scalars *h, int is_f64, void *out) {
    if (is_f64) {
        const scalars<double> s = pack<double>(h);
        memcpy(out, &s, sizeof s);
        return sizeof s;
    }
    const scalars<float> s = pack<float>(h);
    memcpy(out, &s, sizeof s);
    return sizeof s;
}

/* Internal: the optimizer-update kernels (update.cu) in plain C types for both compilers. */
#ifndef EAGLE_SRC_BACKEND_CUDA_UPDATE_LAUNCH_H
#define EAGLE_SRC_BACKEND_CUDA_UPDATE_LAUNCH_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The rules (backend.h's eg__update_rule, mapped by update.c). */
enum { EG__CUDA_UPDATE_SGD = 0, EG__CUDA_UPDATE_ADAM = 1, EG__CUDA_UPDATE_RMSPROP = 2 };

/* One step's scalars as the CPU's loops take them (cpu/update.c): each one rounded once to the
 * variable's dtype by the kernel; the 1 - x ones are computed here in double first, as there. */
typedef struct eg__cuda_update_scalars {
    int rule;
    int nesterov;
    double lr, weight_decay, momentum;
    double beta_1_complement, beta_2_complement, epsilon, alpha; /* Adam: 1 - beta_1, ... */
    double rho, rho_complement;                                  /* RMSprop: rho, 1 - rho */
} eg__cuda_update_scalars;

/* One variable's update: count contiguous elements of its data, gradient and slots (NULL where
 * a slot is unused; the slots in the order of cpu/update.c: SGD momentum; Adam m, v; RMSprop
 * velocity, momentum, average gradient). */
typedef struct eg__cuda_update_piece {
    void *variable;
    const void *grad;
    void *slots[3];
    int64_t count;
} eg__cuda_update_piece;

/* Enqueues on stream the updates of every piece, all of one dtype (f32, or f64 when is_f64),
 * in place: one kernel per EG__CUDA_UPDATE_PIECES_PER_LAUNCH pieces, their table in the
 * kernel's parameters; at most max_blocks blocks each. */
#define EG__CUDA_UPDATE_PIECES_PER_LAUNCH 64
/* live_scalars: NULL, or device memory holding the scalars packed by eg__cuda_update_pack,
 * which the kernels then read instead of `scalars` (a captured graph's update: its host writes
 * each call's scalars there before the launch). */
void eg__cuda_update(const eg__cuda_update_scalars *scalars, int is_f64,
                     const eg__cuda_update_piece *pieces, int n_pieces, int max_blocks,
                     const void *live_scalars, cudaStream_t stream);
/* The scalars as the kernels of one dtype read them, into out (EG__CUDA_UPDATE_PACKED_BYTES of
 * room); returns their size. */
#define EG__CUDA_UPDATE_PACKED_BYTES 128
size_t eg__cuda_update_pack(const eg__cuda_update_scalars *scalars, int is_f64, void *out);

#ifdef __cplusplus
}
#endif
#endif

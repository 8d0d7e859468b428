/* Optimizer updates on a GPU (backend.h: update_many, update_range): the step's scalars and the
 * variables' pointers handed to the multi-tensor kernels of update.cu, enqueued on the device's
 * stream like any op (nothing waits for them).
 *
 * The device: the pieces carry device pointers but no device. With one GPU it is that one;
 * with several, the CUDA runtime says which GPU holds the variable's memory
 * (cudaPointerGetAttributes), and its stream runs the update, after the ops that made the
 * gradient.
 *
 * Errors: these functions return nothing (the CPU's cannot fail). A failure to enter the device
 * or to launch raises the error on the calling thread (eg_last_error), and an asynchronous fault
 * is reported at the next synchronization, naming "optimizer update" as the work enqueued last.
 * EG_CUDA_SYNC=1 waits after each update, as after each op. */
#include <stdatomic.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/update_launch.h"
#include "base/error.h"

_Static_assert(EG__UPDATE_MAX_SLOTS == 3, "update_launch.h's pieces carry three slots");

/* What an asynchronous fault is reported with (cuda_internal.h: last_op). */
static const char *const update_name = "optimizer update";

/* The GPU holding pointer's memory, entered; NULL with an error when there is none. */
static eg__cuda_device *device_of(const void *pointer) {
    int count = eg__cuda_device_count();
    const eg_device *device = NULL;
    if (count == 1) {
        device = eg__cuda_device_at(0);
    } else if (count > 1) {
        struct cudaPointerAttributes attributes;
        cudaError_t e = cudaPointerGetAttributes(&attributes, pointer);
        if (e != cudaSuccess) {
            eg__cuda_error(e, NULL, "optimizer update: cudaPointerGetAttributes");
            return NULL;
        }
        for (int i = 0; i < count && !device; i++)
            if (eg__cuda_of(eg__cuda_device_at(i))->ordinal == attributes.device)
                device = eg__cuda_device_at(i);
    }
    if (!device) {
        eg__error(EG_ERR_DEVICE, "optimizer update: no Eagle GPU holds the variable at %p",
                  pointer);
        return NULL;
    }
    eg__cuda_device *d = eg__cuda_of(device);
    return eg__cuda_enter(d) == EG_OK ? d : NULL;
}

static eg__cuda_update_scalars scalars_of(const eg__update_params *h) {
    int rule = h->rule == EG__UPDATE_ADAM      ? EG__CUDA_UPDATE_ADAM
               : h->rule == EG__UPDATE_RMSPROP ? EG__CUDA_UPDATE_RMSPROP
                                               : EG__CUDA_UPDATE_SGD;
    return (eg__cuda_update_scalars){
        .rule = rule,
        .nesterov = h->nesterov,
        .lr = h->lr,
        .weight_decay = h->weight_decay,
        .momentum = h->momentum,
        .beta_1_complement = 1.0 - h->beta_1,
        .beta_2_complement = 1.0 - h->beta_2,
        .epsilon = h->epsilon,
        .alpha = h->alpha,
        .rho = h->rho,
        .rho_complement = 1.0 - h->rho,
    };
}

/* Inside a graph capture the launch reads its scalars from the graph's memory (*live), so that
 * every later launch of the graph gets its call's; during a refresh (graphs.c) only the scalars
 * are written there: false, nothing to launch. */
static bool graph_scalars(eg__cuda_device *d, const eg__cuda_update_scalars *scalars, int f64,
                          const void **live) {
    if (!d->capturing && !d->refreshing) return true;
    unsigned char packed[EG__CUDA_UPDATE_PACKED_BYTES];
    size_t bytes = eg__cuda_update_pack(scalars, f64, packed);
    if (d->refreshing) {
        eg__cuda_refresh_scalars(d, packed, bytes);
        return false;
    }
    *live = eg__cuda_capture_scalars(d, packed, bytes);
    return *live != NULL;
}

/* Blocks per launch: enough to fill every SM (8 blocks of 256 threads each). */
static int max_blocks(const eg__cuda_device *d) {
    return d->sm_count > 0 ? d->sm_count * 8 : 65535;
}

/* After the launches: their errors raised, the work named for fault reports. */
static void launched(eg__cuda_device *d) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        eg__cuda_error(e, d->device, "optimizer update launch");
        return;
    }
    atomic_store_explicit(&d->last_op, update_name, memory_order_relaxed);
    if (eg__cuda_sync_every_op()) {
        e = cudaStreamSynchronize(eg__cuda_stream(d));
        if (e != cudaSuccess) eg__cuda_error(e, d->device, "optimizer update");
    }
}

void eg__cuda_update_many(const eg__update_params *params, const eg__update_piece *pieces,
                          int n_pieces, int64_t total) {
    if (n_pieces <= 0 || total <= 0) return;
    eg__cuda_device *d = device_of(pieces[0].variable);
    if (!d) return;
    eg__cuda_update_scalars scalars = scalars_of(params);
    /* one kernel per dtype (per EG__CUDA_UPDATE_PIECES_PER_LAUNCH variables): the pieces of
     * each dtype gathered in a small batch, in order */
    enum { BATCH = EG__CUDA_UPDATE_PIECES_PER_LAUNCH };
    eg__cuda_update_piece batch[BATCH];
    for (int f64 = 0; f64 < 2; f64++) {
        eg_dtype dtype = f64 ? EG_DTYPE_F64 : EG_DTYPE_F32;
        int n = 0;
        for (int i = 0; i <= n_pieces; i++) {
            if (i < n_pieces && pieces[i].dtype == dtype && pieces[i].count > 0) {
                const eg__update_piece *p = &pieces[i];
                batch[n++] = (eg__cuda_update_piece){
                    .variable = p->variable,
                    .grad = p->grad,
                    .slots = {p->slots[0], p->slots[1], p->slots[2]},
                    .count = p->count,
                };
            }
            if (n == BATCH || (i == n_pieces && n > 0)) {
                const void *live = NULL;
                if (graph_scalars(d, &scalars, f64, &live))
                    eg__cuda_update(&scalars, f64, batch, n, max_blocks(d), live,
                                    eg__cuda_stream(d));
                n = 0;
            }
        }
    }
    launched(d);
}

void eg__cuda_update_range(const eg__update_params *params, eg_dtype dtype, void *variable,
                           void *const *slots, int64_t start, int64_t n, const void *grad) {
    if (n <= 0) return;
    if (dtype != EG_DTYPE_F32 && dtype != EG_DTYPE_F64) {
        eg__error(EG_ERR_DTYPE, "optimizer update: %s variables are not updated",
                  eg_dtype_name(dtype));
        return;
    }
    eg__cuda_device *d = device_of(variable);
    if (!d) return;
    size_t size = eg__dtype_size(dtype);
    eg__cuda_update_piece piece = {
        .variable = (char *)variable + (size_t)start * size, .grad = grad, .count = n};
    for (int k = 0; k < EG__UPDATE_MAX_SLOTS; k++)
        piece.slots[k] = slots[k] ? (char *)slots[k] + (size_t)start * size : NULL;
    eg__cuda_update_scalars scalars = scalars_of(params);
    const void *live = NULL;
    if (graph_scalars(d, &scalars, dtype == EG_DTYPE_F64, &live))
        eg__cuda_update(&scalars, dtype == EG_DTYPE_F64, &piece, 1, max_blocks(d), live,
                        eg__cuda_stream(d));
    launched(d);
}

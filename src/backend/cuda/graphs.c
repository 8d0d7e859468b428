/* CUDA graphs: a traced function's replay recorded once with stream capture and launched again
 * as one graph, so a call costs one launch instead of one per op.
 *
 * Temporaries (a cuDNN workspace, a dense copy of a strided input) are taken from the caching
 * allocator during the recording like during any run, but their addresses are baked into the
 * graph: they are kept for the graph, not given back, until it is freed. The arena, the inputs'
 * buffers and the variables stay where they were recorded: the graph executor (src/graph)
 * captures again when any of them moves. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "base/error.h"

/* Per-call scalars of a recorded kernel: the graph copies `host` (pinned) into `device` at each
 * launch, and the kernel reads `device`. */
typedef struct scalar_slot {
    void *host, *device;
    size_t bytes;
} scalar_slot;

typedef struct eg__cuda_capture_list {
    int n, capacity;
    eg__cuda_scratch *blocks;
    int n_slots, slot_capacity;
    scalar_slot *slots;
    bool failed; /* a block could not be kept: the capture must not be used */
} eg__cuda_capture_list;

typedef struct eg__cuda_graph {
    cudaGraphExec_t exec;
    eg__cuda_capture_list kept;
    cudaEvent_t done;    /* recorded after each launch: its scalars may be rewritten after it */
    bool launched;       /* done has been recorded */
    int next_slot;       /* during a refresh: the slot the next update writes */
    bool refresh_failed; /* the refresh's calls did not match the capture's */
} cuda_graph;

bool eg__cuda_capture_keep(eg__cuda_device *d, const eg__cuda_scratch *scratch) {
    eg__cuda_capture_list *list = d->captured_scratch;
    if (!list) return false;
    if (list->n == list->capacity) {
        int capacity = list->capacity ? 2 * list->capacity : 16;
        eg__cuda_scratch *blocks = realloc(list->blocks, sizeof *blocks * (size_t)capacity);
        if (!blocks) {
            list->failed = true;
            return false;
        }
        list->blocks = blocks;
        list->capacity = capacity;
    }
    list->blocks[list->n++] = *scratch;
    return true;
}

static void release_kept(eg__cuda_capture_list *list) {
    for (int i = 0; i < list->n; i++)
        eg__allocator_free(list->blocks[i].allocator, list->blocks[i].handle);
    free(list->blocks);
    for (int i = 0; i < list->n_slots; i++) {
        (void)cudaFreeHost(list->slots[i].host);
        (void)cudaFree(list->slots[i].device);
    }
    free(list->slots);
    *list = (eg__cuda_capture_list){0};
}

const void *eg__cuda_capture_scalars(eg__cuda_device *d, const void *packed, size_t bytes) {
    eg__cuda_capture_list *list = d->captured_scratch;
    if (!list) return NULL;
    if (list->n_slots == list->slot_capacity) {
        int capacity = list->slot_capacity ? 2 * list->slot_capacity : 8;
        scalar_slot *slots = realloc(list->slots, sizeof *slots * (size_t)capacity);
        if (!slots) {
            list->failed = true;
            eg__error(EG_ERR_OUT_OF_MEMORY, "graph capture: out of host memory");
            return NULL;
        }
        list->slots = slots;
        list->slot_capacity = capacity;
    }
    scalar_slot slot = {.bytes = bytes};
    /* cudaMalloc is allowed in a relaxed capture; the copy from pinned memory is recorded as a
     * node that reads the host bytes when the graph runs, not now */
    cudaError_t e = cudaHostAlloc(&slot.host, bytes, cudaHostAllocDefault);
    if (e == cudaSuccess) e = cudaMalloc(&slot.device, bytes);
    if (e == cudaSuccess) {
        memcpy(slot.host, packed, bytes);
        e = cudaMemcpyAsync(slot.device, slot.host, bytes, cudaMemcpyHostToDevice, d->stream);
    }
    if (e != cudaSuccess) {
        if (slot.host) (void)cudaFreeHost(slot.host);
        if (slot.device) (void)cudaFree(slot.device);
        list->failed = true;
        eg__cuda_error(e, d->device, "graph capture: an update's scalars");
        return NULL;
    }
    list->slots[list->n_slots++] = slot;
    return slot.device;
}

void eg__cuda_refresh_scalars(eg__cuda_device *d, const void *packed, size_t bytes) {
    cuda_graph *g = d->refreshing;
    if (!g || g->next_slot >= g->kept.n_slots || g->kept.slots[g->next_slot].bytes != bytes) {
        if (g) g->refresh_failed = true;
        return;
    }
    memcpy(g->kept.slots[g->next_slot++].host, packed, bytes);
}

eg_status eg__cuda_graph_refresh_begin(const eg_device *device, void *graph) {
    eg__cuda_device *d = eg__cuda_of(device);
    cuda_graph *g = graph;
    eg_status status = eg__cuda_enter(d);
    if (status != EG_OK) return status;
    /* the previous launch must have copied the old scalars before they are overwritten */
    if (g->launched) {
        cudaError_t e = cudaEventSynchronize(g->done);
        if (e != cudaSuccess) return eg__cuda_error(e, device, "graph refresh");
    }
    g->next_slot = 0;
    g->refresh_failed = false;
    d->capture_owner = pthread_self();
    d->refreshing = g;
    return EG_OK;
}

eg_status eg__cuda_graph_refresh_end(const eg_device *device, void *graph) {
    eg__cuda_device *d = eg__cuda_of(device);
    cuda_graph *g = graph;
    d->refreshing = NULL;
    if (g->refresh_failed || g->next_slot != g->kept.n_slots)
        return eg__error(EG_ERR_STATE,
                         "the call's updates differ from the captured graph's (%d of %d)",
                         g->next_slot, g->kept.n_slots);
    return EG_OK;
}

eg_status eg__cuda_capture_begin(const eg_device *device) {
    eg__cuda_device *d = eg__cuda_of(device);
    eg_status status = eg__cuda_enter(d);
    if (status != EG_OK) return status;
    if (d->capturing)
        return eg__error(EG_ERR_STATE, "%s is already capturing a graph", device->name);
    if (eg__cuda_sync_every_op())
        return eg__error(EG_ERR_UNSUPPORTED,
                         "EG_CUDA_SYNC=1 waits after every op, which a captured graph cannot");
    eg__cuda_capture_list *list = calloc(1, sizeof *list);
    if (!list) return eg__error(EG_ERR_OUT_OF_MEMORY, "graph capture: out of host memory");
    /* Relaxed: the caching allocator may still call cudaMalloc for a temporary meanwhile. */
    cudaError_t e = cudaStreamBeginCapture(d->stream, cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) {
        free(list);
        return eg__cuda_error(e, device, "cudaStreamBeginCapture");
    }
    d->captured_scratch = list;
    d->capture_owner = pthread_self();
    d->capturing = true;
    return EG_OK;
}

eg_status eg__cuda_capture_end(const eg_device *device, void **graph_out) {
    eg__cuda_device *d = eg__cuda_of(device);
    *graph_out = NULL;
    if (!d->capturing) return eg__error(EG_ERR_STATE, "%s is not capturing a graph", device->name);
    /* the graph's event belongs on this GPU, whatever was current meanwhile */
    eg_status entered = eg__cuda_enter(d);
    if (entered != EG_OK) eg_clear_error();
    d->capturing = false;
    eg__cuda_capture_list *list = d->captured_scratch;
    d->captured_scratch = NULL;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(d->stream, &graph);
    cuda_graph *g = calloc(1, sizeof *g);
    eg_status status = EG_OK;
    if (e != cudaSuccess) {
        status = eg__cuda_error(e, device,
                                "cudaStreamEndCapture (work that cannot be captured "
                                "was enqueued)");
    } else if (list->failed || !g) {
        status = eg__error(EG_ERR_OUT_OF_MEMORY, "graph capture: out of host memory");
    } else if ((e = cudaGraphInstantiate(&g->exec, graph, 0)) != cudaSuccess) {
        status = eg__cuda_error(e, device, "cudaGraphInstantiate");
    } else if ((e = cudaEventCreateWithFlags(&g->done, cudaEventDisableTiming)) != cudaSuccess) {
        (void)cudaGraphExecDestroy(g->exec);
        status = eg__cuda_error(e, device, "cudaEventCreate");
    }
    if (graph) (void)cudaGraphDestroy(graph);
    if (status != EG_OK) {
        release_kept(list);
        free(list);
        free(g);
        return status;
    }
    g->kept = *list;
    free(list);
    *graph_out = g;
    return EG_OK;
}

eg_status eg__cuda_graph_launch(const eg_device *device, void *graph) {
    eg__cuda_device *d = eg__cuda_of(device);
    eg_status status = eg__cuda_enter(d);
    if (status != EG_OK) return status;
    cuda_graph *g = graph;
    cudaError_t e = cudaGraphLaunch(g->exec, d->stream);
    if (e == cudaSuccess && (e = cudaEventRecord(g->done, d->stream)) != cudaSuccess) {
        /* without the event a refresh could not tell when this launch has read its scalars */
        (void)cudaStreamSynchronize(d->stream);
        g->launched = false;
    }
    if (e != cudaSuccess) return eg__cuda_error(e, device, "cudaGraphLaunch");
    g->launched = true;
    atomic_store_explicit(&d->last_op, "a captured graph", memory_order_relaxed);
    return EG_OK;
}

void eg__cuda_graph_free(const eg_device *device, void *graph) {
    cuda_graph *g = graph;
    if (!g) return;
    eg__cuda_device *d = eg__cuda_of(device);
    /* the kept temporaries may be in use by a launch still queued */
    if (eg__cuda_enter(d) == EG_OK)
        (void)cudaStreamSynchronize(d->stream);
    else
        eg_clear_error();
    (void)cudaGraphExecDestroy(g->exec);
    (void)cudaEventDestroy(g->done);
    release_kept(&g->kept);
    free(g);
}

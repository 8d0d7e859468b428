/* CUDA graphs: a traced function's replay recorded once with stream capture and launched again
 * as one graph, so a call costs one launch instead of one per op.
 *
 * Temporaries (a cuDNN workspace, a dense copy of a strided input) are taken from the caching
 * allocator during the recording like during any run, but their addresses are baked into the
 * graph: they are kept for the graph, not given back, until it is freed. The arena, the inputs'
 * buffers and the variables stay where they were recorded: the graph executor (src/graph)
 * captures again when any of them moves. */
#include <stdlib.h>

#include "backend/cuda/cuda_internal.h"
#include "base/error.h"

typedef struct eg__cuda_capture_list {
    int n, capacity;
    eg__cuda_scratch *blocks;
    bool failed; /* a block could not be kept: the capture must not be used */
} eg__cuda_capture_list;

typedef struct cuda_graph {
    cudaGraphExec_t exec;
    eg__cuda_capture_list kept;
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
    *list = (eg__cuda_capture_list){0};
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
    d->capturing = true;
    return EG_OK;
}

eg_status eg__cuda_capture_end(const eg_device *device, void **graph_out) {
    eg__cuda_device *d = eg__cuda_of(device);
    *graph_out = NULL;
    if (!d->capturing) return eg__error(EG_ERR_STATE, "%s is not capturing a graph", device->name);
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
    cudaError_t e = cudaGraphLaunch(((cuda_graph *)graph)->exec, d->stream);
    return e == cudaSuccess ? EG_OK : eg__cuda_error(e, device, "cudaGraphLaunch");
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
    release_kept(&g->kept);
    free(g);
}

/* oneDNN (Debian's libdnnl, the library PyTorch's CPU convolutions use) on the CNN's layer shapes,
 * called from C like Eagle's own kernels: forward, input gradient (backward data) and filter
 * gradient (backward weights), f32, batch 64, 3x3 'same', stride 1. Two layouts: "plain" (NHWC
 * images and HWIO filters, Eagle's) and "blocked" (whatever oneDNN prefers, chosen with
 * format_tag_any; the reorders into it are not timed, so this is oneDNN's best case). Prints the
 * same columns as bench_conv. Threads: OMP_NUM_THREADS (oneDNN runs on OpenMP here).
 *   dnnl_conv [--threads N] [--repeats N] [--batch N]
 * Bench-only, built by bench/conv/setup.sh (its own folder keeps it out of bench_conv, which
 * CMake builds from the C files directly in bench/conv). */
#define _POSIX_C_SOURCE 200809L
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        dnnl_status_t s_ = (call);                                                                 \
        if (s_ != dnnl_success) {                                                                  \
            fprintf(stderr, "dnnl_conv: %s failed (%d) at line %d\n", #call, (int)s_, __LINE__);   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static double clock_of(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct layer {
    const char *name;
    long h, w, c, o;
} layer;

typedef enum { FORWARD, BACKWARD_DATA, BACKWARD_WEIGHTS } pass;
static const char *const pass_names[] = {"forward", "input", "filter"};

static dnnl_memory_t memory_for(const dnnl_memory_desc_t *md, dnnl_engine_t engine) {
    dnnl_memory_t m;
    CHECK(dnnl_memory_create(&m, md, engine, DNNL_MEMORY_ALLOCATE));
    void *data;
    CHECK(dnnl_memory_get_data_handle(m, &data));
    size_t n = dnnl_memory_desc_get_size(md) / sizeof(float);
    for (size_t i = 0; i < n; i++) ((float *)data)[i] = (float)(i % 17) * 0.01f - 0.08f;
    return m;
}

static void run(const layer *l, long batch, pass p, int blocked, int repeats, dnnl_engine_t engine,
                dnnl_stream_t stream) {
    dnnl_dims_t src_dims = {batch, l->c, l->h, l->w}, wei_dims = {l->o, l->c, 3, 3};
    dnnl_dims_t dst_dims = {batch, l->o, l->h, l->w};
    dnnl_dims_t strides = {1, 1}, pad = {1, 1};
    dnnl_format_tag_t image = blocked ? dnnl_format_tag_any : dnnl_nhwc;
    dnnl_format_tag_t filter = blocked ? dnnl_format_tag_any : dnnl_hwio;
    dnnl_memory_desc_t src_md, wei_md, dst_md;
    CHECK(dnnl_memory_desc_init_by_tag(&src_md, 4, src_dims, dnnl_f32, image));
    CHECK(dnnl_memory_desc_init_by_tag(&wei_md, 4, wei_dims, dnnl_f32, filter));
    CHECK(dnnl_memory_desc_init_by_tag(&dst_md, 4, dst_dims, dnnl_f32, image));
    dnnl_convolution_desc_t forward_desc, desc;
    CHECK(dnnl_convolution_forward_desc_init(&forward_desc, dnnl_forward_training,
                                             dnnl_convolution_direct, &src_md, &wei_md, NULL,
                                             &dst_md, strides, pad, pad));
    dnnl_primitive_desc_t forward_pd, pd;
    CHECK(dnnl_primitive_desc_create(&forward_pd, &forward_desc, NULL, engine, NULL));
    if (p == FORWARD) {
        CHECK(dnnl_primitive_desc_clone(&pd, forward_pd));
    } else if (p == BACKWARD_DATA) {
        CHECK(dnnl_convolution_backward_data_desc_init(&desc, dnnl_convolution_direct, &src_md,
                                                       &wei_md, &dst_md, strides, pad, pad));
        CHECK(dnnl_primitive_desc_create(&pd, &desc, NULL, engine, forward_pd));
    } else {
        CHECK(dnnl_convolution_backward_weights_desc_init(
            &desc, dnnl_convolution_direct, &src_md, &wei_md, NULL, &dst_md, strides, pad, pad));
        CHECK(dnnl_primitive_desc_create(&pd, &desc, NULL, engine, forward_pd));
    }
    /* The arguments in the layouts this primitive chose. */
    dnnl_query_t q_src = p == BACKWARD_DATA ? dnnl_query_diff_src_md : dnnl_query_src_md;
    dnnl_query_t q_wei = p == BACKWARD_WEIGHTS ? dnnl_query_diff_weights_md : dnnl_query_weights_md;
    dnnl_query_t q_dst = p == FORWARD ? dnnl_query_dst_md : dnnl_query_diff_dst_md;
    dnnl_memory_t src = memory_for(dnnl_primitive_desc_query_md(pd, q_src, 0), engine);
    dnnl_memory_t wei = memory_for(dnnl_primitive_desc_query_md(pd, q_wei, 0), engine);
    dnnl_memory_t dst = memory_for(dnnl_primitive_desc_query_md(pd, q_dst, 0), engine);
    dnnl_primitive_t prim;
    CHECK(dnnl_primitive_create(&prim, pd));
    int a_src = p == BACKWARD_DATA ? DNNL_ARG_DIFF_SRC : DNNL_ARG_SRC;
    int a_wei = p == BACKWARD_WEIGHTS ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS;
    int a_dst = p == FORWARD ? DNNL_ARG_DST : DNNL_ARG_DIFF_DST;
    dnnl_exec_arg_t args[3] = {{a_src, src}, {a_wei, wei}, {a_dst, dst}};
    double wall = 0, cpu = 0, cpu_best = 1e300;
    for (int r = -1; r < repeats; r++) {
        double w0 = clock_of(CLOCK_MONOTONIC), c0 = clock_of(CLOCK_PROCESS_CPUTIME_ID);
        CHECK(dnnl_primitive_execute(prim, stream, 3, args));
        CHECK(dnnl_stream_wait(stream));
        if (r >= 0) {
            double c = clock_of(CLOCK_PROCESS_CPUTIME_ID) - c0;
            wall += clock_of(CLOCK_MONOTONIC) - w0;
            cpu += c;
            if (c < cpu_best) cpu_best = c;
        }
    }
    double flops = 2.0 * (double)(batch * l->h * l->w * l->o) * (double)(9 * l->c);
    char name[64];
    snprintf(name, sizeof name, "%s onednn %s", pass_names[p], blocked ? "blocked" : "plain");
    printf("%-8s %-22s %8.2f ms %8.1f GFLOP/s wall %8.1f GFLOP/s cpu/thread %8.1f best\n", l->name,
           name, 1e3 * wall / repeats, flops * repeats / wall * 1e-9, flops * repeats / cpu * 1e-9,
           flops / cpu_best * 1e-9);
    fflush(stdout);
    dnnl_primitive_destroy(prim);
    dnnl_memory_destroy(src);
    dnnl_memory_destroy(wei);
    dnnl_memory_destroy(dst);
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_desc_destroy(forward_pd);
}

int main(int argc, char **argv) {
    int threads = 1, repeats = 10;
    long batch = 64;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeats"))
            repeats = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch"))
            batch = atol(argv[i + 1]);
    }
    const dnnl_version_t *v = dnnl_version();
    printf(
        "oneDNN %d.%d.%d conv2d, batch %ld, f32, %d thread(s) (OMP_NUM_THREADS=%s), %d repeats\n",
        v->major, v->minor, v->patch, batch, threads,
        getenv("OMP_NUM_THREADS") ? getenv("OMP_NUM_THREADS") : "unset", repeats);
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    CHECK(dnnl_engine_create(&engine, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags));
    static const layer layers[] = {
        {"conv1", 28, 28, 1, 32},
        {"conv2", 28, 28, 32, 32},
        {"conv3", 14, 14, 32, 64},
        {"conv4", 14, 14, 64, 64},
    };
    for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++)
        for (int p = FORWARD; p <= BACKWARD_WEIGHTS; p++)
            for (int blocked = 0; blocked <= 1; blocked++)
                run(&layers[l], batch, (pass)p, blocked, repeats, engine, stream);
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(engine);
    return 0;
}

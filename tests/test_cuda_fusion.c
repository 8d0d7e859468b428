/* The fusion compiler of the CUDA backend (src/backend/cuda/fusion*.c) without a GPU: NVRTC needs
 * none, so every group written here by hand (a unary chain, broadcasting with scalar and strided
 * leaves, compare + where, casts, clip, f64, integers, bools) is really generated and compiled for
 * sm_90. Then the caches: a second request is a memory hit, a fresh memory cache finds the kernel
 * on disk and compiles nothing, groups differing only in a clip bound or in their shape share one
 * kernel, a truncated or corrupt cache file is compiled again and replaced, and the directory
 * follows EG_CUDA_CACHE_DIR, else XDG_CACHE_HOME; threads share the caches. Where a GPU is
 * present, fused kernels run and give the bits of the same ops run one by one (skipped
 * elsewhere). Built in CUDA builds only. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cuda/fusion.h"
#include "test_util.h"

static char cache_dir[PATH_MAX / 2]; /* this process's EG_CUDA_CACHE_DIR, a mkdtemp directory */

/* ---- building groups by hand ---- */

static const eg__attrs no_attrs;

static void begin_group(eg__fused_group *g, int n_dims, const int64_t *shape) {
    memset(g, 0, sizeof *g);
    g->n_dims = n_dims;
    g->n_elems = 1;
    for (int d = 0; d < n_dims; d++) {
        g->shape[d] = shape[d];
        g->n_elems *= shape[d];
    }
}

/* A leaf with the root's own dense strides. */
static eg__fused_operand dense_leaf(eg__fused_group *g, eg_dtype dtype) {
    eg__fused_leaf *l = &g->leaves[g->n_leaves];
    l->dtype = dtype;
    int64_t stride = (int64_t)eg_dtype_size(dtype);
    for (int d = g->n_dims - 1; d >= 0; d--) {
        l->strides[d] = g->shape[d] == 1 ? 0 : stride;
        stride *= g->shape[d];
    }
    return (eg__fused_operand){false, g->n_leaves++};
}

/* A leaf with the given byte strides (0: broadcast along that axis). */
static eg__fused_operand strided_leaf(eg__fused_group *g, eg_dtype dtype, const int64_t *strides) {
    eg__fused_leaf *l = &g->leaves[g->n_leaves];
    l->dtype = dtype;
    memcpy(l->strides, strides, sizeof(int64_t) * (size_t)g->n_dims);
    return (eg__fused_operand){false, g->n_leaves++};
}

static eg__fused_operand scalar_leaf(eg__fused_group *g, eg_dtype dtype) {
    static const int64_t zeros[EG_MAX_DIMS];
    return strided_leaf(g, dtype, zeros);
}

/* Appends a member (dtype its result, in_dtype its value inputs'); returns it as an operand. */
static eg__fused_operand add_member(eg__fused_group *g, eg__op op, eg_dtype dtype,
                                    eg_dtype in_dtype, const eg__attrs *attrs, int n_inputs, ...) {
    eg__fused_member *m = &g->members[g->n_members];
    *m = (eg__fused_member){.op = op,
                            .attrs = attrs ? attrs : &no_attrs,
                            .dtype = dtype,
                            .in_dtype = in_dtype,
                            .n_inputs = n_inputs};
    va_list args;
    va_start(args, n_inputs);
    for (int j = 0; j < n_inputs; j++) m->operands[j] = va_arg(args, eg__fused_operand);
    va_end(args);
    return (eg__fused_operand){true, g->n_members++};
}

#define F32 EG_DTYPE_F32
#define F64 EG_DTYPE_F64

/* relu(tanh(exp(neg(x)))), f32 (4, 5). */
static void unary_chain(eg__fused_group *g) {
    begin_group(g, 2, (const int64_t[]){4, 5});
    eg__fused_operand x = dense_leaf(g, F32);
    eg__fused_operand v = add_member(g, EG__OP_NEG, F32, F32, NULL, 1, x);
    v = add_member(g, EG__OP_EXP, F32, F32, NULL, 1, v);
    v = add_member(g, EG__OP_TANH, F32, F32, NULL, 1, v);
    add_member(g, EG__OP_RELU, F32, F32, NULL, 1, v);
}

/* ((a * b + c) - t) / a over (2, 3, 4): b broadcast from (3, 1), c a scalar, t the transpose of
 * a (4, 3, 2) array. */
static void broadcast_chain(eg__fused_group *g, int64_t n0) {
    begin_group(g, 3, (const int64_t[]){n0, 3, 4});
    eg__fused_operand a = dense_leaf(g, F32);
    eg__fused_operand b = strided_leaf(g, F32, (const int64_t[]){0, 4, 0});
    eg__fused_operand c = scalar_leaf(g, F32);
    eg__fused_operand t = strided_leaf(g, F32, (const int64_t[]){4, 4 * n0, 4 * n0 * 3});
    eg__fused_operand v = add_member(g, EG__OP_MUL, F32, F32, NULL, 2, a, b);
    v = add_member(g, EG__OP_ADD, F32, F32, NULL, 2, v, c);
    v = add_member(g, EG__OP_SUB, F32, F32, NULL, 2, v, t);
    add_member(g, EG__OP_DIV, F32, F32, NULL, 2, v, a);
}

/* where(a < b, a, b) and, on bools, where(m, p == q, m): the condition a bool leaf. */
static void compare_where(eg__fused_group *g) {
    begin_group(g, 1, (const int64_t[]){17});
    eg__fused_operand a = dense_leaf(g, F32), b = scalar_leaf(g, F32);
    eg__fused_operand less = add_member(g, EG__OP_LESS, EG_DTYPE_BOOL, F32, NULL, 2, a, b);
    eg__fused_operand low = add_member(g, EG__OP_WHERE, F32, F32, NULL, 3, less, a, b);
    eg__fused_operand mask = dense_leaf(g, EG_DTYPE_BOOL);
    eg__fused_operand p = dense_leaf(g, EG_DTYPE_BOOL);
    eg__fused_operand same =
        add_member(g, EG__OP_EQUAL, EG_DTYPE_BOOL, EG_DTYPE_BOOL, NULL, 2, p, less);
    eg__fused_operand chosen =
        add_member(g, EG__OP_WHERE, EG_DTYPE_BOOL, EG_DTYPE_BOOL, NULL, 3, mask, same, mask);
    eg__fused_operand as_float = add_member(g, EG__OP_CAST, F32, EG_DTYPE_BOOL, NULL, 1, chosen);
    add_member(g, EG__OP_ADD, F32, F32, NULL, 2, low, as_float);
}

/* f32 -> i32 -> f32, then * x, and f32 -> u8 compared with a u8 leaf. */
static void cast_chain(eg__fused_group *g) {
    begin_group(g, 2, (const int64_t[]){8, 8});
    eg__fused_operand x = dense_leaf(g, F32);
    eg__fused_operand i = add_member(g, EG__OP_CAST, EG_DTYPE_I32, F32, NULL, 1, x);
    eg__fused_operand f = add_member(g, EG__OP_CAST, F32, EG_DTYPE_I32, NULL, 1, i);
    eg__fused_operand u = add_member(g, EG__OP_CAST, EG_DTYPE_U8, F32, NULL, 1, f);
    eg__fused_operand pixels = dense_leaf(g, EG_DTYPE_U8);
    eg__fused_operand ge =
        add_member(g, EG__OP_GREATER_EQUAL, EG_DTYPE_BOOL, EG_DTYPE_U8, NULL, 2, u, pixels);
    eg__fused_operand one = add_member(g, EG__OP_CAST, F32, EG_DTYPE_BOOL, NULL, 1, ge);
    add_member(g, EG__OP_MUL, F32, F32, NULL, 2, f, one);
}

/* clip(x * x, low, high) with the bounds in attrs. */
static void clip_group(eg__fused_group *g, eg__attrs *attrs, double low, double high) {
    *attrs = no_attrs;
    attrs->scalars[0] = low;
    attrs->scalars[1] = high;
    begin_group(g, 1, (const int64_t[]){100});
    eg__fused_operand x = dense_leaf(g, F32);
    eg__fused_operand v = add_member(g, EG__OP_SQUARE, F32, F32, NULL, 1, x);
    add_member(g, EG__OP_CLIP, F32, F32, attrs, 1, v);
}

/* f64: relu_backward(gelu(x * s + b), sigmoid(g)) ^ 2 with s, b per column. */
static void f64_group(eg__fused_group *g) {
    begin_group(g, 2, (const int64_t[]){6, 7});
    eg__fused_operand x = dense_leaf(g, F64), gr = dense_leaf(g, F64);
    eg__fused_operand s = strided_leaf(g, F64, (const int64_t[]){0, 8});
    eg__fused_operand b = strided_leaf(g, F64, (const int64_t[]){0, 8});
    eg__fused_operand v = add_member(g, EG__OP_MUL_ADD, F64, F64, NULL, 3, x, s, b);
    v = add_member(g, EG__OP_GELU, F64, F64, NULL, 1, v);
    eg__fused_operand sg = add_member(g, EG__OP_SIGMOID, F64, F64, NULL, 1, gr);
    v = add_member(g, EG__OP_RELU_BACKWARD, F64, F64, NULL, 2, v, sg);
    add_member(g, EG__OP_POW, F64, F64, NULL, 2, v, scalar_leaf(g, F64));
}

/* i64: maximum(a - b, a / b) with b broadcast; i32 leaves cast up. */
static void integer_group(eg__fused_group *g) {
    begin_group(g, 2, (const int64_t[]){3, 5});
    eg__fused_operand a = dense_leaf(g, EG_DTYPE_I64);
    eg__fused_operand b32 = strided_leaf(g, EG_DTYPE_I32, (const int64_t[]){4, 0});
    eg__fused_operand b = add_member(g, EG__OP_CAST, EG_DTYPE_I64, EG_DTYPE_I32, NULL, 1, b32);
    eg__fused_operand d = add_member(g, EG__OP_SUB, EG_DTYPE_I64, EG_DTYPE_I64, NULL, 2, a, b);
    eg__fused_operand q = add_member(g, EG__OP_DIV, EG_DTYPE_I64, EG_DTYPE_I64, NULL, 2, a, b);
    add_member(g, EG__OP_MAXIMUM, EG_DTYPE_I64, EG_DTYPE_I64, NULL, 2, d, q);
}

/* The largest group the planner makes: 64 transposed leaves summed, then clipped (64 members):
 * 4.7 KB of parameters, above the 4 KB that GPUs before Volta took. */
static void largest_group(eg__fused_group *g) {
    static _Thread_local eg__attrs attrs;
    begin_group(g, 2, (const int64_t[]){3, 5});
    eg__fused_operand sum = strided_leaf(g, F32, (const int64_t[]){4, 12});
    while (g->n_leaves < EG__FUSED_MAX_LEAVES)
        sum = add_member(g, EG__OP_ADD, F32, F32, NULL, 2, sum,
                         strided_leaf(g, F32, (const int64_t[]){4, 12}));
    attrs = no_attrs;
    attrs.scalars[0] = -1.0;
    attrs.scalars[1] = 1.0;
    add_member(g, EG__OP_CLIP, F32, F32, &attrs, 1, sum);
}

/* ---- the statistics, as differences ---- */

typedef struct counts {
    int64_t compiled, disk, memory;
} counts;

static counts stats(void) {
    counts c;
    eg__cuda_fusion_stats(&c.compiled, &c.disk, &c.memory);
    return c;
}

static void expect_stats(int64_t compiled, int64_t disk, int64_t memory) {
    counts c = stats();
    if (c.compiled != compiled || c.disk != disk || c.memory != memory)
        fail_msg("compiled %lld, disk hits %lld, memory hits %lld; expected %lld, %lld, %lld",
                 (long long)c.compiled, (long long)c.disk, (long long)c.memory, (long long)compiled,
                 (long long)disk, (long long)memory);
}

static void compile_ok(const eg__fused_group *g) {
    if (eg__cuda_compile_fused(g) != EG_OK) fail_msg("%s", eg_last_error());
}

static void cubin_path(const eg__fused_group *g, char *path) {
    assert_int_equal(eg__cuda_fusion_cache_file(g, 9, 0, path, PATH_MAX), EG_OK);
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* ---- the cases ---- */

typedef void (*builder)(eg__fused_group *g);
static void broadcast_chain_2(eg__fused_group *g) {
    broadcast_chain(g, 2);
}
static void clip_0_1(eg__fused_group *g) {
    static _Thread_local eg__attrs attrs; /* the threads' case builds it too */
    clip_group(g, &attrs, 0.0, 1.0);
}
static const builder builders[] = {unary_chain, broadcast_chain_2, compare_where, cast_chain,
                                   clip_0_1,    f64_group,         integer_group};
#define N_BUILDERS ((int)(sizeof builders / sizeof builders[0]))

static void test_each_pattern_compiles_then_hits_memory_then_disk(void **state) {
    (void)state;
    static eg__fused_group g;
    for (int b = 0; b < N_BUILDERS; b++) {
        builders[b](&g);
        eg__cuda_fusion_reset();
        compile_ok(&g);
        expect_stats(1, 0, 0);
        compile_ok(&g); /* the same process: from memory */
        expect_stats(1, 0, 1);
        eg__cuda_fusion_reset(); /* a fresh process: from disk, nothing compiled */
        compile_ok(&g);
        expect_stats(0, 1, 0);
        char path[PATH_MAX];
        cubin_path(&g, path);
        assert_true(exists(path));
    }
}

static void test_the_source_is_the_math_then_the_pattern(void **state) {
    (void)state;
    static eg__fused_group g;
    eg__fused_source a, b;
    cast_chain(&g);
    assert_int_equal(eg__cuda_fused_source(&g, "test", &a), EG_OK);
    assert_non_null(strstr(a.kernel, "eg_math_cast<int, float>(l0)"));
    assert_non_null(strstr(a.kernel, "eg_math_cast<float, bool>(m3)"));
    assert_non_null(strstr(a.kernel, "eg_math_greater_equal<unsigned char>(m2, l1)"));
    assert_non_null(strstr(a.kernel, a.name));
    assert_int_equal(strncmp(a.name, "eg_fused_", 9), 0);
    assert_int_equal(strlen(a.name), 9 + 16);
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)a.hash);
    assert_string_equal(a.name + 9, hex);
    size_t prefix_length;
    const char *prefix = eg__cuda_fused_prefix(&prefix_length);
    assert_non_null(strstr(prefix, "eg_math_add"));
    /* the compiler's line is part of the hashed text */
    assert_int_equal(eg__cuda_fused_source(&g, "another compiler", &b), EG_OK);
    assert_true(a.hash != b.hash);
    eg__cuda_fused_source_free(&b);
    /* the leaf kinds go into the pattern, the shape does not */
    broadcast_chain(&g, 2);
    assert_int_equal(eg__cuda_fused_source(&g, "test", &b), EG_OK);
    assert_int_equal(b.leaf_kinds[0], EG__FUSED_LEAF_DENSE);
    assert_int_equal(b.leaf_kinds[1], EG__FUSED_LEAF_STRIDED);
    assert_int_equal(b.leaf_kinds[2], EG__FUSED_LEAF_SCALAR);
    assert_int_equal(b.leaf_kinds[3], EG__FUSED_LEAF_STRIDED);
    uint64_t two = b.hash;
    eg__cuda_fused_source_free(&b);
    broadcast_chain(&g, 5);
    assert_int_equal(eg__cuda_fused_source(&g, "test", &b), EG_OK);
    assert_true(b.hash == two);
    eg__cuda_fused_source_free(&b);
    eg__cuda_fused_source_free(&a);
}

static void test_parameters_merge_dims(void **state) {
    (void)state;
    static eg__fused_group g;
    /* (2, 3, 4) with a leaf of shape (2, 3, 1): the first two dims merge, the last is kept */
    begin_group(&g, 3, (const int64_t[]){2, 3, 4});
    eg__fused_operand x = dense_leaf(&g, F32);
    eg__fused_operand y = strided_leaf(&g, F32, (const int64_t[]){12, 4, 0});
    add_member(&g, EG__OP_ADD, F32, F32, NULL, 2, x, y);
    g.out = (char *)0x1000;
    g.leaves[0].data = (const char *)0x2000;
    g.leaves[1].data = (const char *)0x3000;
    eg__fused_source s;
    assert_int_equal(eg__cuda_fused_source(&g, "test", &s), EG_OK);
    int64_t p[EG__FUSED_MAX_PARAMS];
    size_t bytes = eg__cuda_fused_params(&g, &s, p);
    const int D = EG_MAX_DIMS;
    assert_int_equal(bytes, 8 * (3 + D + 2 + D));
    assert_int_equal(p[0], 24);
    assert_int_equal(p[1], 2);
    assert_int_equal(p[2], 6);
    assert_int_equal(p[3], 4);
    assert_int_equal(p[4], 0);
    assert_int_equal(p[2 + D], 0x1000);
    assert_int_equal(p[3 + D], 0x2000);
    assert_int_equal(p[4 + D], 0x3000);
    assert_int_equal(p[5 + D], 4); /* the strided leaf's strides, merged */
    assert_int_equal(p[6 + D], 0);
    char declared[64];
    snprintf(declared, sizeof declared, "== %zu,", bytes);
    assert_non_null(strstr(s.kernel, declared)); /* what the kernel's static_assert checks */
    eg__cuda_fused_source_free(&s);

    /* clip's bounds are the last words, as doubles */
    eg__attrs attrs;
    clip_group(&g, &attrs, -0.5, 2.25);
    assert_int_equal(eg__cuda_fused_source(&g, "test", &s), EG_OK);
    assert_int_equal(s.n_scalars, 2);
    bytes = eg__cuda_fused_params(&g, &s, p);
    assert_int_equal(bytes, 8 * (3 + D + 1 + 2));
    double low, high;
    memcpy(&low, &p[3 + D + 1], sizeof low);
    memcpy(&high, &p[3 + D + 2], sizeof high);
    assert_true(low == -0.5 && high == 2.25);
    eg__cuda_fused_source_free(&s);
}

static void test_the_largest_group_compiles(void **state) {
    (void)state;
    static eg__fused_group g;
    largest_group(&g);
    assert_int_equal(g.n_members, EG__FUSED_MAX_MEMBERS);
    compile_ok(&g);
    eg__fused_source s;
    assert_int_equal(eg__cuda_fused_source(&g, "test", &s), EG_OK);
    static int64_t p[EG__FUSED_MAX_PARAMS];
    size_t words = 3 + EG_MAX_DIMS + EG__FUSED_MAX_LEAVES * (1 + EG_MAX_DIMS) + 2;
    assert_int_equal(eg__cuda_fused_params(&g, &s, p), 8 * words);
    assert_int_equal(p[1], 2); /* (3, 5) transposed: no dims merge */
    eg__cuda_fused_source_free(&s);
}

static void test_groups_differing_in_a_clip_bound_or_shape_share_a_kernel(void **state) {
    (void)state;
    static eg__fused_group a, b;
    eg__attrs attrs_a, attrs_b;
    clip_group(&a, &attrs_a, 0.0, 6.0);
    clip_group(&b, &attrs_b, -1.0, INFINITY);
    eg__cuda_fusion_reset();
    compile_ok(&a);
    compile_ok(&b);
    expect_stats(0, 1, 1); /* the first case compiled it, as clip(x * x, 0, 1) */
    char path_a[PATH_MAX], path_b[PATH_MAX];
    cubin_path(&a, path_a);
    cubin_path(&b, path_b);
    assert_string_equal(path_a, path_b);

    broadcast_chain(&a, 2);
    broadcast_chain(&b, 7);
    eg__cuda_fusion_reset();
    compile_ok(&a);
    compile_ok(&b);
    expect_stats(0, 1, 1); /* compiled by the first case, now on disk */
}

/* Overwrites the file at path with bytes [0, keep) of itself, then flip (when >= 0) flipped. */
static void damage(const char *path, long keep, long flip) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char data[1 << 22];
    size_t n = fread(data, 1, sizeof data, f);
    fclose(f);
    assert_true(n > 64 && n < sizeof data);
    if (keep < 0 || (size_t)keep > n) keep = (long)n;
    if (flip >= 0) data[flip] ^= 0x20;
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, (size_t)keep, f), (size_t)keep);
    fclose(f);
}

static void expect_recompiled(const eg__fused_group *g, const char *what) {
    eg__cuda_fusion_reset();
    compile_ok(g);
    counts c = stats();
    if (c.compiled != 1 || c.disk != 0) fail_msg("a cache file %s was loaded", what);
    eg__cuda_fusion_reset(); /* and it was replaced by a good one */
    compile_ok(g);
    expect_stats(0, 1, 0);
}

static void test_a_damaged_cache_file_is_compiled_again(void **state) {
    (void)state;
    static eg__fused_group g;
    unary_chain(&g);
    eg__cuda_fusion_reset();
    compile_ok(&g);
    char path[PATH_MAX];
    cubin_path(&g, path);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    long size = (long)st.st_size;

    damage(path, size / 2, -1);
    expect_recompiled(&g, "cut in half");
    damage(path, size - 1, -1);
    expect_recompiled(&g, "missing its last byte");
    damage(path, -1, size - 100);
    expect_recompiled(&g, "with a flipped byte in the cubin");
    damage(path, -1, 9);
    expect_recompiled(&g, "with a flipped byte in its hash");
    damage(path, -1, 0);
    expect_recompiled(&g, "with a wrong magic");
    damage(path, 10, -1);
    expect_recompiled(&g, "of 10 bytes");
    FILE *f = fopen(path, "wb"); /* empty */
    fclose(f);
    expect_recompiled(&g, "that is empty");
    unlink(path);
    expect_recompiled(&g, "that is missing");
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void test_the_cache_directory_follows_the_environment(void **state) {
    (void)state;
    static eg__fused_group g;
    integer_group(&g);
    char path[PATH_MAX], nested[PATH_MAX], xdg[PATH_MAX / 2 + 8];
    cubin_path(&g, path);
    assert_int_equal(strncmp(path, cache_dir, strlen(cache_dir)), 0);
    assert_true(exists(path));
    /* the source beside it */
    char source[PATH_MAX];
    snprintf(source, sizeof source, "%.*s.cu", (int)(strstr(path, "-sm_90") - path), path);
    assert_true(exists(source));

    /* a directory that does not exist yet is made, parents included */
    snprintf(nested, sizeof nested, "%s/a/b/kernels", cache_dir);
    setenv("EG_CUDA_CACHE_DIR", nested, 1);
    eg__cuda_fusion_reset();
    compile_ok(&g);
    expect_stats(1, 0, 0);
    cubin_path(&g, path);
    assert_int_equal(strncmp(path, nested, strlen(nested)), 0);
    assert_true(exists(path));

    /* without it, $XDG_CACHE_HOME/eagle/cuda-kernels */
    unsetenv("EG_CUDA_CACHE_DIR");
    char *saved = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
    snprintf(xdg, sizeof xdg, "%s/xdg", cache_dir);
    setenv("XDG_CACHE_HOME", xdg, 1);
    eg__cuda_fusion_reset();
    compile_ok(&g);
    expect_stats(1, 0, 0);
    cubin_path(&g, path);
    char expected[PATH_MAX];
    snprintf(expected, sizeof expected, "%s/eagle/cuda-kernels/", xdg);
    assert_int_equal(strncmp(path, expected, strlen(expected)), 0);
    assert_true(exists(path));

    if (saved)
        setenv("XDG_CACHE_HOME", saved, 1);
    else
        unsetenv("XDG_CACHE_HOME");
    free(saved);
    setenv("EG_CUDA_CACHE_DIR", cache_dir, 1);
}

static void test_bad_groups_are_errors(void **state) {
    (void)state;
    static eg__fused_group g;
    /* an op NVRTC finds no overload for: the compiler's log in the error */
    begin_group(&g, 1, (const int64_t[]){4});
    eg__fused_operand x = dense_leaf(&g, EG_DTYPE_I32);
    add_member(&g, EG__OP_EXP, EG_DTYPE_I32, EG_DTYPE_I32, NULL, 1, x);
    assert_int_equal(eg__cuda_compile_fused(&g), EG_ERR_UNSUPPORTED);
    expect_error_containing(EG_ERR_UNSUPPORTED, "NVRTC", "eg_math_exp", "sm_90", NULL);

    unary_chain(&g); /* a member reading a later one */
    g.members[1].operands[0] = (eg__fused_operand){true, 2};
    assert_int_equal(eg__cuda_compile_fused(&g), EG_ERR_INTERNAL);
    expect_error_containing(EG_ERR_INTERNAL, "member 1 (exp)", "does not come before", NULL);

    unary_chain(&g); /* a leaf that does not exist */
    g.members[0].operands[0] = (eg__fused_operand){false, 3};
    assert_int_equal(eg__cuda_compile_fused(&g), EG_ERR_INTERNAL);
    expect_error_containing(EG_ERR_INTERNAL, "leaf 3", NULL);

    unary_chain(&g); /* an operand of another dtype */
    g.leaves[0].dtype = F64;
    assert_int_equal(eg__cuda_compile_fused(&g), EG_ERR_INTERNAL);
    expect_error_containing(EG_ERR_INTERNAL, "input 0 is f64, expected f32", NULL);

    unary_chain(&g); /* no fused code for f16 yet */
    g.leaves[0].dtype = EG_DTYPE_F16;
    assert_int_equal(eg__cuda_compile_fused(&g), EG_ERR_DTYPE);
    expect_error_containing(EG_ERR_DTYPE, "f16", NULL);

    unary_chain(&g); /* dropout draws random numbers: never fused */
    g.members[0].op = EG__OP_DROPOUT;
    assert_int_equal(eg__cuda_compile_fused(&g), EG_ERR_INTERNAL);
    expect_error_containing(EG_ERR_INTERNAL, "dropout", NULL);

    unary_chain(&g);
    g.members[3].op = EG__OP_COUNT;
    assert_int_equal(eg__cuda_compile_fused(&g), EG_ERR_INTERNAL);
    expect_error(EG_ERR_INTERNAL);

    unary_chain(&g);
    g.n_elems = 7;
    assert_int_equal(eg__cuda_compile_fused(&g), EG_ERR_INTERNAL);
    expect_error_containing(EG_ERR_INTERNAL, "7 elements", NULL);

    unary_chain(&g);
    g.n_members = 0;
    assert_int_equal(eg__cuda_compile_fused(&g), EG_ERR_INTERNAL);
    expect_error(EG_ERR_INTERNAL);

    assert_int_equal(eg__cuda_compile_fused(NULL), EG_ERR_NULL_ARGUMENT);
    expect_error(EG_ERR_NULL_ARGUMENT);

    unary_chain(&g); /* running needs a GPU's group */
    assert_int_equal(eg__cuda_run_fused(&g), EG_ERR_INTERNAL);
    expect_error_containing(EG_ERR_INTERNAL, "not a GPU", NULL);
}

/* Threads asking for the same kernels at once: each request is served once, by one of the
 * three ways (the mutex is never held across a compile, so two threads may both compile). */
static void *compile_every_pattern(void *failures) {
    static _Thread_local eg__fused_group g;
    for (int b = 0; b < N_BUILDERS; b++) {
        builders[b](&g);
        if (eg__cuda_compile_fused(&g) != EG_OK) ++*(int *)failures;
    }
    return NULL;
}

static void test_threads_share_the_caches(void **state) {
    (void)state;
    enum { THREADS = 4 };
    char fresh[PATH_MAX]; /* so that the threads compile, not only read */
    snprintf(fresh, sizeof fresh, "%s/threads", cache_dir);
    setenv("EG_CUDA_CACHE_DIR", fresh, 1);
    eg__cuda_fusion_reset();
    pthread_t threads[THREADS];
    int failures[THREADS] = {0};
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_create(&threads[t], NULL, compile_every_pattern, &failures[t]), 0);
    for (int t = 0; t < THREADS; t++) {
        pthread_join(threads[t], NULL);
        assert_int_equal(failures[t], 0);
    }
    setenv("EG_CUDA_CACHE_DIR", cache_dir, 1);
    counts c = stats();
    assert_true(c.compiled >= N_BUILDERS);
    assert_int_equal(c.compiled + c.disk + c.memory, THREADS * N_BUILDERS);
}

/* ---- on a GPU (skipped without one): fused kernels give the precompiled kernels' bits ---- */

/* A leaf reading tensor t (on the GPU), broadcast to the group's shape as the lazy planner does. */
static eg__fused_operand tensor_leaf(eg__fused_group *g, const eg_tensor *t) {
    eg__fused_leaf *l = &g->leaves[g->n_leaves];
    l->dtype = t->dtype;
    l->data = eg__data(t);
    int64_t size = (int64_t)eg_dtype_size(t->dtype);
    for (int d = 0; d < g->n_dims; d++) {
        int td = d - (g->n_dims - t->n_dims);
        l->strides[d] = td < 0 || t->shape[td] == 1 ? 0 : t->strides[td] * size;
    }
    return (eg__fused_operand){false, g->n_leaves++};
}

/* Runs g (shaped like expected) twice into a new tensor, the second time from memory, and
 * checks that its bytes are expected's (the same ops run one by one). */
static void expect_fused_bits(eg__fused_group *g, const eg_tensor *expected) {
    assert_non_null(expected);
    eg_tensor *out = eg_zeros(expected->dtype, expected->n_dims, expected->shape);
    assert_non_null(out);
    g->out = eg__data(out);
    g->device = expected->device;
    if (eg__cuda_run_fused(g) != EG_OK) fail_msg("%s", eg_last_error());
    counts before = stats();
    if (eg__cuda_run_fused(g) != EG_OK) fail_msg("%s", eg_last_error());
    assert_int_equal(stats().memory, before.memory + 1);
    size_t size = eg_dtype_size(expected->dtype), bytes = (size_t)expected->n_elems * size;
    char *want = malloc(bytes), *got = malloc(bytes);
    assert_true(want && got);
    assert_int_equal(eg_tensor_copy_to_host(expected, want, bytes), EG_OK);
    assert_int_equal(eg_tensor_copy_to_host(out, got, bytes), EG_OK);
    for (size_t i = 0; i < bytes; i += size)
        if (memcmp(want + i, got + i, size))
            fail_msg("element %zu of %lld differs from the unfused ops'", i / size,
                     (long long)expected->n_elems);
    free(want);
    free(got);
}

static void test_fused_kernels_give_the_unfused_bits(void **state) {
    (void)state;
    const eg_device *gpu = eg_device_get("cuda:0");
    if (!gpu) {
        eg_clear_error();
        skip();
    }
    assert_int_equal(eg_device_scope_begin(gpu), EG_OK);
    static eg__fused_group g;

    /* a unary chain over more elements than one grid has threads */
    const int64_t big[1] = {(1 << 24) + 7};
    eg_tensor *x = uniform_tensor(1, big, 1);
    begin_group(&g, 1, big);
    eg__fused_operand v = tensor_leaf(&g, x);
    v = add_member(&g, EG__OP_NEG, F32, F32, NULL, 1, v);
    v = add_member(&g, EG__OP_EXP, F32, F32, NULL, 1, v);
    v = add_member(&g, EG__OP_TANH, F32, F32, NULL, 1, v);
    v = add_member(&g, EG__OP_RELU, F32, F32, NULL, 1, v);
    add_member(&g, EG__OP_GELU, F32, F32, NULL, 1, v);
    expect_fused_bits(&g, eg_gelu(eg_relu(eg_tanh(eg_exp(eg_neg(x))))));

    /* broadcasting: a dense, b (3, 1), c one element, t a transposed view */
    const int64_t shape[3] = {37, 3, 129};
    eg_tensor *a = uniform_tensor(3, shape, 2);
    eg_tensor *b = uniform_tensor(2, (const int64_t[]){3, 1}, 3);
    eg_tensor *c = uniform_tensor(1, (const int64_t[]){1}, 4);
    eg_tensor *t =
        eg_permute(uniform_tensor(3, (const int64_t[]){129, 3, 37}, 5), (const int[]){2, 1, 0});
    begin_group(&g, 3, shape);
    eg__fused_operand la = tensor_leaf(&g, a), lb = tensor_leaf(&g, b), lc = tensor_leaf(&g, c);
    v = add_member(&g, EG__OP_MUL, F32, F32, NULL, 2, la, lb);
    v = add_member(&g, EG__OP_ADD, F32, F32, NULL, 2, v, lc);
    v = add_member(&g, EG__OP_SUB, F32, F32, NULL, 2, v, tensor_leaf(&g, t));
    add_member(&g, EG__OP_DIV, F32, F32, NULL, 2, v, la);
    expect_fused_bits(&g, eg_div(eg_sub(eg_add(eg_mul(a, b), c), t), a));

    /* compare, where, clip, casts through i32 to f64 */
    float hundred_value = 100.0f;
    eg_tensor *hundred = eg_tensor_from_data(&hundred_value, F32, 0, NULL);
    eg__attrs attrs = no_attrs;
    attrs.scalars[0] = -0.25;
    attrs.scalars[1] = 0.5;
    begin_group(&g, 3, shape);
    la = tensor_leaf(&g, a);
    lb = tensor_leaf(&g, b);
    v = add_member(&g, EG__OP_LESS, EG_DTYPE_BOOL, F32, NULL, 2, la, lb);
    v = add_member(&g, EG__OP_WHERE, F32, F32, NULL, 3, v, la, lb);
    v = add_member(&g, EG__OP_CLIP, F32, F32, &attrs, 1, v);
    v = add_member(&g, EG__OP_MUL, F32, F32, NULL, 2, v, tensor_leaf(&g, hundred));
    v = add_member(&g, EG__OP_CAST, EG_DTYPE_I32, F32, NULL, 1, v);
    add_member(&g, EG__OP_CAST, F64, EG_DTYPE_I32, NULL, 1, v);
    eg_tensor *clipped = eg_clip(eg_where(eg_less(a, b), a, b), -0.25, 0.5);
    expect_fused_bits(&g, eg_cast(eg_cast(eg_mul(clipped, hundred), EG_DTYPE_I32), F64));

    /* f64 */
    eg_tensor *a64 = eg_cast(a, F64), *b64 = eg_cast(b, F64);
    begin_group(&g, 3, shape);
    v = add_member(&g, EG__OP_EXP, F64, F64, NULL, 1, tensor_leaf(&g, a64));
    add_member(&g, EG__OP_POW, F64, F64, NULL, 2, v, tensor_leaf(&g, b64));
    expect_fused_bits(&g, eg_pow(eg_exp(a64), b64));

    assert_int_equal(eg_device_scope_end(), EG_OK);
}

static int group_setup(void **state) {
    (void)state;
    const char *tmp = getenv("TMPDIR");
    snprintf(cache_dir, sizeof cache_dir, "%s/eagle-fusion-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(cache_dir)) return -1;
    setenv("EG_CUDA_CACHE_DIR", cache_dir, 1);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    eg__cuda_fusion_reset();
    nftw(cache_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_each_pattern_compiles_then_hits_memory_then_disk,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_the_source_is_the_math_then_the_pattern,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_parameters_merge_dims, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_the_largest_group_compiles, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(
            test_groups_differing_in_a_clip_bound_or_shape_share_a_kernel, fresh_scope_setup,
            strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_a_damaged_cache_file_is_compiled_again,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_the_cache_directory_follows_the_environment,
                                        fresh_scope_setup, strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_bad_groups_are_errors, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_threads_share_the_caches, fresh_scope_setup,
                                        strict_scope_teardown),
        cmocka_unit_test_setup_teardown(test_fused_kernels_give_the_unfused_bits, fresh_scope_setup,
                                        strict_scope_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

/* DLPack: export fields and dtypes, zero copy both ways (writes seen on both sides), the
 * producer's deleter called exactly once and only when the last eagle reference goes, strided
 * and offset DLTensors, the 1.0 versioned form, and every refusal leaving ownership with the
 * caller. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "eagle.h"
#include "test_util.h"

static int case_setup(void **state) {
    (void)state;
    while (eg_scope_depth() > 0) eg_scope_end();
    eg_clear_error();
    return 0;
}

static int case_teardown(void **state) {
    (void)state;
    if (eg_last_status() != EG_OK) {
        print_error("unexpected pending error: %s\n", eg_last_error());
        return -1;
    }
    return eg_scope_depth() == 0 ? 0 : -1;
}

/* A producer of our own: a DLManagedTensor over a caller-owned buffer whose deleter counts. */
typedef struct producer {
    DLManagedTensor managed;
    int64_t shape[EG_MAX_DIMS];
    int64_t strides[EG_MAX_DIMS];
    int deleted;
} producer;

static void count_delete(DLManagedTensor *self) {
    producer *p = self->manager_ctx;
    p->deleted++;
}

static void producer_init(producer *p, void *data, DLDataType dtype, int ndim, const int64_t *shape,
                          const int64_t *strides, uint64_t byte_offset) {
    memset(p, 0, sizeof *p);
    for (int i = 0; i < ndim; i++) p->shape[i] = shape[i];
    if (strides)
        for (int i = 0; i < ndim; i++) p->strides[i] = strides[i];
    p->managed.dl_tensor = (DLTensor){.data = data,
                                      .device = {kDLCPU, 0},
                                      .ndim = ndim,
                                      .dtype = dtype,
                                      .shape = p->shape,
                                      .strides = strides ? p->strides : NULL,
                                      .byte_offset = byte_offset};
    p->managed.manager_ctx = p;
    p->managed.deleter = count_delete;
}

static const DLDataType DL_F32 = {kDLFloat, 32, 1};

static double get2(const eg_tensor *t, int64_t i, int64_t j) {
    int64_t index[2] = {i, j};
    return eg_tensor_get(t, index);
}

/* ---- export ---- */

static void test_export_fields(void **state) {
    (void)state;
    int64_t shape[2] = {2, 3};
    float values[6] = {0, 1, 2, 3, 4, 5};
    eg_tensor *t = eg_tensor_from_data(values, EG_DTYPE_F32, 2, shape);
    DLManagedTensor *m = NULL;
    assert_int_equal(eg_to_dlpack(t, &m), EG_OK);
    assert_non_null(m);
    const DLTensor *dl = &m->dl_tensor;
    assert_int_equal(dl->device.device_type, kDLCPU);
    assert_int_equal(dl->device.device_id, 0);
    assert_int_equal(dl->ndim, 2);
    assert_int_equal(dl->dtype.code, kDLFloat);
    assert_int_equal(dl->dtype.bits, 32);
    assert_int_equal(dl->dtype.lanes, 1);
    assert_int_equal(dl->shape[0], 2);
    assert_int_equal(dl->shape[1], 3);
    assert_non_null(dl->strides);
    assert_int_equal(dl->strides[0], 3);
    assert_int_equal(dl->strides[1], 1);
    assert_int_equal(dl->byte_offset, 0);
    assert_ptr_equal(dl->data, eg_tensor_data(t));

    /* Zero copy: writes on either side are seen on the other. */
    float *p = dl->data;
    p[4] = 40;
    assert_true(get2(t, 1, 1) == 40);
    ((float *)eg_tensor_data(t))[5] = 50;
    assert_true(p[5] == 50);

    /* The managed tensor keeps the memory alive after eagle lets go (ASan checks the reads). */
    eg_release(t);
    assert_true(p[0] == 0 && p[4] == 40 && p[5] == 50);
    m->deleter(m);
}

static void test_export_views(void **state) {
    (void)state;
    eg_scope_begin();
    int64_t shape[2] = {3, 4};
    eg_tensor *base = eg_reshape(eg_arange(0, 12, 1, EG_DTYPE_F64), 2, shape);
    eg_tensor *transposed = eg_transpose(base, 0, 1); /* (4, 3), strides (1, 4) */
    eg_tensor *sliced = eg_slice(base, 1, 1, 4, 2);   /* (3, 2), strides (4, 2), offset 1 */
    DLManagedTensor *mt = NULL, *ms = NULL;
    assert_int_equal(eg_to_dlpack(transposed, &mt), EG_OK);
    assert_int_equal(eg_to_dlpack(sliced, &ms), EG_OK);
    assert_int_equal(mt->dl_tensor.shape[0], 4);
    assert_int_equal(mt->dl_tensor.strides[0], 1);
    assert_int_equal(mt->dl_tensor.strides[1], 4);
    assert_int_equal(ms->dl_tensor.shape[1], 2);
    assert_int_equal(ms->dl_tensor.strides[0], 4);
    assert_int_equal(ms->dl_tensor.strides[1], 2);
    const double *pt = mt->dl_tensor.data, *ps = ms->dl_tensor.data;
    assert_true(pt[2 * 1 + 1 * 4] == 6); /* transposed[2][1] = base[1][2] */
    assert_true(ps[1 * 4 + 1 * 2] == 7); /* sliced[1][1] = base[1][3] */
    assert_int_equal(eg_scope_end(), EG_OK);
    /* The scope released every tensor; the exports still read the memory. */
    assert_true(pt[11] == 11 && ps[0] == 1);
    mt->deleter(mt);
    ms->deleter(ms);
}

static void test_export_dtypes(void **state) {
    (void)state;
    static const struct {
        eg_dtype dtype;
        uint8_t code, bits;
    } expected[] = {{EG_DTYPE_F32, kDLFloat, 32}, {EG_DTYPE_F64, kDLFloat, 64},
                    {EG_DTYPE_F16, kDLFloat, 16}, {EG_DTYPE_BF16, kDLBfloat, 16},
                    {EG_DTYPE_I32, kDLInt, 32},   {EG_DTYPE_I64, kDLInt, 64},
                    {EG_DTYPE_U8, kDLUInt, 8},    {EG_DTYPE_BOOL, kDLBool, 8}};
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
        int64_t n = 3;
        eg_tensor *t = eg_ones(expected[i].dtype, 1, &n);
        DLManagedTensor *m;
        assert_int_equal(eg_to_dlpack(t, &m), EG_OK);
        assert_int_equal(m->dl_tensor.dtype.code, expected[i].code);
        assert_int_equal(m->dl_tensor.dtype.bits, expected[i].bits);
        assert_int_equal(m->dl_tensor.dtype.lanes, 1);
        eg_tensor *back = eg_from_dlpack(m);
        assert_non_null(back);
        assert_int_equal(eg_tensor_dtype(back), expected[i].dtype);
        assert_true(eg_tensor_shares_storage(back, t) == false);   /* a new storage ... */
        assert_ptr_equal(eg_tensor_data(back), eg_tensor_data(t)); /* ... on the same memory */
        eg_release(t);
        eg_release(back);
    }
    /* 0-d and empty tensors. */
    eg_tensor *scalar = eg_scalar(EG_DTYPE_F32, 2.5);
    DLManagedTensor *m;
    assert_int_equal(eg_to_dlpack(scalar, &m), EG_OK);
    assert_int_equal(m->dl_tensor.ndim, 0);
    eg_tensor *back = eg_from_dlpack(m);
    assert_true(eg_item(back) == 2.5);
    eg_release(back);
    eg_release(scalar);
    int64_t empty_shape[2] = {0, 4};
    eg_tensor *empty = eg_zeros(EG_DTYPE_F32, 2, empty_shape);
    assert_int_equal(eg_to_dlpack(empty, &m), EG_OK);
    back = eg_from_dlpack(m);
    assert_non_null(back);
    assert_int_equal(eg_tensor_n_elems(back), 0);
    eg_release(back);
    eg_release(empty);
}

static void test_export_errors(void **state) {
    (void)state;
    DLManagedTensor *m = (DLManagedTensor *)&m;
    assert_int_equal(eg_to_dlpack(NULL, &m), EG_ERR_NULL_ARGUMENT);
    assert_null(m);
    expect_error(EG_ERR_NULL_ARGUMENT);
    eg_tensor *t = eg_scalar(EG_DTYPE_F32, 1);
    assert_int_equal(eg_to_dlpack(t, NULL), EG_ERR_NULL_ARGUMENT);
    expect_error(EG_ERR_NULL_ARGUMENT);
    eg_release(t);
}

/* ---- import ---- */

static void test_round_trip(void **state) {
    (void)state;
    eg_scope_begin();
    int64_t shape[3] = {2, 3, 4};
    eg_tensor *t = eg_reshape(eg_arange(0, 24, 1, EG_DTYPE_F32), 3, shape);
    DLManagedTensor *m;
    assert_int_equal(eg_to_dlpack(t, &m), EG_OK);
    eg_tensor *back = eg_from_dlpack(m);
    assert_non_null(back);
    assert_int_equal(eg_tensor_n_dims(back), 3);
    assert_memory_equal(eg_tensor_shape(back), shape, sizeof shape);
    assert_true(eg_tensor_is_contiguous(back));
    assert_ptr_equal(eg_tensor_data(back), eg_tensor_data(t));
    eg_tensor *diff = eg_sub(back, t);
    assert_true(eg_item(eg_sum(eg_abs(diff), 0, NULL, false)) == 0);
    /* Writes through the import are seen by the original. */
    ((float *)eg_tensor_data(back))[23] = -1;
    int64_t last[3] = {1, 2, 3};
    assert_true(eg_tensor_get(t, last) == -1);
    eg_release(t);
    eg_release(back); /* runs eagle's own deleter, which drops the last storage reference */
    assert_int_equal(eg_scope_end(), EG_OK);
}

static void test_import_zero_copy_and_deleter(void **state) {
    (void)state;
    float buffer[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3};
    producer p;
    producer_init(&p, buffer, DL_F32, 2, shape, NULL, 0);
    eg_tensor *t = eg_from_dlpack(&p.managed);
    assert_non_null(t);
    assert_ptr_equal(eg_tensor_data(t), buffer);
    assert_true(get2(t, 1, 2) == 6);
    buffer[0] = 100; /* producer writes, eagle sees */
    assert_true(get2(t, 0, 0) == 100);
    ((float *)eg_tensor_data(t))[1] = 200; /* eagle writes, producer sees */
    assert_true(buffer[1] == 200);
    eg_tensor *sum = eg_add(t, t); /* ops read it like any tensor */
    assert_true(get2(sum, 1, 0) == 8);
    eg_release(sum);

    /* The deleter waits for the last view. */
    eg_tensor *row = eg_slice(t, 0, 1, 2, 1);
    eg_release(t);
    assert_int_equal(p.deleted, 0);
    assert_true(get2(row, 0, 1) == 5);
    eg_release(row);
    assert_int_equal(p.deleted, 1);

    /* Inside a scope: released when the scope ends, deleter once. */
    producer_init(&p, buffer, DL_F32, 2, shape, NULL, 0);
    eg_scope_begin();
    assert_non_null(eg_from_dlpack(&p.managed));
    assert_int_equal(p.deleted, 0);
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_int_equal(p.deleted, 1);

    /* Re-exported: the producer's deleter runs when the re-export is deleted too. */
    producer_init(&p, buffer, DL_F32, 2, shape, NULL, 0);
    t = eg_from_dlpack(&p.managed);
    DLManagedTensor *again;
    assert_int_equal(eg_to_dlpack(t, &again), EG_OK);
    eg_release(t);
    assert_int_equal(p.deleted, 0);
    assert_ptr_equal(again->dl_tensor.data, buffer);
    again->deleter(again);
    assert_int_equal(p.deleted, 1);

    /* A NULL deleter is allowed (memory that needs no freeing). */
    producer_init(&p, buffer, DL_F32, 2, shape, NULL, 0);
    p.managed.deleter = NULL;
    t = eg_from_dlpack(&p.managed);
    assert_non_null(t);
    eg_release(t);
    assert_int_equal(p.deleted, 0);
}

static void test_import_strided(void **state) {
    (void)state;
    /* A (4, 3) view of a (4, 6) buffer: every second column, starting at column 1. */
    float buffer[24];
    for (int i = 0; i < 24; i++) buffer[i] = (float)i;
    int64_t shape[2] = {4, 3}, strides[2] = {6, 2};
    producer p;
    producer_init(&p, buffer, DL_F32, 2, shape, strides, sizeof(float));
    eg_tensor *t = eg_from_dlpack(&p.managed);
    assert_non_null(t);
    assert_false(eg_tensor_is_contiguous(t));
    assert_memory_equal(eg_tensor_strides(t), strides, sizeof strides);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) assert_true(get2(t, i, j) == buffer[1 + i * 6 + j * 2]);
    eg_tensor *copy = eg_copy(t);
    float out[12];
    assert_int_equal(eg_tensor_copy_to_host(copy, out, sizeof out), EG_OK);
    for (int i = 0; i < 12; i++) assert_true(out[i] == (float)(1 + (i / 3) * 6 + (i % 3) * 2));
    eg_tensor *total = eg_sum(t, 0, NULL, false);
    assert_true(eg_item(total) == 1 * 12 + 6 * (0 + 1 + 2 + 3) * 3 + 2 * (0 + 1 + 2) * 4);
    eg_release(total);
    eg_release(copy);
    eg_release(t);
    assert_int_equal(p.deleted, 1);

    /* A column-major (Fortran-order) matrix and a broadcast (stride 0) axis. */
    int64_t f_shape[2] = {3, 2}, f_strides[2] = {1, 3};
    producer_init(&p, buffer, DL_F32, 2, f_shape, f_strides, 0);
    t = eg_from_dlpack(&p.managed);
    assert_true(get2(t, 2, 1) == 5 && get2(t, 1, 0) == 1);
    eg_release(t);
    int64_t b_shape[2] = {5, 3}, b_strides[2] = {0, 1};
    producer_init(&p, buffer, DL_F32, 2, b_shape, b_strides, 0);
    t = eg_from_dlpack(&p.managed);
    assert_true(get2(t, 4, 2) == 2);
    eg_release(t);
    assert_int_equal(p.deleted, 1);
}

static void expect_refused(producer *p, eg_status status) {
    eg_tensor *t = eg_from_dlpack(&p->managed);
    assert_null(t);
    expect_error(status);
    assert_int_equal(p->deleted, 0); /* the caller still owns it */
}

static void test_import_refusals(void **state) {
    (void)state;
    double buffer[8] = {0};
    int64_t shape[1] = {4};
    producer p;

    producer_init(&p, buffer, (DLDataType){kDLComplex, 64, 1}, 1, shape, NULL, 0);
    expect_refused(&p, EG_ERR_UNSUPPORTED);
    producer_init(&p, buffer, (DLDataType){kDLInt, 16, 1}, 1, shape, NULL, 0);
    expect_refused(&p, EG_ERR_UNSUPPORTED);
    producer_init(&p, buffer, (DLDataType){kDLFloat, 32, 4}, 1, shape, NULL, 0);
    expect_refused(&p, EG_ERR_UNSUPPORTED);
    producer_init(&p, buffer, DL_F32, 1, shape, NULL, 0);
    p.managed.dl_tensor.device.device_type = kDLCUDA;
    expect_refused(&p, EG_ERR_UNSUPPORTED);
    producer_init(&p, buffer, DL_F32, 1, shape, NULL, 2); /* misaligned */
    expect_refused(&p, EG_ERR_UNSUPPORTED);
    int64_t negative[1] = {-1};
    producer_init(&p, buffer, DL_F32, 1, shape, negative, 12);
    expect_refused(&p, EG_ERR_UNSUPPORTED);
    producer_init(&p, buffer, DL_F32, 1, shape, NULL, 0);
    p.managed.dl_tensor.ndim = EG_MAX_DIMS + 1;
    expect_refused(&p, EG_ERR_UNSUPPORTED);
    producer_init(&p, buffer, DL_F32, 1, shape, NULL, 0);
    p.managed.dl_tensor.shape = NULL;
    expect_refused(&p, EG_ERR_INVALID_ARGUMENT);
    producer_init(&p, NULL, DL_F32, 1, shape, NULL, 0);
    expect_refused(&p, EG_ERR_INVALID_ARGUMENT);
    int64_t bad_shape[1] = {-3};
    producer_init(&p, buffer, DL_F32, 1, bad_shape, NULL, 0);
    expect_refused(&p, EG_ERR_INVALID_ARGUMENT);
    int64_t huge[2] = {2, 2}, huge_strides[2] = {INT64_MAX / 2, 1};
    producer_init(&p, buffer, DL_F32, 2, huge, huge_strides, 0);
    expect_refused(&p, EG_ERR_INVALID_ARGUMENT);
    assert_null(eg_from_dlpack(NULL));
    expect_error(EG_ERR_NULL_ARGUMENT);

    /* After all that the caller can still hand it over. */
    producer_init(&p, buffer, (DLDataType){kDLFloat, 64, 1}, 1, shape, NULL, 0);
    eg_tensor *t = eg_from_dlpack(&p.managed);
    assert_non_null(t);
    eg_release(t);
    assert_int_equal(p.deleted, 1);
}

/* ---- the 1.0 versioned form ---- */

static int versioned_deleted;
static void count_delete_versioned(DLManagedTensorVersioned *self) {
    (void)self;
    versioned_deleted++;
}

static void test_versioned(void **state) {
    (void)state;
    int64_t n = 5;
    eg_tensor *t = eg_arange(0, 5, 1, EG_DTYPE_I64);
    DLManagedTensorVersioned *m;
    assert_int_equal(eg_to_dlpack_versioned(t, &m), EG_OK);
    assert_int_equal(m->version.major, 1);
    assert_int_equal(m->version.minor, 0);
    assert_int_equal(m->flags, 0);
    assert_int_equal(m->dl_tensor.dtype.code, kDLInt);
    assert_int_equal(m->dl_tensor.dtype.bits, 64);
    eg_tensor *back = eg_from_dlpack_versioned(m);
    assert_non_null(back);
    assert_ptr_equal(eg_tensor_data(back), eg_tensor_data(t));
    eg_release(t);
    int64_t index = 4;
    assert_true(eg_tensor_get(back, &index) == 4);
    eg_release(back);

    float buffer[5] = {1, 2, 3, 4, 5};
    DLManagedTensorVersioned user = {
        .version = {1, 0},
        .deleter = count_delete_versioned,
        .dl_tensor = {
            .data = buffer, .device = {kDLCPU, 0}, .ndim = 1, .dtype = DL_F32, .shape = &n}};
    versioned_deleted = 0;
    user.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    assert_null(eg_from_dlpack_versioned(&user));
    expect_error(EG_ERR_UNSUPPORTED);
    user.flags = 0;
    user.version.major = 2;
    assert_null(eg_from_dlpack_versioned(&user));
    expect_error(EG_ERR_UNSUPPORTED);
    assert_int_equal(versioned_deleted, 0);
    user.version.major = 1;
    user.flags = DLPACK_FLAG_BITMASK_IS_COPIED;
    eg_scope_begin();
    back = eg_from_dlpack_versioned(&user);
    assert_non_null(back);
    assert_true(eg_item(eg_sum(back, 0, NULL, false)) == 15);
    assert_int_equal(eg_scope_end(), EG_OK);
    assert_int_equal(versioned_deleted, 1);
    assert_null(eg_from_dlpack_versioned(NULL));
    expect_error(EG_ERR_NULL_ARGUMENT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_export_fields, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_export_views, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_export_dtypes, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_export_errors, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_round_trip, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_import_zero_copy_and_deleter, case_setup,
                                        case_teardown),
        cmocka_unit_test_setup_teardown(test_import_strided, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_import_refusals, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_versioned, case_setup, case_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

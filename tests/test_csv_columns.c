/* CSV columns each parsed in their own dtype (the label column in label_dtype, straight from the
 * text: no value goes through the features' dtype or through double on its way to f32), integer
 * columns exact and strict (non-integers and overflow are errors naming file, line, column and the
 * header's name for it), skip_malformed_rows (which rows go, how many, where the first was) and
 * the header's names through eg_csv_info. Files are written into a fresh temporary directory. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "checkpoint_test_util.h"
#pragma GCC diagnostic pop
#include "data_test_util.h"

static void write_csv(char *path, size_t size, const char *text, size_t n) {
    static int files;
    char name[64];
    snprintf(name, sizeof name, "columns%d.csv", files++);
    join(path, size, name);
    write_bytes(path, text, n);
}

/* The whole file as one batch: *features (rows, F) and *labels (rows,), in the caller's scope. */
static void read_labeled(const char *text, const eg_csv_options *o, eg_tensor **features,
                         eg_tensor **labels) {
    char path[PATH_MAX];
    write_csv(path, sizeof path, text, strlen(text));
    eg_dataset *ds = eg_dataset_batch(eg_dataset_from_csv(path, o), 1000, false);
    if (!ds) fail_msg("dataset_from_csv: %s", eg_last_error());
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    eg_element e = next_element(it);
    expect_end(it);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
    assert_int_equal(e.n_tensors, 2);
    *features = e.tensors[0];
    *labels = e.tensors[1];
}

/* Reading `text` as a dataset fails with status and "<path>: <message>". */
static void expect_dataset_error(const char *text, const eg_csv_options *o, eg_status status,
                                 const char *message) {
    char path[PATH_MAX];
    write_csv(path, sizeof path, text, strlen(text));
    assert_null(eg_dataset_from_csv(path, o));
    char expected[PATH_MAX + 512];
    snprintf(expected, sizeof expected, "%s: %s", path, message);
    assert_error(status, expected);
}

static eg_csv_options with_header(void) {
    eg_csv_options o = eg_csv_options_default();
    o.header = true;
    return o;
}

static eg_csv_options labeled(eg_dtype dtype, int label_column, eg_dtype label_dtype) {
    eg_csv_options o = eg_csv_options_default();
    o.dtype = dtype;
    o.label_column = label_column;
    o.label_dtype = label_dtype;
    return o;
}

/* A label that is not an integer is an error in an integer label column, whatever the features'
 * dtype, and a float label is kept in an integer-features file. */
static void test_label_in_its_own_dtype(void **state) {
    (void)state;
    eg_csv_options o = labeled(EG_DTYPE_F32, 2, EG_DTYPE_I32);
    expect_dataset_error("1,2,3\n4,5,2.5\n", &o, EG_ERR_FORMAT,
                         "line 2, column 3: 2.5 is not an integer (i32)");
    o.header = true;
    expect_dataset_error("x,y,class\n1,2,3\n\n4,5,2.5\n", &o, EG_ERR_FORMAT,
                         "line 4, column 3 (class): 2.5 is not an integer (i32)");
    expect_dataset_error("x,y,class\n1,2,1e3\n", &o, EG_ERR_FORMAT,
                         "line 2, column 3 (class): 1e3 is not an integer (i32)");
    expect_dataset_error("x,y,class\n1,2,abc\n", &o, EG_ERR_FORMAT,
                         "line 2, column 3 (class): cannot parse \"abc\" as i32");
    /* A feature's error names its own column and dtype. */
    expect_dataset_error("x,\"y\",class\n1,q,3\n", &o, EG_ERR_FORMAT,
                         "line 2, column 2 (y): cannot parse \"q\" as f32");

    /* i32 features, f32 labels: 2.5 is a fine label, and features stay strict. */
    o = labeled(EG_DTYPE_I32, 0, EG_DTYPE_F32);
    eg_tensor *features, *labels;
    read_labeled("2.5,1,2\n-0.75,2147483647,-2147483648\n", &o, &features, &labels);
    assert_int_equal(eg_tensor_dtype(features), EG_DTYPE_I32);
    assert_int_equal(eg_tensor_dtype(labels), EG_DTYPE_F32);
    const float *label = eg_tensor_data(labels);
    assert_true(label[0] == 2.5f && label[1] == -0.75f);
    const int32_t *feature = eg_tensor_data(features);
    assert_true(feature[0] == 1 && feature[1] == 2 && feature[2] == INT32_MAX &&
                feature[3] == INT32_MIN);
    expect_dataset_error("2.5,1.5,2\n", &o, EG_ERR_FORMAT,
                         "line 1, column 2: 1.5 is not an integer (i32)");
}

/* Integers that f32 (or double) cannot hold keep every digit. */
static void test_integers_exact(void **state) {
    (void)state;
    eg_csv_options o = labeled(EG_DTYPE_F32, 1, EG_DTYPE_I32);
    eg_tensor *features, *labels;
    read_labeled("0.5,16777217\n1.5,-16777219\n", &o, &features, &labels);
    const int32_t *i32 = eg_tensor_data(labels);
    assert_int_equal(i32[0], 16777217);
    assert_int_equal(i32[1], -16777219);

    /* The default label dtype, i64: 2^53 + 1 and the ends of the range. */
    o = labeled(EG_DTYPE_F32, 0, EG_DTYPE_I64);
    read_labeled("9007199254740993,1\n9223372036854775807,2\n-9223372036854775808,3\n", &o,
                 &features, &labels);
    const int64_t *i64 = eg_tensor_data(labels);
    assert_true(i64[0] == 9007199254740993LL && i64[1] == INT64_MAX && i64[2] == INT64_MIN);
    assert_int_equal(eg_tensor_shape(features)[0], 3);
    assert_int_equal(eg_tensor_shape(features)[1], 1);

    /* Overflow is an error, in the label column and in i64 features. */
    o = labeled(EG_DTYPE_F32, 1, EG_DTYPE_I64);
    expect_dataset_error("1,9223372036854775808\n", &o, EG_ERR_FORMAT,
                         "line 1, column 2: 9223372036854775808 is out of range for i64");
    o.dtype = EG_DTYPE_F64;
    expect_dataset_error("1,2\n3,-9223372036854775809\n", &o, EG_ERR_FORMAT,
                         "line 2, column 2: -9223372036854775809 is out of range for i64");
    o = labeled(EG_DTYPE_I64, 1, EG_DTYPE_F32);
    expect_dataset_error("99999999999999999999,1\n", &o, EG_ERR_FORMAT,
                         "line 1, column 1: 99999999999999999999 is out of range for i64");
    o = labeled(EG_DTYPE_F64, 1, EG_DTYPE_I32);
    expect_dataset_error("1,2147483648\n", &o, EG_ERR_FORMAT,
                         "line 1, column 2: 2147483648 is out of range for i32");
}

/* Floats are read straight into their dtype: an f64 label is not an f32 widened, and an f32 is
 * rounded once from the text (not to double first, then to float). */
static void test_floats_rounded_once(void **state) {
    (void)state;
    eg_csv_options o = labeled(EG_DTYPE_F32, 1, EG_DTYPE_F64);
    eg_tensor *features, *labels;
    /* 1 + 2^-24 + 1e-20: just above the midpoint of 1 and 1 + 2^-23, which is its nearest
     * double; rounding through double lands on the midpoint and then on 1 (ties to even). */
    read_labeled("1.00000005960464477539062501,0.1\n", &o, &features, &labels);
    assert_true(*(const double *)eg_tensor_data(labels) == 0.1);
    float expected = nextafterf(1.0f, 2.0f);
    assert_true(*(const float *)eg_tensor_data(features) == expected);

    char path[PATH_MAX];
    const char *text = "1.00000005960464477539062501\n";
    write_csv(path, sizeof path, text, strlen(text));
    eg_tensor *t = eg_csv_read(path, NULL);
    assert_non_null(t);
    assert_true(*(const float *)eg_tensor_data(t) == expected);
}

/* skip_malformed_rows leaves out every kind of malformed data row, counts them and keeps the
 * rest in order; without it the first one fails the read. */
static void test_skip_malformed_rows(void **state) {
    (void)state;
    static const char text[] = "a,b,label\n"             /* line 1 */
                               "1,2,0\n"                 /* 2: kept */
                               "3,4\n"                   /* 3: too few fields */
                               "5,x,1\n"                 /* 4: not a number */
                               "6,7,2.5\n"               /* 5: label not an integer */
                               "\n"                      /* 6: empty, not a row */
                               "8,,1\n"                  /* 7: empty field */
                               "9,\"10,1\n"              /* 8: unterminated quote */
                               "11,12,3\n"               /* 9: kept */
                               "13,14,99999999999\n"     /* 10: label out of range */
                               "15,1e39,1\n"             /* 11: out of range for f32 */
                               "16,\0,1\n"               /* 12: NUL byte */
                               "17,18,19,20\n"           /* 13: too many fields */
                               "\"21\" ,  22 ,\"-5\"\n"; /* 14: kept */
    char path[PATH_MAX];
    write_csv(path, sizeof path, text, sizeof text - 1);
    eg_csv_options o = labeled(EG_DTYPE_F32, 2, EG_DTYPE_I32);
    o.header = true;
    assert_null(eg_dataset_from_csv(path, &o));
    assert_error_contains(EG_ERR_FORMAT, "line 3: 2 fields, expected 3 (as on line 1)");

    o.skip_malformed_rows = true;
    eg_csv_info info;
    eg_dataset *ds = eg_dataset_from_csv_with_info(path, &o, &info);
    assert_non_null(ds);
    assert_int_equal(info.rows, 3);
    assert_int_equal(info.columns, 3);
    assert_int_equal(info.skipped_rows, 9);
    assert_int_equal(info.first_skipped_line, 3);
    assert_non_null(info.column_names);
    assert_string_equal(info.column_names[2], "label");
    eg_csv_info_free(&info);
    assert_null(info.column_names);
    ds = eg_dataset_batch(ds, 10, false);
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    eg_element e = next_element(it);
    expect_end(it);
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
    const float *features = eg_tensor_data(e.tensors[0]);
    const float expected_features[6] = {1, 2, 11, 12, 21, 22};
    for (int i = 0; i < 6; i++) assert_true(features[i] == expected_features[i]);
    const int32_t *labels = eg_tensor_data(e.tensors[1]);
    assert_true(labels[0] == 0 && labels[1] == 3 && labels[2] == -5);

    /* The whole table read as f32: 2.5 and 99999999999 are fine floats now. */
    eg_tensor *t = eg_csv_read_with_info(path, &o, &info);
    assert_non_null(t);
    assert_int_equal(eg_tensor_shape(t)[0], 5);
    assert_int_equal(info.skipped_rows, 7);
    assert_true(((const float *)eg_tensor_data(t))[3 * 1 + 2] == 2.5f);
    eg_csv_info_free(&info);

    /* Without a header the first row read without error sets the number of fields. */
    o.header = false;
    t = eg_csv_read_with_info(path, &o, &info);
    assert_non_null(t);
    assert_int_equal(info.first_skipped_line, 1); /* the header's names are no numbers */
    assert_int_equal(info.skipped_rows, 8);
    assert_null(info.column_names);
    assert_int_equal(eg_tensor_shape(t)[1], 3);
    eg_csv_info_free(&info);

    /* Still errors: a malformed header, a label column outside the file. */
    o.header = true;
    expect_dataset_error("\"a,b\n1,2\n", &o, EG_ERR_FORMAT, "line 1, column 1: unterminated quote");
    o.label_column = 5;
    expect_dataset_error("a,b\n1,2\n", &o, EG_ERR_INVALID_ARGUMENT,
                         "label_column is 5 but the file has 2 columns");
    o.header = false;
    expect_dataset_error("1,2\n", &o, EG_ERR_INVALID_ARGUMENT,
                         "label_column is 5 but the file has 2 columns");
    /* Every row malformed: no rows, all counted; with a label column, nothing tells where it is. */
    o.label_column = 1;
    expect_dataset_error("x,y\n1,z\n", &o, EG_ERR_FORMAT,
                         "all 2 data rows are malformed (the first on line 1): no column to "
                         "take the label from");
    write_csv(path, sizeof path, "x,y\n1,z\n", 8);
    t = eg_csv_read_with_info(path, &o, &info);
    assert_non_null(t);
    assert_int_equal(eg_tensor_shape(t)[0], 0);
    assert_int_equal(eg_tensor_shape(t)[1], 0);
    assert_int_equal(info.rows, 0);
    assert_int_equal(info.skipped_rows, 2);
}

/* The header's names, without their quotes and blanks; none without a header. */
static void test_header_names(void **state) {
    (void)state;
    char path[PATH_MAX];
    const char *text = "\xEF\xBB\xBF  sepal length ;\"petal;width\";\t\"\";id\r\n1;2;3;4\r\n";
    write_csv(path, sizeof path, text, strlen(text));
    eg_csv_options o = eg_csv_options_default();
    o.delimiter = ';';
    o.header = true;
    o.label_column = 3;
    eg_csv_info info;
    eg_dataset *ds = eg_dataset_from_csv_with_info(path, &o, &info);
    assert_non_null(ds);
    eg_dataset_free(ds);
    assert_int_equal(info.columns, 4);
    assert_int_equal(info.rows, 1);
    assert_int_equal(info.skipped_rows, 0);
    assert_int_equal(info.first_skipped_line, 0);
    const char *expected[4] = {"sepal length", "petal;width", "", "id"};
    for (int i = 0; i < 4; i++) assert_string_equal(info.column_names[i], expected[i]);
    eg_csv_info_free(&info);
    eg_csv_info_free(NULL);

    /* An unnamed column's error gives no name. */
    o = with_header();
    expect_dataset_error("a,,c\n1,2,x\n", &o, EG_ERR_FORMAT,
                         "line 2, column 3 (c): cannot parse \"x\" as f32");
    expect_dataset_error("a,,c\n1,x,2\n", &o, EG_ERR_FORMAT,
                         "line 2, column 2: cannot parse \"x\" as f32");

    /* A header only: the names, no rows; no header: no names; an empty file: nothing. */
    write_csv(path, sizeof path, "x,y\n", 4);
    eg_tensor *t = eg_csv_read_with_info(path, &o, &info);
    assert_int_equal(eg_tensor_shape(t)[0], 0);
    assert_int_equal(info.columns, 2);
    assert_string_equal(info.column_names[1], "y");
    eg_csv_info_free(&info);
    write_csv(path, sizeof path, "1,2\n", 4);
    assert_non_null(eg_csv_read_with_info(path, NULL, &info));
    assert_int_equal(info.columns, 2);
    assert_null(info.column_names);
    write_csv(path, sizeof path, "", 0);
    assert_non_null(eg_csv_read_with_info(path, &o, &info));
    assert_int_equal(info.columns, 0);
    assert_null(info.column_names);

    /* A failed read leaves the info zeroed. */
    info.rows = 7;
    assert_null(eg_csv_read_with_info("/nonexistent/x.csv", NULL, &info));
    assert_error(EG_ERR_IO, "/nonexistent/x.csv: cannot open");
    assert_int_equal(info.rows, 0);
    info.rows = 7;
    assert_null(eg_dataset_from_csv_with_info(NULL, NULL, &info));
    assert_error(EG_ERR_NULL_ARGUMENT, "dataset_from_csv: path is NULL");
    assert_int_equal(info.rows, 0);
}

static int group_setup(void **state) {
    (void)state;
    return make_temp_dir("eagle-test-csv-columns");
}

static int group_teardown(void **state) {
    (void)state;
    return remove_temp_dir();
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define CASE(name) cmocka_unit_test_setup_teardown(name, case_setup, case_teardown)
        CASE(test_label_in_its_own_dtype), CASE(test_integers_exact),
        CASE(test_floats_rounded_once),    CASE(test_skip_malformed_rows),
        CASE(test_header_names),
#undef CASE
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

/* The numpy-like printer: eg_tensor_print / eg_tensor_to_string. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "base/error.h"
#include "core/tensor_internal.h"

enum { EDGE_ITEMS = 3, SUMMARIZE_ABOVE = 1000 };

typedef struct text_buffer {
    char *data;
    size_t length, capacity;
    bool failed;
} text_buffer;

static void append(text_buffer *buffer, const char *text) {
    size_t n = strlen(text);
    if (buffer->failed) return;
    if (buffer->length + n + 1 > buffer->capacity) {
        size_t capacity = (buffer->capacity + n + 1) * 2;
        char *data = realloc(buffer->data, capacity);
        if (!data) {
            buffer->failed = true;
            return;
        }
        buffer->data = data;
        buffer->capacity = capacity;
    }
    memcpy(buffer->data + buffer->length, text, n + 1);
    buffer->length += n;
}

static void format_value(char *out, size_t size, double value, eg_dtype dtype) {
    if (dtype == EG_DTYPE_BOOL)
        snprintf(out, size, value != 0 ? "True" : "False");
    else if (!eg_dtype_is_float(dtype))
        snprintf(out, size, "%.0f", value);
    else if (isnan(value))
        snprintf(out, size, "nan");
    else if (isinf(value))
        snprintf(out, size, value > 0 ? "inf" : "-inf");
    else if (value == floor(value) && fabs(value) < 1e16)
        snprintf(out, size, "%.0f.", value);
    else
        snprintf(out, size, "%.4g", value);
}

static void print_axis(text_buffer *buffer, const eg_tensor *t, const char *base, int axis,
                       int64_t offset, int indent, bool summarize) {
    if (axis == t->n_dims) {
        char value[64];
        if (t->dtype == EG_DTYPE_I64) /* exactly: a double holds only 53 bits */
            snprintf(value, sizeof value, "%lld", (long long)((const int64_t *)base)[offset]);
        else
            format_value(value, sizeof value, eg__load_as_double(base, t->dtype, offset), t->dtype);
        append(buffer, value);
        return;
    }
    append(buffer, "[");
    int64_t size = t->shape[axis];
    for (int64_t i = 0; i < size; i++) {
        if (summarize && size > 2 * EDGE_ITEMS && i == EDGE_ITEMS) {
            append(buffer, axis == t->n_dims - 1 ? "..., " : "...,\n");
            if (axis != t->n_dims - 1)
                for (int s = 0; s < indent + 1; s++) append(buffer, " ");
            i = size - EDGE_ITEMS - 1;
            continue;
        }
        print_axis(buffer, t, base, axis + 1, offset + i * t->strides[axis], indent + 1, summarize);
        if (i + 1 < size) {
            if (axis == t->n_dims - 1) {
                append(buffer, ", ");
            } else {
                append(buffer, ",");
                for (int blank = axis; blank < t->n_dims - 1; blank++) append(buffer, "\n");
                for (int s = 0; s < indent + 1; s++) append(buffer, " ");
            }
        }
    }
    append(buffer, "]");
}

char *eg_tensor_to_string(const eg_tensor *t) {
    if (!eg__check_arg(t, "tensor_to_string", 0) || eg__realize(t) != EG_OK) return NULL;
    /* A GPU tensor is printed from a dense host copy of its elements. */
    eg_tensor dense_copy;
    const char *data = eg__data(t);
    char *host_copy = NULL;
    if (!eg__device_is_host(t->device)) {
        size_t bytes = (size_t)t->n_elems * eg_dtype_size(t->dtype);
        host_copy = malloc(bytes ? bytes : 1);
        if (!host_copy) {
            eg__error(EG_ERR_OUT_OF_MEMORY, "tensor_to_string: out of host memory");
            return NULL;
        }
        if (eg_tensor_copy_to_host(t, host_copy, bytes) != EG_OK) {
            free(host_copy);
            return NULL;
        }
        dense_copy = *t;
        eg__contiguous_strides(t->n_dims, t->shape, dense_copy.strides);
        t = &dense_copy;
        data = host_copy;
    }
    text_buffer buffer = {0};
    append(&buffer, "tensor(");
    print_axis(&buffer, t, data, 0, 0, (int)strlen("tensor("), t->n_elems > SUMMARIZE_ABOVE);
    free(host_copy);
    append(&buffer, ", dtype=");
    append(&buffer, eg_dtype_name(t->dtype));
    append(&buffer, ")");
    if (buffer.failed) {
        free(buffer.data);
        eg__error(EG_ERR_OUT_OF_MEMORY, "tensor_to_string: out of host memory");
        return NULL;
    }
    return buffer.data;
}

eg_status eg_tensor_print(const eg_tensor *t, FILE *out) {
    char *text = eg_tensor_to_string(t);
    if (!text) return eg_last_status();
    fprintf(out ? out : stdout, "%s\n", text);
    free(text);
    return EG_OK;
}

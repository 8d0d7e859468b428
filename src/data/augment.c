/* Ready-made image augmentations for eg_dataset_map: random horizontal flip, random crop with
 * padding, normalization. Randomness comes from eg_dataset_call_random(seed, epoch, index) only. */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/random.h"
#include "data/internal.h"

/* An image argument: the tensor, its height, width and channels, and its elements in row-major
 * order (`pixels`: t's own memory when contiguous, else a malloc'd copy in *copy). */
typedef struct image {
    const eg_tensor *t;
    int64_t height, width, channels;
    const uint8_t *pixels;
    void *copy;
} image;

static eg_status image_get(const eg_element *input, int component, const char *what, image *out) {
    memset(out, 0, sizeof *out);
    if (!input) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: input is NULL", what);
    if (component < 0 || component >= input->n_tensors)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "%s: component %d, but the element has %d tensor%s", what, component,
                         input->n_tensors, input->n_tensors == 1 ? "" : "s");
    const eg_tensor *t = input->tensors[component];
    if (!t) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: the image tensor is NULL", what);
    char shape[160];
    if (t->n_dims != 2 && t->n_dims != 3)
        return eg__error(EG_ERR_SHAPE, "%s: image of shape %s; expected (H, W) or (H, W, C)", what,
                         eg__shape_format(t->n_dims, t->shape, shape, sizeof shape));
    if (t->dtype != EG_DTYPE_U8 && t->dtype != EG_DTYPE_F32)
        return eg__error(EG_ERR_DTYPE, "%s: image of dtype %s; expected u8 or f32", what,
                         eg_dtype_name(t->dtype));
    out->t = t;
    out->height = t->shape[0];
    out->width = t->shape[1];
    out->channels = t->n_dims == 3 ? t->shape[2] : 1;
    if (t->storage && eg__is_contiguous(t) && t->device == eg_device_cpu()) {
        out->pixels = eg__data(t);
        return EG_OK;
    }
    size_t bytes = (size_t)t->n_elems * eg_dtype_size(t->dtype);
    out->copy = malloc(bytes ? bytes : 1);
    if (!out->copy) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    eg_status status = eg_tensor_copy_to_host(t, out->copy, bytes);
    if (status != EG_OK) {
        free(out->copy);
        out->copy = NULL;
        return status;
    }
    out->pixels = out->copy;
    return EG_OK;
}

/* *output = *input with component replaced by `replacement` (a new tensor of this call). */
static void element_with(const eg_element *input, int component, eg_tensor *replacement,
                         eg_element *output) {
    *output = *input;
    output->tensors[component] = replacement;
}

eg_status eg_image_random_flip(const eg_element *input, eg_element *output,
                               const eg_dataset_call_info *info, void *options) {
    const char *what = "image_random_flip";
    const eg_image_flip_options *o = options;
    if (!o || !output)
        return eg__error(EG_ERR_NULL_ARGUMENT, "%s: %s is NULL", what, !o ? "options" : "output");
    if (!(o->probability >= 0 && o->probability <= 1))
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: probability %g is not in [0, 1]", what,
                         o->probability);
    image im;
    eg_status status = image_get(input, o->component, what, &im);
    if (status != EG_OK) return status;
    uint32_t words[4];
    eg_dataset_call_random(o->seed, info, words);
    if (eg__uniform_f64(words[0], words[1]) >= o->probability) {
        free(im.copy);
        *output = *input; /* not flipped: the element passes through */
        return EG_OK;
    }
    eg_tensor *flipped = eg__tensor_alloc(im.t->dtype, im.t->n_dims, im.t->shape, eg_device_cpu());
    if (!flipped) {
        free(im.copy);
        return eg_last_status();
    }
    size_t pixel = (size_t)im.channels * eg_dtype_size(im.t->dtype);
    uint8_t *dst = eg__data(flipped);
    for (int64_t y = 0; y < im.height; y++) {
        const uint8_t *row = im.pixels + (size_t)(y * im.width) * pixel;
        uint8_t *out_row = dst + (size_t)(y * im.width) * pixel;
        for (int64_t x = 0; x < im.width; x++)
            memcpy(out_row + (size_t)x * pixel, row + (size_t)(im.width - 1 - x) * pixel, pixel);
    }
    free(im.copy);
    element_with(input, o->component, flipped, output);
    return EG_OK;
}

eg_status eg_image_random_crop(const eg_element *input, eg_element *output,
                               const eg_dataset_call_info *info, void *options) {
    const char *what = "image_random_crop";
    const eg_image_crop_options *o = options;
    if (!o || !output)
        return eg__error(EG_ERR_NULL_ARGUMENT, "%s: %s is NULL", what, !o ? "options" : "output");
    if (o->padding < 0 || o->padding > (int64_t)1 << 20)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: padding %lld is not in [0, 2^20]", what,
                         (long long)o->padding);
    image im;
    eg_status status = image_get(input, o->component, what, &im);
    if (status != EG_OK) return status;
    uint32_t words[4];
    eg_dataset_call_random(o->seed, info, words);
    int64_t span = 2 * o->padding + 1;
    int64_t dy = (int64_t)(words[2] % (uint64_t)span) - o->padding;
    int64_t dx = (int64_t)(words[3] % (uint64_t)span) - o->padding;
    eg_tensor *cropped = eg__tensor_alloc(im.t->dtype, im.t->n_dims, im.t->shape, eg_device_cpu());
    if (!cropped) {
        free(im.copy);
        return eg_last_status();
    }
    size_t size = eg_dtype_size(im.t->dtype);
    size_t pixel = (size_t)im.channels * size;
    uint8_t *dst = eg__data(cropped);
    /* The fill value in the image's dtype, one pixel's worth. */
    uint8_t fill[64];
    bool fill_zero = o->fill == 0;
    if (im.t->dtype == EG_DTYPE_U8) {
        double v = o->fill < 0 ? 0 : o->fill > 255 ? 255 : nearbyint(o->fill);
        fill[0] = (uint8_t)v;
        fill_zero = fill[0] == 0;
    } else {
        float v = (float)o->fill;
        memcpy(fill, &v, sizeof v);
    }
    /* out[y][x] = in[y + dy][x + dx] where inside the image, else fill. */
    int64_t x_begin = dx < 0 ? -dx : 0;           /* first x with a source */
    int64_t x_end = im.width - (dx > 0 ? dx : 0); /* one past the last */
    if (x_end < x_begin) x_end = x_begin;
    if (x_begin > im.width) x_begin = x_end = im.width;
    for (int64_t y = 0; y < im.height; y++) {
        uint8_t *out_row = dst + (size_t)(y * im.width) * pixel;
        int64_t sy = y + dy;
        bool inside = sy >= 0 && sy < im.height;
        for (int64_t x = 0; x < im.width; x++) {
            if (inside && x >= x_begin && x < x_end) {
                int64_t n = x_end - x_begin;
                memcpy(out_row + (size_t)x * pixel,
                       im.pixels + (size_t)(sy * im.width + x + dx) * pixel, (size_t)n * pixel);
                x = x_end - 1;
                continue;
            }
            if (fill_zero) {
                memset(out_row + (size_t)x * pixel, 0, pixel);
            } else {
                for (int64_t c = 0; c < im.channels; c++)
                    memcpy(out_row + (size_t)x * pixel + (size_t)c * size, fill, size);
            }
        }
    }
    free(im.copy);
    element_with(input, o->component, cropped, output);
    return EG_OK;
}

eg_status eg_image_normalize(const eg_element *input, eg_element *output,
                             const eg_dataset_call_info *info, void *options) {
    (void)info;
    const char *what = "image_normalize";
    const eg_image_normalize_options *o = options;
    if (!o || !output || (o && (!o->mean || !o->std)))
        return eg__error(EG_ERR_NULL_ARGUMENT, "%s: %s is NULL", what,
                         !o         ? "options"
                         : !output  ? "output"
                         : !o->mean ? "mean"
                                    : "std");
    image im;
    eg_status status = image_get(input, o->component, what, &im);
    if (status != EG_OK) return status;
    if (o->n_values != 1 && o->n_values != im.channels) {
        free(im.copy);
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "%s: n_values is %d; 1 or the image's %lld channels expected", what,
                         o->n_values, (long long)im.channels);
    }
    float scale[EG_DATASET_MAX_PARALLELISM], shift[EG_DATASET_MAX_PARALLELISM];
    float *scales = im.channels <= EG_DATASET_MAX_PARALLELISM
                        ? scale
                        : malloc((size_t)im.channels * sizeof *scales);
    float *shifts = im.channels <= EG_DATASET_MAX_PARALLELISM
                        ? shift
                        : malloc((size_t)im.channels * sizeof *shifts);
    if (!scales || !shifts) {
        if (scales != scale) free(scales);
        if (shifts != shift) free(shifts);
        free(im.copy);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    }
    double factor = o->scale == 0 ? 1.0 : o->scale;
    status = EG_OK;
    for (int64_t c = 0; c < im.channels; c++) {
        int k = o->n_values == 1 ? 0 : (int)c;
        if (!(o->std[k] > 0) || !isfinite(o->std[k]) || !isfinite(o->mean[k])) {
            status = eg__error(EG_ERR_INVALID_ARGUMENT,
                               "%s: mean %g and std %g of value %d: std "
                               "must be positive and both finite",
                               what, o->mean[k], o->std[k], k);
            break;
        }
        /* (x * factor - mean) / std = x * (factor / std) - mean / std */
        scales[c] = (float)(factor / o->std[k]);
        shifts[c] = (float)(-o->mean[k] / o->std[k]);
    }
    eg_tensor *normalized =
        status == EG_OK ? eg__tensor_alloc(EG_DTYPE_F32, im.t->n_dims, im.t->shape, eg_device_cpu())
                        : NULL;
    if (normalized) {
        float *dst = eg__data(normalized);
        int64_t n_pixels = im.height * im.width;
        for (int64_t p = 0; p < n_pixels; p++)
            for (int64_t c = 0; c < im.channels; c++) {
                int64_t i = p * im.channels + c;
                float x = im.t->dtype == EG_DTYPE_U8 ? (float)im.pixels[i]
                                                     : ((const float *)(const void *)im.pixels)[i];
                dst[i] = x * scales[c] + shifts[c];
            }
    } else if (status == EG_OK) {
        status = eg_last_status();
    }
    if (scales != scale) free(scales);
    if (shifts != shift) free(shifts);
    free(im.copy);
    if (status != EG_OK) return status;
    element_with(input, o->component, normalized, output);
    return EG_OK;
}

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

/* An image argument (or a batch of them): the tensor, its images' count, height, width and
 * channels, and its elements in row-major order (`pixels`: t's own memory when contiguous, else a
 * malloc'd copy in *copy). */
typedef struct image {
    const eg_tensor *t;
    int64_t n_images, height, width, channels;
    const uint8_t *pixels;
    void *copy;
} image;

static eg_status image_get(const eg_element *input, int component, bool batched, const char *what,
                           image *out) {
    memset(out, 0, sizeof *out);
    if (!input) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: input is NULL", what);
    if (component < 0 || component >= input->n_tensors)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "%s: component %d, but the element has %d tensor%s", what, component,
                         input->n_tensors, input->n_tensors == 1 ? "" : "s");
    const eg_tensor *t = input->tensors[component];
    if (!t) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: the image tensor is NULL", what);
    char shape[160];
    int first = batched ? 1 : 0; /* the height's axis */
    if (t->n_dims != 2 + first && t->n_dims != 3 + first)
        return eg__error(EG_ERR_SHAPE, "%s: image%s of shape %s; expected %s", what,
                         batched ? " batch" : "",
                         eg__shape_format(t->n_dims, t->shape, shape, sizeof shape),
                         batched ? "(N, H, W) or (N, H, W, C)" : "(H, W) or (H, W, C)");
    if (t->dtype != EG_DTYPE_U8 && t->dtype != EG_DTYPE_F32)
        return eg__error(EG_ERR_DTYPE, "%s: image of dtype %s; expected u8 or f32", what,
                         eg_dtype_name(t->dtype));
    out->t = t;
    out->n_images = batched ? t->shape[0] : 1;
    out->height = t->shape[first];
    out->width = t->shape[first + 1];
    out->channels = t->n_dims == 3 + first ? t->shape[first + 2] : 1;
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

/* The random words of image i of a call: the element's own draw, or in a batch (index << 32) + i.
 */
static void draw(uint64_t seed, const eg_dataset_call_info *info, bool batched, int64_t i,
                 uint32_t words[4]) {
    eg_dataset_call_info at = {info ? info->epoch : 0, info ? info->index : 0};
    if (batched) at.index = (int64_t)(((uint64_t)at.index << 32) + (uint64_t)i);
    eg_dataset_call_random(seed, &at, words);
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
    eg_status status = image_get(input, o->component, o->batched, what, &im);
    if (status != EG_OK) return status;
    /* Which images flip; none: the element passes through unchanged. */
    bool any = false;
    bool *flip = malloc((size_t)(im.n_images > 0 ? im.n_images : 1) * sizeof *flip);
    if (!flip) {
        free(im.copy);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    }
    for (int64_t i = 0; i < im.n_images; i++) {
        uint32_t words[4];
        draw(o->seed, info, o->batched, i, words);
        flip[i] = eg__uniform_f64(words[0], words[1]) < o->probability;
        any = any || flip[i];
    }
    if (!any) {
        free(flip);
        free(im.copy);
        *output = *input;
        return EG_OK;
    }
    eg_tensor *flipped = eg__tensor_alloc(im.t->dtype, im.t->n_dims, im.t->shape, eg_device_cpu());
    if (!flipped) {
        free(flip);
        free(im.copy);
        return eg_last_status();
    }
    size_t pixel = (size_t)im.channels * eg_dtype_size(im.t->dtype);
    size_t image_bytes = (size_t)(im.height * im.width) * pixel;
    uint8_t *dst = eg__data(flipped);
    for (int64_t i = 0; i < im.n_images; i++) {
        const uint8_t *src_image = im.pixels + (size_t)i * image_bytes;
        uint8_t *dst_image = dst + (size_t)i * image_bytes;
        if (!flip[i]) {
            memcpy(dst_image, src_image, image_bytes);
            continue;
        }
        for (int64_t y = 0; y < im.height; y++) {
            const uint8_t *row = src_image + (size_t)(y * im.width) * pixel;
            uint8_t *out_row = dst_image + (size_t)(y * im.width) * pixel;
            for (int64_t x = 0; x < im.width; x++)
                memcpy(out_row + (size_t)x * pixel, row + (size_t)(im.width - 1 - x) * pixel,
                       pixel);
        }
    }
    free(flip);
    free(im.copy);
    element_with(input, o->component, flipped, output);
    return EG_OK;
}

/* Writes the crop of one image shifted by (dy, dx): out[y][x] = in[y + dy][x + dx] where inside,
 * else the fill pixel. */
static void crop_one(const image *im, const uint8_t *src, uint8_t *dst, int64_t dy, int64_t dx,
                     const uint8_t *fill_pixel) {
    size_t pixel = (size_t)im->channels * eg_dtype_size(im->t->dtype);
    int64_t x_begin = dx < 0 ? -dx : 0;            /* first x with a source pixel */
    int64_t x_end = im->width - (dx > 0 ? dx : 0); /* one past the last */
    if (x_begin > im->width) x_begin = im->width;
    if (x_end < x_begin) x_end = x_begin;
    for (int64_t y = 0; y < im->height; y++) {
        uint8_t *out_row = dst + (size_t)(y * im->width) * pixel;
        int64_t sy = y + dy;
        bool inside = sy >= 0 && sy < im->height;
        for (int64_t x = 0; x < im->width; x++) {
            if (inside && x == x_begin && x_end > x_begin) {
                memcpy(out_row + (size_t)x * pixel, src + (size_t)(sy * im->width + x + dx) * pixel,
                       (size_t)(x_end - x_begin) * pixel);
                x = x_end - 1;
                continue;
            }
            memcpy(out_row + (size_t)x * pixel, fill_pixel, pixel);
        }
    }
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
    eg_status status = image_get(input, o->component, o->batched, what, &im);
    if (status != EG_OK) return status;
    size_t size = eg_dtype_size(im.t->dtype);
    size_t pixel = (size_t)im.channels * size;
    /* One pixel of fill in the image's dtype. */
    uint8_t *fill_pixel = calloc(pixel ? pixel : 1, 1);
    eg_tensor *cropped =
        fill_pixel ? eg__tensor_alloc(im.t->dtype, im.t->n_dims, im.t->shape, eg_device_cpu())
                   : NULL;
    if (!cropped) {
        free(fill_pixel);
        free(im.copy);
        return fill_pixel ? eg_last_status()
                          : eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    }
    for (int64_t c = 0; c < im.channels; c++) {
        if (im.t->dtype == EG_DTYPE_U8) {
            double v = o->fill < 0 ? 0 : o->fill > 255 ? 255 : nearbyint(o->fill);
            fill_pixel[c] = (uint8_t)v;
        } else {
            float v = (float)o->fill;
            memcpy(fill_pixel + (size_t)c * size, &v, sizeof v);
        }
    }
    int64_t span = 2 * o->padding + 1;
    size_t image_bytes = (size_t)(im.height * im.width) * pixel;
    uint8_t *dst = eg__data(cropped);
    for (int64_t i = 0; i < im.n_images; i++) {
        uint32_t words[4];
        draw(o->seed, info, o->batched, i, words);
        int64_t dy = (int64_t)(words[2] % (uint64_t)span) - o->padding;
        int64_t dx = (int64_t)(words[3] % (uint64_t)span) - o->padding;
        crop_one(&im, im.pixels + (size_t)i * image_bytes, dst + (size_t)i * image_bytes, dy, dx,
                 fill_pixel);
    }
    free(fill_pixel);
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
    eg_status status = image_get(input, o->component, o->batched, what, &im);
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
        int64_t n_pixels = im.n_images * im.height * im.width;
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

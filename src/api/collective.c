/* The collective op builders (eagle/ops.h): the calling thread's replica and a fresh tag go into
 * the attributes, where the kernels (and a traced graph's replays) find them. */
#include "api/internal.h"
#include "base/error.h"
#include "device/collective.h"

eg__attrs eg__collective_attrs(int64_t member, int64_t *tag) {
    eg__attrs attrs = {0};
    attrs.ints[0] = member;
    attrs.ints[1] = eg__collective_next_tag(member);
    if (tag) *tag = attrs.ints[1];
    return attrs;
}

eg_tensor *eg_all_reduce(const eg_tensor *x) {
    if (!eg__check_arg(x, "all_reduce", 0)) return NULL;
    eg__attrs attrs = eg__collective_attrs(eg__collective_current(), NULL);
    return eg__execute(EG__OP_ALL_REDUCE, 1, &x, &attrs);
}

eg_tensor *eg_all_reduce_start(int n, eg_tensor *const *tensors_in, int64_t *tag) {
    const eg_tensor *const *tensors = eg__const_tensors(tensors_in);
    if (n < 1 || !tensors || !tag) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "all_reduce_start: needs tensors and a tag to fill");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!eg__check_arg(tensors[i], "all_reduce_start", i)) return NULL;
    eg__attrs attrs = eg__collective_attrs(eg__collective_current(), tag);
    return eg__execute(EG__OP_ALL_REDUCE_START, n, tensors, &attrs);
}

eg_tensor *eg_all_reduce_done(const eg_tensor *started, int64_t tag) {
    if (!eg__check_arg(started, "all_reduce_done", 0)) return NULL;
    eg__attrs attrs = {0};
    attrs.ints[0] = eg__collective_current();
    attrs.ints[1] = tag;
    return eg__execute(EG__OP_ALL_REDUCE_DONE, 1, &started, &attrs);
}

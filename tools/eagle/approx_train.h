/* eagle train --approx sample:F: the Dense layers' gradient products sampled (eagle/approx.h),
 * and at each epoch's end a shadow check — the exact gradients beside the sampled ones on one
 * training batch, same weights and dropout masks — printed per layer. */
#ifndef EAGLE_TOOLS_APPROX_TRAIN_H
#define EAGLE_TOOLS_APPROX_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "eagle.h"
#include "mlp.h"

/* "sample:F" with 0 < F <= 1 into *fraction; false otherwise. */
bool approx_train_parse(const char *text, double *fraction);
/* The Dense layers that sample (train_run.c's build_model set them: 64 or more units), and how
 * much: one line on stdout (nothing when none do). */
void approx_train_describe(eg_model *model);
/* The shadow check on the first batch_size training examples: for each sampled layer, the
 * relative Frobenius and largest absolute error of its kernel gradient against the exact one,
 * and the time of the step's gradients each way (the fastest of three). The model's variables are
 * left as they were (batch normalization's moving statistics too); the default generator is seeded
 * (the caller's next step seeds it again). */
eg_status approx_train_shadow(eg_model *model, const mlp_data *train, bool cnn, int64_t batch_size,
                              uint64_t seed);

#endif

/* Internal: what the files of src/optim share. */
#ifndef EAGLE_SRC_OPTIM_INTERNAL_H
#define EAGLE_SRC_OPTIM_INTERNAL_H

#include "eagle/optim.h"

/* NULL when the schedule is valid, else a short text saying what is wrong. */
const char *eg__schedule_problem(const eg_schedule *schedule);

#endif

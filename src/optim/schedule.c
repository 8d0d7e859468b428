/* Learning-rate schedules: Keras' ExponentialDecay and CosineDecay, and a constant. */
#include <math.h>

#include "base/error.h"
#include "optim/internal.h"

eg_schedule eg_schedule_constant(double learning_rate) {
    eg_schedule schedule = {.kind = EG_SCHEDULE_CONSTANT, .initial_learning_rate = learning_rate};
    return schedule;
}

eg_schedule eg_schedule_exponential_decay(double initial_learning_rate, int64_t decay_steps,
                                          double decay_rate, bool staircase) {
    eg_schedule schedule = {.kind = EG_SCHEDULE_EXPONENTIAL_DECAY,
                            .initial_learning_rate = initial_learning_rate,
                            .decay_steps = decay_steps,
                            .decay_rate = decay_rate,
                            .staircase = staircase};
    return schedule;
}

eg_schedule eg_schedule_cosine_decay(double initial_learning_rate, int64_t decay_steps,
                                     double alpha) {
    eg_schedule schedule = {.kind = EG_SCHEDULE_COSINE_DECAY,
                            .initial_learning_rate = initial_learning_rate,
                            .decay_steps = decay_steps,
                            .alpha = alpha};
    return schedule;
}

const char *eg__schedule_problem(const eg_schedule *schedule) {
    if (!schedule) return "schedule is NULL";
    if (!(schedule->initial_learning_rate >= 0) || !isfinite(schedule->initial_learning_rate))
        return "the learning rate must be finite and >= 0";
    switch (schedule->kind) {
    case EG_SCHEDULE_CONSTANT:
        return NULL;
    case EG_SCHEDULE_EXPONENTIAL_DECAY:
        if (schedule->decay_steps < 1) return "decay_steps must be >= 1";
        if (!(schedule->decay_rate >= 0) || !isfinite(schedule->decay_rate))
            return "decay_rate must be finite and >= 0";
        return NULL;
    case EG_SCHEDULE_COSINE_DECAY:
        if (schedule->decay_steps < 1) return "decay_steps must be >= 1";
        if (!(schedule->alpha >= 0) || !isfinite(schedule->alpha))
            return "alpha must be finite and >= 0";
        return NULL;
    default:
        return "unknown schedule kind";
    }
}

double eg_schedule_value(const eg_schedule *schedule, int64_t step) {
    const char *problem = eg__schedule_problem(schedule);
    if (!problem && step < 0) problem = "step must be >= 0";
    if (problem) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "schedule_value: %s", problem);
        return NAN;
    }
    double initial = schedule->initial_learning_rate;
    switch (schedule->kind) {
    case EG_SCHEDULE_EXPONENTIAL_DECAY: {
        double p = (double)step / (double)schedule->decay_steps;
        if (schedule->staircase) p = floor(p);
        return initial * pow(schedule->decay_rate, p);
    }
    case EG_SCHEDULE_COSINE_DECAY: {
        double s = (double)(step < schedule->decay_steps ? step : schedule->decay_steps);
        double cosine = 0.5 * (1.0 + cos(M_PI * s / (double)schedule->decay_steps));
        return initial * ((1.0 - schedule->alpha) * cosine + schedule->alpha);
    }
    default:
        return initial;
    }
}

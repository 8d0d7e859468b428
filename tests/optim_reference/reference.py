#!/usr/bin/env python3
"""Reference values for tests/test_optim.c, computed with NumPy in float32 by the update
equations of Keras 3 (keras/src/optimizers/{sgd,adam,adamw,rmsprop}.py and the decoupled weight
decay of keras/src/optimizers/base_optimizer.py), and Keras' learning-rate schedules
(keras/src/optimizers/schedules/learning_rate_schedule.py).

Run: python3 tests/optim_reference/reference.py   (needs numpy)
It prints C initialisers; paste them into tests/test_optim.c when the cases change.
"""
import math

import numpy as np

F = np.float32

# The fixed tiny problem: one (2, 2) variable, three steps with these gradients.
W0 = np.array([0.5, -1.0, 2.0, 0.0], dtype=F)
GRADS = [
    np.array([0.1, -0.2, 0.3, 0.0], dtype=F),
    np.array([-0.5, 0.4, 0.0, 1.0], dtype=F),
    np.array([0.25, 0.25, -1.5, 0.5], dtype=F),
]


def weight_decay(w, lr, wd):
    # base_optimizer._apply_weight_decay: variable.assign(variable - variable * wd * lr)
    if wd:
        w = w - w * F(wd) * F(lr)
    return w


def sgd(lr=0.01, momentum=0.0, nesterov=False, wd=0.0):
    w = W0.copy()
    m = np.zeros_like(w)
    for g in GRADS:
        w = weight_decay(w, lr, wd)
        lr32, mom = F(lr), F(momentum)
        if momentum != 0:
            m = -g * lr32 + m * mom
            if nesterov:
                w = w + (-g * lr32 + m * mom)
            else:
                w = w + m
        else:
            w = w - g * lr32
    return w, [m] if momentum != 0 else []


def adam(lr=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, wd=0.0):
    w = W0.copy()
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for step, g in enumerate(GRADS):
        w = weight_decay(w, lr, wd)
        local_step = F(step + 1)
        beta_1_power = np.power(F(beta_1), local_step)
        beta_2_power = np.power(F(beta_2), local_step)
        alpha = F(lr) * np.sqrt(F(1) - beta_2_power) / (F(1) - beta_1_power)
        m = m + (g - m) * (F(1) - F(beta_1))
        v = v + (np.square(g) - v) * (F(1) - F(beta_2))
        w = w - (m * alpha) / (np.sqrt(v) + F(epsilon))
    return w, [m, v]


def rmsprop(lr=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False, wd=0.0):
    w = W0.copy()
    vel = np.zeros_like(w)
    mom = np.zeros_like(w)
    avg = np.zeros_like(w)
    for g in GRADS:
        w = weight_decay(w, lr, wd)
        vel = F(rho) * vel + (F(1) - F(rho)) * np.square(g)
        if centered:
            avg = F(rho) * avg + (F(1) - F(rho)) * g
            denominator = vel - np.square(avg) + F(epsilon)
        else:
            denominator = vel + F(epsilon)
        increment = (F(lr) * g) / np.sqrt(denominator)
        if momentum > 0:
            mom = F(momentum) * mom + increment
            w = w - mom
        else:
            w = w - increment
    slots = [vel]
    if momentum > 0:
        slots.append(mom)
    if centered:
        slots.append(avg)
    return w, slots


def exponential_decay(initial, decay_steps, decay_rate, staircase, step):
    p = F(step) / F(decay_steps)
    if staircase:
        p = np.floor(p)
    return F(initial) * np.power(F(decay_rate), p)


def cosine_decay(initial, decay_steps, alpha, step):
    step = min(step, decay_steps)
    completed = F(step) / F(decay_steps)
    decayed = F(0.5) * (F(1) + np.cos(F(math.pi) * completed))
    return F(initial) * ((F(1) - F(alpha)) * decayed + F(alpha))


def c_array(values):
    return "{" + ", ".join("%.9g" % v for v in values) + "}"


CASES = [
    ("sgd", sgd()),
    ("sgd_momentum", sgd(lr=0.1, momentum=0.9)),
    ("sgd_nesterov", sgd(lr=0.1, momentum=0.9, nesterov=True)),
    ("sgd_weight_decay", sgd(lr=0.1, wd=0.01)),
    ("adam", adam()),
    ("adam_lr", adam(lr=0.1, beta_1=0.8, beta_2=0.99, epsilon=1e-3)),
    ("adamw", adam(wd=0.004)),
    ("adamw_lr", adam(lr=0.1, wd=0.1)),
    ("rmsprop", rmsprop()),
    ("rmsprop_momentum_centered", rmsprop(lr=0.01, rho=0.8, momentum=0.5, centered=True)),
]

if __name__ == "__main__":
    print("/* variable after 3 steps; then the slots in Keras' order */")
    for name, (w, slots) in CASES:
        print("static const float expected_%s[] = %s;" % (name, c_array(w)))
        for k, s in enumerate(slots):
            print("static const float expected_%s_slot%d[] = %s;" % (name, k, c_array(s)))
    steps = [0, 1, 5, 10, 15, 99, 100, 150]
    print("static const int64_t schedule_steps[] = %s;" % c_array(steps))
    print("static const double expected_exponential[] = %s;"
          % c_array([exponential_decay(0.1, 10, 0.5, False, s) for s in steps]))
    print("static const double expected_exponential_staircase[] = %s;"
          % c_array([exponential_decay(0.1, 10, 0.5, True, s) for s in steps]))
    print("static const double expected_cosine[] = %s;"
          % c_array([cosine_decay(0.1, 100, 0.1, s) for s in steps]))

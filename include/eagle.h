/* Eagle — the whole public API. */
#ifndef EAGLE_H
#define EAGLE_H

#include "eagle/status.h"
#include "eagle/dtype.h"
#include "eagle/device.h"
#include "eagle/tensor.h"
#include "eagle/memory.h"
#include "eagle/ops.h"
#include "eagle/autograd.h"
#include "eagle/runtime.h"
#include "eagle/io.h"
#include "eagle/checkpoint.h"
#include "eagle/data.h"
#include "eagle/dlpack.h"
#include "eagle/summary.h"
#include "eagle/nn.h"
#include "eagle/optim.h"
#include "eagle/profiler.h"
#include "eagle/lazy.h"
#include "eagle/session.h"
#include "eagle/distribute.h"
#include "eagle/fit.h"
#include "eagle/text.h"
#include "eagle/approx.h"

#endif

#include "backend/backend.h"
#include "eagle/runtime.h"

#ifndef EG_BUILD_INFO
#define EG_BUILD_INFO "unknown build"
#endif

const char *eg_version(void) { return "0.1.0"; }
const char *eg_build_info(void) { return EG_BUILD_INFO; }
void eg_shutdown(void) { eg__cpu_shutdown(); }

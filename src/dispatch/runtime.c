/* Process-wide runtime: version, build, shutdown of every backend and device. */
#include "base/threadpool.h"
#include "dispatch/dispatch.h"
#include "eagle/runtime.h"

#ifndef EG_BUILD_INFO
#define EG_BUILD_INFO "unknown build"
#endif

const char *eg_version(void) {
    return "0.1.0";
}
const char *eg_build_info(void) {
    return EG_BUILD_INFO;
}

eg_status eg_set_num_threads(int n) {
    eg_status status = eg__threadpool_set_threads(n);
    for (size_t i = 0; status == EG_OK && i < sizeof eg__backends / sizeof *eg__backends; i++)
        if (eg__backends[i] && eg__backends[i]->set_threads) eg__backends[i]->set_threads(n);
    return status;
}

void eg_shutdown(void) {
    for (size_t i = 0; i < sizeof eg__backends / sizeof *eg__backends; i++)
        if (eg__backends[i] && eg__backends[i]->shutdown) eg__backends[i]->shutdown();
    eg__host_devices_shutdown();
}

/* A stand-in for libcuda.so.1 on a machine without a GPU or driver, enough for cuda.tile to import
 * and compile (never to launch). cuda.tile resolves driver entry points through
 * cuGetProcAddress_v2; this answers cuInit and cuDriverGetVersion (a 13.1 driver, 13010) with
 * success and every other entry point with CUDA_ERROR_NO_DEVICE (100), so any attempt to touch a
 * device fails loudly instead of pretending. Built by kernels.authors_toolchain with gcc. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef int CUresult;
enum { CUDA_SUCCESS = 0, CUDA_ERROR_NO_DEVICE = 100 };

#ifndef STUB_DRIVER_VERSION
#define STUB_DRIVER_VERSION 13010
#endif

CUresult cuInit(unsigned int flags) { (void)flags; return CUDA_SUCCESS; }

CUresult cuDriverGetVersion(int *version) {
    if (version) *version = STUB_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
    if (count) *count = 0;
    return CUDA_SUCCESS;
}

static CUresult no_device(void) { return CUDA_ERROR_NO_DEVICE; }

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version, uint64_t flags,
                             int *status) {
    (void)cuda_version; (void)flags;
    if (status) *status = 1;  /* CU_GET_PROC_ADDRESS_SUCCESS */
    if (!pfn) return CUDA_SUCCESS;
    if (symbol && strcmp(symbol, "cuInit") == 0) *pfn = (void *)&cuInit;
    else if (symbol && strcmp(symbol, "cuDriverGetVersion") == 0) *pfn = (void *)&cuDriverGetVersion;
    else if (symbol && strcmp(symbol, "cuDeviceGetCount") == 0) *pfn = (void *)&cuDeviceGetCount;
    else if (symbol && strcmp(symbol, "cuGetProcAddress") == 0) *pfn = (void *)&cuGetProcAddress_v2;
    else *pfn = (void *)&no_device;
    return CUDA_SUCCESS;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version, uint64_t flags) {
    return cuGetProcAddress_v2(symbol, pfn, cuda_version, flags, NULL);
}

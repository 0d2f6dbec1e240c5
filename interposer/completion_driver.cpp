#include "completion_driver.h"

#include <dlfcn.h>

#include <initializer_list>
#include <type_traits>

namespace lockstep::rec {

CompletionDriver* load_completion_driver() {
  void* h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_NOW);
  if (!h) h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return nullptr;
  auto* d = new CompletionDriver();
  auto sym = [&](auto& fn, std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (void* p = dlsym(h, n)) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
        return;
      }
  };
  sym(d->event_create, {"cuEventCreate"});
  sym(d->event_record, {"cuEventRecord"});
  sym(d->event_query, {"cuEventQuery"});
  sym(d->event_destroy, {"cuEventDestroy_v2", "cuEventDestroy"});
  sym(d->ctx_get_current, {"cuCtxGetCurrent"});
  sym(d->ctx_set_current, {"cuCtxSetCurrent"});
  sym(d->ctx_get_device, {"cuCtxGetDevice"});
  sym(d->device_get_attribute, {"cuDeviceGetAttribute"});
  sym(d->capture_info, {"cuStreamGetCaptureInfo_v3"});
  using GetProc = int (*)(const char*, void**, int, unsigned long long, int*);
  auto gp = reinterpret_cast<GetProc>(dlsym(h, "cuGetProcAddress_v2"));
  if (!d->capture_info && gp) {
    // CUDA 13 exports the v3 argument list under the versioned name; older drivers via
    // cuGetProcAddress with an explicit version.
    void* p = nullptr;
    int status = 0;
    if (gp("cuStreamGetCaptureInfo", &p, 12030, 0, &status) == 0 && p)
      d->capture_info = reinterpret_cast<decltype(d->capture_info)>(p);
  }
  sym(d->exchange_capture_mode, {"cuThreadExchangeStreamCaptureMode"});
  sym(d->driver_version, {"cuDriverGetVersion"});
  // The v2 memop entry points (CUDA >= 11.7); the v1 ones need a driver switch to work.
  sym(d->write_value64, {"cuStreamWriteValue64_v2"});
  sym(d->mem_host_alloc, {"cuMemHostAlloc"});
  sym(d->mem_host_get_device_pointer, {"cuMemHostGetDevicePointer_v2"});
  if (!d->event_create || !d->event_record || !d->event_query) {
    delete d;
    return nullptr;
  }
  return d;
}

}  // namespace lockstep::rec

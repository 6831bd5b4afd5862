// GPU discovery through the CUDA driver API, loaded with dlopen so that kilnd neither
// links against nor requires the driver. Types and names come from the CUDA Toolkit's
// cuda.h; only the handful of entry points below are looked up.
#include <dlfcn.h>

#include <cstdio>
#include <string>

#include <cuda.h>

#include "kiln/builds/gpu_probe.hpp"

namespace kiln::build {

namespace {

struct Driver {
  void* handle = nullptr;
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDeviceGetCount) get_count = nullptr;
  decltype(&::cuDeviceGet) get = nullptr;
  decltype(&::cuDeviceGetName) get_name = nullptr;
  decltype(&::cuDeviceGetAttribute) get_attribute = nullptr;
  decltype(&::cuDeviceTotalMem) total_mem = nullptr;
  decltype(&::cuDeviceGetUuid) get_uuid = nullptr;
  decltype(&::cuGetErrorString) error_string = nullptr;

  template <class F>
  bool sym(F& f, const char* name) {
    f = reinterpret_cast<F>(::dlsym(handle, name));
    return f != nullptr;
  }

  std::string error(CUresult r) const {
    const char* s = nullptr;
    if (error_string && error_string(r, &s) == CUDA_SUCCESS && s) return s;
    return "CUDA error " + std::to_string(static_cast<int>(r));
  }
};

std::string format_uuid(const CUuuid& u) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  char out[64];
  std::snprintf(out, sizeof out, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return out;
}

}  // namespace

GpuProbe probe_gpus() {
  GpuProbe probe;
  Driver d;
  // The handle is deliberately never closed: unloading the driver is not supported.
  d.handle = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!d.handle) {
    const char* e = ::dlerror();
    probe.note = std::string("libcuda.so.1 not loadable (no NVIDIA driver?): ") + (e ? e : "unknown");
    return probe;
  }
  // cuDeviceTotalMem and cuDeviceGetUuid are macros for their current versions.
  if (!d.sym(d.init, "cuInit") || !d.sym(d.get_count, "cuDeviceGetCount") || !d.sym(d.get, "cuDeviceGet") ||
      !d.sym(d.get_name, "cuDeviceGetName") || !d.sym(d.get_attribute, "cuDeviceGetAttribute") ||
      !d.sym(d.total_mem, "cuDeviceTotalMem_v2")) {
    probe.note = "libcuda.so.1 lacks a driver API entry point kiln needs (driver too old?)";
    return probe;
  }
  if (!d.sym(d.get_uuid, "cuDeviceGetUuid_v2")) d.sym(d.get_uuid, "cuDeviceGetUuid");
  d.sym(d.error_string, "cuGetErrorString");

  if (CUresult r = d.init(0); r != CUDA_SUCCESS) {
    probe.note = "cuInit: " + d.error(r);
    return probe;
  }
  int count = 0;
  if (CUresult r = d.get_count(&count); r != CUDA_SUCCESS) {
    probe.note = "cuDeviceGetCount: " + d.error(r);
    return probe;
  }
  for (int i = 0; i < count; ++i) {
    CUdevice dev{};
    if (d.get(&dev, i) != CUDA_SUCCESS) continue;
    GpuInfo g;
    g.index = i;
    char name[256] = {};
    if (d.get_name(name, sizeof name - 1, dev) == CUDA_SUCCESS) g.name = name;
    int major = 0, minor = 0;
    d.get_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    d.get_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    g.arch = "sm_" + std::to_string(major) + std::to_string(minor);
    size_t mem = 0;
    if (d.total_mem(&mem, dev) == CUDA_SUCCESS) g.memory_bytes = mem;
    CUuuid uuid{};
    if (d.get_uuid && d.get_uuid(&uuid, dev) == CUDA_SUCCESS) g.uuid = format_uuid(uuid);
    probe.gpus.push_back(std::move(g));
  }
  if (probe.gpus.empty()) probe.note = "the CUDA driver reports no device";
  return probe;
}

}  // namespace kiln::build

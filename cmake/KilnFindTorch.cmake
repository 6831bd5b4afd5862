# find_package(Torch) for kiln's libtorch parts (client/torch, tests/gpu). libtorch's
# imported targets are scoped to the folder that finds them, so each folder includes this.
# kiln compiles no CUDA code, so libtorch's config need not probe GPUs for nvcc flags: its
# probe (a try_run under this project's C++20) fails on machines without a GPU.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "Common")
endif()
find_package(Torch QUIET)
# A pip-installed torch keeps the CUDA libraries its libtorch_cuda.so needs (NCCL, cuDNN,
# ...) in site-packages/nvidia/*/lib, found at run time through its RPATH ($ORIGIN/...);
# the linker must be pointed at them too, or it takes an older system copy (NCCL's missing
# symbols).
if(Torch_FOUND AND TORCH_INSTALL_PREFIX)
  file(GLOB kiln_torch_nvidia_libs LIST_DIRECTORIES true "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
  foreach(dir IN LISTS kiln_torch_nvidia_libs)
    link_libraries("-Wl,-rpath-link,${dir}")
  endforeach()
endif()

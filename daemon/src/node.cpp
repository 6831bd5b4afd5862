// Node fields of the machine kilnd runs on ("this node").
#include <sys/utsname.h>

#include "kiln/daemon/server.hpp"

namespace kiln::daemon {

NodeFields detect_node_fields(const NodeFields& configured) {
  NodeFields n = configured;
  // torch records these as AOTI_PLATFORM / AOTI_MACHINE / AOTI_CPU_ISA.
  if (n.platform.empty()) n.platform = "linux";
  if (n.machine.empty()) {
    utsname u{};
    if (::uname(&u) == 0) n.machine = u.machine;
  }
#if defined(__x86_64__)
  if (n.cpu_isa.empty()) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) n.cpu_isa = "avx512";
    else if (__builtin_cpu_supports("avx2")) n.cpu_isa = "avx2";
    else n.cpu_isa = "default";
  }
#else
  if (n.cpu_isa.empty()) n.cpu_isa = "default";
#endif
  // GPU and toolchain fields are known only from configuration or the build service's
  // probe of the GPU machine; left empty, a key missing them is incomplete.
  return n;
}

}  // namespace kiln::daemon

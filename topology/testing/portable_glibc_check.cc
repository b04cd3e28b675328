// Checks what topology/portable_glibc.cc does for a program, where the
// program runs: that static constructors ran (portable_glibc_start.cc), that
// an exception is caught (the unwinder finds its tables through
// __wrap__dl_find_object), that std::call_once works (pthread_once), and that
// dlopen/dlsym/dlerror work (the pinned libdl versions). Built like the NVML
// reader; run by ctest on this machine (portable_glibc_check) and in the
// Debian 11, 12 and 13 roots (e2e/e2e_nvml_roots.py). Prints one line;
// exit 0 when every check passes, 1 otherwise.
#include <dlfcn.h>

#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>

namespace {

int g_constructed = 0;
struct Constructed {
  Constructed() { g_constructed = 42; }
} g_instance;

[[gnu::noinline]] void Throw(const std::string& what) { throw std::runtime_error(what); }

}  // namespace

int main() {
  const char* failed = nullptr;
  if (g_constructed != 42) failed = "static constructors did not run";
  std::string caught;
  try {
    Throw("thrown");
  } catch (const std::exception& e) {
    caught = e.what();
  }
  if (failed == nullptr && caught != "thrown") failed = "an exception was not caught";
  static std::once_flag once;
  int calls = 0;
  for (int i = 0; i < 3; ++i) std::call_once(once, [&calls] { ++calls; });
  if (failed == nullptr && calls != 1) failed = "std::call_once ran other than once";
  void* libc = dlopen("libc.so.6", RTLD_NOW);
  if (failed == nullptr && (libc == nullptr || dlsym(libc, "getpid") == nullptr)) {
    failed = "dlopen/dlsym of libc.so.6 failed";
  }
  if (failed == nullptr &&
      (dlopen("/nonexistent/libx.so", RTLD_NOW) != nullptr || dlerror() == nullptr)) {
    failed = "dlerror said nothing of a missing library";
  }
  if (failed != nullptr) {
    printf("portable_glibc_check: FAILED: %s\n", failed);
    return 1;
  }
  printf("portable_glibc_check: ok\n");
  return 0;
}

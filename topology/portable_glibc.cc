// Lets a program or shared library built against this machine's glibc
// (Debian 12: 2.36) run against any glibc from 2.17 on, for the NVML reader
// (nvml_reader_main.cc) and the fake libnvidia-ml.so.1 the roots tests load.
// topology/portable_glibc.cmake links it with one `--wrap=SYMBOL` per symbol
// below, so that every reference to SYMBOL, the ones inside the static
// libstdc++/libgcc archives included, lands on __wrap_SYMBOL here, which
// calls the symbol's oldest version (`.symver`) instead of the default one
// the linker would record:
//
//  - dlopen, dlsym, dlerror and the pthread calls libstdc++ makes got new
//    default versions (GLIBC_2.34) when glibc moved them from libdl and
//    libpthread into libc. Their old versions are in libc.so.6 from 2.34 on
//    and in libdl.so.2 / libpthread.so.0 before, so the program also needs
//    those two ahead of libc.so.6 in DT_NEEDED (the cmake function adds
//    them): the loader finds the old version in whichever has it.
//  - __libc_single_threaded (GLIBC_2.32), which libstdc++ reads to skip
//    atomics, is ours and always 0 (multi-threaded: atomics always).
//  - _dl_find_object (GLIBC_2.35), with which libgcc's unwinder finds a
//    frame's unwind tables, is answered here from dl_iterate_phdr.
//
// topology/check_glibc_versions.py proves the result: no GLIBC_ version
// newer than 2.17 among the ones the binary needs.
//
// Threading: the wrappers are as thread-safe as what they wrap.
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#define TRAINLET_GLIBC_BASE "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define TRAINLET_GLIBC_BASE "GLIBC_2.17"
#else
#error "portable_glibc.cc: only x86_64 and aarch64 are supported"
#endif

// __wrap_NAME(params) calls NAME@TRAINLET_GLIBC_BASE(args).
#define TRAINLET_PIN(ret, name, params, args)                                  \
  ret trainlet_pinned_##name params;                                           \
  __asm__(".symver trainlet_pinned_" #name "," #name "@" TRAINLET_GLIBC_BASE); \
  __attribute__((visibility("hidden"))) ret __wrap_##name params {             \
    return trainlet_pinned_##name args;                                        \
  }

extern "C" {

TRAINLET_PIN(void*, dlopen, (const char* file, int mode), (file, mode))
TRAINLET_PIN(void*, dlsym, (void* handle, const char* name), (handle, name))
TRAINLET_PIN(char*, dlerror, (), ())
TRAINLET_PIN(int, pthread_once, (pthread_once_t * once, void (*init)()), (once, init))
TRAINLET_PIN(int, __pthread_key_create, (pthread_key_t * key, void (*destroy)(void*)),
             (key, destroy))
TRAINLET_PIN(int, pthread_key_create, (pthread_key_t * key, void (*destroy)(void*)), (key, destroy))
TRAINLET_PIN(void*, pthread_getspecific, (pthread_key_t key), (key))
TRAINLET_PIN(int, pthread_setspecific, (pthread_key_t key, const void* value), (key, value))

__attribute__((visibility("hidden"))) char __wrap___libc_single_threaded = 0;

namespace {

struct FindObject {
  uintptr_t pc;
  struct dl_find_object* out;
};

// dl_iterate_phdr's callback: 1 (stop) once the object holding s->pc is
// found, with its mapping and its PT_GNU_EH_FRAME (.eh_frame_hdr) in s->out.
int VisitObject(struct dl_phdr_info* info, size_t, void* data) {
  auto* s = static_cast<FindObject*>(data);
  uintptr_t low = UINTPTR_MAX, high = 0;
  bool inside = false;
  void* eh_frame = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD) {
      low = start < low ? start : low;
      high = start + ph.p_memsz > high ? start + ph.p_memsz : high;
      inside = inside || (s->pc >= start && s->pc - start < ph.p_memsz);
    } else if (ph.p_type == PT_GNU_EH_FRAME) {
      eh_frame = reinterpret_cast<void*>(start);
    }
  }
  if (!inside) return 0;
  memset(s->out, 0, sizeof(*s->out));
  s->out->dlfo_map_start = reinterpret_cast<void*>(low);
  s->out->dlfo_map_end = reinterpret_cast<void*>(high);
  s->out->dlfo_eh_frame = eh_frame;
  return 1;
}

}  // namespace

// As glibc's: 0 and *out filled when `pc` is in a loaded object with unwind
// tables, -1 otherwise.
__attribute__((visibility("hidden"))) int __wrap__dl_find_object(void* pc,
                                                                 struct dl_find_object* out) {
  FindObject s{reinterpret_cast<uintptr_t>(pc), out};
  return dl_iterate_phdr(VisitObject, &s) == 1 && out->dlfo_eh_frame != nullptr ? 0 : -1;
}

}  // extern "C"

// The start of a program built with portable_glibc.cc (topology/
// portable_glibc.cmake, EXECUTABLE): crt1's _start calls
// __libc_start_main, whose default version is GLIBC_2.34 when linked against
// glibc 2.34 or later; --wrap brings the call here, and here it goes to the
// oldest version, which every glibc has.
//
// The two differ in who runs the program's constructors. glibc before 2.34
// runs only the `init` function its caller passes (the old crt1 passed
// __libc_csu_init, which ran the .init_array); the GLIBC_2.34 start code
// passes none and lets libc walk .init_array. So `init` here is
// RunConstructors, which glibc calls in both cases (2.34 and later call a
// non-null `init` instead of walking the array themselves). .preinit_array
// and the destructors are the dynamic loader's in every version.
//
// Threading: runs once, before main, on the only thread.

extern "C" {

#if defined(__x86_64__)
#define TRAINLET_GLIBC_BASE "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define TRAINLET_GLIBC_BASE "GLIBC_2.17"
#else
#error "portable_glibc_start.cc: only x86_64 and aarch64 are supported"
#endif

using MainFn = int (*)(int, char**, char**);
using InitFn = void (*)(int, char**, char**);

int trainlet_pinned_libc_start_main(MainFn main, int argc, char** argv, InitFn init, void (*fini)(),
                                    void (*rtld_fini)(), void* stack_end);
__asm__(".symver trainlet_pinned_libc_start_main,__libc_start_main@" TRAINLET_GLIBC_BASE);

// Defined by the linker around the program's .init_array; _init is crti's.
extern InitFn __init_array_start[] __attribute__((visibility("hidden")));
extern InitFn __init_array_end[] __attribute__((visibility("hidden")));
void _init();

static void RunConstructors(int argc, char** argv, char** envp) {
  _init();
  for (InitFn* f = __init_array_start; f != __init_array_end; ++f) (*f)(argc, argv, envp);
}

__attribute__((visibility("hidden"))) int __wrap___libc_start_main(
    MainFn main, int argc, char** argv, InitFn /*init: null since glibc 2.34*/, void (* /*fini*/)(),
    void (*rtld_fini)(), void* stack_end) {
  return trainlet_pinned_libc_start_main(main, argc, argv, RunConstructors, nullptr, rtld_fini,
                                         stack_end);
}

}  // extern "C"

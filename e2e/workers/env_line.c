/* The worker of the portability test (e2e_portability.py) in a root that
   holds nothing but trainlet and this program: built with `cc -static`, it
   needs no library, no shell and no file in the root.

   Prints one line, "worker VAR=VALUE ... host=H", with the rendezvous
   variables trainlet gives a worker (VALUE "-" when unset) and the UTS
   hostname, then exits 0. The same line as the shell worker the test runs in
   the Debian roots, so that one parser reads both. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <sys/utsname.h>

int main(void) {
  static const char* const kNames[] = {"RANK",       "WORLD_SIZE",  "LOCAL_RANK",
                                       "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"};
  struct utsname uts;
  printf("worker");
  for (size_t i = 0; i < sizeof(kNames) / sizeof(kNames[0]); ++i) {
    const char* value = getenv(kNames[i]);
    printf(" %s=%s", kNames[i], value != NULL && value[0] != '\0' ? value : "-");
  }
  printf(" host=%s\n", uname(&uts) == 0 ? uts.nodename : "-");
  return fflush(stdout) == 0 ? 0 : 1;
}

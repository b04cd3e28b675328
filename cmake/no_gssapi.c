/* GSSAPI for libssh's static archive (TRAINLET_STATIC): Debian ships
 * libgssapi_krb5 only as a shared library, and libssh.a's packet dispatch
 * always pulls in its gssapi-with-mic code. trainlet authenticates with the
 * job's public key only (mpi/ssh_probe.cc) and never asks for GSSAPI, so
 * these are never reached in practice; if they were, every one answers
 * GSS_S_UNAVAILABLE ("mechanism not available"), which libssh reports as a
 * failed GSSAPI authentication. The types are opaque here: only the symbol
 * names must match RFC 2744's; the first argument of each is the minor
 * status, and the others (unused) may be passed and ignored under the
 * x86-64 and AArch64 C calling conventions. */
#include <stddef.h>
#include <stdint.h>

typedef uint32_t OM_uint32;
typedef struct {
  OM_uint32 length;
  void* elements;
} gss_OID_desc;

/* GSS_S_UNAVAILABLE: routine error 16, in the upper 16 bits. */
#define TRAINLET_GSS_S_UNAVAILABLE (((OM_uint32)16) << 16)

static gss_OID_desc trainlet_no_oid = {0, NULL};
gss_OID_desc* GSS_C_NT_HOSTBASED_SERVICE = &trainlet_no_oid;
gss_OID_desc* GSS_C_NT_USER_NAME = &trainlet_no_oid;

#define TRAINLET_NO_GSS(name)                    \
  OM_uint32 name(OM_uint32* minor_status) {      \
    if (minor_status != NULL) *minor_status = 0; \
    return TRAINLET_GSS_S_UNAVAILABLE;           \
  }

TRAINLET_NO_GSS(gss_accept_sec_context)
TRAINLET_NO_GSS(gss_acquire_cred)
TRAINLET_NO_GSS(gss_add_oid_set_member)
TRAINLET_NO_GSS(gss_create_empty_oid_set)
TRAINLET_NO_GSS(gss_display_name)
TRAINLET_NO_GSS(gss_display_status)
TRAINLET_NO_GSS(gss_get_mic)
TRAINLET_NO_GSS(gss_import_name)
TRAINLET_NO_GSS(gss_indicate_mechs)
TRAINLET_NO_GSS(gss_init_sec_context)
TRAINLET_NO_GSS(gss_inquire_cred)
TRAINLET_NO_GSS(gss_inquire_cred_by_mech)
TRAINLET_NO_GSS(gss_release_buffer)
TRAINLET_NO_GSS(gss_release_cred)
TRAINLET_NO_GSS(gss_release_name)
TRAINLET_NO_GSS(gss_release_oid_set)
TRAINLET_NO_GSS(gss_test_oid_set_member)
TRAINLET_NO_GSS(gss_verify_mic)

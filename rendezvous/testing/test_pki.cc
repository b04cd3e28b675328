#include "rendezvous/testing/test_pki.h"

#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainlet::rendezvous::testing {
namespace {

// Runs a shell command (test inputs only), its output to a log file.
absl::Status Sh(const std::string& root, const std::string& command) {
  const std::string log = absl::StrCat(root, "/openssl.log");
  const std::string full = absl::StrCat("(", command, ") >>", log, " 2>&1");
  const int rc = std::system(full.c_str());
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("`", command, "` failed (status ", rc, "); see ", log));
  }
  return absl::OkStatus();
}

constexpr char kKeyOpts[] = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

}  // namespace

TlsFiles CertFiles::files() const {
  return TlsFiles{{cert, "tls.crt"}, {key, "tls.key"}, {ca, "ca.crt"}};
}

absl::StatusOr<std::unique_ptr<TestPki>> TestPki::Create() {
  std::unique_ptr<TestPki> pki(new TestPki());
  if (absl::Status s = pki->NewCa("ca"); !s.ok()) return s;
  if (absl::Status s = pki->NewCa("other-ca"); !s.ok()) return s;
  return pki;
}

absl::Status TestPki::NewCa(const std::string& name) {
  const std::string dir = absl::StrCat(root(), "/", name);
  mkdir(dir.c_str(), 0700);
  return Sh(root(), absl::StrCat("openssl req -x509 ", kKeyOpts, " -keyout ", dir, "/ca.key -out ",
                                 dir, "/ca.crt -days 2 -subj /CN=trainlet-test-", name));
}

absl::Status TestPki::IssueCa(const std::string& name, const std::string& ca, int days) {
  const std::string dir = absl::StrCat(root(), "/", name);
  const std::string ca_dir = absl::StrCat(root(), "/", ca);
  mkdir(dir.c_str(), 0700);
  if (absl::Status s = Sh(root(), absl::StrCat("printf 'basicConstraints=critical,CA:TRUE\n"
                                               "keyUsage=critical,keyCertSign,cRLSign\n' > ",
                                               dir, "/ext.cnf"));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Sh(root(), absl::StrCat("openssl req ", kKeyOpts, " -keyout ", dir,
                                               "/ca.key -out ", dir, "/ca.csr -subj /CN=", name));
      !s.ok()) {
    return s;
  }
  return Sh(root(), absl::StrCat("openssl x509 -req -in ", dir, "/ca.csr -CA ", ca_dir,
                                 "/ca.crt -CAkey ", ca_dir, "/ca.key -CAcreateserial -days ", days,
                                 " -out ", dir, "/ca.crt -extfile ", dir, "/ext.cnf"));
}

absl::StatusOr<CertFiles> TestPki::Issue(const std::string& name, const std::string& ca,
                                         const std::vector<std::string>& sans) {
  CertFiles f;
  f.dir = absl::StrCat(root(), "/", name);
  f.cert = f.dir + "/tls.crt";
  f.key = f.dir + "/tls.key";
  f.ca = f.dir + "/ca.crt";
  const std::string ca_dir = absl::StrCat(root(), "/", ca);
  mkdir(f.dir.c_str(), 0700);
  std::string ext = "extendedKeyUsage=serverAuth,clientAuth\n";
  if (!sans.empty()) absl::StrAppend(&ext, "subjectAltName=", absl::StrJoin(sans, ","), "\n");
  if (absl::Status s = Sh(root(), absl::StrCat("printf '", ext, "' > ", f.dir, "/ext.cnf"));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Sh(root(), absl::StrCat("openssl req ", kKeyOpts, " -keyout ", f.key,
                                               " -out ", f.dir, "/tls.csr -subj /CN=", name));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Sh(
          root(), absl::StrCat("openssl x509 -req -in ", f.dir, "/tls.csr -CA ", ca_dir,
                               "/ca.crt -CAkey ", ca_dir, "/ca.key -CAcreateserial -days 2 -out ",
                               f.cert, " -extfile ", f.dir, "/ext.cnf"));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Sh(root(), absl::StrCat("cp ", ca_dir, "/ca.crt ", f.ca)); !s.ok()) {
    return s;
  }
  return f;
}

absl::StatusOr<TlsConfig> TestPki::IssueConfig(const std::string& name, const std::string& ca,
                                               const std::vector<std::string>& sans) {
  absl::StatusOr<CertFiles> f = Issue(name, ca, sans);
  if (!f.ok()) return f.status();
  return LoadTlsFiles(f->files(), nullptr);
}

}  // namespace trainlet::rendezvous::testing

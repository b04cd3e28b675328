// The NVML reader (nvml_reader.h) against the fake libnvidia-ml.so.1: the
// same answer as the in-process read on every fixture, and every way the
// reader can fail (no loader, exec refused, a hung or crashing driver, a
// garbled answer) as NVML ABSENT or ERROR with its reason, the child reaped.
#include "topology/nvml_reader.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "topology/nvml.h"
#include "topology/nvml_internal.h"

namespace trainlet::topology {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string Testdata(const std::string& name) {
  return std::string(TOPOLOGY_TESTDATA) + "/" + name;
}

struct Read {
  v1::NodeProbe probe;
  std::vector<v1::Gpu> gpus;
};

Read ReadVia(NvmlOptions::Via via, const std::string& library, const std::string& fixture,
             NvmlOptions options = {}) {
  setenv("FAKE_NVML_FIXTURE", fixture.c_str(), 1);
  options.library = library;
  options.via = via;
  Read r;
  ReadNvml(options, &r.probe, &r.gpus);
  return r;
}

Read ThroughReader(const std::string& fixture, NvmlReaderSeams seams, NvmlOptions options = {}) {
  setenv("FAKE_NVML_FIXTURE", fixture.c_str(), 1);
  options.library = FAKE_NVML_PATH;
  Read r;
  ReadNvmlThroughReader(options, seams, &r.probe, &r.gpus);
  return r;
}

void ExpectSame(const Read& in_process, const Read& reader) {
  std::string diff;
  MessageDifferencer d;
  d.ReportDifferencesToString(&diff);
  EXPECT_TRUE(d.Compare(in_process.probe, reader.probe)) << diff;
  ASSERT_EQ(in_process.gpus.size(), reader.gpus.size());
  for (size_t i = 0; i < reader.gpus.size(); ++i) {
    diff.clear();
    EXPECT_TRUE(d.Compare(in_process.gpus[i], reader.gpus[i])) << "GPU " << i << ": " << diff;
  }
}

// No child of this process is left, reaped or not (clone children included).
bool NoChildLeft() {
  siginfo_t info;
  return waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT | __WALL) != 0 && errno == ECHILD;
}

int OpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (d != nullptr && readdir(d) != nullptr) ++n;
  if (d != nullptr) closedir(d);
  return n;
}

TEST(NvmlReader, BuiltIntoThisBuild) { EXPECT_TRUE(NvmlReaderBuiltIn()); }

TEST(NvmlReader, SameAsInProcess_OnEveryFixtureAndDriver) {
  for (const char* library : {FAKE_NVML_PATH, FAKE_NVML_LEGACY_PATH}) {
    for (const char* fixture : {"nvml_h100x8.json", "nvml_vm_1gpu.json", "nvml_errors.json",
                                "nvml_unhealthy.json", "nvml_clocks.json"}) {
      for (bool health : {true, false}) {
        SCOPED_TRACE(std::string(library) + " " + fixture + (health ? " health" : ""));
        NvmlOptions options;
        options.health = health;
        options.cpumap_cpus = 96;
        Read in_process =
            ReadVia(NvmlOptions::Via::kInProcess, library, Testdata(fixture), options);
        Read reader = ReadVia(NvmlOptions::Via::kReader, library, Testdata(fixture), options);
        ASSERT_EQ(reader.probe.nvml().status(), v1::Source::OK) << reader.probe.nvml().reason();
        ExpectSame(in_process, reader);
      }
    }
  }
  EXPECT_TRUE(NoChildLeft());
}

TEST(NvmlReader, UnhealthyNode_HealthComesThrough) {
  Read r = ThroughReader(Testdata("nvml_unhealthy.json"), {});
  ASSERT_EQ(r.probe.nvml().status(), v1::Source::OK) << r.probe.nvml().reason();
  ASSERT_EQ(r.gpus.size(), 4u);
  EXPECT_TRUE(r.gpus[1].health().remap_pending());
  EXPECT_EQ(r.gpus[1].health().ecc_dbe_volatile(), 1u);
  EXPECT_TRUE(r.gpus[2].health().retired_pages_pending());
  ASSERT_EQ(r.gpus[3].health().processes_size(), 2);
  EXPECT_EQ(r.gpus[3].health().processes(0).pid(), 4242u);
}

TEST(NvmlReader, FailuresInsideNvml_SameAsInProcess) {
  // A missing library, an nvmlInit error: data, as in-process.
  Read missing_in = ReadVia(NvmlOptions::Via::kInProcess, "libtrainlet-test-no-such-nvml.so.1",
                            Testdata("nvml_h100x8.json"));
  Read missing = ReadVia(NvmlOptions::Via::kReader, "libtrainlet-test-no-such-nvml.so.1",
                         Testdata("nvml_h100x8.json"));
  EXPECT_EQ(missing.probe.nvml().status(), v1::Source::ABSENT);
  EXPECT_THAT(missing.probe.nvml().reason(), HasSubstr("cannot open shared object file"));
  ExpectSame(missing_in, missing);
}

TEST(NvmlReader, ViaTheLoaderOnProcSelfFd_SameAnswer) {
  NvmlReaderSeams seams;
  seams.via_loader = true;
  Read loader = ThroughReader(Testdata("nvml_h100x8.json"), seams);
  ASSERT_EQ(loader.probe.nvml().status(), v1::Source::OK) << loader.probe.nvml().reason();
  Read memfd = ThroughReader(Testdata("nvml_h100x8.json"), {});
  ExpectSame(memfd, loader);
}

TEST(NvmlReader, NoLoaderInTheImage_IsAbsentSayingWhy) {
  NvmlReaderSeams seams;
  seams.interpreter = "/nonexistent/lib64/ld-linux-x86-64.so.2";
  Read r = ThroughReader(Testdata("nvml_h100x8.json"), seams);
  EXPECT_EQ(r.probe.nvml().status(), v1::Source::ABSENT);
  EXPECT_THAT(r.probe.nvml().reason(),
              AllOf(HasSubstr("no dynamic loader /nonexistent/lib64/ld-linux-x86-64.so.2"),
                    HasSubstr("not glibc-based")));
  EXPECT_TRUE(r.gpus.empty());
}

TEST(NvmlReader, ExecRefused_IsErrorNamingBothTries) {
  NvmlReaderSeams seams;
  seams.via_loader = true;
  seams.interpreter = "/";  // searchable, so access(X_OK) passes; execve fails
  Read r = ThroughReader(Testdata("nvml_h100x8.json"), seams);
  EXPECT_EQ(r.probe.nvml().status(), v1::Source::ERROR);
  EXPECT_THAT(r.probe.nvml().reason(),
              AllOf(HasSubstr("cannot start the NVML reader"), HasSubstr("/proc/self/fd/4"),
                    HasSubstr("Permission denied")));
  EXPECT_TRUE(NoChildLeft());
}

TEST(NvmlReader, SomethingElseAnswering_IsRejected) {
  // /bin/true in the loader's place: exits 0 having said nothing.
  NvmlReaderSeams seams;
  seams.via_loader = true;
  seams.interpreter = "/bin/true";
  Read r = ThroughReader(Testdata("nvml_h100x8.json"), seams);
  EXPECT_EQ(r.probe.nvml().status(), v1::Source::ERROR);
  EXPECT_THAT(r.probe.nvml().reason(),
              AllOf(HasSubstr("gave an answer trainlet rejects"),
                    HasSubstr("does not start with the reader's header (0 bytes)")));
}

TEST(NvmlReader, HungDriver_KilledAfterTheTimeoutAndReaped) {
  for (bool without_pidfd : {false, true}) {
    SCOPED_TRACE(without_pidfd ? "without a pidfd" : "with a pidfd");
    NvmlOptions options;
    options.reader_timeout = absl::Milliseconds(300);
    NvmlReaderSeams seams;
    seams.without_pidfd = without_pidfd;
    const auto start = std::chrono::steady_clock::now();
    Read r = ThroughReader(Testdata("nvml_hang.json"), seams, options);
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(r.probe.nvml().status(), v1::Source::ERROR);
    EXPECT_THAT(r.probe.nvml().reason(),
                AllOf(HasSubstr("did not answer within 300ms and was killed"),
                      HasSubstr("hung NVIDIA driver")));
    EXPECT_GE(took, std::chrono::milliseconds(300));
    EXPECT_LT(took, std::chrono::seconds(30));
    EXPECT_TRUE(NoChildLeft()) << "the killed reader was reaped";
  }
}

TEST(NvmlReader, CrashingDriver_IsErrorNamingTheSignal) {
  Read r = ThroughReader(Testdata("nvml_crash.json"), {});
  EXPECT_EQ(r.probe.nvml().status(), v1::Source::ERROR);
  EXPECT_THAT(r.probe.nvml().reason(), HasSubstr("died of signal 6 (SIGABRT)"));
  EXPECT_TRUE(NoChildLeft());
}

TEST(NvmlReader, AnotherReaper_AnswerStillTaken_AndNoDescriptorLeaks) {
  // The agent's Supervisor reaps every child with waitpid(-1), and may take
  // the reader before ReadNvml does: the answer must still count, and the
  // read must not wait for a child that is gone.
  std::atomic<bool> stop{false};
  std::atomic<int> reaped{0};
  std::thread reaper([&] {
    // Blocked in waitpid(-1), it is woken by the child's exit itself and so
    // mostly reaps it before ReadNvml's polling does.
    while (!stop) {
      int status;
      if (waitpid(-1, &status, 0) > 0) {
        ++reaped;
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(100));  // no child yet
      }
    }
  });
  const int fds = OpenFds();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) {
    NvmlReaderSeams seams;
    seams.without_pidfd = i % 2 == 1;
    Read r = ThroughReader(Testdata("nvml_vm_1gpu.json"), seams);
    EXPECT_EQ(r.probe.nvml().status(), v1::Source::OK) << r.probe.nvml().reason();
    EXPECT_EQ(r.gpus.size(), 1u);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30))
      << "no read waited for its timeout";
  stop = true;
  reaper.join();
  // Which reaper wins is the scheduler's choice; without the ECHILD handling
  // every read the other reaper won waited for its 5 s timeout and failed.
  RecordProperty("reaped_by_the_other_reaper", reaped.load());
  EXPECT_EQ(OpenFds(), fds);
  EXPECT_TRUE(NoChildLeft());
}

TEST(NvmlReader, ReaderOutputWithPriorWarnings_Appended) {
  setenv("FAKE_NVML_FIXTURE", Testdata("nvml_errors.json").c_str(), 1);
  NvmlOptions options;
  options.library = FAKE_NVML_PATH;
  Read r;
  r.probe.add_warnings("an earlier warning");
  ReadNvmlThroughReader(options, {}, &r.probe, &r.gpus);
  ASSERT_GT(r.probe.warnings_size(), 1);
  EXPECT_EQ(r.probe.warnings(0), "an earlier warning");
}

// ---- ParseNvmlReaderAnswer: the parent's checks on an untrusted answer ----

std::string Frame(const std::string& payload, int64_t claimed = -1) {
  std::string out(kNvmlReaderMagic, kNvmlReaderMagicSize);
  const uint32_t size = static_cast<uint32_t>(claimed < 0 ? payload.size() : claimed);
  for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>(size >> (8 * b) & 0xff));
  return out + payload;
}

v1::NodeProbe GoodAnswer() {
  v1::NodeProbe p;
  p.mutable_nvml()->set_status(v1::Source::OK);
  p.mutable_nvml()->set_reason("1 of 1 devices read from libnvidia-ml.so.1");
  p.mutable_nvml()->set_version("550.54.15");
  p.set_cuda_driver_version("12040");
  p.add_warnings("nvml: a warning");
  v1::Gpu* g = p.add_gpus();
  g->set_uuid("GPU-1");
  g->set_name("NVIDIA H100 80GB HBM3");
  g->mutable_health()->add_processes()->set_pid(7);
  g->set_sm_clock_mhz(1980);
  g->set_sm_clock_max_mhz(1980);
  g->set_clock_reasons_known(true);
  g->set_clock_reasons(0x48);
  return p;
}

absl::Status Parse(const std::string& answer, v1::NodeProbe* probe = nullptr,
                   std::vector<v1::Gpu>* gpus = nullptr) {
  v1::NodeProbe p;
  std::vector<v1::Gpu> g;
  return ParseNvmlReaderAnswer(answer, probe ? probe : &p, gpus ? gpus : &g);
}

TEST(ParseNvmlReaderAnswer, AGoodAnswer_IsTaken) {
  v1::NodeProbe probe;
  probe.set_hostname("node-1");
  std::vector<v1::Gpu> gpus;
  ASSERT_TRUE(Parse(Frame(GoodAnswer().SerializeAsString()), &probe, &gpus).ok());
  EXPECT_EQ(probe.hostname(), "node-1") << "the rest of the probe is left alone";
  EXPECT_EQ(probe.nvml().version(), "550.54.15");
  EXPECT_EQ(probe.cuda_driver_version(), "12040");
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].health().processes(0).pid(), 7u);
  EXPECT_EQ(gpus[0].sm_clock_mhz(), 1980u);
  EXPECT_EQ(gpus[0].clock_reasons(), 0x48u);
  EXPECT_EQ(probe.gpus_size(), 0) << "GPUs go to *gpus, for the merge with sysfs";
}

TEST(ParseNvmlReaderAnswer, BadFraming_IsRejected) {
  const std::string good = GoodAnswer().SerializeAsString();
  EXPECT_THAT(Parse("").message(), HasSubstr("reader's header (0 bytes)"));
  EXPECT_THAT(Parse("TRNVML2\n" + Frame(good).substr(8)).message(), HasSubstr("header"));
  EXPECT_THAT(Parse(Frame(good, good.size() + 1)).message(), HasSubstr("header says"));
  EXPECT_THAT(Parse(Frame(good) + "x").message(), HasSubstr("header says"));
  EXPECT_THAT(Parse(Frame(std::string(kNvmlReaderMaxPayload + 1, '\0'))).message(),
              HasSubstr("header says 1048577 bytes"));
  EXPECT_THAT(Parse(Frame("\xff\xff\xff")).message(), HasSubstr("not a trainlet.v1.NodeProbe"));
}

TEST(ParseNvmlReaderAnswer, ContentsOutOfBounds_AreRejected) {
  v1::NodeProbe probe;
  std::vector<v1::Gpu> gpus;
  gpus.emplace_back();
  const v1::NodeProbe untouched = probe;

  v1::NodeProbe extra = GoodAnswer();
  extra.set_hostname("not the reader's to say");
  EXPECT_THAT(Parse(Frame(extra.SerializeAsString()), &probe, &gpus).message(),
              HasSubstr("fields the NVML reader never sets"));

  v1::NodeProbe control = GoodAnswer();
  control.mutable_gpus(0)->set_name("NVIDIA\nforged log line");
  EXPECT_THAT(Parse(Frame(control.SerializeAsString())).message(),
              HasSubstr("trainlet.v1.Gpu.name has the byte 0x0a"));

  v1::NodeProbe long_string = GoodAnswer();
  long_string.add_warnings(std::string(2000, 'w'));
  EXPECT_THAT(Parse(Frame(long_string.SerializeAsString())).message(),
              HasSubstr("is 2000 bytes long"));

  v1::NodeProbe many = GoodAnswer();
  for (int i = 0; i < 300; ++i) many.add_gpus();
  EXPECT_THAT(Parse(Frame(many.SerializeAsString())).message(),
              HasSubstr("trainlet.v1.NodeProbe.gpus has 301 elements"));

  v1::NodeProbe bad_enum = GoodAnswer();
  bad_enum.mutable_nvml()->set_status(static_cast<v1::Source::Status>(77));
  EXPECT_THAT(Parse(Frame(bad_enum.SerializeAsString())).message(), HasSubstr("is 77, not a"));

  v1::NodeProbe no_status = GoodAnswer();
  no_status.mutable_nvml()->clear_status();
  EXPECT_THAT(Parse(Frame(no_status.SerializeAsString())).message(), HasSubstr("no NVML status"));

  v1::NodeProbe fast_clock = GoodAnswer();
  fast_clock.mutable_gpus(0)->set_sm_clock_mhz(kMaxClockMhz + 1);
  EXPECT_THAT(Parse(Frame(fast_clock.SerializeAsString())).message(),
              HasSubstr("SM clock of 100001 MHz"));
  v1::NodeProbe long_clique = GoodAnswer();
  long_clique.mutable_gpus(0)->set_nvlink_clique(std::string(65, 'c'));
  EXPECT_THAT(Parse(Frame(long_clique.SerializeAsString())).message(),
              HasSubstr("NVLink clique of 65 bytes"));
  v1::NodeProbe fast_max = GoodAnswer();
  fast_max.mutable_gpus(0)->set_sm_clock_max_mhz(kMaxClockMhz + 1);
  EXPECT_THAT(Parse(Frame(fast_max.SerializeAsString())).message(), HasSubstr("(max 100001)"));
  v1::NodeProbe unknown_reasons = GoodAnswer();
  unknown_reasons.mutable_gpus(0)->set_clock_reasons_known(false);
  EXPECT_THAT(Parse(Frame(unknown_reasons.SerializeAsString())).message(),
              HasSubstr("clock reasons it does not know"));

  // An unknown field number (a newer or foreign message).
  std::string unknown = GoodAnswer().SerializeAsString() + std::string("\xf8\x3f\x01", 3);
  EXPECT_THAT(Parse(Frame(unknown)).message(), HasSubstr("fields trainlet does not know"));

  EXPECT_TRUE(MessageDifferencer::Equals(probe, untouched)) << "rejected: nothing taken";
  EXPECT_EQ(gpus.size(), 1u);
}

}  // namespace
}  // namespace trainlet::topology

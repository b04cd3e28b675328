// The fuzz targets' driver where libFuzzer is not available (gcc builds, the
// ASan build): runs LLVMFuzzerTestOneInput over every seed file, then over
// random inputs, half of them mutated seeds, from a fixed seed, so that a
// failure replays exactly. Accepts libFuzzer's spelling of the options it
// shares, so scripts/fuzz.sh drives both the same way:
//
//   TARGET [-runs=N] [-seed=S] [-max_len=L] [-max_total_time=SECONDS] [FILE|DIR]...
//
// -runs counts every execution, seeds included (libFuzzer counts the same
// way). When a target aborts (FUZZ_CHECK, or a sanitizer), the input being
// run is written to ./replay-crash-<target> first; rerun the target with
// that file as its only argument to reproduce.
//
// Single-threaded.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

const std::string* g_current = nullptr;
char g_crash_path[256] = "replay-crash";

// Async-signal-safe: writes the input that was running, then dies of the
// same signal.
void OnFatalSignal(int sig) {
  if (g_current != nullptr) {
    int fd = open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ssize_t ignored = write(fd, g_current->data(), g_current->size());
      (void)ignored;
      close(fd);
      const char msg[] = "replay: input written to ";
      ignored = write(2, msg, sizeof(msg) - 1);
      ignored = write(2, g_crash_path, strlen(g_crash_path));
      ignored = write(2, "\n", 1);
    }
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void Run(const std::string& input) {
  g_current = &input;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  g_current = nullptr;
}

std::string Mutate(std::string s, std::mt19937_64& rng, size_t max_len) {
  static const char kInteresting[] = {'\0', '\n', ':', '-', '=', '.',  '[',    ']',   ' ',
                                      '0',  '9',  'e', 's', '"', '\\', '\xff', '\x80'};
  int edits = 1 + static_cast<int>(rng() % 8);
  for (int i = 0; i < edits; ++i) {
    size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 6) {
      case 0:  // flip a bit
        if (!s.empty()) s[pos % s.size()] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:  // random byte
        if (!s.empty()) s[pos % s.size()] = static_cast<char>(rng());
        break;
      case 2:  // insert an interesting byte
        s.insert(pos, 1, kInteresting[rng() % sizeof(kInteresting)]);
        break;
      case 3:  // delete a run
        if (!s.empty()) s.erase(pos % s.size(), 1 + rng() % 4);
        break;
      case 4: {  // duplicate a chunk
        if (s.empty()) break;
        size_t from = rng() % s.size();
        s.insert(pos, s.substr(from, 1 + rng() % 16));
        break;
      }
      default:  // a run of one repeated byte
        s.insert(pos, 1 + rng() % 32, static_cast<char>(rng()));
    }
  }
  if (s.size() > max_len) s.resize(max_len);
  return s;
}

bool ReadFile(const std::filesystem::path& p, std::string* out) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return false;
  out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t runs = 10000, seed = 1;
  size_t max_len = 4096;
  double max_seconds = 0;
  std::vector<std::string> corpus;
  std::string name = std::filesystem::path(argv[0]).filename().string();
  std::snprintf(g_crash_path, sizeof(g_crash_path), "replay-crash-%s", name.c_str());
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* flag) -> const char* {
      for (const char* prefix : {"-", "--"}) {
        std::string p = std::string(prefix) + flag + "=";
        if (arg.rfind(p, 0) == 0) return argv[i] + p.size();
      }
      return nullptr;
    };
    if (const char* v = value("runs")) {
      runs = std::strtoull(v, nullptr, 10);
    } else if (const char* v = value("seed")) {
      seed = std::strtoull(v, nullptr, 10);
    } else if (const char* v = value("max_len")) {
      max_len = std::strtoull(v, nullptr, 10);
    } else if (const char* v = value("max_total_time")) {
      max_seconds = std::strtod(v, nullptr);
    } else if (arg.rfind("-", 0) == 0) {
      std::fprintf(stderr, "replay: ignoring %s (a libFuzzer option)\n", arg.c_str());
    } else if (std::filesystem::is_directory(arg)) {
      for (const auto& e : std::filesystem::directory_iterator(arg)) {
        std::string data;
        if (e.is_regular_file() && ReadFile(e.path(), &data)) corpus.push_back(std::move(data));
      }
    } else {
      std::string data;
      if (!ReadFile(arg, &data)) {
        std::fprintf(stderr, "replay: cannot read %s\n", arg.c_str());
        return 2;
      }
      corpus.push_back(std::move(data));
    }
  }
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) signal(sig, OnFatalSignal);

  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  uint64_t done = 0;
  for (const std::string& input : corpus) {
    Run(input);
    ++done;
  }
  std::mt19937_64 rng(seed);
  while (done < runs && (max_seconds <= 0 || elapsed() < max_seconds)) {
    std::string input;
    if (!corpus.empty() && rng() % 2 == 0) {
      input = Mutate(corpus[rng() % corpus.size()], rng, max_len);
    } else {
      input.resize(rng() % (1 + std::min<size_t>(max_len, 512)));
      for (char& c : input) c = static_cast<char>(rng());
    }
    Run(input);
    ++done;
  }
  std::printf("replay: Done %llu runs in %.1f second(s) (%zu seeds, seed %llu)\n",
              static_cast<unsigned long long>(done), elapsed(), corpus.size(),
              static_cast<unsigned long long>(seed));
  return 0;
}

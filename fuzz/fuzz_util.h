// Small helpers shared by the fuzz targets (fuzz/*_fuzz.cc): a byte reader that
// turns fuzz input into structured values, a line splitter for text inputs, a
// JSON syntax check, and FUZZ_CHECK, which aborts (a crash libFuzzer and the
// replay driver both record) when an invariant does not hold.
//
// Header-only; no state; thread-compatible.
#ifndef TRAINLET_FUZZ_FUZZ_UTIL_H_
#define TRAINLET_FUZZ_FUZZ_UTIL_H_

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"

// `what` (a std::string or a C string) is printed C-escaped, at most 4 KiB.
#define FUZZ_CHECK(cond, what)                                                              \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "%s:%d: invariant failed: %s (%s)\n", __FILE__, __LINE__, #cond, \
                   absl::CEscape(std::string(what).substr(0, 4096)).c_str());               \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

namespace trainlet::fuzz {

// Reads values off the front of the input; once it is used up, every read
// returns zeros and empty strings, so a short input is still a valid program.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  uint8_t Byte() { return empty() ? 0 : data_[pos_++]; }
  uint64_t Uint64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | Byte();
    return v;
  }
  // A value in [lo, hi] from 4 bytes.
  int IntInRange(int lo, int hi) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | Byte();
    const uint64_t range = static_cast<uint64_t>(static_cast<int64_t>(hi) - lo) + 1;
    return static_cast<int>(lo + static_cast<int64_t>(v % range));
  }
  // Picks one of `n` (n > 0) choices with one byte.
  int Pick(size_t n) { return static_cast<int>(Byte() % n); }
  // Up to `n` raw bytes.
  std::string Bytes(size_t n) {
    n = n < size_ - pos_ ? n : size_ - pos_;
    std::string s(reinterpret_cast<const char*>(data_ + pos_), empty() ? 0 : n);
    pos_ += s.size();
    return s;
  }
  // A length byte (capped at max_len), then that many bytes.
  std::string String(size_t max_len) { return Bytes(Byte() % (max_len + 1)); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

inline absl::string_view AsText(const uint8_t* data, size_t size) {
  return absl::string_view(reinterpret_cast<const char*>(data), size);
}

// Splits on '\n' (the seed corpora are line-based, so they stay readable).
inline std::vector<std::string> SplitLines(absl::string_view text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == absl::string_view::npos) end = text.size();
    lines.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// True when `text` is one syntactically valid JSON value (RFC 8259), with
// nesting at most 64 deep.
class JsonChecker {
 public:
  static bool Valid(absl::string_view text) {
    JsonChecker c(text);
    return c.Value(0) && (c.SkipSpace(), c.pos_ == text.size());
  }

 private:
  explicit JsonChecker(absl::string_view t) : t_(t) {}
  void SkipSpace() {
    while (pos_ < t_.size() &&
           (t_[pos_] == ' ' || t_[pos_] == '\n' || t_[pos_] == '\r' || t_[pos_] == '\t')) {
      ++pos_;
    }
  }
  bool Eat(char c) { return pos_ < t_.size() && t_[pos_] == c ? (++pos_, true) : false; }
  bool Literal(absl::string_view word) {
    if (t_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  bool Digits() {
    size_t start = pos_;
    while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') ++pos_;
    return pos_ > start;
  }
  bool Number() {
    Eat('-');
    if (!Eat('0') && !Digits()) return false;
    if (Eat('.') && !Digits()) return false;
    if (Eat('e') || Eat('E')) {
      if (!Eat('+')) Eat('-');
      if (!Digits()) return false;
    }
    return true;
  }
  bool String() {
    if (!Eat('"')) return false;
    while (pos_ < t_.size()) {
      unsigned char c = static_cast<unsigned char>(t_[pos_++]);
      if (c == '"') return true;
      if (c < 0x20) return false;
      if (c == '\\') {
        if (pos_ >= t_.size()) return false;
        char e = t_[pos_++];
        if (e == 'u') {
          for (int i = 0; i < 4; ++i, ++pos_) {
            if (pos_ >= t_.size() || !std::isxdigit(static_cast<unsigned char>(t_[pos_]))) {
              return false;
            }
          }
        } else if (absl::string_view("\"\\/bfnrt").find(e) == absl::string_view::npos) {
          return false;
        }
      }
    }
    return false;
  }
  bool Value(int depth) {
    if (depth > 64) return false;
    SkipSpace();
    if (pos_ >= t_.size()) return false;
    char c = t_[pos_];
    if (c == '"') return String();
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++pos_;
      SkipSpace();
      if (Eat(close)) return true;
      do {
        SkipSpace();
        if (c == '{' && !(String() && (SkipSpace(), Eat(':')))) return false;
        if (!Value(depth + 1)) return false;
        SkipSpace();
      } while (Eat(','));
      return Eat(close);
    }
    return Literal("true") || Literal("false") || Literal("null") || Number();
  }

  absl::string_view t_;
  size_t pos_ = 0;
};

}  // namespace trainlet::fuzz

#endif  // TRAINLET_FUZZ_FUZZ_UTIL_H_

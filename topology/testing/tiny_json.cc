#include "topology/testing/tiny_json.h"

#include <cstdlib>
#include <cstring>

namespace trainlet::topology::testing {
namespace {

constexpr int kMaxDepth = 64;

class Parser {
 public:
  explicit Parser(const std::string& text) : text_(text) {}

  bool Document(Json* out, std::string* why) {
    bool ok = Value(out, 0);
    SkipSpace();
    if (ok && pos_ != text_.size()) ok = Fail("trailing text");
    if (!ok) *why = error_ + " at offset " + std::to_string(pos_);
    return ok;
  }

 private:
  bool Fail(const char* what) {
    if (error_.empty()) error_ = what;
    return false;
  }
  void SkipSpace() {
    while (pos_ < text_.size() && strchr(" \t\r\n", text_[pos_]) != nullptr) ++pos_;
  }
  bool Eat(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Word(const char* word) {
    const size_t n = strlen(word);
    if (text_.compare(pos_, n, word) != 0) return Fail("unexpected word");
    pos_ += n;
    return true;
  }

  bool Value(Json* out, int depth) {
    if (depth > kMaxDepth) return Fail("nested too deep");
    SkipSpace();
    if (pos_ >= text_.size()) return Fail("unexpected end");
    const char c = text_[pos_];
    if (c == '{') return Object(out, depth);
    if (c == '[') return Array(out, depth);
    if (c == '"') {
      out->kind = Json::kString;
      return String(&out->string);
    }
    if (c == 't' || c == 'f') {
      out->kind = Json::kBool;
      out->boolean = c == 't';
      return Word(c == 't' ? "true" : "false");
    }
    if (c == 'n') {
      out->kind = Json::kNull;
      return Word("null");
    }
    const char* start = text_.c_str() + pos_;
    char* end = nullptr;
    out->number = strtod(start, &end);
    if (end == start) return Fail("expected a value");
    out->kind = Json::kNumber;
    pos_ += static_cast<size_t>(end - start);
    return true;
  }

  bool Object(Json* out, int depth) {
    out->kind = Json::kObject;
    ++pos_;  // '{'
    if (Eat('}')) return true;
    do {
      SkipSpace();
      std::string key;
      if (pos_ >= text_.size() || text_[pos_] != '"' || !String(&key)) {
        return Fail("expected a member name");
      }
      if (!Eat(':')) return Fail("expected ':'");
      if (!Value(&out->object[key], depth + 1)) return false;
    } while (Eat(','));
    return Eat('}') || Fail("expected ',' or '}'");
  }

  bool Array(Json* out, int depth) {
    out->kind = Json::kArray;
    ++pos_;  // '['
    if (Eat(']')) return true;
    do {
      out->array.emplace_back();
      if (!Value(&out->array.back(), depth + 1)) return false;
    } while (Eat(','));
    return Eat(']') || Fail("expected ',' or ']'");
  }

  bool String(std::string* out) {
    ++pos_;  // '"'
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == '"') return true;
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= text_.size()) break;
      const char e = text_[pos_++];
      const char* from = "\"\\/bfnrt";
      const char* to = "\"\\/\b\f\n\r\t";
      if (const char* at = strchr(from, e); at != nullptr && e != '\0') {
        out->push_back(to[at - from]);
      } else if (e == 'u' && pos_ + 4 <= text_.size()) {
        const unsigned long code = strtoul(text_.substr(pos_, 4).c_str(), nullptr, 16);
        out->push_back(code < 0x80 ? static_cast<char>(code) : '?');
        pos_ += 4;
      } else {
        return Fail("bad escape");
      }
    }
    return Fail("unterminated string");
  }

  const std::string& text_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace

const Json* Json::Get(const std::string& key) const {
  if (kind != kObject) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &it->second;
}

bool ParseJson(const std::string& text, Json* out, std::string* why) {
  *out = Json();
  return Parser(text).Document(out, why);
}

}  // namespace trainlet::topology::testing

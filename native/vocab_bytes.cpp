// GGUF string-array scanning, UTF-8 validation and BPE merge validation (vocab_bytes.h).
#include "vocab_bytes.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace lll {

size_t scan_strings(const uint8_t* p, size_t end, size_t pos, size_t count, int64_t* s, int64_t* e) {
  if (count > (end - std::min(pos, end)) / 8) throw std::invalid_argument("index 0: absurd array length");
  for (size_t i = 0; i < count; ++i) {
    if (pos > end || end - pos < 8) throw std::invalid_argument("index " + std::to_string(i) + ": truncated");
    uint64_t n;
    std::memcpy(&n, p + pos, 8);
    pos += 8;
    if (n > end - pos) throw std::invalid_argument("index " + std::to_string(i) + ": absurd string length " + std::to_string(n));
    s[i] = (int64_t)pos;
    pos += n;
    e[i] = (int64_t)pos;
  }
  return pos;
}

// then decoding a merge's two sides apart and together agree
bool utf8_valid(std::string_view s) {
  const auto* p = (const unsigned char*)s.data();
  size_t i = 0, n = s.size();
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) { ++i; continue; }
    int len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return false;
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return false;
    for (int j = 2; j < len; ++j)
      if ((p[i + j] & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

bool merges_valid(const std::vector<std::string_view>& tokens, const std::vector<std::string_view>& merges) {
  // an open-addressing set of token indices (FNV-1a, linear probing): std::unordered_set's node per token
  // made this as slow as the Python check
  auto hash = [](std::string_view v) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : v) h = (h ^ c) * 1099511628211ull;
    return h;
  };
  size_t cap = 16;
  while (cap < 2 * tokens.size()) cap *= 2;
  std::vector<int32_t> slots(cap, -1);
  for (size_t i = 0; i < tokens.size(); ++i)
    for (size_t j = hash(tokens[i]) & (cap - 1);; j = (j + 1) & (cap - 1))
      if (slots[j] < 0) {
        slots[j] = (int32_t)i;
        break;
      }
  auto has = [&](std::string_view v) {
    for (size_t j = hash(v) & (cap - 1);; j = (j + 1) & (cap - 1)) {
      if (slots[j] < 0) return false;
      if (tokens[(size_t)slots[j]] == v) return true;
    }
  };
  std::string joined;
  for (const auto& m : merges) {
    const size_t k = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
    if (k == std::string_view::npos || k == m.size() - 1 || !utf8_valid(m)) return false;
    const std::string_view a = m.substr(0, k), b = m.substr(k + 1);
    if (!has(a) || !has(b)) return false;
    joined.assign(a);
    joined.append(b);
    if (!has(joined)) return false;
  }
  return true;
}

}  // namespace lll

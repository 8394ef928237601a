// Byte-level helpers of the GGUF loader and the BPE tokenizer, over raw buffers (bind_tokenizer.cpp exposes
// them): scanning a GGUF string array, well-formed UTF-8, and checking BPE merges against the vocabulary.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace lll {

// GGUF string array: count * ([u64 length][bytes]) from byte pos of buf [0, size). Writes the strings' byte
// ranges to starts[i], ends[i] (count each) and returns the position after the last one; throws
// std::invalid_argument("index N: ...") naming the first bad element (lengths are bounded by the buffer).
size_t scan_strings(const uint8_t* buf, size_t size, size_t pos, size_t count, int64_t* starts, int64_t* ends);

// well-formed UTF-8 (Unicode table 3-7)
bool utf8_valid(std::string_view s);

// true when every merge is well-formed UTF-8 with a space at byte k >= 1 (the first such), not last, and its
// two sides and their concatenation are all token texts (bpe.py's check, without Python strings). False
// means "let the Python check decide and name the problem".
bool merges_valid(const std::vector<std::string_view>& tokens, const std::vector<std::string_view>& merges);

}  // namespace lll

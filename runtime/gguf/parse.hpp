#pragma once
// Internal to runtime/gguf: the pieces File::parse() is made of, one per section of the file.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/gguf/cursor.hpp"
#include "runtime/gguf/gguf.hpp"

namespace ferry::gguf::detail {

// Reads one value of `type` (the type id already consumed). Nested arrays are rejected: no model
// uses them and llama.cpp rejects them too.
Value read_value(Cursor& c, uint32_t type, const std::string& key);

// Reads one tensor-info record and validates everything that does not depend on where the data
// section starts: name length, n_dims <= 4, 1 <= ne < 2^63, element-count and byte-size overflow,
// type id, ne[0] a multiple of the block size. Fills ne, nb, type, offset and n_bytes.
TensorInfo read_tensor_info(Cursor& c, uint64_t index);

// Places every tensor in the file: offset a multiple of the alignment, [file_offset, +n_bytes)
// inside the file, no two tensors' data overlapping. Fills file_offset.
void place_tensors(std::vector<TensorInfo>& tensors, uint64_t data_offset, uint32_t alignment,
                   uint64_t file_size, const std::string& path);

// Size in bytes of the smallest possible encoding of one element of `type` in an array (strings:
// their u64 length). Used to bound counts by the bytes left before allocating.
uint64_t min_encoded_bytes(uint32_t type);

}  // namespace ferry::gguf::detail

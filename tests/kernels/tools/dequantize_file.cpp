// dequantize_file TYPE IN OUT: reads whole blocks of TYPE (a ggml type name, e.g. q4_0) from the
// file IN, writes their values as float32 (native byte order) to OUT with Ferry's reference
// dequantizer (cpu::dequantize_row_ref). For test_gguf_dequantize.py, which compares the result
// with the gguf package's numpy dequantizers. Exit 0 on success, 1 with a message on an error.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

#include "kernels/cpu/quants.hpp"
#include "runtime/core/error.hpp"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s TYPE IN OUT\n", argv[0]);
    return 1;
  }
  try {
    const auto t = ferry::type_from_name(argv[1]);
    if (!t) ferry::fail(ferry::ErrorKind::invalid_arg, "unknown type {}", argv[1]);
    std::ifstream in(argv[2], std::ios::binary);
    if (!in) ferry::fail(ferry::ErrorKind::io, "cannot read {}", argv[2]);
    const std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const ferry::TypeInfo& ti = ferry::type_info(*t);
    if (bytes.size() % ti.block_bytes != 0)
      ferry::fail(ferry::ErrorKind::invalid_arg, "{}: {} bytes are not whole {} blocks", argv[2], bytes.size(), ti.name);
    const auto n = static_cast<int64_t>(bytes.size() / ti.block_bytes * ti.block_values);
    std::vector<float> out(static_cast<size_t>(n));
    ferry::cpu::dequantize_row_ref(*t, bytes.data(), out.data(), n);
    std::ofstream o(argv[3], std::ios::binary);
    o.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(float)));
    if (!o) ferry::fail(ferry::ErrorKind::io, "cannot write {}", argv[3]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dequantize_file: %s\n", e.what());
    return 1;
  }
  return 0;
}

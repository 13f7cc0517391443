#pragma once
// Readable names of kernels, for the per-kernel timer (kernel_times.hpp): the symbol of a kernel's
// function, demangled and shortened. Plain C++.
#include <string>
#include <string_view>

namespace ferry::cuda {

// The name of the kernel whose host function (the pointer passed to launch()) is `kernel`: on a
// GPU build from cudaFuncGetName, on the CUDA emulator from the program's ELF symbol table (the
// kernels are plain host functions there, most of them in anonymous namespaces, so dladdr's
// exported symbols do not name them). "kernel@0x..." when no symbol is found.
std::string kernel_name(const void* kernel);

// A demangled function name made short: "(anonymous namespace)::" and every namespace or class
// qualifier dropped (inside template arguments too), the parameter list and a template's return
// type dropped; template arguments kept (they tell Q4_K from Q8_0 instantiations), a weight type
// by its ggml name. E.g.
// "void ferry::cuda::(anonymous namespace)::matvec<(ferry::GgmlType)12, 4>(float const*, int)"
// → "matvec<Q4_K, 4>".
std::string shorten_kernel_name(std::string_view demangled);

// abi::__cxa_demangle of an Itanium-mangled name ("_Z..."); the name itself otherwise.
std::string demangle(const char* symbol);

}  // namespace ferry::cuda

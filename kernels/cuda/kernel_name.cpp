#include "kernels/cuda/kernel_name.hpp"

#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>

#include "runtime/core/types.hpp"

#if defined(FERRY_CUDA_EMU)
#include <elf.h>
#include <link.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <vector>
#else
#include <cuda_runtime_api.h>
#endif

namespace ferry::cuda {

std::string demangle(const char* symbol) {
  if (!symbol) return {};
  if (symbol[0] != '_' || symbol[1] != 'Z') return symbol;
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(symbol, nullptr, nullptr, &status),
                                             std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(symbol);
}

namespace {

bool is_ident(char c) {
  return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// Removes every "identifier::" (namespace and class qualifiers), so "(ferry::GgmlType)12" reads
// "(GgmlType)12" inside template arguments as well.
std::string drop_qualifiers(std::string s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (is_ident(s[i])) {
      size_t j = i;
      while (j < s.size() && is_ident(s[j])) ++j;
      if (s.compare(j, 2, "::") == 0) {
        i = j + 2;
        continue;
      }
      out.append(s, i, j - i);
      i = j;
    } else {
      out += s[i++];
    }
  }
  return out;
}

// "(GgmlType)12" → "Q4_K": a template argument of the weight type, by its ggml name.
std::string name_weight_types(std::string s) {
  static constexpr std::string_view kCast = "(GgmlType)";
  for (size_t at = 0; (at = s.find(kCast, at)) != std::string::npos;) {
    size_t end = at + kCast.size();
    uint32_t id = 0;
    while (end < s.size() && s[end] >= '0' && s[end] <= '9')
      id = id * 10 + static_cast<uint32_t>(s[end++] - '0');
    const std::optional<TypeInfo> t = end > at + kCast.size() ? type_info(id) : std::nullopt;
    if (!t) {
      at = end;
      continue;
    }
    s.replace(at, end - at, t->name);
    at += t->name.size();
  }
  return s;
}

}  // namespace

std::string shorten_kernel_name(std::string_view demangled) {
  std::string s(demangled);
  for (const std::string_view anon : {"(anonymous namespace)::", "{anonymous}::"})
    for (size_t at; (at = s.find(anon)) != std::string::npos;) s.erase(at, anon.size());
  // The parameter list: the last parenthesised group at the outermost level.
  if (!s.empty() && s.back() == ')') {
    int depth = 0;
    for (size_t i = s.size(); i-- > 0;) {
      if (s[i] == ')') ++depth;
      if (s[i] == '(' && --depth == 0) {
        s.erase(i);
        break;
      }
    }
  }
  // A template's return type: what precedes the last space outside <...> and (...).
  int depth = 0;
  size_t cut = std::string::npos;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<' || s[i] == '(') ++depth;
    if (s[i] == '>' || s[i] == ')') --depth;
    if (s[i] == ' ' && depth == 0) cut = i;
  }
  if (cut != std::string::npos) s.erase(0, cut + 1);
  return name_weight_types(drop_qualifiers(std::move(s)));
}

#if defined(FERRY_CUDA_EMU)
namespace {

struct Symbol {
  uint64_t value, size;
  std::string name;
};

// The function symbols of one ELF file (its .symtab, else .dynsym), sorted by address.
std::vector<Symbol> read_function_symbols(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> file{std::istreambuf_iterator<char>(in),
                               std::istreambuf_iterator<char>()};
  std::vector<Symbol> out;
  if (file.size() < sizeof(Elf64_Ehdr)) return out;
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(file.data());
  if (std::string_view(reinterpret_cast<const char*>(eh->e_ident), 4) != ELFMAG ||
      eh->e_ident[EI_CLASS] != ELFCLASS64 ||
      eh->e_shoff + uint64_t{eh->e_shnum} * sizeof(Elf64_Shdr) > file.size())
    return out;
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(file.data() + eh->e_shoff);
  for (const uint32_t type : {uint32_t{SHT_SYMTAB}, uint32_t{SHT_DYNSYM}}) {
    for (unsigned i = 0; i < eh->e_shnum; ++i) {
      if (sh[i].sh_type != type || sh[i].sh_link >= eh->e_shnum) continue;
      const Elf64_Shdr& strtab = sh[sh[i].sh_link];
      if (sh[i].sh_offset + sh[i].sh_size > file.size() ||
          strtab.sh_offset + strtab.sh_size > file.size())
        continue;
      const auto* syms = reinterpret_cast<const Elf64_Sym*>(file.data() + sh[i].sh_offset);
      for (size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); ++k) {
        if (ELF64_ST_TYPE(syms[k].st_info) != STT_FUNC || syms[k].st_value == 0 ||
            syms[k].st_name >= strtab.sh_size)
          continue;
        out.push_back(
            {syms[k].st_value, syms[k].st_size, file.data() + strtab.sh_offset + syms[k].st_name});
      }
    }
    if (!out.empty()) break;
  }
  std::sort(out.begin(), out.end(),
            [](const Symbol& a, const Symbol& b) { return a.value < b.value; });
  return out;
}

struct Module {
  uintptr_t address;  // in
  uintptr_t base = 0;
  std::string path;
};

int find_module(dl_phdr_info* info, size_t, void* data) {
  auto* m = static_cast<Module*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type != PT_LOAD || m->address < lo || m->address >= lo + ph.p_memsz) continue;
    m->base = info->dlpi_addr;
    // The main program has an empty name.
    m->path = info->dlpi_name && *info->dlpi_name ? info->dlpi_name : "/proc/self/exe";
    return 1;
  }
  return 0;
}

}  // namespace

std::string kernel_name(const void* kernel) {
  static std::mutex mu;
  static std::map<std::string, std::vector<Symbol>> tables;  // per file, read once
  Module m{reinterpret_cast<uintptr_t>(kernel)};
  if (dl_iterate_phdr(find_module, &m) != 0) {
    std::lock_guard lk(mu);
    auto it = tables.find(m.path);
    if (it == tables.end()) it = tables.emplace(m.path, read_function_symbols(m.path)).first;
    const std::vector<Symbol>& syms = it->second;
    const uint64_t offset = m.address - m.base;
    auto s = std::upper_bound(syms.begin(), syms.end(), offset,
                              [](uint64_t v, const Symbol& x) { return v < x.value; });
    if (s != syms.begin() &&
        offset < std::prev(s)->value + std::max<uint64_t>(std::prev(s)->size, 1))
      return shorten_kernel_name(demangle(std::prev(s)->name.c_str()));
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "kernel@%p", kernel);
  return buf;
}
#else
std::string kernel_name(const void* kernel) {
  const char* name = nullptr;
  if (cudaFuncGetName(&name, kernel) == cudaSuccess && name)
    return shorten_kernel_name(demangle(name));
  (void)cudaGetLastError();  // not a launch error: keep it from the next FERRY_CUDA_CHECK_LAUNCH
  char buf[40];
  std::snprintf(buf, sizeof buf, "kernel@%p", kernel);
  return buf;
}
#endif

}  // namespace ferry::cuda

// `ferry tokenize -m FILE (-p TEXT | -f FILE | --stdin) [--ids] [--no-parse-special] [--add-bos]`:
// the token ids of a text under a GGUF's tokenizer, printed like llama.cpp's llama-tokenize.
// `--jsonl FILE` tokenizes many texts in one run (one JSON string per line in, one JSON array of
// ids per line out), for scripts and the oracle tests.
#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/cli/command.hpp"
#include "runtime/core/error.hpp"
#include "runtime/gguf/gguf.hpp"
#include "runtime/tokenizer/tokenizer.hpp"

namespace ferry::cli {
namespace {

std::string read_all(std::istream& in, const std::string& what) {
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail(ErrorKind::io, "cannot read {}", what);
  return ss.str();
}

// llama.cpp's -e handling for the common escapes: \n \r \t \\ \' \" \xHH.
std::string process_escapes(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char e = s[++i];
    switch (e) {
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'x':
        if (i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
            std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
          out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
          i += 2;
          break;
        }
        [[fallthrough]];
      default:
        out += '\\';
        out += e;
    }
  }
  return out;
}

int run_jsonl(const Tokenizer& tok, const std::string& path, bool add_bos, bool parse_special,
              bool escape) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::io, "cannot open {}", path);
  size_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail(ErrorKind::invalid_arg, "{}:{}: not JSON: {}", path, line_no, e.what());
    }
    if (!j.is_string())
      fail(ErrorKind::invalid_arg, "{}:{}: expected a JSON string", path, line_no);
    std::string text = j.get<std::string>();
    if (escape) text = process_escapes(text);
    const nlohmann::json ids = tok.encode(text, add_bos, parse_special);
    std::printf("%s\n", ids.dump().c_str());
  }
  return 0;
}

int run_tokenize(int argc, char** argv) {
  CLI::App app{
      "Print the token ids of a text under a GGUF's tokenizer (like llama.cpp's llama-tokenize). "
      "The text is used byte for byte: no trailing newline is added or removed.",
      "ferry tokenize"};
  std::string model, prompt, file;
  bool use_stdin = false, ids_only = false, no_parse_special = false, add_bos = false,
       show_count = false, escape = false;
  app.add_option("-m,--model", model, "GGUF file (only its tokenizer metadata is used)")
      ->required();
  auto* p_opt = app.add_option("-p,--prompt", prompt, "text to tokenize");
  auto* f_opt = app.add_option("-f,--file", file, "read the text from this file");
  auto* s_opt = app.add_flag("--stdin", use_stdin, "read the text from standard input");
  std::string jsonl;
  auto* j_opt = app.add_option(
      "--jsonl", jsonl,
      "tokenize every line of this file, a JSON string, and print one JSON array of ids per line");
  p_opt->excludes(f_opt)->excludes(s_opt)->excludes(j_opt);
  f_opt->excludes(s_opt)->excludes(j_opt);
  s_opt->excludes(j_opt);
  app.add_flag("--ids", ids_only, "print only the ids, as a list [a, b, ...]");
  app.add_flag("--no-parse-special", no_parse_special,
               "treat control-token text such as <|im_start|> as plain text (user-defined tokens "
               "still match)");
  app.add_flag("--add-bos", add_bos,
               "add BOS (and EOS) when the vocabulary asks for them (tokenizer.ggml.add_bos_token "
               "/ add_eos_token)");
  app.add_flag("--show-count", show_count, "print the number of tokens at the end");
  app.add_flag("-e,--escape", escape, R"(process escapes (\n \r \t \\ \' \" \xHH) in the text)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (p_opt->count() + f_opt->count() + s_opt->count() + j_opt->count() != 1)
    fail(ErrorKind::invalid_arg, "give the text with exactly one of -p, -f, --stdin or --jsonl");

  const gguf::File gf = gguf::File::open(model);
  const Tokenizer tok = Tokenizer::from_gguf(gf);
  if (j_opt->count()) return run_jsonl(tok, jsonl, add_bos, !no_parse_special, escape);

  std::string text;
  if (f_opt->count()) {
    std::ifstream in(file, std::ios::binary);
    if (!in) fail(ErrorKind::io, "cannot open {}", file);
    text = read_all(in, file);
  } else if (use_stdin) {
    text = read_all(std::cin, "standard input");
  } else {
    text = prompt;
  }
  if (escape) text = process_escapes(text);

  const std::vector<int32_t> ids = tok.encode(text, add_bos, !no_parse_special);
  if (ids_only) {
    std::printf("[");
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? ", %d" : "%d", ids[i]);
    std::printf("]\n");
  } else {
    for (int32_t id : ids) {
      const std::string piece = tok.token_bytes(id, /*render_special=*/true);
      std::printf("%6d -> '", id);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::printf("'\n");
    }
  }
  if (show_count) std::printf("Total number of tokens: %zu\n", ids.size());
  return 0;
}

}  // namespace

FERRY_COMMAND("tokenize", "print the token ids of a text (like llama-tokenize)", run_tokenize);

}  // namespace ferry::cli

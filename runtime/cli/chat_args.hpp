#pragma once
// The chat-template flags `ferry serve` and `ferry chat` share, with llama-server's names and
// meanings: --chat-template-file, --jinja (accepted: templates are always Jinja here),
// --chat-template-kwargs, --reasoning-format, --reasoning-budget.
#include <CLI/CLI.hpp>

#include "runtime/engine/chat_format.hpp"

namespace ferry::cli {

void add_chat_format_args(CLI::App& app, ChatFormatArgs& a);

// FERRY_TEST_FORCE_TOKENS (test only, docs/server.md): the file named, or "" when unset. Warns on
// stderr when set: every reply is then scripted, not the model's.
std::string forced_tokens_file(const char* command);

}  // namespace ferry::cli

#pragma once
// The text of a reply as it is generated: token ids in, text that is safe to send out. Safe means
// complete UTF-8 (a byte-level BPE token can end inside a character: TextStream holds it) and no
// possible beginning of a stop string (held until it is known not to be one); a matched stop
// string ends the reply and is not part of it, as in llama-server.
#include <string>
#include <vector>

#include "runtime/tokenizer/tokenizer.hpp"

namespace ferry::server {

class ReplyText {
 public:
  ReplyText(const Tokenizer& tok, std::vector<std::string> stop);
  // The text that may be sent after this token ("" while held). After a stop match, stopped().
  std::string push(int32_t id);
  // End of the reply without a stop match: what is still held.
  std::string finish();
  bool stopped() const { return stopped_; }
  const std::string& stop_word() const { return stop_word_; }

 private:
  // Cuts held_ at the earliest stop match (true) or releases all but a suffix that may start one.
  std::string release();
  TextStream stream_;
  std::vector<std::string> stop_;
  std::string held_;  // complete UTF-8 not yet sent
  bool stopped_ = false;
  std::string stop_word_;
};

}  // namespace ferry::server

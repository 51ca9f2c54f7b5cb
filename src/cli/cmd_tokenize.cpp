// `bucketrl tokenize --model DIR`: text lines on stdin -> one line of space-separated token
// ids per input line (no special tokens unless --add-special-tokens). --decode reads lines
// of ids and prints their text (--skip-special-tokens drops special tokens). --time reports
// the encode/decode throughput on stderr, model loading excluded.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {
struct Args {
  std::string model_dir;
  bool add_special = false, decode = false, skip_special = false, time = false;
};

int run(const Args& a) {
  auto tok = brl::tok::Tokenizer::from_dir(a.model_dir);
  std::vector<std::string> lines;
  size_t bytes = 0;
  for (std::string line; std::getline(std::cin, line);) {
    bytes += line.size() + 1;
    lines.push_back(std::move(line));
  }
  std::string out;
  size_t n_ids = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (size_t li = 0; li < lines.size(); ++li) {
    const std::string& line = lines[li];
    if (!a.decode) {
      auto ids = tok.encode(line, a.add_special);
      n_ids += ids.size();
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i) out += ' ';
        out += std::to_string(ids[i]);
      }
    } else {
      std::vector<int32_t> ids;
      std::istringstream ss(line);
      for (std::string w; ss >> w;) {
        size_t used = 0;
        long v = -1;
        try {
          v = std::stol(w, &used);
        } catch (const std::exception&) {
        }
        if (used != w.size() || v < 0 || v >= tok.vocab_size())
          throw brl::UserError("stdin line " + std::to_string(li + 1) + ": '" + w + "' is not a token id (0.." +
                               std::to_string(tok.vocab_size() - 1) + ")");
        ids.push_back(static_cast<int32_t>(v));
      }
      n_ids += ids.size();
      out += tok.decode(ids, a.skip_special);
    }
    out += '\n';
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (a.time)
    std::fprintf(stderr, "%s %zu lines, %zu bytes, %zu tokens in %.3f s: %.2f MB/s, %.0f tokens/s\n",
                 a.decode ? "decoded" : "encoded", lines.size(), bytes, n_ids, s, bytes / 1e6 / s, n_ids / s);
  return 0;
}

brl::cli::RunFn setup_tokenize(CLI::App& app) {
  auto a = std::make_shared<Args>();
  app.add_option("--model", a->model_dir, "model folder with tokenizer.json")->required();
  app.add_flag("--add-special-tokens", a->add_special, "add the post-processor's special tokens (e.g. BOS)");
  app.add_flag("--decode", a->decode, "read lines of space-separated ids, print their text");
  app.add_flag("--skip-special-tokens", a->skip_special, "with --decode: leave special tokens out");
  app.add_flag("--time", a->time, "report throughput on stderr (loading excluded)");
  return [a] { return run(*a); };
}
brl::cli::Register reg("tokenize", "text lines on stdin -> token ids per line (or --decode ids -> text)",
                       setup_tokenize);
}  // namespace

// `bucketrl keygen`: an Ed25519 key pair for a worker. The private half (NAME.pem, mode
// 0600) stays with the worker (--signing-key); the public half (NAME.pub, one line
// "ed25519:<base64>") goes into the run's [security] allowed_keys. The private key is never
// printed.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/command.h"
#include "util/ed25519.h"
#include "util/error.h"

namespace {

using namespace brl;

cli::RunFn setup_keygen(CLI::App& app) {
  static std::string out, public_of;
  app.add_option("--out", out, "writes OUT.pem (private, mode 0600) and OUT.pub (public, one line)");
  app.add_option("--public-of", public_of, "print the public line of an existing private key (PEM) instead");
  return [] {
    if (!public_of.empty()) {
      std::printf("%s\n", ed25519::format_public_key(ed25519::SigningKey::load(public_of).public_key()).c_str());
      return 0;
    }
    if (out.empty()) throw UserError("keygen: --out NAME is required", "e.g. bucketrl keygen --out keys/worker-a");
    const std::string priv = out + ".pem", pub = out + ".pub";
    for (auto& p : {priv, pub})
      if (std::filesystem::exists(p))
        throw UserError("keygen: " + p + " exists",
                        "keygen does not overwrite keys; choose another --out or remove the old files");
    auto key = ed25519::SigningKey::generate();
    key.save(priv);
    const std::string line = ed25519::format_public_key(key.public_key());
    std::ofstream f(pub);
    f << line << "\n";
    if (!f.flush()) throw UserError("keygen: cannot write " + pub);
    std::printf("private key: %s (mode 0600; give it to the worker: --signing-key %s)\n", priv.c_str(), priv.c_str());
    std::printf("public key:  %s\n  %s\n", pub.c_str(), line.c_str());
    std::printf("allow it in run.toml:\n  [security]\n  allowed_keys = [\"%s\"]\n", line.c_str());
    return 0;
  };
}
cli::Register reg("keygen", "create an Ed25519 key pair for signing worker updates", setup_keygen);

}  // namespace

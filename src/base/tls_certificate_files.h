// TlsCertificateFiles: a TLS server's certificate (chain) and private key,
// read from their PEM files, and read again at the first handshake after
// either file changed: a rotated certificate (a Secret volume the kubelet
// updates, cert-manager, a new `tessera webhook-certs` run) is served without
// a restart.
//
// A change is seen in either file's inode, size or modification time (one
// stat() each per handshake). A pair that cannot be read, or whose key does
// not match the certificate (e.g. read between the writes of the two files),
// is not taken: handshakes go on with the last good pair and the next
// handshake reads again. Nothing of either file's content is ever logged.
//
// Thread-safety: the handshake callback runs on any worker thread; all
// methods may be called from any thread. The object must outlive every
// SSL_CTX it is installed on (hold it beside the server).
#pragma once

#include <openssl/ssl.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "base/result.h"

namespace tessera {

class TlsCertificateFiles {
 public:
  // Reads both files; the error names the file and what is wrong with it.
  static Result<std::unique_ptr<TlsCertificateFiles>> Load(std::string cert_file, std::string key_file);
  ~TlsCertificateFiles();
  TlsCertificateFiles(const TlsCertificateFiles&) = delete;
  TlsCertificateFiles& operator=(const TlsCertificateFiles&) = delete;

  // Every handshake on `ctx` from now on presents the current pair.
  void Install(SSL_CTX* ctx);
  // How many changed pairs were taken since Load.
  uint64_t reloads() const;

  struct Pair;    // a certificate, its chain and key (OpenSSL objects)
  struct Stamps;  // what identifies a version of the two files

 private:
  TlsCertificateFiles(std::string cert_file, std::string key_file);
  static int OnHandshake(SSL* ssl, void* self);
  std::shared_ptr<const Pair> Current();

  const std::string cert_file_;
  const std::string key_file_;
  mutable std::mutex mu_;
  std::shared_ptr<const Pair> pair_;  // guarded by mu_
  std::unique_ptr<Stamps> stamps_;    // guarded by mu_; of the files pair_ was read from, or last tried
  uint64_t reloads_ = 0;              // guarded by mu_
};

}  // namespace tessera

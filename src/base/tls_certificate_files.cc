#include "base/tls_certificate_files.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <tuple>

#include "base/log.h"

namespace tessera {

struct TlsCertificateFiles::Pair {
  X509* cert = nullptr;
  STACK_OF(X509) * chain = nullptr;  // the certificates after the first, may be empty
  EVP_PKEY* key = nullptr;
  ~Pair() {
    X509_free(cert);
    sk_X509_pop_free(chain, X509_free);
    EVP_PKEY_free(key);
  }
};

struct TlsCertificateFiles::Stamps {
  // Per file: inode, size, modification time (ns); errno when stat failed.
  std::tuple<ino_t, off_t, int64_t, int> cert{}, key{};
  bool operator==(const Stamps& o) const { return cert == o.cert && key == o.key; }
};

namespace {

std::tuple<ino_t, off_t, int64_t, int> StampOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {0, 0, 0, errno};
  return {st.st_ino, st.st_size, int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, 0};
}

using Bio = std::unique_ptr<BIO, decltype(&BIO_free)>;

Result<Bio> OpenFile(const std::string& path) {
  Bio bio(BIO_new_file(path.c_str(), "r"), &BIO_free);
  if (!bio) {
    ERR_clear_error();
    return Error{path + ": cannot read it (" + std::strerror(errno) + ")"};
  }
  return bio;
}

Result<std::shared_ptr<TlsCertificateFiles::Pair>> ReadPair(const std::string& cert_file,
                                                            const std::string& key_file) {
  auto pair = std::make_shared<TlsCertificateFiles::Pair>();
  TESSERA_ASSIGN_OR_RETURN(Bio certs, OpenFile(cert_file));
  pair->cert = PEM_read_bio_X509(certs.get(), nullptr, nullptr, nullptr);
  if (pair->cert == nullptr) {
    ERR_clear_error();
    return Error{cert_file + ": not a PEM certificate"};
  }
  pair->chain = sk_X509_new_null();
  while (X509* next = PEM_read_bio_X509(certs.get(), nullptr, nullptr, nullptr))
    sk_X509_push(pair->chain, next);
  ERR_clear_error();  // the end of the file reads as an error
  TESSERA_ASSIGN_OR_RETURN(Bio key, OpenFile(key_file));
  pair->key = PEM_read_bio_PrivateKey(key.get(), nullptr, nullptr, nullptr);
  if (pair->key == nullptr) {
    ERR_clear_error();
    return Error{key_file + ": not a PEM private key"};
  }
  if (X509_check_private_key(pair->cert, pair->key) != 1) {
    ERR_clear_error();
    return Error{key_file + ": not the key of the certificate in " + cert_file};
  }
  return pair;
}

}  // namespace

TlsCertificateFiles::TlsCertificateFiles(std::string cert_file, std::string key_file)
    : cert_file_(std::move(cert_file)), key_file_(std::move(key_file)), stamps_(std::make_unique<Stamps>()) {}

TlsCertificateFiles::~TlsCertificateFiles() = default;

Result<std::unique_ptr<TlsCertificateFiles>> TlsCertificateFiles::Load(std::string cert_file,
                                                                       std::string key_file) {
  std::unique_ptr<TlsCertificateFiles> files(
      new TlsCertificateFiles(std::move(cert_file), std::move(key_file)));
  files->stamps_->cert = StampOf(files->cert_file_);
  files->stamps_->key = StampOf(files->key_file_);
  TESSERA_ASSIGN_OR_RETURN(files->pair_, ReadPair(files->cert_file_, files->key_file_));
  return files;
}

void TlsCertificateFiles::Install(SSL_CTX* ctx) {
  SSL_CTX_set_cert_cb(ctx, &TlsCertificateFiles::OnHandshake, this);
}

uint64_t TlsCertificateFiles::reloads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reloads_;
}

std::shared_ptr<const TlsCertificateFiles::Pair> TlsCertificateFiles::Current() {
  Stamps now;
  now.cert = StampOf(cert_file_);
  now.key = StampOf(key_file_);
  std::lock_guard<std::mutex> lock(mu_);
  if (now == *stamps_) return pair_;
  *stamps_ = now;  // a bad pair is tried once per change, not at every handshake
  auto read = ReadPair(cert_file_, key_file_);
  if (!read.ok()) {
    log::Warn("TLS certificate files changed but cannot be used; serving the previous certificate",
              {{"error", read.error().message}});
    return pair_;
  }
  pair_ = std::move(read).value();
  ++reloads_;
  log::Info("TLS certificate reloaded", {{"cert_file", cert_file_}, {"key_file", key_file_}});
  return pair_;
}

int TlsCertificateFiles::OnHandshake(SSL* ssl, void* self) {
  std::shared_ptr<const Pair> pair = static_cast<TlsCertificateFiles*>(self)->Current();
  // override=1: replaces what the SSL_CTX had; the objects are up-referenced.
  return SSL_use_cert_and_key(ssl, pair->cert, pair->key, pair->chain, 1) == 1 ? 1 : 0;
}

}  // namespace tessera

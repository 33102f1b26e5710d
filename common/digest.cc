#include "common/digest.h"

#include <openssl/evp.h>

namespace eps {

struct Sha256::Impl {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~Impl() { EVP_MD_CTX_free(ctx); }
};

Sha256::Sha256() : impl_(new Impl) { EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr); }
Sha256::~Sha256() = default;

void Sha256::Update(const void* data, size_t n) { EVP_DigestUpdate(impl_->ctx, data, n); }

std::array<uint8_t, 32> Sha256::Digest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(impl_->ctx, md, &len);
  std::array<uint8_t, 32> out{};
  for (unsigned int i = 0; i < len && i < out.size(); ++i) out[i] = md[i];
  return out;
}

std::string Sha256::HexDigest() {
  const std::array<uint8_t, 32> d = Digest();
  return Hex(d.data(), d.size());
}

std::string Hex(const uint8_t* data, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out += kHex[data[i] >> 4];
    out += kHex[data[i] & 15];
  }
  return out;
}

void SetDigest::AddItem(std::initializer_list<std::string_view> parts) {
  Sha256 h;
  for (std::string_view p : parts) h.Update(p.data(), p.size());
  Add(h.Digest());
  ++items_;
}

void SetDigest::Merge(const SetDigest& other) {
  Add(other.sum_);
  items_ += other.items_;
}

void SetDigest::Add(const std::array<uint8_t, 32>& x) {
  unsigned carry = 0;
  for (size_t i = sum_.size(); i-- > 0;) {
    const unsigned s = unsigned{sum_[i]} + unsigned{x[i]} + carry;
    sum_[i] = static_cast<uint8_t>(s);
    carry = s >> 8;
  }
}

std::string SetDigest::Bytes() const {
  return std::string(reinterpret_cast<const char*>(sum_.data()), sum_.size());
}

StatusOr<SetDigest> SetDigest::FromBytes(std::string_view bytes) {
  if (bytes.size() != kBytes) {
    return InvalidArgument("a set digest is " + std::to_string(kBytes) + " bytes, not " +
                           std::to_string(bytes.size()));
  }
  SetDigest d;
  for (size_t i = 0; i < kBytes; ++i) d.sum_[i] = static_cast<uint8_t>(bytes[i]);
  return d;
}

}  // namespace eps

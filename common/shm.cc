#include "common/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <string>

namespace eps {
namespace {

constexpr uint64_t kMagic = 0x31304d4853535045ULL;  // "EPSSHM01", little-endian

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

bool ShmRegionRef::Holds(uint64_t offset, uint64_t bytes) const {
  return offset >= ShmRegion::kHeaderBytes && offset <= size && bytes <= size - offset;
}

StatusOr<std::unique_ptr<ShmRegion>> ShmRegion::Create(size_t size) {
  if (size < kHeaderBytes)
    return InvalidArgument("a shared-memory region holds at least its header");
  const int fd = memfd_create("eps-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Unavailable(Errno("memfd_create"));
  auto fail = [fd](const std::string& what) {
    Status st = Unavailable(Errno(what));
    close(fd);
    return st;
  };
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) return fail("ftruncate");
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return fail("F_ADD_SEALS");
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail("mmap");
  std::random_device random;
  const uint64_t token = (uint64_t{random()} << 32) ^ random();
  auto* data = static_cast<uint8_t*>(p);
  std::memcpy(data, &kMagic, sizeof kMagic);
  std::memcpy(data + sizeof kMagic, &token, sizeof token);
  ShmRegionRef ref{static_cast<uint32_t>(getpid()), fd, token, size};
  return std::unique_ptr<ShmRegion>(new ShmRegion(ref, data));
}

ShmRegion::~ShmRegion() {
  munmap(data_, ref_.size);
  close(ref_.fd);
}

ShmMappings::~ShmMappings() {
  for (const Mapping& m : maps_) munmap(m.data, m.ref.size);
}

StatusOr<uint8_t*> ShmMappings::Map(const ShmRegionRef& ref, Clock::time_point now) {
  auto it =
      std::find_if(maps_.begin(), maps_.end(), [&](const Mapping& m) { return m.ref == ref; });
  if (it != maps_.end()) {
    maps_.splice(maps_.begin(), maps_, it);
  } else if (std::find(refused_.begin(), refused_.end(), ref) != refused_.end()) {
    return FailedPrecondition("shared-memory region refused before");
  } else {
    StatusOr<uint8_t*> data = Open(ref);
    if (!data.ok()) {
      refused_.push_front(ref);
      if (refused_.size() > capacity_) refused_.pop_back();
      return data.status();
    }
    maps_.push_front({ref, *data, now});
    if (maps_.size() > capacity_) Unmap();
  }
  maps_.front().used = now;
  while (maps_.size() > 1 && now - maps_.back().used > idle_) Unmap();
  return maps_.front().data;
}

void ShmMappings::Unmap() {
  munmap(maps_.back().data, maps_.back().ref.size);
  maps_.pop_back();
}

StatusOr<uint8_t*> ShmMappings::Open(const ShmRegionRef& ref) const {
  if (ref.size < ShmRegion::kHeaderBytes || ref.fd < 0 || ref.pid == 0) {
    return FailedPrecondition("not a shared-memory region");
  }
  const std::string path = "/proc/" + std::to_string(ref.pid) + "/fd/" + std::to_string(ref.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return FailedPrecondition(Errno("open " + path));
  struct stat st {};
  const int seals = fcntl(fd, F_GET_SEALS);
  Status bad;
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    bad = FailedPrecondition(path + " is not a memfd sealed against shrinking");
  } else if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < ref.size) {
    bad = FailedPrecondition(path + " is smaller than the region named");
  }
  void* p = MAP_FAILED;
  if (bad.ok()) {
    p = mmap(nullptr, ref.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) bad = FailedPrecondition(Errno("mmap " + path));
  }
  close(fd);
  EPS_RETURN_IF_ERROR(bad);
  auto* data = static_cast<uint8_t*>(p);
  uint64_t magic = 0, token = 0;
  std::memcpy(&magic, data, sizeof magic);
  std::memcpy(&token, data + sizeof magic, sizeof token);
  if (magic != kMagic || token != ref.token) {
    munmap(p, ref.size);
    return FailedPrecondition(path + " does not hold the region's token");
  }
  return data;
}

}  // namespace eps

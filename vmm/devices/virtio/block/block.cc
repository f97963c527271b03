#include "vmm/devices/virtio/block/block.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "vmm/snapshot/bytes.h"

namespace cordon::vmm::virtio {
namespace {
constexpr uint32_t kTypeIn = 0, kTypeOut = 1, kTypeFlush = 4, kTypeGetId = 8;
constexpr uint8_t kStatusOk = 0, kStatusIoErr = 1, kStatusUnsupp = 2;
constexpr uint64_t kFRo = 1ull << 5, kFFlush = 1ull << 9;

bool pread_all(int fd, uint8_t* p, uint64_t len, uint64_t off) {
  while (len) {
    ssize_t r = ::pread(fd, p, len, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    len -= static_cast<uint64_t>(r);
    off += static_cast<uint64_t>(r);
  }
  return true;
}
bool pwrite_all(int fd, const uint8_t* p, uint64_t len, uint64_t off) {
  while (len) {
    ssize_t r = ::pwrite(fd, p, len, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    len -= static_cast<uint64_t>(r);
    off += static_cast<uint64_t>(r);
  }
  return true;
}
}  // namespace

Result<std::unique_ptr<Block>> Block::create(const std::string& base, const std::string& overlay,
                                             bool keep_overlay) {
  std::unique_ptr<Block> b(new Block());
  int fd = ::open(base.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail("open block base " + base + ": " + std::strerror(errno));
  b->base_ = kvm::Fd(fd);
  struct stat st {};
  if (::fstat(fd, &st) < 0) return fail("fstat " + base);
  b->size_ = static_cast<uint64_t>(st.st_size) & ~511ull;
  if (!overlay.empty()) {
    int flags = keep_overlay ? O_RDWR | O_CLOEXEC : O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC;
    int ofd = ::open(overlay.c_str(), flags, 0600);
    if (ofd < 0) return fail("open block overlay " + overlay + ": " + std::strerror(errno));
    b->overlay_ = kvm::Fd(ofd);
    struct stat ost {};
    if (keep_overlay && (::fstat(ofd, &ost) < 0 || static_cast<uint64_t>(ost.st_size) != b->size_))
      return fail("block overlay " + overlay + " does not have the base image's size");
    if (!keep_overlay && ::ftruncate(ofd, static_cast<off_t>(b->size_)) < 0)
      return fail("ftruncate " + overlay);
    b->dirty_.assign((b->size_ + kBlockBytes - 1) / kBlockBytes, false);
  }
  return b;
}

uint64_t Block::features() const {
  return kFFlush | kFIndirectDesc | (overlay_.valid() ? 0 : kFRo);
}

void Block::read_config(uint64_t offset, uint8_t* data, size_t len) {
  uint8_t cfg[8];
  uint64_t sectors = size_ / 512;
  std::memcpy(cfg, &sectors, 8);
  for (size_t i = 0; i < len; ++i) data[i] = offset + i < 8 ? cfg[offset + i] : 0;
}

Status Block::read_at(uint64_t off, uint8_t* dst, uint64_t len) {
  if (off > size_ || len > size_ - off) return fail("block read beyond capacity");
  while (len) {
    uint64_t blk = off / kBlockBytes;
    uint64_t n = std::min(len, (blk + 1) * kBlockBytes - off);
    bool in_overlay = overlay_.valid() && dirty_[blk];
    if (!pread_all(in_overlay ? overlay_.get() : base_.get(), dst, n, off))
      return fail("block read I/O error");
    dst += n;
    off += n;
    len -= n;
  }
  return {};
}

Status Block::write_at(uint64_t off, const uint8_t* src, uint64_t len) {
  if (!overlay_.valid()) return fail("block device is read-only");
  if (off > size_ || len > size_ - off) return fail("block write beyond capacity");
  std::vector<uint8_t> tmp(kBlockBytes);
  while (len) {
    uint64_t blk = off / kBlockBytes;
    uint64_t start = blk * kBlockBytes;
    uint64_t n = std::min(len, start + kBlockBytes - off);
    if (!dirty_[blk] && n < kBlockBytes) {  // copy-on-write of the rest of the block
      uint64_t bl = std::min(kBlockBytes, size_ - start);
      if (!pread_all(base_.get(), tmp.data(), bl, start) ||
          !pwrite_all(overlay_.get(), tmp.data(), bl, start))
        return fail("block copy-on-write I/O error");
    }
    if (!pwrite_all(overlay_.get(), src, n, off)) return fail("block write I/O error");
    dirty_[blk] = true;
    src += n;
    off += n;
    len -= n;
  }
  return {};
}

uint8_t Block::handle(const Chain& c, uint32_t* written) {
  struct {
    uint32_t type, reserved;
    uint64_t sector;
  } hdr{};
  *written = 0;
  if (c.read(*ctx_.mem, 0, &hdr, sizeof hdr) != sizeof hdr || c.writable_bytes < 1)
    return kStatusIoErr;
  uint64_t data_out = c.readable_bytes - sizeof hdr;  // payload for writes
  uint64_t data_in = c.writable_bytes - 1;            // room for reads, before the status byte
  if (hdr.sector > (~0ull >> 9)) return kStatusIoErr;
  uint64_t off = hdr.sector * 512;
  std::vector<uint8_t> buf;
  switch (hdr.type) {
    case kTypeIn: {
      if (data_in > kMaxRequestBytes || data_in % 512) return kStatusIoErr;
      buf.resize(data_in);
      if (!read_at(off, buf.data(), data_in)) return kStatusIoErr;
      c.write(*ctx_.mem, 0, buf.data(), data_in);
      *written = static_cast<uint32_t>(data_in);
      return kStatusOk;
    }
    case kTypeOut: {
      if (data_out > kMaxRequestBytes || data_out % 512) return kStatusIoErr;
      buf.resize(data_out);
      c.read(*ctx_.mem, sizeof hdr, buf.data(), data_out);
      return write_at(off, buf.data(), data_out) ? kStatusOk : kStatusIoErr;
    }
    case kTypeFlush:
      if (overlay_.valid() && ::fdatasync(overlay_.get()) < 0) return kStatusIoErr;
      return kStatusOk;
    case kTypeGetId: {
      const char id[20] = "cordon-vmm-disk";
      *written =
          static_cast<uint32_t>(c.write(*ctx_.mem, 0, id, std::min<uint64_t>(data_in, sizeof id)));
      return kStatusOk;
    }
    default:
      return kStatusUnsupp;
  }
}

void Block::notify(int queue) {
  if (queue != 0 || ctx_.mem == nullptr) return;
  serve_queue(ctx_, 0, [this](const Chain& c) -> uint32_t {
    uint32_t written = 0;
    uint8_t status = handle(c, &written);
    if (c.writable_bytes >= 1)
      c.write(*ctx_.mem, c.writable_bytes - 1, &status, 1);  // status is last
    return written + 1;
  });
}

std::string Block::save_state() const {
  snapshot::Writer w;
  w.u64(dirty_.size());
  for (bool b : dirty_) w.u8(b);
  return w.take();
}

Status Block::restore_state(const std::string& s) {
  snapshot::Reader r(s);
  uint64_t n = r.u64();
  if (!r.ok() || n != dirty_.size()) return fail("virtio-blk state: block count mismatch");
  for (uint64_t i = 0; i < n; ++i) dirty_[i] = r.u8() != 0;
  return r.ok() ? Status{} : fail("virtio-blk state truncated");
}

}  // namespace cordon::vmm::virtio

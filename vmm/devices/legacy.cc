#include "vmm/devices/legacy.h"

namespace cordon::vmm::devices {
namespace {
constexpr uint8_t kIerRda = 0x01, kIerThre = 0x02;
constexpr uint8_t kIirNone = 0x01, kIirThre = 0x02, kIirRda = 0x04, kIirFifo = 0xC0;
constexpr uint8_t kLcrDlab = 0x80;
constexpr uint8_t kMcrLoop = 0x10;
constexpr uint8_t kLsrDr = 0x01, kLsrThre = 0x20, kLsrTemt = 0x40;
}  // namespace

uint8_t Serial::iir_locked() const {
  if ((ier_ & kIerRda) && !input_.empty()) return kIirFifo | kIirRda;
  if ((ier_ & kIerThre) && thre_pending_) return kIirFifo | kIirThre;
  return kIirFifo | kIirNone;
}

void Serial::read(uint64_t offset, uint8_t* data, size_t len) {
  if (len == 0) return;
  std::lock_guard lock(mu_);
  uint8_t v = 0;
  switch (offset) {
    case 0:
      if (lcr_ & kLcrDlab) {
        v = dll_;
      } else if (!input_.empty()) {
        v = input_.front();
        input_.pop_front();
      }
      break;
    case 1:
      v = (lcr_ & kLcrDlab) ? dlm_ : ier_;
      break;
    case 2:
      v = iir_locked();
      if ((v & 0x0F) == kIirThre) thre_pending_ = false;  // reading IIR acknowledges THRE
      break;
    case 3:
      v = lcr_;
      break;
    case 4:
      v = mcr_;
      break;
    case 5:
      v = kLsrThre | kLsrTemt | (input_.empty() ? 0 : kLsrDr);
      break;
    case 6:
      if (mcr_ & kMcrLoop) {  // loopback: DTR->DSR, RTS->CTS, OUT1->RI, OUT2->DCD
        v = static_cast<uint8_t>(((mcr_ & 0x01) << 5) | ((mcr_ & 0x02) << 3) |
                                 ((mcr_ & 0x04) << 4) | ((mcr_ & 0x08) << 4));
      } else {
        v = 0xB0;  // DCD | DSR | CTS
      }
      break;
    case 7:
      v = scr_;
      break;
    default:
      break;
  }
  data[0] = v;
  for (size_t i = 1; i < len; ++i) data[i] = 0;
}

void Serial::write(uint64_t offset, const uint8_t* data, size_t len) {
  if (len == 0) return;
  bool raise = false;
  uint8_t v = data[0];
  {
    std::lock_guard lock(mu_);
    switch (offset) {
      case 0:
        if (lcr_ & kLcrDlab) {
          dll_ = v;
        } else if (mcr_ & kMcrLoop) {
          input_.push_back(v);
          raise = (ier_ & kIerRda) != 0;
        } else {
          if (sink_) sink_(reinterpret_cast<const char*>(&v), 1);
          thre_pending_ = true;  // the byte left at once: THR is empty again
          raise = (ier_ & kIerThre) != 0;
        }
        break;
      case 1:
        if (lcr_ & kLcrDlab) {
          dlm_ = v;
        } else {
          bool thre_enabled_now = !(ier_ & kIerThre) && (v & kIerThre);
          ier_ = v & 0x0F;
          if (thre_enabled_now) {  // enabling THRE with an empty THR raises it at once
            thre_pending_ = true;
            raise = true;
          }
        }
        break;
      case 3:
        lcr_ = v;
        break;
      case 4:
        mcr_ = v & 0x1F;
        break;
      case 7:
        scr_ = v;
        break;
      default:
        break;  // FCR, LSR, MSR writes are ignored
    }
  }
  if (raise && irq_) irq_();
}

void Serial::enqueue_input(const std::string& bytes) {
  bool raise;
  {
    std::lock_guard lock(mu_);
    input_.insert(input_.end(), bytes.begin(), bytes.end());
    raise = (ier_ & kIerRda) != 0;
  }
  if (raise && irq_) irq_();
}

Serial::State Serial::save() const {
  std::lock_guard lock(mu_);
  return State{ier_, lcr_, mcr_, scr_, dll_, dlm_, thre_pending_};
}

void Serial::restore(const State& s) {
  std::lock_guard lock(mu_);
  ier_ = s.ier;
  lcr_ = s.lcr;
  mcr_ = s.mcr;
  scr_ = s.scr;
  dll_ = s.dll;
  dlm_ = s.dlm;
  thre_pending_ = s.thre_pending;
}

void I8042::read(uint64_t offset, uint8_t* data, size_t len) {
  std::lock_guard lock(mu_);
  uint8_t v = 0;
  if (offset == 0) {  // 0x60 data
    v = output_;
    has_output_ = false;
  } else if (offset == 4) {  // 0x64 status: output full, system flag
    v = static_cast<uint8_t>((has_output_ ? 0x01 : 0) | 0x04);
  }
  for (size_t i = 0; i < len; ++i) data[i] = i == 0 ? v : 0;
}

void I8042::write(uint64_t offset, const uint8_t* data, size_t len) {
  if (len == 0) return;
  bool reset = false;
  {
    std::lock_guard lock(mu_);
    uint8_t v = data[0];
    if (offset == 4) {
      switch (v) {
        case 0xFE:
          reset = true;
          break;    // pulse the CPU reset line: the guest's reboot=k
        case 0x20:  // read command byte
          output_ = command_byte_;
          has_output_ = true;
          break;
        case 0x60:
          pending_command_ = v;
          break;    // next data byte is the command byte
        case 0xAA:  // self test
          output_ = 0x55;
          has_output_ = true;
          break;
        default:
          break;
      }
    } else if (offset == 0) {
      if (pending_command_ == 0x60) command_byte_ = v;
      pending_command_ = 0;
    }
  }
  if (reset && reset_) reset_();
}

}  // namespace cordon::vmm::devices

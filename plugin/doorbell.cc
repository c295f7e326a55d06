#include "doorbell.h"

#include <cstring>
#include <new>

namespace crystal::plugin {

namespace {
constexpr std::size_t kPage = 4096;
static_assert(sizeof(DoorbellPage) <= kPage);
}  // namespace

Doorbell::Doorbell(std::unique_ptr<ShmSegment> shm, bool sender)
    : shm_(std::move(shm)), page_(reinterpret_cast<DoorbellPage*>(shm_->data())) {
  out_ = sender ? &page_->frames : &page_->replies;
  in_ = sender ? &page_->replies : &page_->frames;
}

std::unique_ptr<Doorbell> Doorbell::create(std::string* why) {
  auto shm = ShmSegment::create(kPage, why);
  if (!shm) return nullptr;
  new (shm->data()) DoorbellPage;  // fresh pages are zero; this sets the magic
  return std::unique_ptr<Doorbell>(new Doorbell(std::move(shm), true));
}

std::unique_ptr<Doorbell> Doorbell::open(const std::string& name, std::uint64_t read,
                                         std::uint64_t written, std::string* why) {
  auto shm = ShmSegment::open(name, kPage, why);
  if (!shm) return nullptr;
  std::uint64_t magic = 0;
  std::memcpy(&magic, shm->data(), sizeof magic);
  if (magic != DoorbellPage::kMagic) {
    *why = "not a doorbell page";
    return nullptr;
  }
  std::unique_ptr<Doorbell> d(new Doorbell(std::move(shm), false));
  d->read_ = read;
  d->wrote(written);
  d->page_->attached.store(1, std::memory_order_release);
  return d;
}

}  // namespace crystal::plugin

// Storage lifetime: cached blocks go back to the allocator, external memory to its owner.
#include "dygrad/core/storage.h"

namespace dg {

Ref<Storage> Storage::allocate(size_t nbytes, Device device) {
  Ref<Storage> s(new Storage());
  s->category_ = current_memory_category();
  s->block_ = allocator_for(device).allocate(nbytes, s->category_);
  s->data_ = s->block_.ptr;
  s->nbytes_ = nbytes;
  s->device_ = device;
  return s;
}

Ref<Storage> Storage::wrap_external(void* data, size_t nbytes, void (*release)(void*), void* context) {
  Ref<Storage> s(new Storage());
  s->data_ = data;
  s->nbytes_ = nbytes;
  s->external_release_ = release;
  s->external_context_ = context;
  s->category_ = MemoryCategory::Other;
  return s;
}

void Storage::set_category(MemoryCategory c) {
  if (!is_external()) allocator_for(device_).retag(block_, nbytes_, category_, c);
  category_ = c;
}

void Storage::annotate(const char* description) const {
  if (!is_external() && block_.ptr) allocator_for(device_).annotate(block_, description);
}

Storage::~Storage() {
  if (external_release_) external_release_(external_context_);
  else allocator_for(device_).free(block_, nbytes_, category_);
}

}  // namespace dg

// Thread-local free lists for the small objects every op creates (TensorImpl, Storage): an op's host
// cost is dominated by these allocations otherwise (glibc's tcache holds only 7 objects per size, and the
// stream reclaims finished Tasks in batches). Objects may be freed on another thread than the one that
// made them; they then join that thread's list.
#pragma once
#include <cstddef>
#include <new>

namespace dg {

template <size_t Size>
class ObjectPool {
 public:
  static void* allocate() {
    List& list = local();
    if (list.head) {
      FreeNode* n = list.head;
      list.head = n->next;
      --list.count;
      return n;
    }
    return ::operator new(Size);
  }
  static void release(void* p) {
    List& list = local();
    if (list.count >= kMaxCached) {
      ::operator delete(p);
      return;
    }
    auto* n = static_cast<FreeNode*>(p);
    n->next = list.head;
    list.head = n;
    ++list.count;
  }

 private:
  static constexpr size_t kMaxCached = 4096;
  struct FreeNode { FreeNode* next; };
  struct List {
    FreeNode* head = nullptr;
    size_t count = 0;
    ~List() {
      while (head) {
        FreeNode* n = head;
        head = n->next;
        ::operator delete(n);
      }
    }
  };
  static List& local() {
    static thread_local List list;
    return list;
  }
};

// Adds pooled operator new/delete to a class: `DG_POOLED_ALLOCATION(TensorImpl)`.
#define DG_POOLED_ALLOCATION(Class)                                                          \
  static void* operator new(size_t size) {                                                   \
    return size == sizeof(Class) ? ::dg::ObjectPool<sizeof(Class)>::allocate() : ::operator new(size); \
  }                                                                                          \
  static void operator delete(void* p, size_t size) {                                        \
    if (size == sizeof(Class)) ::dg::ObjectPool<sizeof(Class)>::release(p);                  \
    else ::operator delete(p);                                                               \
  }

}  // namespace dg

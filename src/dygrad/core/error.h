// dygrad's exception: every user error starts with the op's name ("[matmul] ...") and maps to the Python
// exception a PyTorch user expects (TypeError, ValueError, IndexError, RuntimeError).
#pragma once
#include <cstdint>
#include <exception>
#include <sstream>
#include <span>
#include <string>

namespace dg {

// OutOfMemory: the allocator could not serve a request (a memory limit, or the system refused); Python's
// dg.OutOfMemoryError, a RuntimeError subclass like torch.OutOfMemoryError (docs/memory.md).
enum class ErrorKind : uint8_t { Runtime, Type, Value, Index, NotImplemented, OutOfMemory };

class Error : public std::exception {
 public:
  Error(ErrorKind kind, std::string message) : kind_(kind), message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }
  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }

 private:
  ErrorKind kind_;
  std::string message_;
};

std::string shape_str(std::span<const int64_t> shape);  // "(2, 3)", as torch.Size prints without the name

namespace detail {
inline void append(std::ostringstream& os, std::span<const int64_t> s) { os << shape_str(s); }
template <typename T>
void append(std::ostringstream& os, const T& v) { os << v; }
template <typename... A>
std::string concat(const A&... args) {
  std::ostringstream os;
  (append(os, args), ...);
  return os.str();
}
}  // namespace detail

// fail(ErrorKind::Value, "[op] ", "shapes ", a.shape(), " and ", b.shape(), ...): throws dg::Error.
template <typename... A>
[[noreturn]] void fail(ErrorKind kind, const A&... parts) {
  throw Error(kind, detail::concat(parts...));
}

}  // namespace dg

// DG_CHECK(cond, Kind, parts...): throws dg::Error(ErrorKind::Kind, concat(parts...)) when cond is false.
#define DG_CHECK(cond, kind, ...)                                  \
  do {                                                             \
    if (__builtin_expect(!(cond), 0)) ::dg::fail(::dg::ErrorKind::kind, __VA_ARGS__); \
  } while (0)

#include "errors.hpp"

#include "tilefmha/error.hpp"

namespace tilefmha::python {

namespace {

PyObject* exception_type(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::invalid_problem:
    case ErrorKind::invalid_argument: return PyExc_ValueError;
    case ErrorKind::not_supported: return PyExc_NotImplementedError;
    case ErrorKind::io:
    case ErrorKind::no_kernel:
    case ErrorKind::compile:
    case ErrorKind::runtime: return PyExc_RuntimeError;
  }
  return PyExc_RuntimeError;
}

}  // namespace

void register_error_translation() {
  pybind11::register_exception_translator([](std::exception_ptr pending) {
    if (!pending) return;
    try {
      std::rethrow_exception(pending);
    } catch (const Error& error) {
      PyErr_SetString(exception_type(error.kind()), error.what());
    }
  });
}

}  // namespace tilefmha::python

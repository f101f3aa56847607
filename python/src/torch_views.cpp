#include "torch_views.hpp"

#include <string>
#include <utility>
#include <vector>

#include "tilefmha/error.hpp"

namespace tilefmha::python {
namespace py = pybind11;

namespace {

// Strong references, deliberately never released: the registry lives as long as the process,
// and releasing Python objects from a static destructor after the interpreter finalised would
// crash.
struct TorchRegistry {
  PyObject* tensor_type = nullptr;
  std::vector<std::pair<PyObject*, DType>> dtypes;
  // Interned attribute names, looked up by pointer on every call.
  PyObject* data_ptr = nullptr;
  PyObject* shape = nullptr;
  PyObject* stride = nullptr;
  PyObject* dtype = nullptr;
  PyObject* get_device = nullptr;
};

TorchRegistry& registry() {
  static TorchRegistry* instance = new TorchRegistry();
  return *instance;
}

py::object checked(PyObject* result) {
  if (result == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(result);
}

PyObject* interned(const char* name) {
  PyObject* text = PyUnicode_InternFromString(name);
  if (text == nullptr) throw py::error_already_set();
  return text;
}

int64_t as_int64(PyObject* value) {
  const long long n = PyLong_AsLongLong(value);
  if (n == -1 && PyErr_Occurred()) throw py::error_already_set();
  return n;
}

}  // namespace

void register_torch(const py::handle& tensor_type, const py::dict& dtypes) {
  TorchRegistry& r = registry();
  if (r.data_ptr == nullptr) {
    r.data_ptr = interned("data_ptr");
    r.shape = interned("shape");
    r.stride = interned("stride");
    r.dtype = interned("dtype");
    r.get_device = interned("get_device");
  }
  std::vector<std::pair<PyObject*, DType>> table;
  for (const auto& [dtype, name] : dtypes) {
    table.emplace_back(dtype.ptr(), parse_enum<DType>(py::cast<std::string>(name)));
    Py_INCREF(dtype.ptr());
  }
  Py_INCREF(tensor_type.ptr());
  r.tensor_type = tensor_type.ptr();
  r.dtypes = std::move(table);
}

std::optional<TensorView> torch_view(const py::handle& tensor, int rank, int device) {
  const TorchRegistry& r = registry();
  if (r.tensor_type == nullptr ||
      Py_TYPE(tensor.ptr()) != reinterpret_cast<PyTypeObject*>(r.tensor_type))
    return std::nullopt;
  TensorView view;
  const py::object dtype = checked(PyObject_GetAttr(tensor.ptr(), r.dtype));
  bool known = false;
  for (const auto& [object, engine_dtype] : r.dtypes)
    if (object == dtype.ptr()) {
      view.dtype = engine_dtype;
      known = true;
    }
  if (!known) return std::nullopt;
  if (as_int64(checked(PyObject_CallMethodNoArgs(tensor.ptr(), r.get_device)).ptr()) != device)
    return std::nullopt;
  // torch.Size is a tuple, and so is what stride() returns.
  const py::object shape = checked(PyObject_GetAttr(tensor.ptr(), r.shape));
  if (!PyTuple_Check(shape.ptr()) || PyTuple_GET_SIZE(shape.ptr()) != rank || rank > kMaxRank)
    return std::nullopt;
  const py::object strides = checked(PyObject_CallMethodNoArgs(tensor.ptr(), r.stride));
  if (!PyTuple_Check(strides.ptr()) || PyTuple_GET_SIZE(strides.ptr()) != rank) return std::nullopt;
  view.space = MemorySpace::device;
  view.rank = rank;
  for (int d = 0; d < rank; ++d) {
    view.shape[d] = as_int64(PyTuple_GET_ITEM(shape.ptr(), d));
    view.stride[d] = as_int64(PyTuple_GET_ITEM(strides.ptr(), d));
  }
  const py::object data = checked(PyObject_CallMethodNoArgs(tensor.ptr(), r.data_ptr));
  view.data = PyLong_AsVoidPtr(data.ptr());
  if (view.data == nullptr && PyErr_Occurred()) throw py::error_already_set();
  return view;
}

}  // namespace tilefmha::python

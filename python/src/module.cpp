// The `tilefmha._core` extension: the engine's problem handle, the CPU reference and the GPU
// dispatcher. The public API (argument checking, output allocation, backends) is the pure-Python
// layer in python/tilefmha; this module is its private back end.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "context_parallel.hpp"
#include "environment.hpp"
#include "errors.hpp"
#include "gpu_session.hpp"
#include "jit/cuda_driver.hpp"
#include "problem_handle.hpp"
#include "torch_views.hpp"
#include "warmup.hpp"

namespace py = pybind11;
using tilefmha::python::GpuSession;
using tilefmha::python::ProblemHandle;

PYBIND11_MODULE(_core, m) {
  m.doc() = "tilefmha engine bindings (private; use the tilefmha package)";
  tilefmha::python::register_error_translation();

  py::class_<ProblemHandle>(m, "Problem")
      .def(py::init<const std::string&>(), py::arg("family"))
      .def("set_dtype", &ProblemHandle::set_dtype, py::arg("dtype"))
      .def("set_shape", &ProblemHandle::set_shape, py::arg("batch"), py::arg("nhead_q"),
           py::arg("nhead_k"), py::arg("seqlen_q"), py::arg("seqlen_k"), py::arg("hdim_q"),
           py::arg("hdim_v"))
      .def("set_group", &ProblemHandle::set_group, py::arg("seqstart_q"), py::arg("seqstart_k"))
      .def("set_group_on_device", &ProblemHandle::set_group_on_device, py::arg("seqstart_q"),
           py::arg("seqstart_k"), py::arg("batch"), py::arg("max_seqlen_q"),
           py::arg("max_seqlen_k"))
      .def("set_block_table_on_device", &ProblemHandle::set_block_table_on_device,
           py::arg("layout"), py::arg("page_size"), py::arg("num_pages"), py::arg("block_table"),
           py::arg("max_pages_per_seq"))
      .def("set_page_list_on_device", &ProblemHandle::set_page_list_on_device, py::arg("layout"),
           py::arg("page_size"), py::arg("num_pages"), py::arg("page_indptr"),
           py::arg("page_indices"))
      .def("set_checked_indices", &ProblemHandle::set_checked_indices, py::arg("checked"))
      .def("set_key_lengths_on_device", &ProblemHandle::set_key_lengths_on_device,
           py::arg("seqlen_k_per_batch"), py::arg("max_seqlen_k"))
      .def("set_key_lengths", &ProblemHandle::set_key_lengths, py::arg("seqlen_k_per_batch"))
      .def("set_features", &ProblemHandle::set_features, py::arg("features"))
      .def("set_block_table", &ProblemHandle::set_block_table, py::arg("layout"),
           py::arg("page_size"), py::arg("num_pages"), py::arg("block_table"),
           py::arg("max_pages_per_seq"))
      .def("set_page_list", &ProblemHandle::set_page_list, py::arg("layout"), py::arg("page_size"),
           py::arg("num_pages"), py::arg("page_indptr"), py::arg("page_indices"))
      .def("set_append", &ProblemHandle::set_append, py::arg("seqlen_knew"), py::arg("rope"),
           py::arg("rotary_dim"), py::arg("rotate_q"))
      .def("set_rope_base", &ProblemHandle::set_rope_base, py::arg("theta"),
           py::arg("position_offsets"))
      .def("set_rope_offsets_on_device", &ProblemHandle::set_rope_offsets_on_device,
           py::arg("position_offsets"))
      .def("set_deterministic", &ProblemHandle::set_deterministic, py::arg("deterministic"))
      .def("set_fp8", &ProblemHandle::set_fp8, py::arg("kind"), py::arg("q_descale"),
           py::arg("k_descale"), py::arg("v_descale"))
      .def("set_out_dtype", &ProblemHandle::set_out_dtype, py::arg("dtype"))
      .def("attach_host", &ProblemHandle::attach_host, py::arg("field"), py::arg("array"),
           py::arg("writable") = false, py::arg("as_dtype") = "")
      .def("attach_device", &ProblemHandle::attach_device, py::arg("field"), py::arg("capsule"),
           py::arg("writable") = false, py::arg("as_dtype") = "")
      .def("attach_torch", &ProblemHandle::attach_torch, py::arg("field"), py::arg("data"),
           py::arg("dtype"), py::arg("shape"), py::arg("strides"), py::arg("device"),
           py::arg("owner"), py::arg("as_dtype") = "")
      .def_property_readonly("device", &ProblemHandle::device)
      .def("describe", &ProblemHandle::describe)
      .def("run_reference", &ProblemHandle::run_reference);

  py::class_<GpuSession>(m, "GpuSession")
      .def(py::init<int>(), py::arg("device"))
      .def_property_readonly("device", &GpuSession::device_ordinal)
      .def_property_readonly("device_name", &GpuSession::device_name)
      .def("run", &GpuSession::run, py::arg("problem"), py::arg("stream"))
      .def("plan", &GpuSession::plan, py::arg("problem"))
      .def("forward", &GpuSession::forward, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("o"),
           py::arg("lse"), py::arg("features"), py::arg("seqstarts"), py::arg("stream"));

  m.def("register_torch", &tilefmha::python::register_torch, py::arg("tensor_type"),
        py::arg("dtypes"),
        "Registers torch.Tensor and {dtype object: engine dtype name} for GpuSession.forward.");

  m.def("gpu_unavailable_reason", &tilefmha::jit::gpu_unavailable_reason,
        "Empty when a CUDA driver and a GPU are usable, else why not.");

  // The environment report of `python -m tilefmha` (tilefmha/_environment.py).
  m.def("gpu_devices", &tilefmha::python::gpu_devices,
        "One dict per GPU: ordinal, name, compute_capability, sm_count, arch, nvrtc_target.");
  m.def("driver_info", &tilefmha::python::driver_info,
        "The CUDA driver's version and library; RuntimeError when none loads.");
  m.def("nvrtc_info", &tilefmha::python::nvrtc_info,
        "NVRTC's version and library; RuntimeError when it does not load.");
  m.def("default_cache_directory", &tilefmha::python::default_cache_directory,
        "The kernel cache directory the engine uses when given none.");

  m.def("gpu_families", &tilefmha::python::gpu_families,
        "The families the engine runs on the GPU, which warmup compiles by default.");
  m.def("warmup", &tilefmha::python::warmup, py::arg("config"), py::arg("arch"), py::arg("profile"),
        py::arg("filters"), py::arg("cache_dir"), py::arg("workers"), py::arg("progress"),
        py::arg("launch_forms"),
        "Compiles a kernel set into the disk cache (tilefmha.warmup); returns its counts.");
  tilefmha::python::register_context_parallel(m);
}

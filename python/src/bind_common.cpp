// Errors, configuration and logging for Python.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "common/config.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/shm_reclaim.hpp"

namespace gpustripe::py {
namespace {

void bind_common(nb::module_& m) {
  m.attr("VERSION") = nb::make_tuple(GPUSTRIPE_VERSION_MAJOR, GPUSTRIPE_VERSION_MINOR, GPUSTRIPE_VERSION_PATCH);
  // The source's commit when the build was configured (python/CMakeLists.txt): what results
  // record where the package runs outside a checkout (results.provenance).
  m.attr("BUILD_COMMIT") = GPUSTRIPE_BUILD_COMMIT;

  // gpustripe.Error carries .status (the C status name) and the message.
  nb::exception<Error> exc(m, "Error", PyExc_RuntimeError);
  nb::register_exception_translator(
      [](const std::exception_ptr& p, void* payload) {
        try {
          std::rethrow_exception(p);
        } catch (const Error& e) {
          PyObject* type = static_cast<PyObject*>(payload);
          nb::object err = nb::borrow(type)(nb::str(e.what()));
          err.attr("status") = nb::str(status_name(e.status()));
          PyErr_SetObject(type, err.ptr());
        }
      },
      exc.ptr());

  m.def("status_string", [](int s) { return std::string(status_name(static_cast<Status>(s))); });

  m.def(
      "settings",
      []() {
        nb::list out;
        for (const SettingInfo& s : all_settings()) {
          nb::dict d;
          d["name"] = s.name;
          d["type"] = setting_type_name(s.type);
          d["default"] = s.default_value;
          d["value"] = s.current_value();
          d["set"] = s.is_set();
          d["description"] = s.description;
          d["choices"] = s.choices;
          out.append(d);
        }
        return out;
      },
      "Every GPUSTRIPE_* variable: name, type, default, current value, description.");
  m.def("parse_size", [](const std::string& t) { return parse_size(t, "size"); });
  m.def("format_size", &format_size);
  m.def("log_reconfigure", &log_reconfigure, "Re-read GPUSTRIPE_LOG_* after changing os.environ.");

  auto segments = [](const std::vector<LeftSegment>& v) {
    nb::list out;
    for (const LeftSegment& s : v) {
      nb::dict d;
      d["name"] = s.name;
      d["bytes"] = s.bytes;
      d["pid"] = s.pid;
      out.append(d);
    }
    return out;
  };
  m.def(
      "dead_segments", [segments](const std::string& dir) { return segments(dead_segments(dir)); },
      nb::arg("dir") = kShmDir,
      "gpustripe's shared-memory segments (files in `dir`) of this user whose creating process died: name, bytes, "
      "pid.");
  m.def(
      "reclaim_dead_segments", [segments](const std::string& dir) { return segments(reclaim_dead_segments(dir)); },
      nb::arg("dir") = kShmDir, "Removes dead_segments(dir); returns those removed.");
}

BindingRegistrar reg(0, bind_common);

}  // namespace
}  // namespace gpustripe::py

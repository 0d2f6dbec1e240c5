// CPython extension used by test_python_frames.py: calls lockstep's capture/resolve the way the
// recorder's NCCL hook does (GIL released, or held), from Python threads and from a pure C
// thread, and returns what it saw.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <time.h>

#include <vector>

#include "python_frames.h"
#include "python_layouts.h"

namespace {

using lockstep::PyFrameInfo;
using lockstep::PyFrameRaw;

PyObject* frames_to_list(const std::vector<PyFrameInfo>& infos) {
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(infos.size()));
  if (!list) return nullptr;
  for (size_t i = 0; i < infos.size(); ++i) {
    PyObject* t = Py_BuildValue("(s#s#i)", infos[i].file.data(),
                                static_cast<Py_ssize_t>(infos[i].file.size()),
                                infos[i].function.data(),
                                static_cast<Py_ssize_t>(infos[i].function.size()), infos[i].line);
    if (!t) {
      Py_DECREF(list);
      return nullptr;
    }
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), t);
  }
  return list;
}

// capture(max=64, release_gil=True) -> [(file, qualname, line), ...], innermost first.
PyObject* capture(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* kw[] = {"max", "release_gil", nullptr};
  Py_ssize_t max = 64;
  int release_gil = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|np", const_cast<char**>(kw), &max,
                                   &release_gil))
    return nullptr;
  if (max < 0 || max > 4096) {
    PyErr_SetString(PyExc_ValueError, "max must be in [0, 4096]");
    return nullptr;
  }
  std::vector<PyFrameRaw> raw(static_cast<size_t>(max) + 1);
  std::vector<PyFrameInfo> infos;
  size_t n = 0;
  auto work = [&] {
    n = lockstep::capture_python_frames(raw.data(), static_cast<size_t>(max));
    for (size_t i = 0; i < n; ++i) infos.push_back(lockstep::resolve_python_frame(raw[i]));
  };
  if (release_gil) {
    Py_BEGIN_ALLOW_THREADS
    // The hook's situation: no GIL, the thread state is detached but still ours.
    if (PyGILState_Check()) n = SIZE_MAX;
    else work();
    Py_END_ALLOW_THREADS
    if (n == SIZE_MAX) {
      PyErr_SetString(PyExc_AssertionError, "GIL still held after Py_BEGIN_ALLOW_THREADS");
      return nullptr;
    }
  } else {
    work();
  }
  return frames_to_list(infos);
}

// capture_cached(max=64) -> (stack_id, [(file, qualname, line), ...]): the thread stack
// cache's capture (capture_python_frames_cached), GIL released as in the hook.
PyObject* capture_cached(PyObject*, PyObject* args) {
  Py_ssize_t max = 64;
  if (!PyArg_ParseTuple(args, "|n", &max)) return nullptr;
  if (max < 0 || max > 4096) {
    PyErr_SetString(PyExc_ValueError, "max must be in [0, 4096]");
    return nullptr;
  }
  std::vector<PyFrameRaw> raw(static_cast<size_t>(max) + 1);
  std::vector<PyFrameInfo> infos;
  uint64_t id = 0;
  Py_BEGIN_ALLOW_THREADS
  const size_t n = lockstep::capture_python_frames_cached(raw.data(), static_cast<size_t>(max), &id);
  for (size_t i = 0; i < n; ++i) infos.push_back(lockstep::resolve_python_frame(raw[i]));
  Py_END_ALLOW_THREADS
  PyObject* frames = frames_to_list(infos);
  if (!frames) return nullptr;
  return Py_BuildValue("(KN)", static_cast<unsigned long long>(id), frames);
}

// capture_hash() -> python_frames_hash of the caller's stack, captured without the GIL.
PyObject* capture_hash(PyObject*, PyObject*) {
  PyFrameRaw raw[128];
  uint64_t h = 0;
  Py_BEGIN_ALLOW_THREADS
  h = lockstep::python_frames_hash(raw, lockstep::capture_python_frames(raw, 128));
  Py_END_ALLOW_THREADS
  return PyLong_FromUnsignedLongLong(h);
}

void* c_thread_main(void* arg) {
  PyFrameRaw raw[64];
  *static_cast<size_t*>(arg) = lockstep::capture_python_frames(raw, 64);
  return nullptr;
}

// capture_in_c_thread() -> number of frames a pthread that never ran Python captures.
PyObject* capture_in_c_thread(PyObject*, PyObject*) {
  size_t n = SIZE_MAX;
  int rc = 0;
  Py_BEGIN_ALLOW_THREADS
  pthread_t t;
  rc = pthread_create(&t, nullptr, c_thread_main, &n);
  if (rc == 0) pthread_join(t, nullptr);
  Py_END_ALLOW_THREADS
  if (rc != 0) return PyErr_Format(PyExc_OSError, "pthread_create failed: %d", rc);
  return PyLong_FromSize_t(n);
}

// linetable_line(co_linetable: bytes, co_firstlineno: int, addr: int) -> int (-1: no line)
PyObject* linetable_line(PyObject*, PyObject* args) {
  Py_buffer buf;
  int first = 0, addr = 0;
  if (!PyArg_ParseTuple(args, "y*ii", &buf, &first, &addr)) return nullptr;
  const auto* table = static_cast<const uint8_t*>(buf.buf);
  const size_t len = static_cast<size_t>(buf.len);
#if PY_VERSION_HEX < 0x030B0000
  const int line = lockstep::pyframes_detail::python_linetable_line_310(table, len, first, addr);
#else
  const int line = lockstep::pyframes_detail::python_linetable_line(table, len, first, addr);
#endif
  PyBuffer_Release(&buf);
  return PyLong_FromLong(line);
}

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// bench(iterations, max=64, resolve=False) -> (ns per capture, frames per capture), GIL
// released, for bench/python_frames_bench.py. With resolve, every frame is also resolved.
PyObject* bench(PyObject*, PyObject* args) {
  Py_ssize_t iterations = 0, max = 64;
  int resolve = 0;
  if (!PyArg_ParseTuple(args, "n|np", &iterations, &max, &resolve)) return nullptr;
  if (iterations <= 0 || max <= 0 || max > 4096) {
    PyErr_SetString(PyExc_ValueError, "iterations > 0 and 0 < max <= 4096 required");
    return nullptr;
  }
  std::vector<PyFrameRaw> raw(static_cast<size_t>(max));
  size_t n = 0;
  uint64_t sink = 0;
  int64_t elapsed = 0;
  Py_BEGIN_ALLOW_THREADS
  const int64_t t0 = now_ns();
  for (Py_ssize_t i = 0; i < iterations; ++i) {
    n = lockstep::capture_python_frames(raw.data(), raw.size());
    sink += lockstep::python_frames_hash(raw.data(), n);
    if (resolve)
      for (size_t k = 0; k < n; ++k) sink += lockstep::resolve_python_frame(raw[k]).line;
  }
  elapsed = now_ns() - t0;
  Py_END_ALLOW_THREADS
  if (sink == 42) PyErr_WarnEx(PyExc_RuntimeWarning, "unlikely", 1);  // keep the loop
  return Py_BuildValue("(dn)", static_cast<double>(elapsed) / static_cast<double>(iterations),
                       static_cast<Py_ssize_t>(n));
}

// bench_cached(iterations, max=64) -> (ns per capture, frames): as bench, through the thread
// stack cache (capture_python_frames_cached), the hook's default.
PyObject* bench_cached(PyObject*, PyObject* args) {
  Py_ssize_t iterations = 0, max = 64;
  if (!PyArg_ParseTuple(args, "n|n", &iterations, &max)) return nullptr;
  if (iterations <= 0 || max <= 0 || max > 4096) {
    PyErr_SetString(PyExc_ValueError, "iterations > 0 and 0 < max <= 4096 required");
    return nullptr;
  }
  std::vector<PyFrameRaw> raw(static_cast<size_t>(max));
  size_t n = 0;
  uint64_t sink = 0, id = 0;
  int64_t elapsed = 0;
  Py_BEGIN_ALLOW_THREADS
  const int64_t t0 = now_ns();
  for (Py_ssize_t i = 0; i < iterations; ++i) {
    n = lockstep::capture_python_frames_cached(raw.data(), raw.size(), &id);
    sink += id;
  }
  elapsed = now_ns() - t0;
  Py_END_ALLOW_THREADS
  if (sink == 42) PyErr_WarnEx(PyExc_RuntimeWarning, "unlikely", 1);  // keep the loop
  return Py_BuildValue("(dn)", static_cast<double>(elapsed) / static_cast<double>(iterations),
                       static_cast<Py_ssize_t>(n));
}

PyObject* available(PyObject*, PyObject*) {
  return PyBool_FromLong(lockstep::python_frames_available());
}

PyObject* status(PyObject*, PyObject*) {
  return PyUnicode_FromString(lockstep::python_frames_status());
}

PyObject* guard_status(PyObject*, PyObject*) {
  return PyUnicode_FromString(lockstep::python_frames_guard_status());
}

// allow_code_watcher(bool): while False, captures do not ask for the code watcher.
PyObject* allow_code_watcher(PyObject*, PyObject* arg) {
  const int allow = PyObject_IsTrue(arg);
  if (allow < 0) return nullptr;
  lockstep::pyframes_detail::python_frames_allow_code_watcher(allow != 0);
  Py_RETURN_NONE;
}

// exact_guard(bool): bench knob, every lookup takes the exact guard.
PyObject* exact_guard(PyObject*, PyObject* arg) {
  const int on = PyObject_IsTrue(arg);
  if (on < 0) return nullptr;
  lockstep::python_frames_bench_exact_guard(on != 0);
  Py_RETURN_NONE;
}

#if PY_VERSION_HEX >= 0x030C0000
int noop_watcher(PyCodeEvent, PyCodeObject*) { return 0; }

// free_code_watcher_slots() -> how many code watchers this interpreter could still register.
PyObject* free_code_watcher_slots(PyObject*, PyObject*) {
  std::vector<int> ids;
  for (int id; ids.size() < 64 && (id = PyCode_AddWatcher(noop_watcher)) >= 0;) ids.push_back(id);
  PyErr_Clear();
  for (int id : ids) PyCode_ClearWatcher(id);
  return PyLong_FromSize_t(ids.size());
}

long g_creates = 0, g_destroys = 0;
int counting_watcher(PyCodeEvent event, PyCodeObject*) {
  if (event == PY_CODE_EVENT_CREATE) ++g_creates;
  if (event == PY_CODE_EVENT_DESTROY) ++g_destroys;
  return 0;
}

// add_counting_watcher() -> id: a program's own code watcher, counting events.
PyObject* add_counting_watcher(PyObject*, PyObject*) {
  const int id = PyCode_AddWatcher(counting_watcher);
  return id < 0 ? nullptr : PyLong_FromLong(id);
}

// counting_watcher_events() -> (creates, destroys) seen by the counting watcher.
PyObject* counting_watcher_events(PyObject*, PyObject*) {
  return Py_BuildValue("(ll)", g_creates, g_destroys);
}
#endif

PyMethodDef kMethods[] = {
    {"guard_status", guard_status, METH_NOARGS, nullptr},
    {"allow_code_watcher", allow_code_watcher, METH_O, nullptr},
    {"exact_guard", exact_guard, METH_O, nullptr},
#if PY_VERSION_HEX >= 0x030C0000
    {"free_code_watcher_slots", free_code_watcher_slots, METH_NOARGS, nullptr},
    {"add_counting_watcher", add_counting_watcher, METH_NOARGS, nullptr},
    {"counting_watcher_events", counting_watcher_events, METH_NOARGS, nullptr},
#endif
    {"capture", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(capture)),
     METH_VARARGS | METH_KEYWORDS, "capture(max=64, release_gil=True)"},
    {"capture_cached", capture_cached, METH_VARARGS, nullptr},
    {"bench_cached", bench_cached, METH_VARARGS, nullptr},
    {"capture_hash", capture_hash, METH_NOARGS, nullptr},
    {"capture_in_c_thread", capture_in_c_thread, METH_NOARGS, nullptr},
    {"linetable_line", linetable_line, METH_VARARGS, nullptr},
    {"bench", bench, METH_VARARGS, "bench(iterations, max=64, resolve=False)"},
    {"available", available, METH_NOARGS, nullptr},
    {"status", status, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "lockstep_pyframes_test", nullptr, -1, kMethods,
                       nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit_lockstep_pyframes_test() { return PyModule_Create(&kModule); }

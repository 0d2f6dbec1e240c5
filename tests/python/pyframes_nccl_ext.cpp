// CPython extension linked against libnccl.so.2 (the CPU fixture in CI), calling NCCL with the
// GIL released the way torch's c10d bindings do. Driven by e2e_nccl_frames.py under
// LD_PRELOAD=liblockstep.so.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <nccl.h>

namespace {

ncclComm_t g_comm = nullptr;
float g_buf[16];

// all_reduce() -> ncclResult_t of a 1-rank all-reduce (the communicator is made on first use).
PyObject* all_reduce(PyObject*, PyObject*) {
  ncclResult_t rc = ncclSuccess;
  Py_BEGIN_ALLOW_THREADS
  if (!g_comm) {
    ncclUniqueId id;
    rc = ncclGetUniqueId(&id);
    if (rc == ncclSuccess) rc = ncclCommInitRank(&g_comm, 1, id, 0);
  }
  if (rc == ncclSuccess) rc = ncclAllReduce(g_buf, g_buf, 16, ncclFloat32, ncclSum, g_comm, nullptr);
  Py_END_ALLOW_THREADS
  return PyLong_FromLong(rc);
}

PyObject* destroy(PyObject*, PyObject*) {
  ncclResult_t rc = ncclSuccess;
  Py_BEGIN_ALLOW_THREADS
  if (g_comm) rc = ncclCommDestroy(g_comm);
  g_comm = nullptr;
  Py_END_ALLOW_THREADS
  return PyLong_FromLong(rc);
}

PyMethodDef kMethods[] = {{"all_reduce", all_reduce, METH_NOARGS, nullptr},
                          {"destroy", destroy, METH_NOARGS, nullptr},
                          {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "lockstep_nccl_ext", nullptr, -1, kMethods,
                       nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit_lockstep_nccl_ext() { return PyModule_Create(&kModule); }

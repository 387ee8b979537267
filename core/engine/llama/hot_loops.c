/* The Python module around the host's C loops (fast_rows.c, lone_run.c): it holds no Python
   functions. Being a module only lets Python find the library, which is called through
   ctypes (fast_rows.py, lone_run.py). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_hot_loops", .m_size = -1};

PyMODINIT_FUNC PyInit__hot_loops(void) { return PyModule_Create(&module); }

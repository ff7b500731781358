_npu_lazy_main = dict(globals())  # __main__ as `python -c` leaves it, before this program adds a name
# The program of a run_python zygote. It is never imported: python_c/pool.py passes its text to
# `python -c`, so the zygote starts exactly as the `python -c CODE` it stands in for
# (same interpreter, flags, sys.path, stdio set-up) and holds no pytest.
#
# Order matters. The preload is imported first, with nothing of this plugin loaded, so
# every module it pulls in is one `python -c "import <preload>"` would have too; the
# names of sys.modules at that point are what a child keeps. Only then is the plugin's
# package loaded, from its directory, under a private name, and its modules are dropped
# from sys.modules again in every child. Comments, not a docstring: a docstring would
# set __doc__ in __main__.
#
# The last statement runs the code of a call in each forked child: zygote.serve
# returns only there, with the compiled code and the fresh __main__ namespace, so the
# code runs from this module's top level, one frame below nothing but this one. How
# the code ended (None, or the exception) then goes to zygote.finish, which ends the
# child as `python -c` ends, without tearing down the interpreter it shares with the
# zygote page by page.
import os  # noqa: E402 - after the first line, which must see __main__ untouched
import sys  # noqa: E402

_npu_lazy_state = {"startup": list(sys.modules), "environ": dict(os.environ)}
_npu_lazy_package, _npu_lazy_control, _npu_lazy_preload = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
sys.argv[:] = ["-c"]


class _NpuLazyReads(os._Environ):
    # os.environ's class while the preload imports: notes each variable looked up
    names = set()  # type: set[str]

    def __getitem__(self, key):
        _NpuLazyReads.names.add(key)
        return os._Environ.__getitem__(self, key)

    def __contains__(self, key):
        _NpuLazyReads.names.add(key)
        return os._Environ.__contains__(self, key)

    def __iter__(self):
        _NpuLazyReads.names.add("*")
        return os._Environ.__iter__(self)


_npu_lazy_error = None
os.environ.__class__ = _NpuLazyReads
try:
    for _npu_lazy_name in _npu_lazy_preload:
        __import__(_npu_lazy_name)
except BaseException:
    import traceback

    _npu_lazy_error = traceback.format_exc()
finally:
    os.environ.__class__ = os._Environ
_npu_lazy_state.update(modules=list(sys.modules), finders=list(sys.path_importer_cache), path=list(sys.path))
sys.stdout.flush()
sys.stderr.flush()

import importlib.util  # noqa: E402

_npu_lazy_spec = importlib.util.spec_from_file_location(
    "_npu_lazy_zygote", os.path.join(_npu_lazy_package, "__init__.py"),
    submodule_search_locations=[_npu_lazy_package])
assert _npu_lazy_spec is not None and _npu_lazy_spec.loader is not None  # a file location always has both
sys.modules["_npu_lazy_zygote"] = importlib.util.module_from_spec(_npu_lazy_spec)
_npu_lazy_spec.loader.exec_module(sys.modules["_npu_lazy_zygote"])
# the package, loaded just above under this private name: mypy knows it as pytest_npu_lazy
from _npu_lazy_zygote.python_c.zygote import finish as _npu_lazy_finish, serve as _npu_lazy_serve  # type: ignore[import-not-found]  # noqa: E402

try:
    exec(*_npu_lazy_serve(_npu_lazy_control, _npu_lazy_main, _npu_lazy_state, sorted(_NpuLazyReads.names),
                          _npu_lazy_error))
except BaseException as _npu_lazy_raised:
    # a type comment, not an annotation: one would add __annotations__ to __main__
    _npu_lazy_outcome = _npu_lazy_raised  # type: BaseException | None
    # finished outside the handler, as CPython prints it: no __context__
else:
    _npu_lazy_outcome = None
_npu_lazy_finish(_npu_lazy_outcome)

"""torch_npu's own CI rule for which test files a pull request runs, re-implemented as a pure function.

Source: repository Ascend/pytorch (GitHub mirror of the Gitee project), folder ``ci/access_control/``
(``constants.py``, ``strategy/{test_file,copy_opt,op,directory_mapping,core,base}.py``,
``test_manager.py``) and ``ci/access_control_test.py``, read at master commit
9e73e708ab9350d203475609f36f8a43f6a0c2ab (2026-08-21). The strategies and constants are the same on the
v2.5.1 ... v2.12.0 branches (a docstring typo aside); v2.1.0 .. v2.3.1 had a ``dynamo`` row (``legacy_dynamo``).

The rule keys on the *names* of the changed files (their directory, module and stem), never on what
code a test actually runs: that is why it is kept here, as the baseline a run-time map is compared with.

The original walks the disk (``find test -name PATTERN``, ``Path.glob``/``rglob``, ``Path.exists``);
here ``test_files`` stands in for the disk, so the rule can be asked about any tree without a checkout.
Parts that do not depend on file names are left out: ``common_files.txt`` (a CI-provided exclusion
list), ``--between_version`` (parses test sources), ``--npu_core`` and the per-node rank split.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from pathlib import PurePosixPath

SOURCE = ("Ascend/pytorch", "ci/access_control/", "9e73e708ab9350d203475609f36f8a43f6a0c2ab")

# constants.py, verbatim
SLOW_TEST_BLOCKLIST = ['test_ops', 'test_modules', 'test_binary_ufuncs', 'test_ops_fwd_gradients',
                       'test_ops_gradients', 'test_reductions', 'test_unary_ufuncs', 'test_ops_jit',
                       'test_jit_fuser_te', "onnx/test_op_consistency", 'onnx/test_pytorch_onnx_onnxruntime']
NOT_RUN_DIRECTLY = {"jit": "test_jit.py"}
INCLUDE_FILES = ['jit/test_complexity.py']

# strategy/directory_mapping.py, verbatim (master and v2.5.1+)
MAPPING_LIST = {
    'contrib': 'test/contrib',
    'cpp_extension': 'test/cpp_extensions',
    'distributed': 'test/distributed',
    'fx': 'test/test_fx.py',
    'optim': 'test/optim',
    'profiler': 'test/profiler',
    'onnx': 'test/onnx',
    'utils': 'test/test_utils.py',
    'testing': 'test/test_testing.py',
    'jit': 'test/test_jit.py',
    'rpc': 'test/distributed/rpc',
    'meta': 'test/test_fake_tensor.py',
}
#: the row branches v2.1.0 .. v2.3.1 had (and v2.4.0 dropped; v2.1.0/v2.2.0 also mapped
#: 'checkpoint' -> 'test/distributed/checkpoint', not reproduced); master has no dynamo row
LEGACY_DYNAMO_ROW = {'dynamo': 'test/dynamo'}

#: strategy/core.py: the core set is not a fixed list but ``(BASE_DIR/'test/npu').rglob('test_*.py')``
#: at run time, so it is computed from ``test_files``; at the commit above it is 96 files
CORE_TEST_ROOT = "test/npu"

#: their ``test/dynamo`` folder at the commit above (relative to it); no row of master's table maps to it.
#: ``test/_inductor`` (128 files) exists too; the rule reaches it only through TestFileStrategy and the
#: ``--inductor`` flag, and drops changed ``test/_inductor/`` paths when the CI is split over nodes.
THEIR_TEST_DYNAMO_FILES = tuple("""
__init__.py mock_modules/__init__.py mock_modules/mock_module1.py mock_modules/mock_module2.py
mock_modules/mock_module3.py test_activation_checkpointing.py test_after_aot.py test_aot_autograd.py
test_autograd_function.py test_backends.py test_base_output.py test_bytecode_hook.py test_compile.py
test_compile_trigger.py test_comptime.py test_config.py test_ctx_manager.py test_debug_utils.py
test_decorators.py test_deprecated_inline_inbuilt_nn_modules.py test_deterministic_level_graph_mode.py
test_dynamic_shapes.py test_export.py test_export_mutations.py test_functions.py test_global.py
test_guard_control.py test_higher_order_ops.py test_hooks.py test_input_attr_tracking.py test_interop.py
test_logging.py test_minifier.py test_misc.py test_model_output.py test_modules.py test_nops.py
test_npu_backend.py test_npugraph_ex.py test_npugraphs.py test_optimizers.py test_pre_dispatch.py
test_profiler.py test_python_autograd.py test_recompiles.py test_repros.py test_skip_non_tensor.py
test_sources.py test_stream.py test_subclasses.py test_subgraphs.py test_torch_compiler_compile.py
test_torchair_lazy.py test_torchair_no_init.py test_trace_rules.py test_trace_stream_event.py
test_unspec.py test_verify_correctness.py utils.py
""".split())


def _find_ut_by_regex(pattern: str, files: list[str]) -> list[str]:
    """base.py: ``find test -name PATTERN``, kept if the basename starts with "test" and ends ".py"."""
    out = []
    for path in files:
        base = posixpath.basename(path)
        if path.startswith("test/") and fnmatch.fnmatchcase(base, pattern):
            if base.startswith("test") and path.endswith(".py"):
                out.append(path)
    return out


def _glob_dir(directory: str, files: list[str], recursive: bool) -> list[str]:
    """``Path(directory).glob('test_*.py')`` (or ``rglob``) over the given list instead of the disk."""
    prefix = directory.rstrip("/") + "/"
    return [p for p in files if p.startswith(prefix) and fnmatch.fnmatchcase(posixpath.basename(p), "test_*.py")
            and (recursive or posixpath.dirname(p) == directory.rstrip("/"))]


def _module_name(parts: tuple, legacy_dynamo: bool) -> str:
    """DirectoryMappingStrategy.get_module_name: the second path part, the third under csrc."""
    module_name = parts[1]
    if module_name == 'csrc':
        module_name = parts[2]
    if 'rpc' in parts:
        module_name = 'rpc'
    if module_name == 'utils' and parts[2] == 'cpp_extension.py':
        module_name = 'cpp_extension'
    if legacy_dynamo and module_name == 'utils' and 'dynamo' in parts[2]:
        module_name = 'dynamo'
    return module_name


def _strategies(changed: str, files: list[str], on_disk: set, legacy_dynamo: bool):
    """TestMgr.analyze's per-file order: TestFile, CopyOpt, Op, DirectoryMapping, Core."""
    path = PurePosixPath(changed)
    parts = path.parts  # an empty line raises IndexError here, as in the original
    if parts[0] == "test" and re.match("test_(.+).py", path.name):
        yield changed, "TestFileStrategy"
    if changed.find('contiguous') > 0:  # '> 0' as written: a path *starting* with it does not count
        for p in _find_ut_by_regex('*contiguous*', files):
            yield p, "CopyOptStrategy(*contiguous*)"
    for p in _op_files(path.name, files):
        yield p, "OpStrategy"
    if parts[0] == 'torch_npu':
        table = {**MAPPING_LIST, **LEGACY_DYNAMO_ROW} if legacy_dynamo else MAPPING_LIST
        keys = [k for k in (_module_name(parts, legacy_dynamo), path.stem) if k in table]
        for key in keys:
            target = table[key]
            hits = [target] if target in on_disk else _glob_dir(target, files, recursive=False)
            for p in hits:
                yield p, f"DirectoryMappingStrategy({key!r} -> {target})"
    if parts[0] not in ['test', 'docs']:
        for p in _glob_dir(CORE_TEST_ROOT, files, recursive=True):
            yield p, "CoreTestStrategy"


def _op_files(filename: str, files: list[str]) -> list[str]:
    """OpStrategy: FooBarKernelNpu.cpp -> files named like *foo*bar* (capitalised words, lowered)."""
    if filename.find('KernelNpu') < 0:
        return []
    features = re.findall('[A-Z][^A-Z]*', filename.split('KernelNpu')[0])
    if not features:  # '**' reaches find unquoted: the shell expands it to the working directory's
        return []     # names, find rejects the extra operands, and a failed find selects nothing
    return _find_ut_by_regex('*' + '*'.join(f.lower() for f in features) + '*', files)


def _exclude(selected: dict[str, str]) -> dict[str, str]:
    """TestMgr.exclude_test_files: slow tests by substring, then NOT_RUN_DIRECTLY folders -> their file."""
    kept = {p: r for p, r in selected.items() if not any(n + ".py" in p for n in SLOW_TEST_BLOCKLIST)}
    instead: dict[str, str] = {}
    for name, replacement in NOT_RUN_DIRECTLY.items():
        for p in list(kept):
            folder_in = not name.endswith(".py") and "/" + name + "/" in "/" + p
            file_in = name.endswith(".py") and name in p
            if folder_in or file_in:
                if name in ["jit"] and re.search("|".join(INCLUDE_FILES), p):
                    continue
                del kept[p]
                instead.setdefault("test/" + replacement, f"NOT_RUN_DIRECTLY({name!r}) <- {p}")
    for p, rule in instead.items():  # appended after the sorted list, if not there already
        kept.setdefault(p, rule)
    return kept


def files_selected(changed: list[str], test_files: list[str], *, world_size: int = 0,
                   legacy_dynamo: bool = False) -> dict[str, str]:
    """The test files torch_npu's CI runs for a PR changing ``changed``: {test file: rule <- changed file}.

    ``test_files``: repository-relative paths of the files that exist (all of ``test/`` at least; the
    original's own filters drop non-test names). Order and dedup follow the original: every candidate
    from every strategy, ``sorted(set(...))``, kept only if it exists, then the exclusions; the rule
    recorded is the first strategy, for the first changed file, that produced the path.
    ``world_size`` != 0 reproduces a CI split over nodes, which ignores changed ``test/_inductor/`` lines.
    ``legacy_dynamo`` adds the v2.2.0 .. v2.3.1 ``dynamo`` row, which master no longer has.
    """
    on_disk = set(test_files)
    found: dict[str, str] = {}
    for line in changed:
        if world_size != 0 and "test/_inductor/" in line:
            continue
        name = line.strip()
        for path, rule in _strategies(name, test_files, on_disk, legacy_dynamo):
            found.setdefault(path, f"{rule} <- {name}")
    return _exclude({p: found[p] for p in sorted(found) if p in on_disk})


def op_files_selected(changed: list[str], test_files: list[str]) -> list[str]:
    """The second list, ``op_ut_files``: OpStrategy hits, run as ``test_ops -k _<name>``, not as files.

    Deduplicated here (the original keeps a repeat, which only runs the same filter twice)."""
    hits = [p for c in changed for p in _op_files(PurePosixPath(c.strip()).name, test_files)]
    return list(_exclude({p: "OpStrategy" for p in hits}))

"""docs/torch_npu-inductor-tests.md from a run of torch_npu's own test/_inductor under --npu-lazy-cann=compute.

    scripts/torch_npu_inductor_tests --source PATH/TO/Ascend-pytorch --json run.json --junit run.xml
    python scripts/torch_npu_inductor_table.py run.json run.xml --keep docs/torch_npu-inductor-tests.json \
        > docs/torch_npu-inductor-tests.md
    python scripts/torch_npu_inductor_table.py docs/torch_npu-inductor-tests.json > docs/torch_npu-inductor-tests.md

Every figure is read from the report: outcomes, durations, what computed (the ledger, JSON
``phases[].computed``), the failure messages. The JUnit XML adds the files pytest could not import (a
collection error is no test of the JSON report). ``--keep`` writes the part of the report the page
reads (paths relative, nothing of this machine), so the page can be made again from the repository.

The cause of each non-pass is a diagnosis (``CAUSES``, below): a pattern of test ids, the words the
failure must contain, a kind, and the finding. A cause applies only where the report's message
matches its words; a non-pass no cause matches, or whose message no longer matches, is shown as
UNDIAGNOSED with its message, and counted so.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass

FOLDER = "test/_inductor/"

#: files named after one operator: the name after ``test_`` is an ATen operator (``torch.ops.aten``
#: has it), or one of these three names their authors gave an operator's file (spelled as in the file name)
OPERATOR_SPELLINGS = {"arrange": "arange", "argmax_unalign": "argmax", "nanquantile_defaul": "nanquantile"}

#: kinds of cause, in the order the summary lists them; ``accepted`` says whether the issue's target
#: ("every other non-pass is a named refusal, never a crash or a wrong value") takes it
KINDS = {
    "their skip": ("skipped by their own test (the reason is theirs)", True),
    "refused": ("the emulation refused an operator or runtime call an NPU has and it lacks, naming it", True),
    "interpreter gap": ("refused by name: Triton's interpreter cannot run what the kernel asks", True),
    "device only": ("needs what only a real NPU host has (CANN's compiler, tools, libraries)", True),
    "their repository": ("needs files of their repository beyond test/_inductor that are not supplied", True),
    "release": ("tests Ascend/pytorch master where the installed torch_npu 2.13.0 differs", True),
    "torch_npu": ("torch_npu's or their test's own behaviour: fails the same way on a device", True),
    "package": ("needs a package this environment lacks, named by the failure (torch_mlir)", True),
    "interpreter branch": ("asserts a hook that torch_npu's device launch path calls and its TRITON_INTERPRET branch "
                           "skips (data_dump, check_accuracy): no value differs", True),
    "resources": ("needs more host memory than this runner has: killed by the kernel's OOM killer (SIGKILL), "
                  "reported as the test's failure naming the signal", True),
    "emulation": ("WRONG VALUE or crash caused by the emulation", False),
    "plugin": ("crash or wrong value caused by the plugin", False),
    "timeout": ("killed by the per-test timeout", False),
    "undiagnosed": ("UNDIAGNOSED: no cause below matches the report's message", False),
}


@dataclass(frozen=True)
class Cause:
    tests: str  # fnmatch pattern of node ids (relative to their repository's root)
    words: str  # a regular expression the failure's message (or skip reason) must match
    kind: str
    finding: str


#: the kernel names of torch_npu's index codegen: master's tests assert triton_unk_* (Inductor's category for a
#: source with no single known ``@triton_heuristics.`` decorator); 2.13.0's index codegen decorates its kernels
#: ``@triton_heuristics.pointwise``, so Inductor names the same kernel triton_poi_* (compute mode runs the index
#: codegen's kernels since 2026-12-07: cann/compute/index_codegen.py)
_UNK = ("torch_npu 2.13.0's index codegen writes this kernel (the report's ledger says so) decorated "
        "@triton_heuristics.pointwise, which Inductor names triton_poi_*; master's tests expect triton_unk_*, Inductor's "
        "name for a source with no single known decorator: the name differs by release, the values are equal")
_REPO = "test/_inductor/experimental/python_wrapper_fast_launch/"

#: the diagnosis of every non-pass (docs/torch_npu-inductor-tests.md explains each at length)
CAUSES: list[Cause] = [
    # op files
    Cause("test/_inductor/test_var_mean.py::*", r"skip ci codegen error|Ascend 950-specific", "their skip",
          "their own skip"),
    Cause("test/_inductor/test_var_mean.py::TestVarMean::test_welford_simd_codegen", r"x1_loop_offset", "release",
          "asserts master's vectorised Welford loop text; torch_npu 2.13.0 writes another loop (values pass in "
          "this project's own Welford tests)"),
    # device only
    Cause("test/_inductor/test_dvm_*", r"DVM EXCEPTION.*MsprofRegisterCallBack failed", "device only",
          "DVM registers a callback with msprof (CANN's profiler) when it starts; no msprof here, DVM says so"),
    Cause("test/_inductor/test_use_static_kernel.py::*", r"libascend_dump\.so", "device only",
          "static kernels need CANN's libascend_dump.so"),
    Cause("test/_inductor/test_npu_static_kernel.py::*", r"libascend_dump\.so", "device only",
          "static kernels need CANN's libascend_dump.so"),
    # refused by name
    Cause("test/_inductor/test_inductor_graph_partition.py::*", r"aclrtSetStreamAttribute", "refused",
          "aclrtSetStreamAttribute: a runtime call the emulation does not define (absent, as with an older CANN)"),
    Cause("test/_inductor/test_inductor_graph_partition.py::*", r"MissingOperatorWithoutDecomp", "torch_npu",
          "the file sets TORCH_NPU_USE_COMPATIBLE_IMPL=1, under which torch_npu registers its own aten::matmul for "
          "npu (PrivateUse1 and AutogradPrivateUse1): make_fx keeps aten.matmul, which has no Inductor lowering"),
    Cause("test/_inductor/test_aclgraph_update_plan_compile.py::*",
          r"aclrtSetStreamAttribute|aclnnFusedInferAttentionScoreV[34]", "refused",
          "aclrtSetStreamAttribute (not emulated) or aclnnFusedInferAttentionScore (an NPU-only operator of "
          "libopapi.so), refused by name"),
    Cause("test/_inductor/test_npu_fusion_attention_graph.py::*", r"aclnnFlashAttentionScore", "refused",
          "npu_fusion_attention: aclnnFlashAttentionScore, an NPU-only operator, refused by name"),
    Cause("test/_inductor/test_aoti_user_defined_op.py::*", r"operator name is RmsNorm|first refusal", "refused",
          "torch_npu.npu_rms_norm (RmsNorm, NPU-only) is refused by name; a later operator of the same test "
          "then reports the lost device, naming that first refusal"),
    Cause("test/_inductor/test_dropout_compile.py::*", r"StatelessDropOutGenMask", "refused",
          "torch_npu's dropout kernel (StatelessDropOutGenMask, NPU-only) refused by name"),
    Cause("test/_inductor/test_opensora_graph1.py::*", r"operator name is Cast", "refused",
          "torch.ops.npu.npu_dtype_cast (Cast, NPU-only) refused by name"),
    Cause("test/_inductor/test_triton_experimental_autotune.py::*", r"no CAPTURE_JSON", "refused",
          "the test runs itself in a fresh python subprocess: it inherits the emulated CANN but not compute mode's "
          "host kernels (they live in pytest's processes), so its first operator (torch.randn on npu: "
          "StatelessRandomNormalV2) is refused by name"),
    # interpreter
    Cause("test/_inductor/test_triton_experimental_enable.py::*", r"extract_slice", "interpreter gap",
          "tl.extra.cann.extension.extract_slice: refused by name (triton-ascend 3.2.0 has no tl.extra.cann; "
          "the interpreter has no implementation)"),
    Cause("test/_inductor/test_add_triton_wrap.py::*",
          r"arange's arguments must be of type tl\.constexpr|Cannot access data pointer of Tensor", "interpreter gap",
          "torch 2.13.0's wrap_triton returns an interpreted kernel unwrapped (torch/_library/triton.py: 'lacks the "
          "JIT metadata the traceable wrapper needs'), so torch.compile runs it on FakeTensors"),
    Cause("test/_inductor/test_user_autotune_npu.py::*", r"has no attribute 'fn'", "interpreter gap",
          "Dynamo's user-defined Triton kernel support unwraps .fn until a JITFunction "
          "(DynamoTritonHOPifier.call_triton_kernel); under TRITON_INTERPRET=1 the kernel is an InterpretedFunction "
          "over a plain function"),
    Cause("test/_inductor/test_grouped_cpp_wrapper.py::*", r"NoTritonConfigsError.*(InterpretedFunction|MissingAttribute)",
          "interpreter gap", "the C++ wrapper needs each kernel compiled ahead of launch (torch_npu's precompile "
          "asks JITFunction.constexprs); an interpreted kernel only launches, refused by name"),
    Cause("test/_inductor/test_exceptions.py::*", r"tmp1 is not defined.*(InterpretedFunction|MissingAttribute)",
          "interpreter gap", "expects the compiler's NameError from precompile(); an interpreted kernel is not "
          "compiled (refused by name), and the interpreter would raise it only at launch"),
    # the interpreter branch; a kernel name and a trace their release or their file decides
    Cause("test/_inductor/test_event.py::*", r"False is not true", "release",
          "asserts the kernel name triton_unk_fused_add_mul_0; " + _UNK),
    Cause("test/_inductor/test_debug_msg.py::*", r"no logs of level WARNING", "torch_npu",
          "their file sets TORCH_COMPILE_DEBUG after 'from torch._inductor import config' has read it, so the trace "
          "it asserts is off in any process, their runner's included"),
    Cause("test/_inductor/test_check_accuracy.py::*", r"Scalars are not equal", "interpreter branch",
          "NPUCachingAutotuner.run's TRITON_INTERPRET branch launches directly and never calls maybe_run_debug "
          "(data_dump, check_accuracy_triton), so the counted hook ran 0 times (torch_npu 2.13.0)"),
    # release differences: master's tests, torch_npu 2.13.0
    Cause("test/_inductor/test_inductor_dynamic_shapes.py::TestPointwiseSymbolicGrouping::*",
          r"Scalars are not equal|None is not transpose", "release",
          "a unit test of SplitTiling (mocked kernel, no device): master's _build_group_features returns a "
          "'pointwise' feature, 2.13.0's returns none here; its layout classification differs too"),
    Cause("test/_inductor/test_symbolic_grouping.py::*",
          r"_enable_auto_blockify_for_grouped_fallback_if_needed|Expected wide pointwise grouped fallback", "release",
          "master's NPUIndexTritonKernel._enable_auto_blockify_for_grouped_fallback_if_needed (writes "
          "'enable_auto_blockify') is not in 2.13.0"),
    Cause("test/_inductor/test_triton_experimental_regressions.py::*",
          r"_cat_store_dtype|_npu_linearize|Expected 'mock' to not have been called", "release",
          "master's triton_experimental tests against 2.13.0's triton_experimental: no ir._cat_store_dtype, "
          "NPUTritonKernel reads _npu_linearize set in __init__, and 2.13.0 registers fallbacks for "
          "reflection_pad2d and upsample_bilinear2d"),
    Cause("test/_inductor/test_triton_experimental_deberta_regressions.py::*", r"both a fallback and a decomp",
          "release", "2.13.0's triton_experimental registers a reflection_pad2d fallback the test's mocked tables do "
          "not expect (master's lowering_override_list has no reflection_pad2d)"),
    Cause("test/_inductor/test_algorithm_selector_dispatch.py::*", r"__wrapped__|is not \(", "release",
          "pins a device-dispatching wrapper (functools.wraps, non-npu layouts to the parent) that neither "
          "2.13.0's nor master 9e73e708's patch_algorithm_selector has"),
    Cause("test/_inductor/test_shape_handling.py::TestInductorWrapperShapeHandlingOptions::*",
          r"patch_shape_handling' to be called once", "torch_npu",
          "mocks torch_npu._inductor.patch_shape_handling; the wrapper calls torch_npu.utils._dynamo."
          "_patch_shape_handling instead (2.13.0 and master alike): fails on a device too"),
    Cause("test/_inductor/test_graph_deduplication.py::*", r"invoke_subgraph", "torch_npu",
          "a copy of PyTorch's graph-deduplication test, CPU only: the same 4 fail in plain pytest without this "
          "plugin and without torch_npu (torch 2.13.0's printed graph has no blank line there)"),
    Cause("test/_inductor/test_cpu_compile.py::*", r"False is not true", "torch_npu",
          "asserts the lowerings carry torch_npu's device-dispatch marker, installed when torch_npu._inductor "
          "loads; their runner loads it in an earlier test of the file, isolated the test runs alone"),
    Cause("test/_inductor/test_dropout_with_checkpoint_recompute.py::*", r"Tensor-likes are not close", "torch_npu",
          "their __main__ sets fallback_random=True, which pytest never runs: compiled dropout draws with "
          "Triton's tl.rand (Philox in the kernel), eager from the device's generator, different streams by "
          "Inductor's design; with fallback_random the compiled side calls StatelessDropOutGenMask, refused"),
    # their repository, packages, skips
    Cause(_REPO + "*", r"torch_npu\._inductor\.experimental|No such file or directory: 'torch_npu/",
          "their repository", "loads torch_npu's sources from their repository beside the tests (REPO_ROOT/"
          "torch_npu), which a run of test/_inductor alone does not supply"),
    Cause("test/_inductor/test_*mlir*", r"torch_mlir is not installed", "package",
          "the MLIR backend (deprecated in 2.13.0) imports torch_mlir, not installed; torch_npu says so"),
    Cause("test/_inductor/test_kernel_not_fallback_akg.py::*", r"torch_mlir is not installed", "package",
          "imports the MLIR backend at module level: torch_mlir, not installed"),
    Cause("test/_inductor/test_inductor_all_fallback.py::*", r"torch_mlir is not installed", "package",
          "the MLIR backend imports torch_mlir, not installed"),
    Cause("test/_inductor/test_multi_backend_compile.py::*", r"torch_mlir is not installed", "package",
          "the MLIR backend imports torch_mlir, not installed"),
    Cause("test/_inductor/test_linear_dynamic.py::*", r"signal 9|SIGKILL", "resources",
          "four 512x160x160x40 float32 tensors (2.1 GB each) plus eager's copies on a 23 GiB runner: the OOM "
          "killer took the test's child; the worker lived on"),
    Cause("test/_inductor/test_linear_dynamic.py::*", r"TIMEOUT: the isolated test ran longer than", "timeout",
          "the index codegen's kernel over 512x160x160x40 float32 tensors loops over sub-blocks of its pointwise "
          "axes, and the interpreter runs every iteration as Python (the static twin passes in 230 s): compute "
          "mode's speed (issue 49), not a wrong value"),
    Cause("test/_inductor/test_multi_slice_concat_pass.py::*", r"TORCHINDUCTOR_ENABLE_MULTI_SLICE_CONCAT",
          "their skip", "their own skip (the pass registers only under its switch)"),
    Cause("test/_inductor/test_grouped_matmul_pass.py::*", r"TORCHINDUCTOR_ENABLE_GROUPED_MATMUL_FUSION",
          "their skip", "their own skip (the pass registers only under its switch)"),
    Cause("test/_inductor/test_issue*.py::*", r"skip ci", "their skip", "their own skip"),
    Cause("test/_inductor/test_npu_aoti_shim.py", r"torch_test_cpp_extension", "their repository",
          "imports torch_test_cpp_extension, a C++ extension their CI builds from test/cpp_extensions of their "
          "repository (setup.py), not supplied with test/_inductor"),
    Cause("test/_inductor/test_rngprims_philox_rand_default.py.py", r"No module named", "torch_npu",
          "the file is named '.py.py': pytest imports it as a module named with a dot, which no process can "
          "import (their runner runs it as a script)"),
]


def is_operator_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    if not (name.startswith("test_") and name.endswith(".py")):
        return False
    stem = name[len("test_"):-len(".py")]
    if stem in OPERATOR_SPELLINGS:
        return True
    return stem in _aten_names()


_ATEN: frozenset[str] | None = None


def _aten_names() -> frozenset[str]:
    global _ATEN
    if _ATEN is None:
        import os
        os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
        import torch
        _ATEN = frozenset(name for name in dir(torch.ops.aten) if not name.startswith("__"))
    return _ATEN


def computed(test: dict) -> tuple[list[str], list[str], list[str]]:
    """Triton kernels, host ATen operators and refusals of the test's own phase (the ledger)."""
    kernels, host, refused = [], [], []
    for phase in test.get("phases", []):
        if phase["name"] in ("collect", "teardown"):
            continue
        for row in phase.get("computed", []):
            if row["by"] == "Triton interpreter":
                kernels.append(row["name"])
            elif row["by"] == "host ATen kernel":
                host.append(row["name"])
            else:
                refused.append(f"{row['by']}: {row['name']} {row.get('detail', '')}".strip())
    return list(dict.fromkeys(kernels)), list(dict.fromkeys(host)), list(dict.fromkeys(refused))


def collection_errors(junit_path: str) -> list[dict]:
    """Files pytest could not import, from the JUnit XML (``<error message="collection failure">``)."""
    found = []
    for case in ET.parse(junit_path).getroot().iter("testcase"):
        for child in case:
            if child.tag == "error" and "collection failure" in (child.get("message") or ""):
                path = case.get("classname", "").replace(".", "/")
                # pytest names a module it could not import in the text ("... importing test module '/x/y.py'"),
                # and gives no classname: the path from there, relative to their repository
                named = re.search(r"importing test module '([^']*)'", child.text or "")
                if not path and named and FOLDER in named.group(1):
                    path = named.group(1)[named.group(1).index(FOLDER):].removesuffix(".py")
                text = (child.text or "").strip().splitlines()
                last = next((line for line in reversed(text) if line.startswith("E ")), text[-1] if text else "")
                found.append({"nodeid": f"{path}.py", "outcome": "error (collection)", "duration": 0.0,
                              "message": last[1:].strip(), "phases": []})
    return found


def keep(report: dict, errors: list[dict]) -> dict:
    """The part of the report the page reads."""
    tests = []
    for test in report["tests"]:
        if FOLDER not in test["nodeid"]:
            continue
        tests.append({"nodeid": test["nodeid"], "outcome": test["outcome"], "duration": round(test["duration"], 3),
                      "message": test.get("message"), "worker": test.get("worker"),
                      "phases": [{"name": p["name"], "duration": round(p["duration"], 3),
                                  "computed": p.get("computed", [])} for p in test.get("phases", [])]})
    run = dict(report["run"])
    run["args"] = [a if not a.startswith(("--npu-lazy-json=", "--junitxml=")) else a.split("=")[0] + "=..."
                   for a in run.get("args", [])]
    environment = {k: v for k, v in report["environment"].items() if k not in ("cann",)}
    return {"environment": environment, "run": run, "tests": tests, "collection_errors": errors}


def diagnose(test: dict) -> tuple[str, str]:
    """The first cause naming the test whose words are in its message; a test that causes name but whose message
    has none of their words is undiagnosed, and says so."""
    message = test.get("message") or ""
    named = [cause for cause in CAUSES if fnmatch.fnmatchcase(test["nodeid"], cause.tests)]
    for cause in named:
        if re.search(cause.words, message, re.S):
            return cause.kind, cause.finding
    if named:
        return "undiagnosed", f"a cause names this test, but its words /{named[0].words}/ are not in the message: " \
                              f"{_first_line(message)}"
    return "undiagnosed", _first_line(message)


#: the line pytest-xdist writes above a worker's failure text ("[gw0] linux -- Python 3.11.7 /path/python")
_WORKER_HEADER = re.compile(r"^\[gw\d+\] \S+ -- Python ")


def _first_line(text: str) -> str:
    line = next((line for line in text.splitlines() if line.strip() and not _WORKER_HEADER.match(line)), "")
    return line[:240].replace("|", "\\|")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(kept: dict) -> str:
    tests = kept["tests"] + kept["collection_errors"]
    env, run = kept["environment"], kept["run"]
    lines = [
        "# torch_npu's own Inductor tests on the emulated NPU that computes",
        "",
        "Generated by `scripts/torch_npu_inductor_table.py` from the JSON report of one run (kept as",
        "`docs/torch_npu-inductor-tests.json`); every figure is read from it.",
        "",
        f"torch {env.get('torch')}, torch_npu {env.get('torch_npu')}, {env.get('triton_flavour')} "
        f"{env.get('triton')}, Python {env.get('python')}, {env.get('platform')}; "
        f"run: `pytest {' '.join(run.get('args', []))}` ({run.get('xdist_workers') or 0} xdist workers), "
        f"{run.get('duration', 0) / 60:.0f} min.",
        "",
    ]
    rows = []
    groups: dict[str, Counter] = {"operator": Counter(), "other": Counter()}
    kinds: dict[str, Counter] = {"operator": Counter(), "other": Counter()}
    for test in tests:
        path = test["nodeid"].split("::")[0]
        group = "operator" if is_operator_file(path) else "other"
        outcome = test["outcome"]
        groups[group][outcome] += 1
        groups[group]["files:" + path] += 0
        kernels, host, refused = computed(test)
        if outcome == "passed":
            kind, finding = "", ""
        else:
            kind, finding = diagnose(test)
            kinds[group][kind] += 1
        by = ", ".join(f"`{k}`" for k in kernels) if kernels else ("no Triton kernel" if outcome == "passed" else "")
        rows.append((group, test["nodeid"], outcome, test["duration"], by, kind, finding))
    lines += ["| tests | files | tests | passed | non-passes by kind |", "|---|---:|---:|---:|---|"]
    for group in ("operator", "other"):
        counts = groups[group]
        files = sum(1 for key in counts if key.startswith("files:"))
        total = sum(v for k, v in counts.items() if not k.startswith("files:"))
        listed = ", ".join(f"{kind} {n}" for kind, n in sorted(kinds[group].items(), key=lambda kv: list(KINDS).index(kv[0])))
        lines.append(f"| {group} | {files} | {total} | {counts['passed']} ({100 * counts['passed'] / max(1, total):.1f} %) "
                     f"| {listed or '-'} |")
    lines += ["", "| test | outcome | s | Triton kernels run (interpreted) | kind | cause |", "|---|---|---:|---|---|---|"]
    for _group, nodeid, outcome, duration, by, kind, finding in rows:
        name = nodeid[len(FOLDER):] if nodeid.startswith(FOLDER) else nodeid
        lines.append(f"| `{name}` | {outcome} | {duration:.0f} | {by} | {kind} | {_cell(finding)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", help="the JSON report of the run, or the kept part of one")
    parser.add_argument("junit", nargs="?", help="the JUnit XML of the same run (collection errors)")
    parser.add_argument("--keep", help="write the part of the report the page reads here")
    args = parser.parse_args(argv)
    with open(args.report, encoding="utf-8") as handle:
        report = json.load(handle)
    if "collection_errors" in report:
        kept = report
    else:
        kept = keep(report, collection_errors(args.junit) if args.junit else [])
    if args.keep:
        with open(args.keep, "w", encoding="utf-8") as handle:
            json.dump(kept, handle, indent=1, sort_keys=True)
            handle.write("\n")
    sys.stdout.write(render(kept))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

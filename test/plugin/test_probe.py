"""The npu_lazy fixture: provenance in failure messages, blocking, ran(), phases, compile vs eager."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("fake_heavy_package")


def test_failure_names_module_phase_chain_and_line(run_pytest, pytester):
    pytester.makepyfile(test_prov="""
        import pytest

        def load_it():
            import heavy.core

        @pytest.mark.npu_lazy(preload=[])
        def test_regression(npu_lazy):
            with npu_lazy.phase("wrap"):
                load_it()
            npu_lazy.assert_not_loaded("heavy.helpers")
    """)
    run = run_pytest()
    assert run.outcomes == {"test_prov.py::test_regression": "failed"}, run.text()
    message = run.report("test_regression", "call")["longrepr"]
    assert "'heavy.helpers' must not be loaded yet, but it was loaded during phase 'wrap'" in message
    assert ("import chain: heavy.helpers <- heavy.core (heavy/core.py:1 in <module>) "
            "<- test_prov (test_prov.py:4 in load_it)") in message
    assert "triggered at: heavy/core.py:1 in <module>" in message
    assert "from heavy import helpers" in message  # the source line


def test_a_chain_through_a_deep_code_path_still_reaches_the_tests_line(run_pytest, pytester):
    """Dynamo compiles a first call through a hundred frames before Inductor imports torch_npu._inductor: the chain
    keeps the frames nearest the import and those nearest the test, so it ends at the test's own line."""
    pytester.makepyfile(deep="""
        def descend(depth):
            if depth:
                return descend(depth - 1)
            import heavy.core
    """)
    pytester.makepyfile(test_deep="""
        import pytest

        @pytest.mark.npu_lazy(preload=[])
        def test_deep(npu_lazy):
            import deep
            with npu_lazy.phase("first_call"):
                deep.descend(60)
            npu_lazy.assert_not_loaded("heavy.helpers")
    """)
    run = run_pytest()
    message = run.report("test_deep", "call")["longrepr"]
    chain = message.split("import chain:")[1].splitlines()[0]
    assert chain.startswith(" heavy.helpers <- heavy.core (heavy/core.py:1 in <module>) <- deep (deep.py:"), chain
    assert chain.endswith("<- test_deep (test_deep.py:7 in test_deep)"), chain


def test_lazy_import_names_the_function_that_loaded_it(run_pytest, pytester):
    pytester.makepyfile(test_lazy="""
        import pytest

        @pytest.mark.npu_lazy(preload=["heavy.lazy"])
        def test_lazy(npu_lazy):
            import heavy.lazy
            with npu_lazy.phase("first_use"):
                heavy.lazy.setup()
            assert npu_lazy.first_loaded("heavy.helpers") == "first_use"
            assert npu_lazy.import_chain("heavy.helpers")[:2] == ["heavy.helpers", "heavy.lazy"]
            npu_lazy.assert_not_loaded("heavy.helpers")
    """)
    run = run_pytest()
    message = run.report("test_lazy", "call")["longrepr"]
    assert "loaded during phase 'first_use'" in message, run.text()
    assert "triggered at: heavy/lazy.py:5 in setup" in message
    assert 'return importlib.import_module("heavy.helpers")' in message


def test_blocking(run_pytest, pytester):
    pytester.makepyfile(test_block="""
        import importlib.util
        import sys
        import pytest

        @pytest.mark.npu_lazy(preload=[], block=["heavy.helpers"])
        def test_marker_block(npu_lazy):
            assert importlib.util.find_spec("heavy.helpers") is None
            with pytest.raises(ModuleNotFoundError):
                import heavy.core  # imports heavy.helpers
            import heavy  # the parent is still there
            with pytest.raises(ModuleNotFoundError):
                import heavy.helpers.deeper

        @pytest.mark.npu_lazy(preload=[])
        def test_fixture_block(npu_lazy):
            npu_lazy.block("heavy")
            assert importlib.util.find_spec("heavy") is None
            with pytest.raises(ModuleNotFoundError):
                importlib.import_module("heavy.core")

        @pytest.mark.npu_lazy(preload=["heavy"])
        def test_block_loaded_is_an_error(npu_lazy):
            npu_lazy.block("heavy")

        @pytest.mark.npu_lazy(preload=["heavy"], block=["heavy.core"])
        def test_block_conflicts_with_preload():
            pass
    """)
    run = run_pytest()
    assert run.outcomes == {
        "test_block.py::test_marker_block": "passed",
        "test_block.py::test_fixture_block": "passed",
        "test_block.py::test_block_loaded_is_an_error": "error",
        "test_block.py::test_block_conflicts_with_preload": "error",
    }, run.text()
    loaded = run.report("test_block_loaded_is_an_error", "call")["longrepr"]
    assert "cannot block 'heavy': 'heavy' is already loaded by the zygote's preload ['heavy']" in loaded
    conflict = run.report("test_block_conflicts_with_preload", "setup")["longrepr"]
    assert "block=['heavy.core'] conflicts with preload=['heavy']" in conflict


def test_ran(run_pytest, pytester):
    pytester.makepyfile(test_ran="""
        import pytest

        @pytest.mark.npu_lazy(preload=[], track=["heavy.lazy:setup"])
        def test_tracked_from_the_marker(npu_lazy):
            assert not npu_lazy.ran("heavy.lazy:setup")  # module not even loaded
            import heavy.lazy
            assert not npu_lazy.ran("heavy.lazy:setup")
            heavy.lazy.setup()
            assert npu_lazy.ran("heavy.lazy:setup")

        @pytest.mark.npu_lazy(preload=[])
        def test_asking_before_the_import_starts_tracking(npu_lazy):
            assert not npu_lazy.ran("heavy.lazy:setup")
            from heavy.lazy import setup  # the importer gets the counting wrapper
            setup()
            assert npu_lazy.ran("heavy.lazy:setup")

        @pytest.mark.npu_lazy(preload=[])
        def test_has_run_flag_is_trusted(npu_lazy):
            import heavy.lazy
            assert not npu_lazy.ran("heavy.lazy:has_flag")
            heavy.lazy.has_flag.has_run = True
            assert npu_lazy.ran("heavy.lazy:has_flag")

        @pytest.mark.npu_lazy(preload=["heavy.lazy"])
        def test_untracked_loaded_module_is_an_error(npu_lazy):
            npu_lazy.ran("heavy.lazy:setup")

        @pytest.mark.npu_lazy(preload=[])
        def test_missing_function_is_an_error(npu_lazy):
            npu_lazy.track("heavy.lazy:setpu")
            import heavy.lazy
            npu_lazy.ran("heavy.lazy:setpu")

        @pytest.mark.npu_lazy(preload=[], track=["heavy.lazy:setpu"])
        def test_a_typo_never_asked_about_is_an_error_when_the_test_ends(npu_lazy):
            import heavy.lazy
            heavy.lazy.setup()

        @pytest.mark.npu_lazy(preload=[])
        def test_a_late_typo_names_the_phase_its_module_loaded_in(npu_lazy):
            with npu_lazy.phase("import"):
                import heavy.lazy
            npu_lazy.ran("heavy.lazy:setpu")
    """)
    run = run_pytest()
    assert run.outcomes == {
        "test_ran.py::test_tracked_from_the_marker": "passed",
        "test_ran.py::test_asking_before_the_import_starts_tracking": "passed",
        "test_ran.py::test_has_run_flag_is_trusted": "passed",
        "test_ran.py::test_untracked_loaded_module_is_an_error": "error",
        "test_ran.py::test_missing_function_is_an_error": "error",
        "test_ran.py::test_a_typo_never_asked_about_is_an_error_when_the_test_ends": "error",
        "test_ran.py::test_a_late_typo_names_the_phase_its_module_loaded_in": "error",
    }, run.text()
    untracked = run.report("test_untracked_loaded_module_is_an_error", "call")["longrepr"]
    assert "cannot tell whether heavy.lazy:setup ran: 'heavy.lazy' was already loaded" in untracked
    assert "track=['heavy.lazy:setup']" in untracked
    missing = run.report("test_missing_function_is_an_error", "call")["longrepr"]
    assert "module 'heavy.lazy' has no 'setpu'" in missing and "Did you mean setup?" in missing
    assert "(checked when it loaded, phase 'test')" in missing
    unasked = run.report("test_a_typo_never_asked_about_is_an_error_when_the_test_ends", "teardown")["longrepr"]
    assert "cannot track heavy.lazy:setpu: module 'heavy.lazy' has no 'setpu'" in unasked
    assert "Fix the name in track=[...]" in unasked and "fixture.py" not in unasked.split("ProbeUsageError")[0]
    late = run.report("test_a_late_typo_names_the_phase_its_module_loaded_in", "call")["longrepr"]
    assert "(checked in phase 'test'; it loaded in phase 'import')" in late


def test_phase_and_pattern_misuse(run_pytest, pytester):
    pytester.makepyfile(test_misuse="""
        import pytest

        @pytest.mark.npu_lazy(preload=[])
        def test_phase_reused(npu_lazy):
            with npu_lazy.phase("a"):
                pass
            with npu_lazy.phase("a"):
                pass

        @pytest.mark.npu_lazy(preload=[])
        def test_reserved_phase(npu_lazy):
            with npu_lazy.phase("setup"):
                pass

        @pytest.mark.npu_lazy(preload=[])
        def test_typo_in_submodule(npu_lazy):
            npu_lazy.assert_not_loaded("heavy.helpres")

        @pytest.mark.npu_lazy(preload=[])
        def test_typo_in_package(npu_lazy):
            npu_lazy.assert_not_loaded("haevy")

        @pytest.mark.npu_lazy(preload=[])
        def test_absent_package_is_fine(npu_lazy):
            npu_lazy.assert_not_loaded("no_such_package_anywhere_xyz")
    """)
    run = run_pytest()
    assert run.outcomes == {
        "test_misuse.py::test_phase_reused": "error",
        "test_misuse.py::test_reserved_phase": "error",
        "test_misuse.py::test_typo_in_submodule": "error",
        "test_misuse.py::test_typo_in_package": "error",
        "test_misuse.py::test_absent_package_is_fine": "passed",
    }, run.text()
    assert "phase 'a' was already used in this test" in run.report("test_phase_reused", "call")["longrepr"]
    assert "phase name 'setup' is reserved" in run.report("test_reserved_phase", "call")["longrepr"]
    sub = run.report("test_typo_in_submodule", "call")["longrepr"]
    assert "package 'heavy' has no module 'heavy.helpres'. Did you mean 'heavy.helpers'?" in sub
    top = run.report("test_typo_in_package", "call")["longrepr"]
    assert "no module named 'haevy' is installed. Did you mean 'heavy'?" in top


@pytest.mark.needs("torch")
def test_compile_records_phases_and_checks_eager(run_pytest, pytester):
    """Real torch, real Inductor kernel on the CPU; an injected mismatch must be caught."""
    pytester.makepyfile(test_compile="""
        import pytest

        @pytest.mark.npu_lazy(preload=["torch"])
        def test_compiled(npu_lazy):
            import torch
            npu_lazy.assert_not_loaded("torch._dynamo")
            fn = npu_lazy.compile(lambda x: torch.sin(x) * 2, backend="inductor")
            npu_lazy.assert_loaded("torch._dynamo")
            x = torch.randn(16)
            assert torch.equal(fn(x), fn(x))
            assert npu_lazy.phases[-3:] == ["first_call", "eager", "call"]
            assert npu_lazy.first_loaded("torch._dynamo.backends.inductor") == "first_call"
            kernels = npu_lazy.loaded("torch._inductor.runtime.compile_tasks.*")
            assert kernels and {npu_lazy.first_loaded(k) for k in kernels} == {"first_call"}
            assert npu_lazy.modules("call") == []

        @pytest.mark.npu_lazy(preload=["torch"])
        def test_mismatch_is_caught(npu_lazy):
            import torch
            calls = []
            def fn(x):
                return x + 1
            def backend(gm, example_inputs):
                return lambda *args: [gm(*args)[0] + 1]  # a wrong kernel
            compiled = npu_lazy.compile(fn, backend=backend)
            compiled(torch.zeros(4))
    """)
    run = run_pytest()
    assert run.outcomes == {
        "test_compile.py::test_compiled": "passed",
        "test_compile.py::test_mismatch_is_caught": "failed",
    }, run.text()
    mismatch = run.report("test_mismatch_is_caught", "call")["longrepr"]
    assert "the compiled output of 'first_call' differs from eager" in mismatch
    assert "Mismatched elements: 4 / 4" in mismatch


@pytest.mark.needs("torch")
def test_a_reference_that_cannot_run_is_refused_naming_the_way_out(run_pytest, pytester):
    pytester.makepyfile(test_only_compiled="""
        import pytest

        @pytest.mark.npu_lazy(preload=["torch"])
        def test_only_compiled(npu_lazy):
            import torch

            def f(x):
                if not torch.compiler.is_compiling():
                    raise RuntimeError("this function only runs compiled")
                return x + 1

            npu_lazy.compile(f, backend="eager")(torch.ones(3))
    """)
    run = run_pytest()
    assert run.outcomes == {"test_only_compiled.py::test_only_compiled": "error"}, run.text()  # not judged
    message = run.report("test_only_compiled", "call")["longrepr"]
    assert ("the eager reference of 'first_call' could not be computed, so the compiled output was not compared: "
            "RuntimeError: this function only runs compiled") in message, message
    assert "compile it with check_eager=False" in message

"""Where each check of torch_npu's own guarantee file lives in this suite.

torch_npu keeps its deferred-loading checks in its repository (Ascend/pytorch,
test/dynamo/test_compile_trigger.py: the tests of master, and two more on the
v2.12.0 branch), each a code string run with ``python -c``. This map says
which tests here check the same guarantee: docs/torch_npu-tests.md explains
each row, a test keeps the two in step, and ``python -m benchmarks.port``
runs both sides to compare outcomes and time.

Values are test functions of test/dynamo as ``file::function`` (every
parametrized case of the function counts).
"""

from __future__ import annotations

#: their test (method of TorchCompileTriggerTests) -> our test functions
PORTED: dict[str, tuple[str, ...]] = {
    "test_import_installs_dynamo_post_import_trigger": (
        "test_import.py::test_import_replaces_has_triton_and_installs_one_trigger_only",
        "test_import.py::test_import_torch_npu_defers_compiler_stack",
        "test_import.py::test_dynamo_post_import_trigger_is_installed",
    ),
    "test_explicit_inductor_import_initializes_npu_config": (
        "test_inductor_setup.py::test_explicit_npu_inductor_import_injects_the_npu_config",
    ),
    "test_public_compiler_entries_are_available_before_compile": (
        "test_compiler_entries.py::test_mark_step_begin_works_before_any_compile_and_loads_no_compiler",
        "test_compiler_entries.py::test_list_backends_before_compile_sets_up_dynamo_only",
    ),
    "test_lazy_compiler_proxies_bind_submodules": (
        "test_compiler_entries.py::test_lazy_proxies_are_installed_by_import_and_import_nothing",
        "test_compiler_entries.py::test_lazy_proxy_binds_submodules_on_the_proxy_and_the_package",
    ),
    "test_dynamo_backend_entrypoint_metadata_and_cold_load": (
        "test_backend_registration.py::test_entry_points_name_the_lazy_entries_and_load_cold",
        "test_entry_points.py::test_backend_entry_points_load_without_dynamo_or_inductor",
    ),
    "test_backend_entrypoint_can_import_torch_npu_without_duplicate_registration": (
        "test_backend_registration.py::test_entry_point_lookup_registers_the_npu_backend_once",
    ),
    "test_backend_registration_retry_after_partial_failure": (
        "test_backend_registration.py::test_registration_is_retried_after_a_partial_failure",
    ),
    "test_npugraphs_rejects_options_across_registration_order": (
        "test_npugraphs.py::test_entry_point_accepts_options_but_does_not_forward_them",
    ),
    "test_npugraphs_reset_protocol_across_registration_order": (
        "test_npugraphs.py::test_reset_reaches_graph_trees_only_when_loaded",
    ),
    "test_fsdp_patch_when_imported_before_torch_npu": (
        "test_import.py::test_fsdp_gets_the_npu_grad_scaler_in_either_import_order",
    ),
    "test_npu_inductor_initialization_chain": (
        "test_inductor_setup.py::test_first_inductor_call_runs_the_chain_in_order",
        "test_inductor_setup.py::test_first_inductor_call_on_a_device_registers_the_npu_interface",
    ),
    "test_npu_npugraphs_initialization_chain": (
        "test_npugraphs.py::test_first_npugraphs_call_sets_up_inductor_then_needs_the_device",
        "test_npugraphs.py::test_npugraphs_chain_on_a_device_matches_eager",
    ),
    "test_compile_triggers_setup_before_backend_lookup": (
        "test_backend_registration.py::test_dynamo_setup_completes_before_any_backend_lookup",
        "test_backend_registration.py::test_trigger_calls_the_current_setup_function_once",
    ),
    "test_trigger_after_dynamo_was_preimported": (
        "test_import.py::test_preimported_dynamo_is_set_up_at_import_and_eager_compile_needs_no_inductor",
        "test_import.py::test_dynamo_imported_before_torch_npu_triggers_setup_once",
    ),
    "test_inductor_patch_inventory_is_preserved": (
        "test_inductor_setup.py::test_import_time_decomposition_and_rng_patches_load_no_compiler",
        "test_inductor_setup.py::test_inductor_patches_wait_for_the_inductor_setup_and_then_all_hold",
        "test_inductor_setup.py::test_inductor_triton_backend_patches_on_a_device",
    ),
    "test_npu_export_public_entry_and_import_order_matrix": (
        "test_export.py::test_npu_export_public_entry_and_import_order_matrix",
    ),
    "test_npu_export_capture_semantics_matrix": (
        "test_export.py::test_npu_export_capture_semantics_matrix",
    ),
    "test_npu_onnx_dynamo_export_initialization_chain": (
        "test_export.py::test_npu_onnx_dynamo_export_initialization_chain",
    ),
    "test_invalid_inductor_arguments_fail_without_npu_initialization": (
        "test_backend_scope.py::test_invalid_inductor_arguments_fail_without_npu_initialization",
    ),
    "test_npu_backend_scope_restores_env_after_entry_failure": (
        "test_backend_scope.py::test_npu_backend_scope_restores_env_after_entry_failure",
        "test_backend_scope.py::test_npu_backend_scope_sets_env_inside_and_restores_on_exit",
    ),
    "test_shape_handling_initializes_before_backend_selection": (
        "test_backend_scope.py::test_shape_handling_initializes_before_backend_selection",
        "test_backend_scope.py::test_mlir_backend_selection_completes_on_npu",
    ),
    "test_shape_handling_backend_load_is_deferred_until_first_call": (
        "test_wrapper.py::test_wrapper_runs_dynamo_setup_only",
        "test_backend_scope.py::test_shape_handling_backend_load_is_deferred_until_first_call",
    ),
    "test_non_inductor_compile_backend_matrix": (
        "test_non_inductor_backends.py::test_non_inductor_compile_backend_matrix",
        "test_non_inductor_backends.py::test_npu_backend_without_a_device_sets_up_no_inductor",
        "test_non_inductor_backends.py::test_non_inductor_backends_on_npu",
    ),
    "test_has_triton_preserves_target_device_semantics": (
        "test_patch_inventory.py::test_has_triton_preserves_target_device_semantics",
        "test_patch_inventory.py::test_has_triton_without_the_triton_package",
        "test_patch_inventory.py::test_has_triton_counts_a_triton_cpu_by_default",
    ),
    "test_dynamo_patch_inventory_is_preserved": (
        "test_patch_inventory.py::test_dynamo_patch_inventory_is_preserved",
        "test_patch_inventory.py::test_master_dynamo_patches",
        "test_patch_inventory.py::test_npu_device_interface_counts_devices",
    ),
    "test_public_lazy_setup_recovers_after_fork": (
        "test_fork_recovery.py::test_public_lazy_setup_recovers_after_fork",
    ),
    # v2.12.0 branch only
    "test_inductor_backend_load_is_deferred_until_first_call": (
        "test_wrapper.py::test_wrapper_runs_dynamo_setup_only",
        "test_first_call.py::test_first_call_sets_up_npu_inductor",
    ),
}

#: tests that exist on the v2.12.0 branch but not on master
V2_12_ONLY = ("test_inductor_backend_load_is_deferred_until_first_call", "test_public_lazy_setup_recovers_after_fork")

#: torch_npu's device-side lazy-initialisation tests, in other files of its repository (master; the same on
#: v26.2.0-beta.1-pytorch2.13.0) -> our tests (test_device_init.py asserts on the device calls themselves).
#: An empty tuple: not ported, and docs/torch_npu-tests.md says why.
DEVICE_PORTED: dict[str, tuple[str, ...]] = {
    "test/test_torch_npu_init.py::test_05_runtime_lazy_init_semantics": (
        "test_device_init.py::test_availability_and_device_count_do_not_initialise",
        "test_device_init.py::test_first_device_use_initialises_exactly_once",
    ),
    "test/test_torch_npu_init.py::test_11_import_does_not_trigger_device_count": (
        "test_device_init.py::test_import_torch_npu_makes_no_device_call",
    ),
    "test/test_npu.py::TestNpu::test_lazy_init": (
        "test_device_init.py::test_import_torch_npu_makes_no_device_call",
    ),
    "test/npu/test_torch_npu.py::test_lazy_init": (
        "test_device_init.py::test_a_fork_after_initialisation_cannot_initialise_again",
        "test_device_init.py::test_a_fork_after_the_availability_check_is_a_good_fork",
    ),
    "test/test_npu.py::TestNpu::test_device_count_not_cached_pre_init": (),
    "test/dynamo/test_torchair_lazy.py": (
        "test_compiler_entries.py::test_lazy_proxies_are_installed_by_import_and_import_nothing",
        "test_compiler_entries.py::test_lazy_proxy_binds_submodules_on_the_proxy_and_the_package",
    ),
    "test/dynamo/test_torchair_no_init.py": (
        "test_compiler_entries.py::test_lazy_proxies_are_installed_by_import_and_import_nothing",
    ),
}

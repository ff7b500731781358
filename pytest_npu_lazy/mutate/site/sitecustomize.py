"""Installs the mutation hook as each interpreter of a mutation run starts (see pytest_npu_lazy.mutate.hook).

This folder is first on PYTHONPATH only during a mutation run. A
``sitecustomize`` that the environment had before is still imported after.
"""

import os

from pytest_npu_lazy.site_chain import chain_to_the_next_sitecustomize

try:
    from pytest_npu_lazy.mutate.hook import install_from_env

    install_from_env()
finally:
    chain_to_the_next_sitecustomize(os.path.dirname(os.path.abspath(__file__)))

"""Shared by the three wings (tests/core, tests/lab, tests/repo); the helpers beside this file (tiny_models.py,
fuzz.py, ...) import from all of them (pyproject.toml puts tests/ and the repository root on the path)."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def one_thread_for_tiny_models():
    """The suite's tiny models run several times faster on one thread (their ops are too small to split);
    tests of the real embedded model raise the count again for themselves."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pytest_addoption(parser):
    parser.addoption("--fuzz-long", action="store_true", help="run 5,000 fuzz cases (tests/core/test_fuzz.py)")

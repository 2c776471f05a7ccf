import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True, scope="session")
def one_thread_for_tiny_models():
    """The suite's tiny models run several times faster on one thread (their ops are too small to split);
    tests of the real embedded model raise the count again for themselves."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pytest_addoption(parser):
    parser.addoption("--fuzz-long", action="store_true", help="run 5,000 fuzz cases (tests/test_fuzz.py)")

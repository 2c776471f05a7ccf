"""The lab's model loader refuses a quantization method whose backend is missing before it loads anything."""

import pytest
from transformers import AwqConfig, BitsAndBytesConfig

from lab.harness.models import load_model
from quantized_models import hide_packages, save_tiny


def test_load_model_checks_the_backend_first(tmp_path, monkeypatch):
    """load_model asks lade.quantization for the backend before transformers loads the weights, so a missing
    backend is the error (naming the extra to install), not a failure deep inside loading."""
    folder = save_tiny(tmp_path / "tiny-llama")
    hide_packages(monkeypatch, "bitsandbytes", "gptqmodel")
    with pytest.raises(ImportError, match=r"pip install 'lade-decoding\[awq\]'"):
        load_model(str(folder), quantization_config=AwqConfig(bits=4))
    with pytest.raises(ImportError, match=r"pip install 'lade-decoding\[bnb\]'"):
        load_model(str(folder), quantization_config=BitsAndBytesConfig(load_in_8bit=True))

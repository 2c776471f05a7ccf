"""Where the decoder keeps what it writes: chosen by the caller, never by where lade's files sit."""

from pathlib import Path

from lade.user_cache import cache_dir


def test_cache_dir_is_lade_cache_else_the_user_cache(monkeypatch, tmp_path):
    """$LADE_CACHE wins; without it the user cache (~/.cache/lade), the same for an installed wheel and a checkout
    (the repository's scripts set LADE_CACHE to the checkout's .cache themselves)."""
    monkeypatch.setenv("LADE_CACHE", str(tmp_path / "chosen"))
    assert cache_dir() == tmp_path / "chosen"
    monkeypatch.delenv("LADE_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == Path(tmp_path / "home" / ".cache" / "lade")

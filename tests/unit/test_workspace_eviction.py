"""Cache accounting and LRU eviction on plain files (no git)."""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.core.files import remove_tree
from pipeline.workspace.housekeeping import cache_units, disk_usage, evict_caches


def put(path: Path, size: int, when: float, atime: float | None = None) -> Path:
    """A file of ``size`` bytes with the given mtime (and atime)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\1" * size)
    os.utime(path, (atime if atime is not None else when, when))
    return path


def test_units_are_files_oldest_first_by_latest_of_atime_and_mtime(tmp_path: Path) -> None:
    """A recently read old file counts as recent; order is by max(atime, mtime)."""
    a = put(tmp_path / "pip" / "a", 10, 100.0)
    b = put(tmp_path / "npm" / "b", 10, 50.0, atime=300.0)
    c = put(tmp_path / "uv" / "c", 10, 200.0)
    assert [u.path for u in cache_units(tmp_path)] == [a, c, b]


def test_go_modules_and_cargo_sources_are_whole_units(tmp_path: Path) -> None:
    """An extracted Go module and a Cargo source dir are evicted as one unit each."""
    put(tmp_path / "go-mod" / "github.com" / "x" / "y@v1.0.0" / "a.go", 10, 100.0)
    put(tmp_path / "go-mod" / "github.com" / "x" / "y@v1.0.0" / "sub" / "b.go", 10, 400.0)
    put(tmp_path / "cargo" / "registry" / "src" / "index-abc" / "serde-1.0" / "lib.rs", 10, 50.0)
    put(tmp_path / "cargo" / "registry" / "cache" / "index-abc" / "serde-1.0.crate", 10, 60.0)
    names = [u.path.relative_to(tmp_path).as_posix() for u in cache_units(tmp_path)]
    assert names == [
        "cargo/registry/src/index-abc/serde-1.0",
        "cargo/registry/cache/index-abc/serde-1.0.crate",
        "go-mod/github.com/x/y@v1.0.0",
    ]


def test_each_repositorys_caches_are_units_like_the_shared_ones(tmp_path: Path) -> None:
    """Under ``repos/<repo>/`` a Go module and a Cargo source are whole units too, and
    one repository's caches compete with another's and the shared ones, oldest first."""
    calc, web = tmp_path / "repos" / "calc", tmp_path / "repos" / "web"
    put(calc / "go-mod" / "example.com" / "lib@v1.2.3" / "lib.go", 10, 100.0)
    put(web / "cargo" / "registry" / "src" / "index-abc" / "serde-1.0" / "lib.rs", 10, 50.0)
    put(web / "pip" / "http" / "a", 10, 300.0)
    put(tmp_path / "pip" / "left-by-a-shared-cache", 10, 10.0)
    names = [u.path.relative_to(tmp_path).as_posix() for u in cache_units(tmp_path)]
    assert names == [
        "pip/left-by-a-shared-cache",
        "repos/web/cargo/registry/src/index-abc/serde-1.0",
        "repos/calc/go-mod/example.com/lib@v1.2.3",
        "repos/web/pip/http/a",
    ]


def test_eviction_keeps_each_repositorys_tool_directories(tmp_path: Path) -> None:
    """Emptied by eviction, a repository's cache directory and its tools' stay (a running
    sandbox may have them bound); what is below them goes."""
    old = put(tmp_path / "repos" / "calc" / "pip" / "http" / "a", 8192, 1.0)
    evicted, _ = evict_caches(
        tmp_path, usage=100, capacity=100, high_watermark=0.5, low_watermark=0.0
    )
    assert evicted == [old]
    assert (tmp_path / "repos" / "calc" / "pip").is_dir()
    assert not (tmp_path / "repos" / "calc" / "pip" / "http").exists()


def test_eviction_stops_at_the_low_watermark(tmp_path: Path) -> None:
    """Oldest units go until usage is at or under low * capacity, no further."""
    files = [put(tmp_path / "pip" / f"f{i}", 8192, 100.0 + i) for i in range(10)]
    usage = disk_usage(tmp_path)
    size = files[0].stat().st_blocks * 512
    capacity = int((usage - 3 * size) / 0.8) + 1
    evicted, freed = evict_caches(
        tmp_path, usage=usage, capacity=capacity, high_watermark=0.9, low_watermark=0.8
    )
    assert evicted == files[:3] and freed == 3 * size
    assert [f.exists() for f in files] == [False] * 3 + [True] * 7


def test_no_eviction_under_the_high_watermark(tmp_path: Path) -> None:
    """Usage between the watermarks evicts nothing (hysteresis)."""
    put(tmp_path / "pip" / "old", 8192, 1.0)
    evicted, freed = evict_caches(
        tmp_path, usage=85, capacity=100, high_watermark=0.9, low_watermark=0.8
    )
    assert (evicted, freed) == ([], 0)


def test_protected_paths_are_never_evicted(tmp_path: Path) -> None:
    """A protected path is skipped even when it is the oldest."""
    keep = put(tmp_path / "pip" / "in-use" / "x", 8192, 1.0)
    other = put(tmp_path / "pip" / "y", 8192, 2.0)
    evicted, _ = evict_caches(
        tmp_path,
        usage=100,
        capacity=100,
        high_watermark=0.5,
        low_watermark=0.0,
        protected=[keep.parent],
    )
    assert evicted == [other] and keep.exists()


def test_remove_tree_handles_read_only_directories(tmp_path: Path) -> None:
    """Read-only directories (as the Go module cache makes them) are removed."""
    module = tmp_path / "m@v1"
    put(module / "sub" / "f.go", 5, 1.0)
    (module / "sub").chmod(0o555)
    module.chmod(0o555)
    remove_tree(module)
    assert not module.exists()


def test_disk_usage_counts_hard_links_once(tmp_path: Path) -> None:
    """Two names for one inode are counted once, as du does."""
    first = put(tmp_path / "a", 65536, 1.0)
    before = disk_usage(tmp_path)
    os.link(first, tmp_path / "b")
    assert disk_usage(tmp_path) == before

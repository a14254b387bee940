"""Review of what another local user could do to course_lib's files (kernels/native.py's
cache of compiled libraries, which the fusion loops, ``perf`` and the emulator load): a cache
in a folder that user owns or may write to (who can swap it for theirs after the checks), the
umask, relative paths. The attacker's folders are made with a mode that lets anyone write
(and, as root, given to user 65534 with os.chown)."""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
import pytest

from conftest import needs_gxx
from course_lib.kernels import emulator, native
from course_lib.kernels.errors import UnsafeCacheError

needs_emulator = needs_gxx("the CUDA emulator")
as_root = pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
OTHER_USER = 65534
PUT = 'extern "C" __global__ void put(float* x) { x[threadIdx.x] = %s; }  // %s\n'


def _attackers_folder(path, mode=0o777):
    """A folder another user made first, and lets anyone write."""
    path.mkdir()
    path.chmod(mode)
    if os.getuid() == 0:
        os.chown(path, OTHER_USER, OTHER_USER)
    return path


@pytest.fixture
def umask():
    """Set the process's umask for one test."""
    saved = os.umask(0o022)
    yield os.umask
    os.umask(saved)


@pytest.mark.parametrize("mode", [0o777, 0o770])
def test_cache_in_a_folder_others_may_write_is_refused(tmp_path, monkeypatch, mode):
    """Only the cache itself was checked: whoever may write to the folder above it can rename
    it, after the check, and put a folder of theirs in its place."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    if os.getuid() == 0:
        os.chown(shared, -1, OTHER_USER)  # a group of others, not root's own
    elif native._own_group(shared.stat().st_gid):
        pytest.skip("the folder's group is this user's private group: only they may write")
    monkeypatch.setenv(native.CACHE_ENV, str(shared / "cache"))
    with pytest.raises(UnsafeCacheError, match=rf"others may write to the folder {shared} above "
                                               rf"it \(mode {mode:o}\)"):  # fmt: skip
        native.cache_dir()


def test_cache_in_a_sticky_folder_like_tmp_is_accepted(tmp_path, monkeypatch):
    """The sticky bit stops others renaming what is not theirs: /tmp's own case."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setenv(native.CACHE_ENV, str(shared / "cache"))
    assert native.cache_dir() == shared / "cache"


@as_root
@pytest.mark.parametrize("mode", [0o755, 0o1777])
def test_cache_in_another_users_folder_is_refused(tmp_path, monkeypatch, mode):
    """As root (CI): a folder of another user's above the cache is theirs to rearrange."""
    _attackers_folder(tmp_path / "theirs", mode)
    (tmp_path / "theirs" / "deeper").mkdir(mode=0o755)
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path / "theirs" / "deeper" / "cache"))
    with pytest.raises(UnsafeCacheError, match=rf"the folder {tmp_path}/theirs above it belongs "
                                               f"to user id {OTHER_USER}"):  # fmt: skip
        native.cache_dir()


@needs_emulator
def test_cache_swapped_by_the_owner_of_a_shared_folder_never_runs_their_kernel(
    tmp_path, monkeypatch
):
    """The attack, played out: XDG_CACHE_HOME names a folder another user made first. Before,
    the library was built there; that user then moved the cache aside and put theirs (a
    library of the same name) in its place, and the launch child loaded it: their code ran
    as this user. Now the cache is a private temporary folder, and the kernel is ours."""
    attacker = _attackers_folder(tmp_path / "xdg")
    good, evil = PUT % ("1.0f", tmp_path), PUT % ("666.0f", tmp_path)
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path / "attackers-own"))
    planted = native.build_library(emulator.translate(evil, "put.cu")[0], "put.cu")
    monkeypatch.delenv(native.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(attacker))

    module = emulator.compile_module(good, "put.cu")
    cache = attacker / "course_lib" / "emulator"
    if cache.exists():  # made, then refused: swap it all the same
        cache.rename(attacker / "moved-aside")
    cache.mkdir(parents=True)
    for suffix in (".so", ".sha256"):  # the library and its record, under our library's name
        shutil.copy(planted.with_suffix(suffix), cache / f"{module.library_path.stem}{suffix}")
    x = np.zeros(4, np.float32)
    module.get_function("put")(1, 4, [x])
    np.testing.assert_array_equal(x, 1.0)


@pytest.mark.parametrize("mask", [0o002, 0o000])
def test_cache_is_reused_under_a_permissive_umask(tmp_path, monkeypatch, umask, mask):
    """Under umask 002 (usual with per-user groups) the linker made the library group-writable,
    so it never verified and every call compiled it again."""
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path / "cache"))
    compiled = []
    real_compile = native._compile
    monkeypatch.setattr(native, "_compile", lambda *a: compiled.append(a) or real_compile(*a))
    umask(mask)
    unit = f'extern "C" int f() {{ return 1; }}  // {tmp_path}\n'
    library = native.build_library(unit, "f.cpp")
    assert native.build_library(unit, "f.cpp") == library
    assert len(compiled) == 1
    for path in (library, library.with_suffix(".sha256")):
        assert os.stat(path).st_mode & 0o077 == 0


def test_folders_made_for_the_cache_are_private_whatever_the_umask(tmp_path, monkeypatch, umask):
    """mkdir(parents=True) made the folders above the cache 0777 under umask 000: anyone could
    then swap the cache."""
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path / "a" / "b" / "cache"))
    umask(0)
    native.cache_dir()
    for folder in ("a", "a/b", "a/b/cache"):
        assert os.stat(tmp_path / folder).st_mode & 0o777 == 0o700, folder


@needs_emulator
def test_relative_cache_still_found_after_a_change_of_directory(tmp_path, monkeypatch):
    """A relative $COURSE_LIB_KERNEL_CACHE gave a relative library path, which the launch child
    looked up from the current directory of the time: after os.chdir it could not load it."""
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(native.CACHE_ENV, "relative-cache")
    module = emulator.compile_module(PUT % ("1.0f", tmp_path / "relative"), "put.cu")
    monkeypatch.chdir(tmp_path / "elsewhere")
    x = np.zeros(4, np.float32)
    module.get_function("put")(1, 4, [x])
    np.testing.assert_array_equal(x, 1.0)


def test_relative_xdg_cache_home_is_ignored(tmp_path, monkeypatch):
    """The XDG specification: a relative path in XDG_CACHE_HOME is invalid (it named a folder
    under whatever the current directory was, a shared course folder say)."""
    monkeypatch.delenv(native.CACHE_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", "shared-cache")
    monkeypatch.chdir(tmp_path)
    assert native.cache_dir() == tmp_path / "home" / ".cache" / "course_lib" / "emulator"


@pytest.fixture
def fresh_temporary_cache():
    native._temporary_cache.cache_clear()
    yield
    native._temporary_cache.cache_clear()


def test_temporary_cache_in_a_folder_others_may_write_is_refused(
    tmp_path, monkeypatch, fresh_temporary_cache
):
    """The fallback's mkdtemp folder lies in $TMPDIR, which may be a folder anyone can write
    (without /tmp's sticky bit): it was used unchecked."""
    shared = _attackers_folder(tmp_path / "shared")
    monkeypatch.delenv(native.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared))  # unsafe: the fallback is taken
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    with pytest.raises(UnsafeCacheError, match=rf"course_lib-kernels-\w+: .*folder {shared} "):
        native.cache_dir()


def test_cache_below_a_folder_of_the_users_private_group_is_accepted(tmp_path, monkeypatch):
    """Where the umask is 002 (Ubuntu's for users), ``~/.cache`` is group-writable by the
    user's private group, which holds them alone: the cache there is theirs to keep."""
    home_cache = tmp_path / "dot-cache"
    home_cache.mkdir()
    home_cache.chmod(0o775)
    if not native._own_group(home_cache.stat().st_gid):
        pytest.skip("this user's group is not a private group")
    monkeypatch.setenv(native.CACHE_ENV, str(home_cache / "course_lib"))
    assert native.cache_dir() == (home_cache / "course_lib").resolve()

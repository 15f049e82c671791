"""Hostile names and places for models (issue 33), where no process is needed: specs and
catalog entries that would lead outside a repo's cache folder, empty names, a file where
specrun's cache folder should be. tests/e2e/test_faults_models.py drives the same through
the real command line."""

from __future__ import annotations

import pytest

from specrun.errors import SpecrunError
from specrun.models.cache import HubRef, InvalidName
from specrun.models.catalog import CatalogError, load_catalog, parse_spec
from specrun.models.hub import ModelNotFound
from specrun.system.files import replaced_atomically
from tests.support.hfcache import LLAMA_1B

NOT_A_FILE = "is not a file in a repo: that is a relative path without '.', '..', empty parts"
NOT_A_REPO = "is not a Hugging Face repo id"


@pytest.mark.parametrize(
    "spec, expected",
    [
        (
            f"{LLAMA_1B}/../../../../../somewhere.gguf",
            f"'../../../../../somewhere.gguf' {NOT_A_FILE}",
        ),
        (f"{LLAMA_1B}/sub/../../x.GGUF", f"'sub/../../x.GGUF' {NOT_A_FILE}"),  # any case
        (f"{LLAMA_1B}//etc/x.gguf", f"'/etc/x.gguf' {NOT_A_FILE}"),  # absolute
        (f"{LLAMA_1B}/./x.gguf", f"'./x.gguf' {NOT_A_FILE}"),
        (f"{LLAMA_1B}/a//x.gguf", f"'a//x.gguf' {NOT_A_FILE}"),
        (f"{LLAMA_1B}/..\\..\\x.gguf", f"'..\\..\\x.gguf' {NOT_A_FILE}"),  # Windows' separator
        (f"{LLAMA_1B}/C:x.gguf", f"'C:x.gguf' {NOT_A_FILE}"),  # a drive
        (f"hf.co/{LLAMA_1B}/../x.gguf", f"'../x.gguf' {NOT_A_FILE}"),
        ("org/../x.gguf", f"'org/..' {NOT_A_REPO}"),
        ("org/..:Q4_K_M", f"'org/..' {NOT_A_REPO}"),
        ("org/.hidden:Q4_K_M", f"'org/.hidden' {NOT_A_REPO}"),
        ("a--b/c:Q4_K_M", f"'a--b/c' {NOT_A_REPO}"),  # the cache folder of a/b--c as well
    ],
)
def test_a_spec_that_leaves_the_repo_is_refused_before_any_path_is_made(hf_cache, spec, expected):
    with pytest.raises(InvalidName) as raised:
        parse_spec(spec, load_catalog())
    assert str(raised.value).startswith(f"{spec}: {expected}")


@pytest.mark.parametrize(
    "spec, repo, file",
    [
        (f"{LLAMA_1B}/sub/dir/x.gguf", LLAMA_1B, "sub/dir/x.gguf"),
        ("org.x/name_v2.1/file..name.gguf", "org.x/name_v2.1", "file..name.gguf"),  # no '..' part
        ("org/name:Q4_K_M", "org/name", None),
    ],
)
def test_names_inside_the_repo_still_parse(hf_cache, spec, repo, file):
    hub = parse_spec(spec, load_catalog()).hub
    assert hub is not None and (hub.repo, hub.file) == (repo, file)


def test_a_hub_ref_is_checked_wherever_it_is_made():
    """The library's own callers get the same check as the command line."""
    with pytest.raises(InvalidName, match=NOT_A_FILE):
        HubRef(LLAMA_1B, file="../x.gguf")
    with pytest.raises(InvalidName, match=NOT_A_REPO):
        HubRef("../x", quant="Q4_0")


@pytest.mark.parametrize(
    "keys, expected",
    [
        (f'repo = "{LLAMA_1B}"\nfile = "../../x.gguf"', f"'../../x.gguf' {NOT_A_FILE}"),
        ('repo = "../.."\nquant = "Q4_0"', f"'../..' {NOT_A_REPO}"),
        ('repo = "a/b/c"\nfile = "x.gguf"', f"'a/b/c' {NOT_A_REPO}"),
    ],
)
def test_a_catalog_entry_that_leaves_the_repo_is_refused_at_load(
    hf_cache, tmp_path, keys, expected
):
    catalog = tmp_path / "models.toml"
    catalog.write_text(f'[[model]]\nalias = "bad"\nfamily = "x"\n{keys}\n')
    with pytest.raises(CatalogError) as raised:
        load_catalog(catalog)
    assert str(raised.value).startswith(f"{catalog}: [[model]] #1 ('bad'): {expected}")


@pytest.mark.parametrize("spec", ["", " ", "\t"])
def test_an_empty_model_name_is_called_empty(hf_cache, spec):
    """As a path, "" is the current folder: it was reported as 'a directory'."""
    with pytest.raises(ModelNotFound, match=r"^the model name is empty: give an alias, a GGUF"):
        parse_spec(spec, load_catalog())


def test_a_file_where_a_folder_should_be_is_named(tmp_path):
    """SPECRUN_CACHE (or any folder specrun writes in) naming a file: one line, no traceback."""
    blocker = tmp_path / "cache"
    blocker.write_text("a file, not a folder")
    destination = blocker / "demo" / "model.gguf"
    with pytest.raises(SpecrunError) as raised, replaced_atomically(destination) as partial:
        partial.write_text("never")
    assert str(raised.value) == (
        f"cannot write {destination}: {blocker} is a regular file, not a folder"
    )
    assert blocker.read_text() == "a file, not a folder"


@pytest.mark.parametrize(
    "spec, repo, revision, file",
    [
        (f"https://huggingface.co/{LLAMA_1B}/resolve/main/x.gguf", LLAMA_1B, "main", "x.gguf"),
        (f"https://huggingface.co/{LLAMA_1B}/blob/v1.2/sub/x.gguf", LLAMA_1B, "v1.2", "sub/x.gguf"),
        (f"HF.CO/{LLAMA_1B}/resolve/main/x.gguf?download=true#top", LLAMA_1B, "main", "x.gguf"),
        (f"hf.co/{LLAMA_1B}/x.gguf", LLAMA_1B, "main", "x.gguf"),  # REPO/FILE after the host
        # Without a host it is a file of that name in the repo, as before.
        (f"{LLAMA_1B}/resolve/main/x.gguf", LLAMA_1B, "main", "resolve/main/x.gguf"),
    ],
)
def test_a_hub_url_is_repo_revision_and_file(hf_cache, spec, repo, revision, file):
    """A URL was read as repo ORG/NAME with the file `resolve/main/x.gguf`."""
    hub = parse_spec(spec, load_catalog()).hub
    assert hub is not None and (hub.repo, hub.revision, hub.file) == (repo, revision, file)


@pytest.mark.parametrize("revision", ["..", "a/b", "-x", ""])
def test_a_revision_that_could_be_a_path_is_refused(revision):
    with pytest.raises(InvalidName, match="is not a revision specrun takes"):
        HubRef(LLAMA_1B, file="x.gguf", revision=revision)

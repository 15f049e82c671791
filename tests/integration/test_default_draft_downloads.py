"""Default drafting and `models list` against a Hub on loopback (tests/support/hubserver.py):
a draft is never downloaded unasked, one downloaded is used by default afterwards, and every
model in the cache is listed, those pulled by REPO:QUANT or REPO/FILE included."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from specrun.cli.models import app as models_app
from tests.support.cli import specrun
from tests.support.hfcache import add_cached_file

DRAFT_REPO = "someone/Tiny-Draft-GGUF"


def test_a_draft_on_the_hub_is_never_fetched_unasked_and_used_once_fetched(
    hub, tiny_target, tiny_draft, tmp_path
):
    hub.add(DRAFT_REPO, "tiny-draft.gguf", tiny_draft.read_bytes())
    catalog = tmp_path / "models.toml"
    catalog.write_text(
        f'[[model]]\nalias = "tiny-target"\nfamily = "tiny"\nlocal = "{tiny_target}"\n'
        'drafts = ["hub-draft"]\n\n'
        f'[[model]]\nalias = "hub-draft"\nfamily = "tiny"\nrepo = "{DRAFT_REPO}"\n'
        'file = "tiny-draft.gguf"\n'
    )
    run = ("run", "-t", "tiny-target", "--catalog", str(catalog), "--temp", "0", "-n", "8")
    run += ("--threads", "1", "--json", "the sea")

    unasked = specrun(*run)
    assert unasked.returncode == 0, unasked.stderr
    assert unasked.stderr.startswith("specrun: drafting with prompt lookup (-d lookup): ")
    assert "`specrun models pull hub-draft` fetches one" in unasked.stderr
    assert json.loads(unasked.stdout)["draft"] == "lookup" and hub.log == []

    asked = specrun(*run[:-2], "-d", "auto", *run[-2:])  # the Hub answers when asked
    assert asked.returncode == 0, asked.stderr
    assert any(line.startswith("GET /someone/Tiny-Draft-GGUF/resolve/") for line in hub.log)

    hub.log.clear()
    fetched = specrun(*run)
    assert fetched.returncode == 0, fetched.stderr
    assert fetched.stderr.startswith("specrun: drafting with hub-draft and prompt lookup ")
    record = json.loads(fetched.stdout)
    assert record["draft"].endswith("tiny-draft.gguf,lookup") and hub.log == []
    assert record["text"] == json.loads(unasked.stdout)["text"]


def test_models_list_shows_every_model_in_the_cache(hub, hf_cache, tiny_target):
    content = tiny_target.read_bytes()
    hub.add("someone/Thing-GGUF", "Thing-Q5_K_M.gguf", content)
    hub.add("someone/Other-GGUF", "other-f16.gguf", content)
    runner = CliRunner()
    for spec in ("someone/Thing-GGUF:Q5_K_M", "someone/Other-GGUF/other-f16.gguf"):
        pulled = runner.invoke(models_app, ["pull", spec])
        assert pulled.exit_code == 0, pulled.output
    add_cached_file(hf_cache, "elsewhere/By-Another-Tool-GGUF", "tool-Q8_0.gguf", content)
    add_cached_file(hf_cache, "elsewhere/Not-A-Model", "README.md", b"not a model")

    listed = runner.invoke(models_app, ["list"])
    assert listed.exit_code == 0, listed.output
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    for name, quant in (
        ("someone/Thing-GGUF/Thing-Q5_K_M.gguf", "Q5_K_M"),
        ("someone/Other-GGUF/other-f16.gguf", "F16"),
        ("elsewhere/By-Another-Tool-GGUF/tool-Q8_0.gguf", "Q8_0"),
    ):
        assert rows[name][1:4] == ["llama", "-", quant] and rows[name][-2:] == ["yes", "-"]
    assert not any(name.startswith("elsewhere/Not-A-Model") for name in rows)
    records = {
        row["alias"]: row
        for row in json.loads(runner.invoke(models_app, ["list", "--json"]).stdout)
    }
    thing = records["someone/Thing-GGUF/Thing-Q5_K_M.gguf"]
    assert thing["catalog"] is False and thing["size_gb"] == len(content) / 1e9
    assert records["llama-1b-q4"]["catalog"] is True and records["llama-1b-q4"]["cached"] is False

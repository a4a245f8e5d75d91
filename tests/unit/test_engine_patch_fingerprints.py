"""Every vLLM function and class the engine patch replaces or reads has the signature and source recorded for
the supported release (``vllm_fingerprints.json``): an upgrade that keeps a name but changes what is behind it
fails here, naming the touchpoint, instead of serving with a patch written for other code."""

import json
import shutil

import pytest

from dspark_serve import SUPPORTED_VLLM
from dspark_serve.fingerprints import changes, current, fingerprint, module_file, recorded, source_of


def _replaced() -> list[str]:
    from dspark_serve.engine_plugin import TARGETS

    return sorted({point for module in TARGETS for point in module.REPLACES})


def test_the_installed_vllm_matches_the_recorded_fingerprints():
    pytest.importorskip("vllm")
    assert recorded()["vllm"].split("+")[0] == SUPPORTED_VLLM
    assert changes(current(), recorded()["touchpoints"]) == []


def test_every_replaced_method_has_a_fingerprint():
    """A replaced name that is an attribute would have no source to compare: each one is a function."""
    pytest.importorskip("vllm")
    missing = [point for point in _replaced() if point not in recorded()["touchpoints"]]
    assert not missing and len(_replaced()) >= 10


def _copy_module(tmp_path, module: str):
    """``module``'s file under a site folder of its own, to edit as a vLLM release would."""
    source = module_file(module)
    copy = tmp_path.joinpath(*module.split(".")).with_suffix(".py")
    copy.parent.mkdir(parents=True)
    shutil.copy(source, copy)
    return copy


def test_a_changed_method_body_fails_naming_the_touchpoint(tmp_path):
    pytest.importorskip("vllm")
    point = "vllm.v1.core.sched.scheduler:Scheduler.update_from_output"
    copy = _copy_module(tmp_path, "vllm.v1.core.sched.scheduler")
    original = source_of(point)
    assert fingerprint(point, tmp_path) == recorded()["touchpoints"][point]  # the copy itself matches
    body_line = original.splitlines()[-1].strip()  # the method's last line, whatever it is
    text = copy.read_text()
    assert text.count(body_line) >= 1
    copy.write_text(text.replace(original, original.replace(body_line, body_line + "  # changed\n        pass")))
    lines = changes({point: fingerprint(point, tmp_path)}, {point: recorded()["touchpoints"][point]})
    assert len(lines) == 1 and lines[0].startswith(point) and "source changed" in lines[0]


def test_a_changed_signature_fails_naming_the_touchpoint(tmp_path):
    pytest.importorskip("vllm")
    point = "vllm.v1.engine.core:EngineCore.post_step"
    copy = _copy_module(tmp_path, "vllm.v1.engine.core")
    text = copy.read_text()
    assert text.count("def post_step(self, model_executed: bool)") == 1
    copy.write_text(text.replace("def post_step(self, model_executed: bool)", "def post_step(self, model_executed: bool, step: int = 0)"))
    lines = changes({point: fingerprint(point, tmp_path)}, {point: recorded()["touchpoints"][point]})
    assert len(lines) == 1 and "signature" in lines[0] and "step: int=0" in lines[0]


def test_a_method_that_went_is_a_lookup_error(tmp_path):
    pytest.importorskip("vllm")
    copy = _copy_module(tmp_path, "vllm.v1.engine.core")
    copy.write_text(copy.read_text().replace("def post_step(", "def post_step_renamed("))
    with pytest.raises(LookupError, match="post_step"):
        fingerprint("vllm.v1.engine.core:EngineCore.post_step", tmp_path)


def test_the_recorded_file_is_the_tools_output():
    """Written by ``python -m dspark_serve.fingerprints --write``: sorted, one version."""
    data = recorded()
    assert set(data) == {"vllm", "touchpoints"}
    assert list(data["touchpoints"]) == sorted(data["touchpoints"])
    assert all(set(entry) == {"signature", "sha256"} for entry in data["touchpoints"].values())
    json.dumps(data)
